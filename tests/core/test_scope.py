"""Identity, scope and the backend key encoding (R14, R16)."""

from __future__ import annotations

import fnmatch
import glob
import posixpath
import re
import unicodedata
from typing import Any

import attrs
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from agentium_harness._errors import AgentiumError, IdentityError, InvalidIdError
from agentium_harness._scope import (
    MAX_ID_LENGTH,
    RecallScope,
    Scope,
    SessionKey,
    VerifiedIdentity,
    decode_segment,
    encode_segment,
    require_identity,
    validate_id,
)

IDENTITY = VerifiedIdentity("acme", "alice", "test-suite")

# ---------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------

#: Pieces an attacker would try in an ID: traversal, separators, escapes, globs, controls.
ADVERSARIAL = [
    "..",
    ".",
    "/",
    "//",
    "%2F",
    "%2f",
    "%",
    "%25",
    "%%",
    "*",
    "?",
    "[",
    "]",
    "[!a]",
    "\\",
    ":",
    "~",
    "-",
    "_",
    " ",
    "é",
    "\u2215",  # division slash
    "\uff0e",  # fullwidth full stop
    "😀",
    "\x00",
    "\x1f",
    "\x7f",
    "\x85",
]
#: The subset that is still acceptable inside an ID (no control characters).
ADVERSARIAL_PRINTABLE = [
    p for p in ADVERSARIAL if not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in p)
]

# Any text Python can encode as UTF-8 (no lone surrogates), adversarial pieces mixed in.
any_text = st.lists(st.one_of(st.text(max_size=6), st.sampled_from(ADVERSARIAL)), max_size=8).map("".join)

_id_chars = st.characters(blacklist_categories=("Cc", "Cs"))
valid_ids = (
    st.lists(
        st.one_of(st.text(_id_chars, min_size=1, max_size=6), st.sampled_from(ADVERSARIAL_PRINTABLE)),
        min_size=1,
        max_size=8,
    )
    .map("".join)
    .filter(lambda s: len(s) <= MAX_ID_LENGTH)
)
optional_ids = st.none() | st.just("~") | valid_ids
scopes = st.builds(Scope, valid_ids, valid_ids, valid_ids, optional_ids, optional_ids)
session_keys = st.builds(SessionKey, valid_ids, valid_ids, valid_ids)

KEY_ALPHABET = re.compile(r"[A-Za-z0-9_%-]*")
FORBIDDEN_IN_SEGMENT = "/.*?[]\\~:"


def _decode_scope_key(key: str) -> tuple[str | None, ...]:
    """The inverse of ``Scope.key()``: split on "/" and decode, "~" meaning absent."""
    parts = key.split("/")
    assert len(parts) == 5, key
    return tuple(None if p == "~" else decode_segment(p) for p in parts)


def _fields(scope: Scope) -> tuple[str | None, ...]:
    return (scope.tenant, scope.user, scope.session, scope.project, scope.repository)


# ---------------------------------------------------------------------------
# ID validation
# ---------------------------------------------------------------------------

BAD_IDS: list[tuple[object, str]] = [
    ("", "must not be empty"),
    (42, "expected a string, got int"),
    (None, "expected a string, got NoneType"),
    (b"bytes", "expected a string, got bytes"),
    ("x" * (MAX_ID_LENGTH + 1), "257 characters; at most 256 allowed"),
    ("x" * 300, "300 characters; at most 256 allowed"),
    ("a\x00b", "control character U+0000"),
    ("line\nbreak", "control character U+000A"),
    ("tab\there", "control character U+0009"),
    ("esc\x1b", "control character U+001B"),
    ("del\x7f", "control character U+007F"),
    ("c1\x85", "control character U+0085"),
    ("c1\x9f", "control character U+009F"),
    ("lone\ud800", "lone surrogate"),
    ("\udfff", "lone surrogate"),
]


@pytest.mark.parametrize(("value", "reason"), BAD_IDS, ids=[repr(v)[:20] for v, _ in BAD_IDS])
def test_validate_id_refuses_bad_values_naming_the_field(value: object, reason: str) -> None:
    with pytest.raises(InvalidIdError) as info:
        validate_id(value, "tenant")
    assert info.value.field == "tenant"
    assert reason in info.value.reason
    assert str(info.value) == f"invalid tenant: {info.value.reason}"


def test_invalid_id_error_is_a_value_error_in_the_hierarchy() -> None:
    with pytest.raises(InvalidIdError) as info:
        validate_id("", "user")
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, AgentiumError)


@pytest.mark.parametrize(
    "value",
    [
        "x",
        "x" * MAX_ID_LENGTH,
        "é" * MAX_ID_LENGTH,  # the bound is in characters, not bytes
        "a/b",
        "..",
        "~",
        "*",
        "%2F",
        "with space",
        "😀",
        "\u00a0",  # no-break space is not a control character
    ],
)
def test_validate_id_accepts_printable_strings_up_to_the_bound(value: str) -> None:
    assert validate_id(value, "session") == value


@given(any_text)
def test_validate_id_either_accepts_or_raises_invalid_id_error(value: str) -> None:
    try:
        assert validate_id(value, "project") == value
    except InvalidIdError as exc:
        assert exc.field == "project"


def _reference_id_problem(value: str) -> str | None:
    """What ``validate_id`` said of a non-empty ``str`` before its C-speed path: the character loop."""
    for ch in value:
        if unicodedata.category(ch) == "Cc":
            return f"contains control character U+{ord(ch):04X}"
        if 0xD800 <= ord(ch) <= 0xDFFF:
            return "contains a lone surrogate"
    return None


#: Surrogates, DEL, a C1 control, and two non-printable characters that are not controls.
ODD_CHARACTERS = ["\ud800", "\udfff", "\x7f", "\x9f", "\u2028", "\u200b"]


class _LyingIterStr(str):
    """A str whose iteration shows a control character it does not hold."""

    def __iter__(self) -> Any:
        return iter("a\x00")


@given(
    st.one_of(
        st.text(min_size=1, max_size=40),
        st.text(alphabet=st.characters(codec=None), min_size=1, max_size=40),
        st.lists(st.sampled_from([*ADVERSARIAL, *ODD_CHARACTERS]), min_size=1).map("".join),
    )
)
def test_validate_id_says_what_the_character_loop_says(value: str) -> None:
    # The printable fast path must accept exactly what the loop accepts, with the same message.
    assume(len(value) <= MAX_ID_LENGTH)
    problem = _reference_id_problem(value)
    if problem is None:
        assert validate_id(value, "session") == value
    else:
        with pytest.raises(InvalidIdError) as caught:
            validate_id(value, "session")
        assert str(caught.value) == str(InvalidIdError("session", problem))


def test_validate_id_checks_a_str_subclass_by_the_characters_it_holds() -> None:
    # A subclass is checked (and returned) as the plain text it holds, not as it iterates: what is
    # checked is what the records keep and the keys encode (test_hostile_subclasses has the rest).
    checked = validate_id(_LyingIterStr("plain"), "session")
    assert type(checked) is str and checked == "plain"
    with pytest.raises(InvalidIdError, match="U\\+0000"):
        validate_id(_LyingIterStr("pl\x00ain"), "session")


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["t", "u", "t2"]), st.sampled_from(["u", "t"]), st.text(min_size=1, max_size=5)
        ),
        max_size=30,
    )
)
def test_session_key_is_always_the_key_its_scope_names(ids: list[tuple[str, str, str]]) -> None:
    # Keys are remembered per (tenant, user, session): a remembered key must never answer for another.
    for tenant, user, session in ids:
        try:
            scope = Scope(tenant, user, session)
        except InvalidIdError:
            continue
        key = scope.session_key
        assert (key.tenant, key.user, key.session) == (tenant, user, session)
        assert key == SessionKey(tenant, user, session)
        assert hash(key) == hash(SessionKey(tenant, user, session))
        assert scope.session_key is key  # asked again: the same (frozen) key


class _EqualToAnyStr(str):
    """A str that claims equality (and a hash) with one it is not."""

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return hash("s")


def test_session_key_of_a_lying_str_subclass_is_its_own() -> None:
    cached = Scope("t", "u", "s").session_key
    liar = Scope("t", "u", _EqualToAnyStr("other"))
    assert liar.session_key is not cached
    assert str.__str__(liar.session_key.session) == "other"


def test_session_key_made_while_validators_were_off_is_not_remembered() -> None:
    try:
        attrs.validators.set_disabled(True)
        bad = Scope("t", "u", "bad\x00id")
        assert bad.session_key.session == "bad\x00id"
    finally:
        attrs.validators.set_disabled(False)
    with pytest.raises(InvalidIdError):
        bad.session_key  # noqa: B018 - built (and validated) again, as before any key was remembered


RECORD_FIELDS: list[tuple[type[Any], dict[str, Any], str]] = [
    (VerifiedIdentity, {"tenant": "t", "user": "u", "verified_by": "v"}, "tenant"),
    (VerifiedIdentity, {"tenant": "t", "user": "u", "verified_by": "v"}, "user"),
    (VerifiedIdentity, {"tenant": "t", "user": "u", "verified_by": "v"}, "verified_by"),
    (Scope, {"tenant": "t", "user": "u", "session": "s", "project": "p", "repository": "r"}, "tenant"),
    (Scope, {"tenant": "t", "user": "u", "session": "s", "project": "p", "repository": "r"}, "user"),
    (Scope, {"tenant": "t", "user": "u", "session": "s", "project": "p", "repository": "r"}, "session"),
    (Scope, {"tenant": "t", "user": "u", "session": "s", "project": "p", "repository": "r"}, "project"),
    (Scope, {"tenant": "t", "user": "u", "session": "s", "project": "p", "repository": "r"}, "repository"),
    (SessionKey, {"tenant": "t", "user": "u", "session": "s"}, "tenant"),
    (SessionKey, {"tenant": "t", "user": "u", "session": "s"}, "user"),
    (SessionKey, {"tenant": "t", "user": "u", "session": "s"}, "session"),
    (RecallScope, {"project": "p", "repository": "r"}, "project"),
    (RecallScope, {"project": "p", "repository": "r"}, "repository"),
]


@pytest.mark.parametrize(
    ("cls", "good", "field"), RECORD_FIELDS, ids=[f"{c.__name__}.{f}" for c, _, f in RECORD_FIELDS]
)
@pytest.mark.parametrize(
    "bad", ["", "x" * 257, "a\x00b", "a\x7fb", 7], ids=["empty", "long", "nul", "del", "int"]
)
def test_every_record_field_is_validated(
    cls: type[Any], good: dict[str, Any], field: str, bad: object
) -> None:
    cls(**good)  # the baseline is valid
    with pytest.raises(InvalidIdError) as info:
        cls(**{**good, field: bad})
    assert info.value.field == field
    assert field in str(info.value)


def test_optional_fields_accept_none_and_default_to_none() -> None:
    assert RecallScope() == RecallScope(None, None)
    scope = Scope("t", "u", "s")
    assert scope.project is None and scope.repository is None


def test_records_are_frozen() -> None:
    scope = Scope("t", "u", "s")
    with pytest.raises(AttributeError):
        scope.tenant = "other"  # type: ignore[misc]


# ---------------------------------------------------------------------------
# Only verified identity is accepted (R16)
# ---------------------------------------------------------------------------


class _LookAlike:
    """Has the attributes of a VerifiedIdentity but was not built as one."""

    tenant = "acme"
    user = "alice"
    verified_by = "me, trust me"


STATED_IDENTITIES = [
    {"tenant": "acme", "user": "alice"},
    ("acme", "alice"),
    "acme/alice",
    None,
    _LookAlike(),
]
STATED_IDS = ["dict", "tuple", "str", "None", "lookalike"]


@pytest.mark.parametrize("stated", STATED_IDENTITIES, ids=STATED_IDS)
def test_require_identity_refuses_stated_identity(stated: object) -> None:
    with pytest.raises(IdentityError) as info:
        require_identity(stated)
    assert isinstance(info.value, TypeError)
    assert "VerifiedIdentity" in str(info.value)
    assert "not authentication" in str(info.value)


@pytest.mark.parametrize("stated", STATED_IDENTITIES, ids=STATED_IDS)
def test_scope_of_refuses_stated_identity(stated: object) -> None:
    with pytest.raises(IdentityError):
        Scope.of(stated, "s1")  # type: ignore[arg-type]


@pytest.mark.parametrize("stated", STATED_IDENTITIES, ids=STATED_IDS)
def test_session_key_of_refuses_stated_identity(stated: object) -> None:
    with pytest.raises(TypeError):
        SessionKey.of(stated, "s1")  # type: ignore[arg-type]


def test_require_identity_returns_the_verified_identity() -> None:
    assert require_identity(IDENTITY) is IDENTITY


def test_scope_of_combines_identity_session_and_recall_scope() -> None:
    scope = Scope.of(IDENTITY, "s1", RecallScope(project="p", repository="r"))
    assert scope == Scope("acme", "alice", "s1", "p", "r")
    assert Scope.of(IDENTITY, "s1") == Scope("acme", "alice", "s1")
    assert scope.session_key == SessionKey("acme", "alice", "s1") == SessionKey.of(IDENTITY, "s1")


def test_scope_of_validates_the_session_id() -> None:
    with pytest.raises(InvalidIdError) as info:
        Scope.of(IDENTITY, "")
    assert info.value.field == "session"


# ---------------------------------------------------------------------------
# Key segment encoding
# ---------------------------------------------------------------------------


def _reference_segment(value: str) -> str:
    """The encoding byte by byte, as :func:`encode_segment` does for anything but plain ASCII ids."""
    safe = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
    return "".join(chr(b) if b in safe else f"%{b:02X}" for b in value.encode("utf-8"))


@given(
    st.one_of(
        any_text,
        st.text(alphabet="abcXYZ019_-", max_size=40),
        st.text(alphabet="aZ9_-.%~ é\u0660\u00b2", max_size=20),  # Arabic-Indic and superscript digits
    )
)
def test_encode_segment_says_what_the_byte_loop_says(value: str) -> None:
    assert encode_segment(value) == _reference_segment(value)


@pytest.mark.parametrize(
    ("raw", "encoded"),
    [
        ("abc-XYZ_09", "abc-XYZ_09"),
        ("a/b", "a%2Fb"),
        ("..", "%2E%2E"),
        ("%", "%25"),
        ("%2F", "%252F"),
        ("~", "%7E"),
        ("*?[]", "%2A%3F%5B%5D"),
        ("a:b", "a%3Ab"),
        ("é", "%C3%A9"),
        ("", ""),
    ],
)
def test_encode_segment_examples(raw: str, encoded: str) -> None:
    assert encode_segment(raw) == encoded
    assert decode_segment(encoded) == raw


@given(any_text)
def test_encode_segment_round_trips(value: str) -> None:
    assert decode_segment(encode_segment(value)) == value


@given(any_text, any_text)
def test_encode_segment_is_injective(a: str, b: str) -> None:
    assume(a != b)
    assert encode_segment(a) != encode_segment(b)


@given(any_text)
def test_encode_segment_output_alphabet(value: str) -> None:
    encoded = encode_segment(value)
    assert KEY_ALPHABET.fullmatch(encoded), encoded
    assert not any(ch in encoded for ch in FORBIDDEN_IN_SEGMENT)
    assert ".." not in encoded
    assert encoded.isascii()


@pytest.mark.parametrize(
    "foreign",
    [
        "%2f",  # lower-case hex is not what the encoder writes
        "%41",  # "A" is safe, so escaping it is non-canonical
        "%2D",  # "-" likewise
        "%",
        "%2",
        "abc%",
        "%+1",  # int(..., 16) would accept a sign
        "% 1",  # ... and surrounding whitespace
        "%1 ",
        "%-1",
        "%0x",
        "%_1",
        "a.b",
        "a/b",
        "~",
        "*",
        "é",
        "%C3",  # truncated UTF-8
        "%ED%A0%80",  # an encoded surrogate
        "%C0%AF",  # overlong UTF-8 for "/"
        "%FF",
    ],
)
def test_decode_segment_refuses_text_the_encoder_cannot_produce(foreign: str) -> None:
    with pytest.raises(ValueError):
        decode_segment(foreign)


# Canonical text with one near-miss spliced in ("%" and two characters that
# are almost upper-case hex digits, or a stray character), so that inputs the
# encoder could not have produced are generated often.
_HEXISH = st.sampled_from(list("+- _0129ACEFfGx."))
_near_miss = st.one_of(
    st.builds(lambda a, b: "%" + a + b, _HEXISH, _HEXISH),
    st.sampled_from(["%", "%4", ".", "~", "/", "é", "%C3", "%A9", "%41"]),
)
_near_canonical = st.builds(
    lambda a, miss, b: encode_segment(a) + miss + encode_segment(b), any_text, _near_miss, any_text
)


@given(_near_canonical)
def test_decode_segment_accepts_only_canonical_text(text: str) -> None:
    try:
        decoded = decode_segment(text)
    except ValueError:
        return
    assert encode_segment(decoded) == text


# ---------------------------------------------------------------------------
# Whole keys
# ---------------------------------------------------------------------------


def test_scope_key_keeps_field_boundaries() -> None:
    a = Scope("a:b", "c", "s")
    b = Scope("a", "b:c", "s")
    assert a.key() != b.key()
    assert a.key(sep=":") != b.key(sep=":")
    assert Scope("a/b", "c", "s").key() != Scope("a", "b/c", "s").key()


def test_absent_optional_differs_from_a_tilde_id() -> None:
    absent = Scope("t", "u", "s", project=None)
    tilde = Scope("t", "u", "s", project="~")
    assert absent.key() != tilde.key()
    assert absent.key_segments()[3] == "~"
    assert tilde.key_segments()[3] == "%7E"
    # project vs repository position matters too
    assert Scope("t", "u", "s", project="x").key() != Scope("t", "u", "s", repository="x").key()


@given(scopes)
def test_scope_key_decodes_back_to_the_scope(scope: Scope) -> None:
    # A left inverse exists, so the key function is injective over whole scopes.
    assert _decode_scope_key(scope.key()) == _fields(scope)


@given(scopes, scopes)
def test_scope_key_is_injective(a: Scope, b: Scope) -> None:
    assume(a != b)
    assert a.key() != b.key()


@given(st.lists(valid_ids, min_size=3, max_size=3), st.integers(0, 1), st.integers(1, 5))
def test_moving_characters_across_a_field_boundary_changes_the_key(
    parts: list[str], boundary: int, shift: int
) -> None:
    # Move the tail of one field to the head of the next: the joined text is the same.
    left, right = parts[boundary], parts[boundary + 1]
    assume(len(left) > shift)
    moved = list(parts)
    moved[boundary], moved[boundary + 1] = left[:-shift], left[-shift:] + right
    assume(len(moved[boundary + 1]) <= MAX_ID_LENGTH)
    assert "".join(parts) == "".join(moved)
    assert Scope(*parts).key() != Scope(*moved).key()
    assert SessionKey(*parts).key() != SessionKey(*moved).key()


@given(session_keys)
def test_session_key_round_trips(key: SessionKey) -> None:
    assert SessionKey(*(decode_segment(p) for p in key.key().split("/"))) == key


@given(scopes)
def test_joined_key_never_escapes_its_prefix(scope: Scope) -> None:
    prefix = "/var/lib/agentium/tenants"
    for key in (scope.key(), scope.session_key.key()):
        joined = prefix + "/" + key
        normalized = posixpath.normpath(joined)
        assert normalized.startswith(prefix + "/")
        # Nothing in the key is normalized away: no "..", ".", or empty segments.
        assert normalized == joined


@given(scopes, scopes)
def test_key_as_glob_pattern_matches_only_itself(a: Scope, b: Scope) -> None:
    pattern = a.key()
    assert glob.escape(pattern) == pattern  # no glob metacharacters at all
    assert fnmatch.fnmatchcase(a.key(), pattern)
    if a != b:
        assert not fnmatch.fnmatchcase(b.key(), pattern)
    assert not fnmatch.fnmatchcase(pattern + "x", pattern)
    assert not fnmatch.fnmatchcase(pattern[:-1], pattern)
