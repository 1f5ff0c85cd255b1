"""The option tables of the docs say what the adapters' config classes take.

A table headed ``| option | default | ... |`` (a plugin's README, the
SQLite section of ``docs/adapters.md``) must name every field of the config
class it documents and no other, and each default it writes as a literal
(a number, with KiB/MiB units allowed; a backquoted value; ``true`` /
``false``; ``(required)``) must be the class's. Defaults written as words
(``none``, ``AWS``, ``standard chain``) must stand for an empty default.
The class is found among the adapters the distribution registers: the one
whose fields include every option the table names.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import attrs
import pytest

from agentium_harness.plugin_api import PluginRegistry

ROOT = Path(__file__).resolve().parents[1]
TABLE = re.compile(r"^\| option \| default \| [a-z]+ \|\n\|[- |]+\|\n((?:\|.*\|\n)+)", re.M)
UNITS = {"KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
EMPTY: tuple[Any, ...] = (None, (), [], {}, "")

#: Where the tables are, and whose adapters they document.
DOCUMENTS = {
    "docs/adapters.md": "agentium-harness",
    **{
        f"plugins/{p.name}/README.md": f"agentium-{p.name}"
        for p in sorted((ROOT / "plugins").iterdir())
        if (p / "README.md").exists() and TABLE.search((p / "README.md").read_text("utf-8"))
    },
}


def _tables(text: str) -> list[dict[str, str]]:
    """Each option table as {option: default cell}; a row naming several options splits its defaults."""
    tables = []
    for match in TABLE.finditer(text):
        rows: dict[str, str] = {}
        for line in match.group(1).splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            names = re.findall(r"`([a-z_0-9]+)`", cells[0])
            if not names or re.sub(r"`[a-z_0-9]+`|[, ]", "", cells[0]):
                continue
            defaults = [d.strip() for d in cells[1].split(",")] if len(names) > 1 else [cells[1]]
            for i, name in enumerate(names):
                rows[name] = defaults[i] if len(defaults) == len(names) else cells[1]
        tables.append(rows)
    return tables


def _literal(cell: str) -> tuple[str, Any]:
    if cell == "(required)":
        return "required", None
    if cell in ("true", "false"):
        return "value", cell == "true"
    quoted = re.fullmatch(r"`([^`]*)`(?:\s.*)?", cell)
    if quoted:
        try:
            return "value", json.loads(quoted.group(1))
        except ValueError:
            return "value", quoted.group(1)
    number = re.match(r"([0-9][0-9,_]*(?:\.[0-9]+)?)(?:\s*(KiB|MiB|GiB))?(?![0-9A-Za-z])", cell)
    if number:
        value = float(number.group(1).replace(",", "").replace("_", ""))
        return "value", value * UNITS.get(number.group(2) or "", 1)
    return "word", cell


def _same(written: Any, default: Any) -> bool:
    if isinstance(default, bool) or isinstance(written, bool):
        return written is default
    if isinstance(default, int | float) and isinstance(written, int | float):
        return float(written) == float(default)
    if isinstance(default, list | tuple | dict) and not default:
        return written in ([], {}, ())
    return bool(written == default)


def _classes(distribution: str) -> list[type]:
    registry = PluginRegistry.load()
    return list(
        dict.fromkeys(a.spec.config_class for a in registry.adapters() if a.distribution == distribution)
    )


CASES = [
    pytest.param(doc, dist, i, id=f"{doc}#{i + 1}")
    for doc, dist in DOCUMENTS.items()
    for i, _ in enumerate(_tables((ROOT / doc).read_text("utf-8")))
]


def test_the_tables_are_found() -> None:
    assert {doc for doc, *_ in (c.values for c in CASES)} >= {
        "docs/adapters.md",
        "plugins/archive-s3/README.md",
        "plugins/provider-openai/README.md",
    }


@pytest.mark.parametrize(("doc", "distribution", "index"), CASES)
def test_an_option_table_matches_its_config_class(doc: str, distribution: str, index: int) -> None:
    rows = _tables((ROOT / doc).read_text("utf-8"))[index]
    candidates = [c for c in _classes(distribution) if set(rows) <= {f.name for f in attrs.fields(c)}]
    assert candidates, f"{doc}: no config class of {distribution} takes all of {sorted(rows)}"
    # The smallest class that takes them all is the one documented (a subclass adds options).
    cls = min(candidates, key=lambda c: len(attrs.fields(c)))
    fields = {f.name: f for f in attrs.fields(cls)}
    assert sorted(set(fields) - set(rows)) == [], f"{doc} leaves out options of {cls.__name__}"
    wrong = []
    for name, cell in rows.items():
        default = fields[name].default
        if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            default = default.factory()  # type: ignore[attr-defined]
        kind, written = _literal(cell)
        required = default is attrs.NOTHING
        if kind == "required" or required:
            if (kind == "required") != required:
                wrong.append(f"{name}: {cell!r}, the class {'requires it' if required else 'has a default'}")
        elif kind == "value" and not _same(written, default):
            wrong.append(f"{name}: the table says {cell!r}, the class {default!r}")
        elif kind == "word" and default not in EMPTY:
            wrong.append(f"{name}: the table says {cell!r}, the class {default!r}")
    assert wrong == [], f"{doc} ({cls.__name__}):\n" + "\n".join(wrong)
