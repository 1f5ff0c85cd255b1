"""The one converter and the canonical JSON encoding."""

from __future__ import annotations

import ast
import enum
import hashlib
import math
import re
from pathlib import Path
from typing import Any

import attrs
import cattrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentium_harness import codec
from agentium_harness.codec import (
    canonical_json,
    converter,
    digest_bytes,
    digest_of,
    from_json,
    structure,
    to_json,
    unstructure,
)
from agentium_harness.history import Message, MessageGroup, Role
from agentium_harness.ports.memory import MemoryEventKind
from agentium_harness.ports.provider import SourceKind
from agentium_harness.ports.recall import (
    Candidate,
    Completeness,
    Excerpt,
    OmittedContext,
    SourceRef,
    ValidationStatus,
)
from agentium_harness.ports.verify import Verdict

ROOT = Path(__file__).resolve().parents[2]


def _forbidden_extra_keys(exc: BaseException) -> list[cattrs.ForbiddenExtraKeysError]:
    """Every ForbiddenExtraKeysError inside a (possibly nested) cattrs validation error."""
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        return [exc]
    if isinstance(exc, BaseExceptionGroup):
        return [found for sub in exc.exceptions for found in _forbidden_extra_keys(sub)]
    return []


# ---------------------------------------------------------------------------
# Structuring refuses unknown keys
# ---------------------------------------------------------------------------


def test_extra_top_level_key_is_refused() -> None:
    data = {"seq": 0, "messages": [], "retained": None, "extra": 1}
    with pytest.raises(cattrs.BaseValidationError) as info:
        structure(data, MessageGroup)
    [found] = _forbidden_extra_keys(info.value)
    assert found.extra_fields == {"extra"}
    assert found.cl is MessageGroup


def test_extra_nested_key_is_refused_with_its_path() -> None:
    message = {"role": "user", "content": "x", "tool_calls": [], "tool_call_id": None, "bogus": 2}
    data = {"seq": 0, "messages": [message], "retained": None}
    with pytest.raises(cattrs.BaseValidationError) as info:
        structure(data, MessageGroup)
    [found] = _forbidden_extra_keys(info.value)
    assert found.extra_fields == {"bogus"}
    assert cattrs.transform_error(info.value) == ["extra fields found (bogus) @ $.messages[0]"]


def test_missing_required_key_is_refused() -> None:
    with pytest.raises(cattrs.BaseValidationError):
        structure({"messages": []}, MessageGroup)


def test_unknown_enum_value_is_refused() -> None:
    data = {"seq": 0, "messages": [{"role": "wizard"}], "retained": None}
    with pytest.raises(cattrs.BaseValidationError):
        structure(data, MessageGroup)


def test_module_exposes_one_converter() -> None:
    assert codec.converter is converter
    assert isinstance(converter, cattrs.Converter)


# ---------------------------------------------------------------------------
# Enums and sets become plain data
# ---------------------------------------------------------------------------

CORE_ENUMS = [Role, Completeness, OmittedContext, ValidationStatus, Verdict, SourceKind, MemoryEventKind]


@pytest.mark.parametrize("enum_cls", CORE_ENUMS, ids=lambda c: c.__name__)
def test_core_enums_unstructure_to_plain_strings(enum_cls: type[enum.Enum]) -> None:
    for member in enum_cls:
        plain = unstructure(member)
        assert type(plain) is str
        assert plain == member.value
        assert structure(plain, enum_cls) is member


class _Colour(enum.Enum):
    RED = "red"


class _Level(enum.IntEnum):
    HIGH = 3


@attrs.frozen
class _Painted:
    colour: _Colour
    level: _Level
    kinds: frozenset[SourceKind] = frozenset()


def test_every_enum_flavour_unstructures_to_its_value() -> None:
    plain = unstructure(_Painted(_Colour.RED, _Level.HIGH, frozenset({SourceKind.MEMORY})))
    assert plain == {"colour": "red", "level": 3, "kinds": ["memory"]}
    assert type(plain["colour"]) is str
    assert type(plain["level"]) is int
    assert type(plain["kinds"][0]) is str


def test_enum_inside_a_record_is_plain() -> None:
    plain = unstructure(Message(Role.ASSISTANT, "x"))
    assert type(plain["role"]) is str


def test_sets_become_sorted_lists_and_round_trip() -> None:
    a = Excerpt(SourceRef("s", "r1"), "text", omitted=[OmittedContext.SOURCE, OmittedContext.NEGATION])
    b = Excerpt(SourceRef("s", "r1"), "text", omitted=[OmittedContext.NEGATION, OmittedContext.SOURCE])
    plain = unstructure(a)
    assert plain["omitted"] == ["negation", "source"]
    assert canonical_json(a) == canonical_json(b)
    assert from_json(to_json(a), Excerpt) == a


@given(st.frozensets(st.text(max_size=5) | st.integers(), max_size=8))
def test_set_encoding_does_not_depend_on_iteration_order(items: frozenset[Any]) -> None:
    # Rebuilding the set in reverse insertion order gives the same bytes.
    rebuilt = frozenset(reversed(list(items)))
    assert canonical_json(items) == canonical_json(rebuilt)


# ---------------------------------------------------------------------------
# Canonical JSON
# ---------------------------------------------------------------------------


def test_canonical_json_is_sorted_and_compact() -> None:
    data = {"b": 1, "a": [1, {"d": 2, "c": 3}], "é": "ü"}
    assert canonical_json(data) == '{"a":[1,{"c":3,"d":2}],"b":1,"é":"ü"}'.encode()


def test_canonical_json_of_a_record_equals_that_of_its_plain_data() -> None:
    group = MessageGroup(0, (Message(Role.USER, "hi"),))
    assert canonical_json(group) == canonical_json(unstructure(group))
    assert to_json(group) == canonical_json(group).decode("utf-8")


def test_canonical_json_keeps_non_ascii_as_utf8() -> None:
    out = canonical_json({"k": "日本 😀"})
    assert out == '{"k":"日本 😀"}'.encode()
    assert b"\\u" not in out


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_floats_are_refused(bad: float) -> None:
    with pytest.raises(ValueError):
        canonical_json(bad)
    with pytest.raises(ValueError):
        canonical_json({"nested": [bad]})
    with pytest.raises(ValueError):
        canonical_json(Candidate(SourceRef("s", "r"), score=bad, size_bytes=1))


def test_digests() -> None:
    assert digest_bytes(b"") == "sha256:" + hashlib.sha256(b"").hexdigest()
    group = MessageGroup(0, (Message(Role.USER, "hi"),))
    assert digest_of(group) == digest_bytes(canonical_json(group)) == group.digest
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest_of({"a": 1}))
    assert digest_of({"a": 1, "b": 2}) == digest_of({"b": 2, "a": 1})
    assert digest_of({"a": 1}) != digest_of({"a": 2})


# ---------------------------------------------------------------------------
# No pickle anywhere
# ---------------------------------------------------------------------------

UNSAFE_MODULES = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "shelve", "marshal", "joblib"}


def _unsafe_uses(source: str) -> list[str]:
    """Imports (static or dynamic) of a deserializer that can run code."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Call):
            func = node.func
            callee = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if callee in {"__import__", "import_module"}:
                names = [
                    a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                ]
        found += [n for n in names if n.split(".")[0] in UNSAFE_MODULES]
    return found


@pytest.mark.parametrize(
    "snippet",
    [
        "import pickle",
        "import os, pickle as p",
        "from pickle import loads",
        "from _pickle import loads",
        "import shelve",
        "__import__('pickle')",
        "import importlib\nimportlib.import_module('dill')",
    ],
)
def test_the_pickle_scanner_finds_unsafe_imports(snippet: str) -> None:
    assert _unsafe_uses(snippet)


def test_no_pickle_in_core_or_plugin_sources() -> None:
    roots = [ROOT / "core" / "src", *sorted((ROOT / "plugins").glob("*/src"))]
    files = [f for root in roots for f in sorted(root.rglob("*.py"))]
    assert len(files) > 5, "the source tree was not found"
    offenders = {
        str(f.relative_to(ROOT)): uses for f in files if (uses := _unsafe_uses(f.read_text("utf-8")))
    }
    assert offenders == {}
