"""The user docs keep to what users can rely on: public modules only, and no requirement ids.

- Every ``python`` block in ``docs/`` and the READMEs, and every file under
  ``examples/``, imports only public modules: a module path with a part that
  starts with ``_`` (``agentium_harness._config``, ``agentium_archive_s3._x``)
  is private and may change without notice, so a document must not send a
  reader there.
- Requirement ids (``R9``, ``R25``) are the project's own bookkeeping: they
  stay in code comments, docstrings and tests, and leave the user docs
  (``docs/``, generated pages included, and every README). The API reference
  generator drops them from the docstrings it copies.

``CONTRIBUTING.md`` is for contributors and is not scanned.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentium_harness.testing._api_docs import adapter_modules, without_requirement_ids
from test_docs_examples import parse_python_blocks

ROOT = Path(__file__).resolve().parents[1]

#: A requirement id as the project writes them: R1 to R99.
REQUIREMENT_ID = re.compile(r"\bR[1-9][0-9]?\b")
#: Top-level packages of this repository (the core, plugins and integrations).
OUR_PACKAGES = re.compile(r"agentium_[a-z0-9_]+|agentium_harness")


def user_docs() -> list[Path]:
    """``docs/**/*.md`` and every README of the repository (the root's, plugins', integrations')."""
    found = sorted((ROOT / "docs").rglob("*.md"))
    found += [ROOT / "README.md", *sorted(ROOT.glob("plugins/**/README.md"))]
    found += sorted(ROOT.glob("integrations/**/README.md"))
    return [p for p in found if p.is_file() and ".venv" not in p.parts and "node_modules" not in p.parts]


def _code_units() -> Iterator[tuple[str, str]]:
    """(where, source) of every python block in the user docs and every example file."""
    for doc in user_docs():
        rel = doc.relative_to(ROOT).as_posix()
        for block in parse_python_blocks(doc.read_text("utf-8"), rel):
            yield block.id, block.source
    for example in sorted((ROOT / "examples").rglob("*.py")):
        yield example.relative_to(ROOT).as_posix(), example.read_text("utf-8")


def private_imports(source: str) -> list[str]:
    """Modules of this repository that ``source`` imports (or names to ``import_module``) and are private."""
    found: list[str] = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if re.fullmatch(r"agentium_[a-z0-9_.]+", node.value):  # importlib.import_module("...")
                names = [node.value]
        for name in names:
            parts = name.split(".")
            if OUR_PACKAGES.fullmatch(parts[0]) and any(p.startswith("_") for p in parts[1:]):
                found.append(name)
    return sorted(set(found))


def test_the_import_scan_catches_private_modules() -> None:
    assert private_imports("from agentium_harness._config import load_config\n") == [
        "agentium_harness._config",
        "agentium_harness._config.load_config",
    ]
    assert private_imports("import agentium_harness._cli as cli\n") == ["agentium_harness._cli"]
    assert private_imports("from agentium_harness import _codec\n") == ["agentium_harness._codec"]
    assert private_imports("importlib.import_module('agentium_archive_s3._keys')\n") == [
        "agentium_archive_s3._keys"
    ]
    assert private_imports("from agentium_harness import load_config\nfrom os import _exit\n") == []
    assert private_imports("from agentium_harness.adapters.sqlite import SQLiteArchive\n") == []


UNITS = list(_code_units())


@pytest.mark.parametrize(("where", "source"), UNITS, ids=[w for w, _ in UNITS])
def test_docs_and_examples_import_only_public_modules(where: str, source: str) -> None:
    assert private_imports(source) == [], (
        f"{where} imports a private module; use agentium_harness, agentium_harness.plugin_api, "
        "agentium_harness.testing, agentium_harness.eval or a module of agentium_harness.adapters"
    )


def test_the_public_adapter_modules_are_the_ones_named_without_underscore() -> None:
    modules = adapter_modules()
    assert "agentium_harness.adapters.sqlite" in modules and "agentium_harness.adapters.memory" in modules
    assert not any(m.rsplit(".", 1)[1].startswith("_") for m in modules)


@pytest.mark.parametrize("doc", user_docs(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_user_docs_cite_no_requirement_ids(doc: Path) -> None:
    hits = [
        f"{n}: {line.strip()}"
        for n, line in enumerate(doc.read_text("utf-8").splitlines(), 1)
        if REQUIREMENT_ID.search(line)
    ]
    assert hits == [], "requirement ids belong in code and tests, not the user docs:\n" + "\n".join(hits)


@pytest.mark.parametrize(
    ("written", "shown"),
    [
        ("What a write did (R39).", "What a write did."),
        ("declared capabilities (R9, R10) and refuses", "declared capabilities and refuses"),
        ("What recall achieved (R20–R22).", "What recall achieved."),
        ("(it proves nothing, R29); since", "(it proves nothing); since"),
        ("(R16: only verified identity is accepted)", "(only verified identity is accepted)"),
        ("## Acknowledgments (R39)", "## Acknowledgments"),
        ("no ids here (see R&D)", "no ids here (see R&D)"),
    ],
)
def test_the_reference_generator_drops_requirement_ids(written: str, shown: str) -> None:
    assert without_requirement_ids(written) == shown


def test_the_engine_layout_in_runtime_md_names_every_engine_module() -> None:
    text = (ROOT / "docs" / "runtime.md").read_text("utf-8")
    listed = set(re.findall(r"`_engine/([a-z_/]+\.py)`", text))
    engine = ROOT / "core/src/agentium_harness/_engine"
    present = {p.relative_to(engine).as_posix() for p in engine.rglob("*.py") if p.name != "__init__.py"}
    assert sorted(present - listed) == [], "docs/runtime.md's engine table leaves these out"
    assert sorted(listed - present) == [], "docs/runtime.md's engine table names modules that do not exist"


def test_the_case_sample_in_eval_md_is_a_valid_case() -> None:
    from agentium_harness.eval import parse_cases

    text = (ROOT / "docs" / "eval.md").read_text("utf-8")
    [sample] = re.findall(r"^```json\n(.*?)^```$", text, re.M | re.S)
    [case] = parse_cases(" ".join(sample.split("\n")) + "\n", file="docs/eval.md")
    assert case.id == "stated-evicted-01" and case.probe == "What is my locker number?"
