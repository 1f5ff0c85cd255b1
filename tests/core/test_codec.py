"""Converters made by make_converter (strict for stored data) and the canonical JSON encoding."""

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
from cattrs.gen import make_dict_structure_fn
from hypothesis import given
from hypothesis import strategies as st

from agentium_harness import _codec as codec
from agentium_harness._codec import (
    canonical_json,
    converter,
    digest_bytes,
    digest_of,
    from_json,
    make_converter,
    register_structure_hook,
    structure,
    to_json,
    unstructure,
)
from agentium_harness._errors import AgentiumError, EncodingError, RecordDecodeError
from agentium_harness._history import Message, MessageGroup, Role, ToolCall
from agentium_harness._ports.memory import MemoryEventKind
from agentium_harness._ports.provider import SourceKind
from agentium_harness._ports.recall import (
    Candidate,
    Completeness,
    Excerpt,
    OmittedContext,
    SourceOwner,
    SourceRef,
    ValidationStatus,
)
from agentium_harness._ports.verify import Verdict

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
    with pytest.raises(RecordDecodeError) as info:
        structure(data, MessageGroup)
    [found] = _forbidden_extra_keys(info.value.__cause__)  # type: ignore[arg-type]
    assert found.extra_fields == {"extra"}
    assert found.cl is MessageGroup
    assert info.value.record == "MessageGroup"
    assert info.value.issues == ("extra fields found (extra) @ $",)


def test_extra_nested_key_is_refused_with_its_path() -> None:
    message = {"role": "user", "content": "x", "tool_calls": [], "tool_call_id": None, "bogus": 2}
    data = {"seq": 0, "messages": [message], "retained": None}
    with pytest.raises(RecordDecodeError) as info:
        structure(data, MessageGroup)
    [found] = _forbidden_extra_keys(info.value.__cause__)  # type: ignore[arg-type]
    assert found.extra_fields == {"bogus"}
    assert info.value.issues == ("extra fields found (bogus) @ $.messages[0]",)


def test_missing_required_key_is_refused() -> None:
    with pytest.raises(RecordDecodeError, match=r"\$\.seq"):
        structure({"messages": []}, MessageGroup)


def test_unknown_enum_value_is_refused() -> None:
    data = {"seq": 0, "messages": [{"role": "wizard"}], "retained": None}
    with pytest.raises(RecordDecodeError, match=r"\$\.messages\[0\]\.role"):
        structure(data, MessageGroup)


def test_decode_error_is_in_the_family_and_a_value_error() -> None:
    with pytest.raises(AgentiumError):
        structure({"seq": "0", "messages": []}, MessageGroup)
    with pytest.raises(ValueError):
        structure({"seq": "0", "messages": []}, MessageGroup)


# ---------------------------------------------------------------------------
# Strict decoding never coerces (stored data)
# ---------------------------------------------------------------------------


def _group(**overrides: Any) -> dict[str, Any]:
    message = {"role": "user", "content": "hi", "tool_calls": [], "tool_call_id": None}
    data: dict[str, Any] = {"seq": 3, "messages": [message], "retained": None}
    for path, value in overrides.items():
        if path == "content":
            message["content"] = value
        elif path == "tool_call_id":
            message["tool_call_id"] = value
        elif path == "messages":
            data["messages"] = value
        else:
            data[path] = value
    return data


STRICT_CASES = {
    "null where text belongs": (_group(content=None), "expected a string, got null @ $.messages[0].content"),
    "number where text belongs": (
        _group(content=12),
        "expected a string, got a number (12) @ $.messages[0].content",
    ),
    "number where an id belongs": (
        _group(tool_call_id=7),
        "expected a string, got a number (7) @ $.messages[0].tool_call_id",
    ),
    "string where an int belongs": (_group(seq="3"), "expected an integer, got a string @ $.seq"),
    "bool where an int belongs": (_group(seq=True), "expected an integer, got a boolean @ $.seq"),
    "float where an int belongs": (_group(seq=3.0), "expected an integer, got a number (3.0) @ $.seq"),
    "string where an array belongs": (_group(messages="abc"), "expected an array, got a string @ $.messages"),
    "object where an array belongs": (_group(messages={}), "expected an array, got an object @ $.messages"),
}


@pytest.mark.parametrize("case", list(STRICT_CASES), ids=list(STRICT_CASES))
def test_strict_structure_never_coerces(case: str) -> None:
    data, issue = STRICT_CASES[case]
    with pytest.raises(RecordDecodeError) as info:
        structure(data, MessageGroup)
    assert issue in info.value.issues


def test_lenient_converter_coerces_what_strict_refuses() -> None:
    lenient = make_converter(strict=False)
    group = lenient.structure(_group(content=12, seq="3"), MessageGroup)
    assert group.messages[0].content == "12" and group.seq == 3
    assert lenient.structure(_group(content=None), MessageGroup).messages[0].content == "None"


def test_strict_enum_refuses_other_json_types() -> None:
    with pytest.raises(RecordDecodeError, match="expected one of"):
        structure(True, _Level)
    with pytest.raises(RecordDecodeError, match="expected one of"):
        structure("3", _Level)
    assert structure(3, _Level) is _Level.HIGH


def test_strict_mapping_refuses_a_list_of_pairs() -> None:
    data = {"id": "c1", "name": "t", "arguments": [["a", 1]]}
    with pytest.raises(RecordDecodeError, match=r"expected an object, got an array @ \$\.arguments"):
        structure(data, ToolCall)
    assert structure({"id": "c1", "name": "t", "arguments": {"a": [1, None]}}, ToolCall).arguments == {
        "a": [1, None]
    }


@attrs.frozen
class _WithOptions:
    options: dict[str, Any]


def test_strict_mapping_check_holds_for_every_record_using_the_type() -> None:
    # cattrs' own mapping generator registers its result as the type's direct
    # hook; the next record with a dict field would then get the unchecked one.
    conv = make_converter(strict=True)
    assert conv.structure({"id": "c1", "name": "t", "arguments": {}}, ToolCall).arguments == {}
    with pytest.raises(cattrs.ClassValidationError) as info:
        conv.structure({"options": [["a", 1]]}, _WithOptions)
    [problem] = info.value.exceptions
    assert str(problem) == "expected an object, got an array"


def test_from_json_refuses_nan_and_broken_text_with_a_typed_error() -> None:
    with pytest.raises(RecordDecodeError, match="NaN is not valid canonical JSON"):
        from_json('{"id": "c1", "name": "t", "arguments": {"x": NaN}}', ToolCall)
    with pytest.raises(RecordDecodeError, match="not valid JSON"):
        from_json(b'{"id": "c1"', ToolCall)
    with pytest.raises(RecordDecodeError, match="not valid JSON"):
        from_json(b"\xff\xfe{}", ToolCall)


def test_strict_and_lenient_converters_are_new_each_time() -> None:
    first, second = make_converter(strict=True), make_converter(strict=True)
    assert first is not second
    first.register_structure_hook(_Colour, lambda v, _: _Colour.RED)
    # Changing one converter changes nothing else, the module's own included.
    with pytest.raises(RecordDecodeError):
        structure("blue", _Colour)
    with pytest.raises(Exception, match="blue"):
        second.structure("blue", _Colour)


# ---------------------------------------------------------------------------
# Adapter structure rules
# ---------------------------------------------------------------------------


@attrs.frozen
class _Shout:
    text: str
    times: int = 1


def _shout_rule(conv: cattrs.Converter) -> Any:
    from_table = make_dict_structure_fn(_Shout, conv, _cattrs_forbid_extra_keys=True)

    def hook(value: object, _: object) -> _Shout:
        return _Shout(value.upper()) if isinstance(value, str) else from_table(value, _Shout)

    return hook


def test_registered_rule_applies_to_converters_made_afterwards_with_their_own_strictness() -> None:
    before = make_converter(strict=True)
    register_structure_hook(_Shout, _shout_rule)
    assert structure("hey", _Shout) == _Shout("HEY")
    assert make_converter(strict=False).structure("hey", _Shout) == _Shout("HEY")
    # Nested fields follow the converter the rule is installed on.
    with pytest.raises(RecordDecodeError, match=r"expected an integer, got a string @ \$\.times"):
        structure({"text": "a", "times": "2"}, _Shout)
    assert make_converter(strict=False).structure({"text": "a", "times": "2"}, _Shout) == _Shout("a", 2)
    # A converter made before the rule is unchanged by it (cattrs fails on the string).
    with pytest.raises(AttributeError):
        before.structure("hey", _Shout)


def test_register_structure_hook_checks_its_arguments() -> None:
    with pytest.raises(TypeError, match="needs a class"):
        register_structure_hook("Shout", _shout_rule)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be callable"):
        register_structure_hook(_Shout, "rule")  # type: ignore[arg-type]


def test_deprecated_converter_alias_is_read_only_and_copies_fresh() -> None:
    assert codec.converter is converter
    assert isinstance(converter, cattrs.Converter)
    with pytest.raises(TypeError, match="register_structure_hook"):
        converter.register_structure_hook(_Colour, lambda v, _: _Colour.RED)
    copy = converter.copy()
    assert copy is not converter.copy()
    # The alias keeps the old lenient behaviour for code that still uses it.
    assert converter.structure(_group(seq="3"), MessageGroup).seq == 3
    assert copy.structure(_group(seq="3"), MessageGroup).seq == 3


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
    ref, owner = SourceRef("s", "r1"), SourceOwner("t")
    a = Excerpt(ref, owner, "text", omitted=[OmittedContext.SOURCE, OmittedContext.NEGATION])
    b = Excerpt(ref, owner, "text", omitted=[OmittedContext.NEGATION, OmittedContext.SOURCE])
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
def test_non_finite_floats_are_refused_with_a_typed_error(bad: float) -> None:
    with pytest.raises(EncodingError, match="canonical JSON"):
        canonical_json(bad)
    with pytest.raises(EncodingError):
        canonical_json({"nested": [bad]})
    with pytest.raises(EncodingError):
        canonical_json(Candidate(SourceRef("s", "r"), SourceOwner("t"), score=bad, size_bytes=1))
    with pytest.raises(ValueError):  # still a ValueError for callers that caught that
        digest_of({"x": bad})


def test_non_json_values_are_refused_with_a_typed_error() -> None:
    with pytest.raises(EncodingError):
        canonical_json({"x": object()})


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
