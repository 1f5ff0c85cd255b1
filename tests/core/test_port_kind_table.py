"""One table of port kinds, derived names, shared validators, and an acyclic import graph."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest
from _layout_support import cycle

from agentium_harness import _scope as scope
from agentium_harness import _validators
from agentium_harness._config import (
    REQUIRED_SECTIONS,
    SECTION_KINDS,
    HarnessConfig,
    ResolvedConfig,
    parse_config,
)
from agentium_harness._engine.build import create_harness_runtime
from agentium_harness._engine.checks import adapter_problems
from agentium_harness._errors import ConfigError, InvalidIdError
from agentium_harness._plugins import hookspecs
from agentium_harness._ports import (
    OPTIONAL_KINDS,
    PORT_KIND_TABLE,
    PORT_KINDS,
    REQUIRED_KINDS,
    port_kind_by_section,
)
from agentium_harness._ports.recall import RecallCapabilities, RecallStore

SRC = Path(__file__).resolve().parents[2] / "core" / "src"
PACKAGE = SRC / "agentium_harness"

# ------------------------------------------------------------------ the table


def test_one_name_per_kind_everywhere() -> None:
    for kind in PORT_KIND_TABLE:
        assert kind.section == kind.name == kind.factory_arg
        assert PORT_KINDS[kind.name] is kind
        assert port_kind_by_section(kind.section) is kind
    assert "summary" not in SECTION_KINDS and "summary" not in PORT_KINDS
    assert PORT_KINDS["summarizer"].hook == "agentium_register_summarizers"


def test_config_sections_and_required_kinds_come_from_the_table() -> None:
    assert dict(SECTION_KINDS) == {k.section: k.name for k in PORT_KIND_TABLE}
    assert REQUIRED_SECTIONS == REQUIRED_KINDS == ("provider", "archive", "session_store")
    assert set(OPTIONAL_KINDS) == {"recall", "embedder", "summarizer", "verifier", "memory"}


def test_schema_classes_have_one_field_per_section() -> None:
    # [runtime] and [retention] configure the runtime itself, not an adapter kind; [plugins.<name>]
    # holds a plugin's shared settings (connection options every kind of that plugin reads).
    harness = {f.name for f in attrs.fields(HarnessConfig)} - {"runtime", "retention", "plugins"}
    resolved = {f.name for f in attrs.fields(ResolvedConfig)} - {"config", "registry", "base_dir", "source"}
    assert harness == resolved == set(SECTION_KINDS)
    for field in attrs.fields(HarnessConfig):
        if field.name in REQUIRED_SECTIONS:
            assert field.default is attrs.NOTHING, field.name
        elif field.name in SECTION_KINDS:
            assert field.default is None, field.name


def test_registration_hooks_match_the_table_and_the_hookspecs() -> None:
    assert dict(hookspecs.REGISTRATION_HOOKS) == {k.name: k.hook for k in PORT_KIND_TABLE}
    for kind in PORT_KIND_TABLE:
        spec = getattr(hookspecs, kind.hook)
        assert getattr(spec, "agentium_spec", None) is not None, f"{kind.hook} is not a hook specification"
    written = {name for name in vars(hookspecs) if name.startswith("agentium_register_")}
    # Plus the registration hooks that are not adapter kinds: named recall strategies and eval graders.
    assert written == {k.hook for k in PORT_KIND_TABLE} | {
        "agentium_register_recall_strategies",
        "agentium_register_graders",
        "agentium_register_commands",
    }


def test_factory_arguments_are_parameters_of_create_harness_runtime() -> None:
    params = inspect.signature(create_harness_runtime).parameters
    for kind in PORT_KIND_TABLE:
        assert kind.factory_arg in params, kind.factory_arg
        assert (params[kind.factory_arg].default is inspect.Parameter.empty) == kind.required


def test_the_old_summary_section_suggests_summarizer() -> None:
    text = (
        '[provider]\nplugin = "p"\n[archive]\nplugin = "a"\n[session_store]\nplugin = "s"\n'
        '[summary]\nplugin = "x"\n'
    )
    with pytest.raises(ConfigError) as info:
        parse_config(text, environ={})
    (issue,) = info.value.issues
    assert issue.path == "$.summary"
    assert "did you mean 'summarizer'?" in issue.message


def test_recall_session_methods_are_checked_on_the_session_class() -> None:
    class Store(RecallStore):
        capabilities = RecallCapabilities(
            bounded_discovery=True,
            bounded_reads=True,
            revision_validation=True,
            bounded_current_validation=True,
        )

        async def open(self, *args: Any) -> Any:
            raise AssertionError

    problems = adapter_problems("recall", Store, require_own_declaration=True)
    # Each session method is reported once, though a required flag names it too.
    assert sorted(problems) == sorted(
        f"session method needs RecallSession.{m}() implemented"
        for m in ("discover", "read", "validate", "validate_current")
    )


# ------------------------------------------------------------- validators


@attrs.frozen
class _Record:
    count: int = attrs.field(default=1, validator=_validators.positive_int)
    offset: int = attrs.field(default=0, validator=_validators.non_negative_int)
    timeout: float = attrs.field(default=1.0, validator=_validators.positive_float)
    label: str = attrs.field(default="x", validator=_validators.non_empty_str)
    ident: str = attrs.field(default="id", validator=_validators.identifier)
    maybe: str | None = attrs.field(default=None, validator=_validators.optional_identifier)
    names: tuple[str, ...] = attrs.field(default=(), converter=_validators.str_tuple)
    seqs: tuple[int, ...] = attrs.field(default=(), converter=_validators.int_tuple)
    pairs: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_validators.str_pair_tuple)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("count", 0),
        ("count", True),
        ("count", 1.5),
        ("offset", -1),
        ("offset", False),
        ("timeout", 0),
        ("timeout", float("nan")),
        ("timeout", float("inf")),
        ("timeout", True),
        ("label", ""),
        ("label", "   "),
        ("label", 3),
    ],
)
def test_shared_validators_refuse_bad_values_naming_the_field(field: str, value: object) -> None:
    kwargs: dict[str, Any] = {field: value}
    with pytest.raises(ValueError, match=field):
        _Record(**kwargs)


@pytest.mark.parametrize("value", ["", "a\x00b", "x" * 257, 5])
def test_identifier_validator(value: object) -> None:
    with pytest.raises(InvalidIdError):
        _Record(ident=value)  # type: ignore[arg-type]
    with pytest.raises(InvalidIdError):
        _Record(maybe=value)  # type: ignore[arg-type]


def test_tuple_converters_make_tuples_and_refuse_a_lone_string() -> None:
    record = _Record(names=["a", "b"], seqs=iter([1, 2]), pairs=[["k", "v"]])  # type: ignore[list-item]
    assert record.names == ("a", "b") and record.seqs == (1, 2) and record.pairs == (("k", "v"),)
    with pytest.raises(TypeError, match="single str"):
        _Record(names="shell")


def test_scope_ids_follow_the_same_rule() -> None:
    for bad in ("", "a\x00b", "x" * 257):
        with pytest.raises(InvalidIdError):
            scope.validate_id(bad, "f")
        with pytest.raises(InvalidIdError):
            _validators.validate_id(bad, "f")
    assert scope.MAX_ID_LENGTH == _validators.MAX_ID_LENGTH


# -------------------------------------------------------------- imports


_LAYERS = ("agentium_harness._plugins", "agentium_harness._config", "agentium_harness._engine")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> list[str]:
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    # ``from pkg import name`` may import a submodule ``pkg.name``.
    return [target] + [f"{target}.{alias.name}" for alias in node.names]


def _import_graph() -> dict[str, set[str]]:
    """Module → the project modules it imports at module level, with implicit parent packages."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        targets: set[str] = set()
        for node in tree.body:  # module level only: that is what runs at import time
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                targets.update(_resolve(module, path.name == "__init__.py", node))
        deps = set()
        for target in targets:
            if target in files and target != module:
                deps.add(target)
                # Importing a.b.c runs a/__init__ and a/b/__init__ first.
                parts = target.split(".")
                deps.update(".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in files)
        deps.discard(module)
        deps -= {m for m in deps if module.startswith(m + ".")}  # a module's own parents are already loading
        graph[module] = deps
    return graph


def test_the_import_graph_of_plugins_config_and_engine_is_acyclic() -> None:
    graph = _import_graph()
    layered = {m for m in graph if m.startswith(_LAYERS)}
    assert "agentium_harness._config.runtime" in layered and "agentium_harness._plugins.registry" in layered
    # Walk everything these modules reach, so a cycle through ports or codec counts too.
    reach = set(layered)
    frontier = list(layered)
    while frontier:
        for dep in graph[frontier.pop()]:
            if dep not in reach:
                reach.add(dep)
                frontier.append(dep)
    assert cycle({m: graph[m] & reach for m in reach}) is None


_OWN_MODULES = [
    "_config/load.py",
    "_cli/main.py",
    "_demo/run.py",
    "_validators.py",
    "_ports/__init__.py",
    "_config/runtime.py",
    "_engine/checks.py",
    *(f"_plugins/{p.name}" for p in sorted((PACKAGE / "_plugins").glob("*.py"))),
]


@pytest.mark.parametrize("relative", _OWN_MODULES)
def test_no_import_hides_inside_a_function(relative: str) -> None:
    tree = ast.parse((PACKAGE / relative).read_text(encoding="utf-8"))
    hidden = [
        f"line {inner.lineno}"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for inner in ast.walk(node)
        if isinstance(inner, ast.Import | ast.ImportFrom)
    ]
    assert hidden == []


@pytest.mark.parametrize(
    "module",
    [
        "agentium_harness._plugins.registry",
        "agentium_harness._config",
        "agentium_harness._config.runtime",
        "agentium_harness._plugins.validation",
        "agentium_harness._cli",
    ],
)
def test_each_layer_imports_first_in_a_fresh_interpreter(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
