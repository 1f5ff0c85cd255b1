"""The package layout a newcomer walks: private packages import each other one way only.

``agentium_harness`` is split into private packages (``_engine``, ``_config``,
``_plugins``, ``_cli`` …). Each import between two of them, at module level, in
a function or under ``TYPE_CHECKING``, is an edge of the package graph; a
cycle there means neither package can be read (or changed) without the other.
"""

from __future__ import annotations

import ast
from pathlib import Path

from _layout_support import cycle

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "core" / "src"
PACKAGE = SRC / "agentium_harness"


def _module(path: Path, src: Path) -> list[str]:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return parts


def _imported(path: Path, src: Path) -> set[str]:
    """Every module or name ``path`` imports, anywhere in the file, as an absolute dotted name."""
    me = _module(path, src)
    package = me if path.name == "__init__.py" else me[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def package_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Private top-level package → the other private top-level packages it imports from."""
    private = {
        p.name for p in package.iterdir() if p.is_dir() and p.name.startswith("_") and p.name != "__pycache__"
    }
    graph: dict[str, set[str]] = {name: set() for name in private}
    for name in private:
        for path in (package / name).rglob("*.py"):
            for target in _imported(path, package.parent):
                parts = target.split(".")
                if len(parts) > 1 and parts[0] == package.name and parts[1] in private and parts[1] != name:
                    graph[name].add(parts[1])
    return graph


def test_the_private_packages_import_each_other_one_way_only() -> None:
    graph = package_graph()
    assert {"_cli", "_config", "_demo", "_engine", "_plugins", "_ports"} <= set(graph)
    assert cycle(graph) is None, graph


def test_the_engine_imports_neither_the_config_nor_the_plugin_registry() -> None:
    # The config (and the CLI, the demo) build on the engine, never the reverse.
    assert package_graph()["_engine"] & {"_config", "_plugins", "_cli", "_demo"} == set()


def test_the_package_graph_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    root = tmp_path / "agentium_harness"
    (root / "_a").mkdir(parents=True)
    (root / "_b").mkdir()
    (root / "_a" / "x.py").write_text("from .._b.y import thing\n")
    (root / "_b" / "y.py").write_text("def f():\n    from agentium_harness._a import x\n")
    graph = package_graph(root)
    assert graph == {"_a": {"_b"}, "_b": {"_a"}}
    assert cycle(graph) == ["_a", "_b", "_a"]


def test_the_cycle_check_finds_a_longer_cycle_and_none_in_a_tree() -> None:
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


# ------------------------------------------------- private attributes stay home

#: Private attributes of third-party objects the package reads on purpose (argparse's
#: sub-command help, cattrs' stock set hooks); ours are never on this list.
_THIRD_PARTY_PRIVATE = {
    "_actions",
    "_choices_actions",
    "_mutually_exclusive_groups",
    "_structure_set",
    "_structure_frozenset",
}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _own_private_names(tree: ast.Module) -> set[str]:
    """Private names a module defines: attributes it assigns, methods and class attributes, slots."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _private(node.value):
            names.add(node.value)  # __slots__ entries, attrs' private fields
    return {n for n in names if _private(n)}


def _our_module_aliases(tree: ast.Module, top: str | tuple[str, ...]) -> set[str]:
    """Names bound to a module of this project (``from .._observe import spans as observe``)."""
    aliases: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(top)):
            aliases.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            aliases.update((a.asname or a.name).split(".")[0] for a in node.names if a.name.startswith(top))
    return aliases


def private_reach(path: Path, top: str | tuple[str, ...] = "agentium_harness") -> list[str]:
    """``obj._name`` in ``path`` where ``obj`` is not ``self``/``cls`` and ``_name`` is another module's."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    own = _own_private_names(tree)
    ours = _our_module_aliases(tree, top)
    imported = {
        (alias.asname or alias.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(top)):
            # ``from .spans import _Null``: a private name of another of our modules.
            found.extend(
                f"{path.name}:{node.lineno} import {alias.name}"
                for alias in node.names
                if _private(alias.name)
            )
            continue
        if not (isinstance(node, ast.Attribute) and _private(node.attr)):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in {"self", "cls"}:
            continue
        if isinstance(owner, ast.Name) and owner.id in imported:
            if owner.id in ours:  # a private name of one of our modules, read from another module
                found.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
            continue  # a third-party module's private name (sys._current_frames …)
        if node.attr in own or node.attr in _THIRD_PARTY_PRIVATE:
            continue
        found.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
    return found


#: The source folders of the plugins and integrations, each holding one top-level package.
DISTRIBUTION_SOURCES = sorted([*ROOT.glob("plugins/*/src"), *ROOT.glob("integrations/*/src")])


def _packages(src: Path) -> list[Path]:
    return sorted(p for p in src.iterdir() if (p / "__init__.py").is_file())


def test_no_module_reads_another_modules_private_attributes() -> None:
    reach = [hit for path in sorted(PACKAGE.rglob("*.py")) for hit in private_reach(path)]
    assert reach == []


def test_no_plugin_or_integration_module_reads_another_modules_private_attributes() -> None:
    # A plugin's modules share what they must through names without a leading underscore
    # (``require_asyncio``, ``EraseOps``); reaching for core's private names counts too.
    assert DISTRIBUTION_SOURCES, "no plugins or integrations found: the scan would pass vacuously"
    reach = [
        f"{package.name}/{hit}"
        for src in DISTRIBUTION_SOURCES
        for package in _packages(src)
        for path in sorted(package.rglob("*.py"))
        for hit in private_reach(path, (package.name, "agentium_harness"))
    ]
    assert reach == []


def test_the_private_reach_scan_finds_a_reach(tmp_path: Path) -> None:
    stage = tmp_path / "closing.py"
    stage.write_text(
        "from .._observe import spans as observe\n"
        "import sys\n"
        "class Resources:\n"
        "    def __init__(self, runtime):\n"
        "        self._runtime = runtime\n"
        "    def close(self):\n"
        "        sys._getframe()\n"  # a third-party module's private name: not ours to fix
        "        self._runtime.parts.admission.check_open()\n"  # own attribute, then public ones
        "        return self._runtime._admission, observe._Null\n"
        "from .sqlite_recall import _group_text, indexed_group_text\n"
    )
    assert sorted(private_reach(stage)) == [
        "closing.py:10 import _group_text",
        "closing.py:9 observe._Null",
        "closing.py:9 self._runtime._admission",
    ]


# ------------------------------------------------- module length

#: The project's bound (design/STYLE.md): a module past it is split by responsibility.
MAX_MODULE_LINES = 600


def _source_modules() -> list[Path]:
    return sorted([*PACKAGE.rglob("*.py"), *(p for src in DISTRIBUTION_SOURCES for p in src.rglob("*.py"))])


def _line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_module_is_longer_than_600_lines() -> None:
    modules = _source_modules()
    assert any("plugins" in p.parts for p in modules) and any("integrations" in p.parts for p in modules)
    too_long = {str(p.relative_to(ROOT)): n for p in modules if (n := _line_count(p)) > MAX_MODULE_LINES}
    assert too_long == {}, f"split these modules by responsibility: each is over {MAX_MODULE_LINES} lines"
