"""Hostile subclasses of ``str`` (and of numbers) at the record boundary.

A host may hand Agentium a ``str`` subclass: a harmless one (an enum's ``str``
mixin, ``markupsafe.Markup``) or one whose own ``__len__``, ``__iter__``,
``encode``, ``__hash__``, ``__eq__``, ``__getitem__`` or ``__str__`` raises or
lies. Either way the records keep the exact ``str`` it holds (copied without
calling any of its methods), so what is checked is what is keyed, encoded and
committed, and nothing of the host's class runs later inside the engine.
"""

from __future__ import annotations

import enum
import re
import sys
from collections import OrderedDict
from typing import Any, ClassVar

import pytest

from agentium_harness import (
    EraseTarget,
    HarnessRuntime,
    IdentityError,
    InvalidArgumentError,
    InvalidIdError,
    InvalidPayloadError,
    MemoryScope,
    MessageRef,
    RecallScope,
    ResidentLimits,
    RetentionPolicy,
    RuntimeLimits,
    Scope,
    SessionKey,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine.history_checks import (
    check_before_seq,
    check_expected_revision,
    check_messages_encoded,
    check_reply,
)
from agentium_harness._plugins.deadline import check_timeout
from agentium_harness._ports.erasure import SeqRange, check_max_items
from agentium_harness._ports.memory import check_limit
from agentium_harness._ports.recall import reciprocal_rank_fusion
from agentium_harness._ports.recall_args import checked_count
from agentium_harness._ports.recall_sources import SourceOwner, document_source_id
from agentium_harness._scope import ERASURE_RECORDS_TENANT, encode_segment, validate_id
from agentium_harness._validators import check_count, check_duration
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.plugin_api import (
    Message,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    OpContext,
    ProviderCapabilities,
    Role,
    ToolCall,
)

pytestmark = pytest.mark.anyio


class Boom(Exception):
    """What a hostile subclass raises: it must never reach the host from Agentium."""


def _boom(self: object, *args: Any, **kwargs: Any) -> Any:
    raise Boom("the host's str subclass ran")


class Hostile(str):
    """A str every one of whose own methods raises (its characters are all one can read)."""

    __len__ = __iter__ = __getitem__ = __contains__ = _boom
    __hash__ = __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _boom  # type: ignore[assignment]
    __str__ = __repr__ = __format__ = __add__ = __mod__ = __mul__ = _boom  # type: ignore[assignment]
    encode = isascii = isprintable = isalnum = strip = replace = split = join = _boom  # type: ignore[assignment]
    startswith = endswith = lower = upper = casefold = find = index = _boom  # type: ignore[assignment]


class Lying(str):
    """A str whose own methods tell another text than it holds (short, printable, harmless)."""

    def __len__(self) -> int:
        return 1

    def __iter__(self) -> Any:
        return iter("a")

    def isprintable(self) -> bool:
        return True

    def isascii(self) -> bool:
        return True

    def isalnum(self) -> bool:
        return True

    def replace(self, *args: Any) -> str:
        return "a"

    def encode(self, *args: Any, **kwargs: Any) -> bytes:  # type: ignore[override]
        return b"a"

    def __eq__(self, other: object) -> bool:
        return False

    def __ne__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0


class Colour(str, enum.Enum):  # noqa: UP042 - the str mixin is what is tested
    """A harmless subclass: an enum with a str mixin."""

    RED = "red"


def _exact(*values: object) -> bool:
    return all(type(v) is str for v in values)


# -- ids: validated as the text they hold, kept and encoded as that text -----------------------------


def test_validate_id_checks_and_returns_the_plain_text_of_a_hostile_subclass() -> None:
    plain = validate_id(Hostile("s-1"), "session_id")
    assert type(plain) is str and plain == "s-1"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        pytest.param("a\x00b", "control character", id="control-hidden-by-iter-and-isprintable"),
        pytest.param("x" * 300, "at most", id="length-hidden-by-len"),
        pytest.param("a\ud800", "lone surrogate", id="surrogate-hidden-by-encode"),
    ],
)
def test_validate_id_refuses_what_a_lying_subclass_hides(text: str, why: str) -> None:
    with pytest.raises(InvalidIdError, match=why):
        validate_id(Lying(text), "session_id")


def test_encode_segment_encodes_the_text_held_not_what_encode_says() -> None:
    # Injectivity: a subclass whose encode() lies must not share a key segment with another id.
    assert encode_segment(Lying("a/b")) == encode_segment("a/b") == "a%2Fb"
    assert encode_segment(Lying("a/b")) != encode_segment("a")
    assert encode_segment(Hostile("ü")) == encode_segment("ü")


def test_identity_and_scope_records_keep_exact_str_ids() -> None:
    identity = VerifiedIdentity(Hostile("acme"), Hostile("ana"), Hostile("auth"))
    assert _exact(identity.tenant, identity.user, identity.verified_by)
    assert identity == VerifiedIdentity("acme", "ana", "auth")
    scope = Scope(Lying("acme"), Lying("ana"), Lying("s/1"), Hostile("p"), Lying("r"))
    assert _exact(scope.tenant, scope.user, scope.session, scope.project, scope.repository)
    assert scope.key() == Scope("acme", "ana", "s/1", "p", "r").key()
    assert scope.session_key == SessionKey("acme", "ana", "s/1")
    key = SessionKey(Hostile("acme"), Hostile("ana"), Hostile("s1"))
    assert _exact(key.tenant, key.user, key.session) and hash(key) == hash(SessionKey("acme", "ana", "s1"))
    recall = RecallScope(Hostile("p"), Lying("r"))
    assert _exact(recall.project, recall.repository)
    memory = MemoryScope(Hostile("acme"), Lying("ana"), Hostile("p"))
    assert _exact(memory.tenant, memory.user, memory.project)
    target = EraseTarget(Hostile("acme"), Lying("ana"), Hostile("s1"))
    assert _exact(target.tenant_id, target.user_id, target.session_id)
    owner = SourceOwner(Hostile("acme"), Lying("ana"), Hostile("s1"))
    assert _exact(owner.tenant, owner.user, owner.session)
    assert document_source_id(owner, Lying("d/1")) == document_source_id(
        SourceOwner("acme", "ana", "s1"), "d/1"
    )


def test_a_subclass_cannot_name_the_reserved_tenant_by_lying_about_equality() -> None:
    with pytest.raises(IdentityError):
        VerifiedIdentity(Lying(ERASURE_RECORDS_TENANT), "ana", "auth")
    with pytest.raises(Exception, match="reserved"):
        SourceOwner(Lying(ERASURE_RECORDS_TENANT))


def test_harmless_subclasses_are_kept_as_their_text() -> None:
    scope = Scope(Colour.RED, "ana", "s1")
    assert type(scope.tenant) is str and scope.tenant == "red"


class _Echo(ModelProvider):
    capabilities: ClassVar[ProviderCapabilities] = ProviderCapabilities(tool_calls=False, deterministic=True)

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        return ModelResponse(message=Message(Role.ASSISTANT, "ok"))


def _runtime(max_groups: int = 2) -> HarnessRuntime:
    return create_harness_runtime(
        provider=_Echo(),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=max_groups)),
    )


ANA = VerifiedIdentity("acme", "ana", "test-auth")


async def test_a_hostile_session_id_reaches_the_session_its_text_names() -> None:
    rt = _runtime()
    async with rt:
        first = await rt.append(ANA, Hostile("s1"), [Message(Role.USER, "u0"), Message(Role.ASSISTANT, "a0")])
        second = await rt.append(ANA, "s1", [Message(Role.USER, "u1"), Message(Role.ASSISTANT, "a1")])
        assert (first.seq, second.seq) == (0, 1)
        page = await rt.read_history(ANA, Lying("s1"), max_groups=10)
        assert [g.seq for g in page.groups] == [0, 1]
        listed = await rt.list_sessions(ANA, after=Hostile("s0"), limit=10)
        assert listed.sessions == ("s1",) and _exact(*listed.sessions)


# -- message text: committed as the plain text it holds ------------------------------------------------

FORMAT = "openai.responses.input_item/v1"


def _turn(n: int, kind: type[str]) -> list[Message]:
    """A user message, a tool call with its result and an answer, every text of class ``kind``."""
    call = ToolCall(f"c{n}", "lookup", {"q": n})
    # Set behind the record's back, as ToolCall keeps plain ids: what a hand-made record could hold.
    object.__setattr__(call, "id", kind(f"c{n}"))
    object.__setattr__(call, "name", kind("lookup"))
    return [
        Message(Role.USER, kind(f"question {n} ü"), payload={"n": n}, payload_format=kind(FORMAT)),
        Message(Role.ASSISTANT, kind(""), tool_calls=(call,)),
        Message(Role.TOOL, kind(f"result {n}"), tool_call_id=kind(f"c{n}")),
        Message(Role.ASSISTANT, kind(f"answer {n}")),
    ]


def _without_write_id(data: bytes) -> bytes:
    """A group's bytes with its write id (random, its own) taken out; each committed group has one."""
    stripped, found = re.subn(rb',"write_id":"[0-9a-f]{32}"', b"", data)
    assert found == 1
    return stripped


def _texts(message: Message) -> tuple[object, ...]:
    calls = tuple(x for c in message.tool_calls for x in (c.id, c.name))
    return (message.content, message.tool_call_id, message.payload_format, *calls)


@pytest.mark.parametrize("kind", [Hostile, Lying, str], ids=["hostile", "lying", "plain"])
async def test_message_text_of_a_str_subclass_is_committed_as_its_plain_text(kind: type[str]) -> None:
    # Eviction (2 groups resident) plans over the committed copies: with the subclass kept, its own
    # encode()/__len__ ran there, after the append was admitted, and failed it (or mis-counted it).
    plain_rt, rt = _runtime(), _runtime()
    async with plain_rt, rt:
        for n in range(4):
            expected = await plain_rt.append(ANA, "s1", _turn(n, str))
            result = await rt.append(ANA, "s1", _turn(n, kind))
            assert (result.seq, result.commit_state, result.eviction) == (
                expected.seq,
                expected.commit_state,
                expected.eviction,
            )
        plain_page = await plain_rt.read_history(ANA, "s1", max_groups=10, view=False)
        page = await rt.read_history(ANA, "s1", max_groups=10, view=False)
    # The same bytes but for each group's own random write id.
    assert [_without_write_id(g.group.canonical_bytes()) for g in page.groups] == [
        _without_write_id(g.group.canonical_bytes()) for g in plain_page.groups
    ]
    for entry in page.groups:
        for message in entry.group.messages:
            assert all(t is None or type(t) is str for t in _texts(message))


def test_the_checked_copies_hold_exact_str_on_both_check_paths() -> None:
    # At once (one encoding of all the messages): text, ids and format of subclasses.
    at_once = [
        Message(Role.USER, Hostile("hi"), payload=[1], payload_format=Hostile(FORMAT)),
        Message(Role.ASSISTANT, Lying("a"), tool_calls=(ToolCall(Hostile("c"), Lying("f")),)),
        Message(Role.TOOL, Lying("r"), tool_call_id=Hostile("c")),
    ]
    checked, encoded = check_messages_encoded(at_once)
    assert encoded is not None
    plain_checked, plain_encoded = check_messages_encoded(
        [
            Message(Role.USER, "hi", payload=[1], payload_format=FORMAT),
            Message(Role.ASSISTANT, "a", tool_calls=(ToolCall("c", "f"),)),
            Message(Role.TOOL, "r", tool_call_id="c"),
        ]
    )
    assert (checked, encoded) == (plain_checked, plain_encoded)
    for message in checked:
        assert all(t is None or type(t) is str for t in _texts(message))
    # One by one (tool calls whose ids were changed behind their back send the messages there).
    checked, encoded = check_messages_encoded(_turn(0, Hostile))
    assert encoded is None
    for message in checked:
        assert all(t is None or type(t) is str for t in _texts(message))


def test_a_providers_reply_of_str_subclasses_is_checked_into_plain_text() -> None:
    reply = Message(Role.ASSISTANT, Hostile("answer"), payload={"a": 1}, payload_format=Lying(FORMAT))
    checked = check_reply(reply)
    assert _exact(checked.content, checked.payload_format)
    assert (checked.content, checked.payload_format) == ("answer", FORMAT)


def test_a_payload_format_a_subclass_hides_is_refused_as_the_text_it_holds() -> None:
    with pytest.raises(InvalidPayloadError, match="payload_format"):
        check_messages_encoded([Message(Role.USER, "x", payload=1, payload_format=Lying("bad format!"))])
    with pytest.raises(InvalidPayloadError, match="payload_format"):
        check_messages_encoded([Message(Role.USER, "x", payload=1, payload_format=Hostile("x" * 200))])


async def test_harmless_subclasses_commit_the_same_bytes_as_their_text() -> None:
    rt = _runtime()
    async with rt:
        await rt.append(ANA, "s1", [Message(Role.USER, Colour.RED), Message(Role.ASSISTANT, "ok")])
        await rt.append(ANA, "s2", [Message(Role.USER, "red"), Message(Role.ASSISTANT, "ok")])
        (one,) = (await rt.read_history(ANA, "s1", max_groups=1)).groups
        (two,) = (await rt.read_history(ANA, "s2", max_groups=1)).groups
    assert type(one.group.messages[0].content) is str
    assert one.group.messages == two.group.messages
    assert _without_write_id(one.group.canonical_bytes()).replace(b'"s1"', b'"s2"') == _without_write_id(
        two.group.canonical_bytes()
    )


# -- numbers: an int or float subclass is checked, and kept, as the number it holds --------------------


class RaisingInt(int):
    """An int every one of whose own methods raises."""

    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = __hash__ = _boom  # type: ignore[assignment]
    __index__ = __int__ = __float__ = __bool__ = __repr__ = __str__ = __format__ = _boom  # type: ignore[assignment]
    __add__ = __sub__ = __mul__ = __truediv__ = __floordiv__ = __neg__ = __abs__ = _boom  # type: ignore[assignment]
    __radd__ = __rsub__ = __rmul__ = __rtruediv__ = bit_length = _boom  # type: ignore[assignment]


class LyingInt(int):
    """An int whose own comparisons say it is within any bound."""

    def __lt__(self, other: object) -> bool:
        return False

    def __gt__(self, other: object) -> bool:
        return False

    def __le__(self, other: object) -> bool:
        return True

    def __ge__(self, other: object) -> bool:
        return True


class RaisingFloat(float):
    """A float every one of whose own methods raises."""

    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = __hash__ = _boom  # type: ignore[assignment]
    __float__ = __int__ = __bool__ = __repr__ = __str__ = __format__ = _boom  # type: ignore[assignment]
    __add__ = __sub__ = __mul__ = __truediv__ = __radd__ = __rmul__ = __rtruediv__ = _boom  # type: ignore[assignment]


class LyingFloat(float):
    """A float whose own comparisons say it is within any bound."""

    def __lt__(self, other: object) -> bool:
        return False

    def __gt__(self, other: object) -> bool:
        return False

    def __le__(self, other: object) -> bool:
        return True

    def __ge__(self, other: object) -> bool:
        return True


class Level(enum.IntEnum):
    """A harmless int subclass."""

    EIGHT = 8


def test_counts_and_durations_are_read_as_the_number_they_hold() -> None:
    for given, expected in ((RaisingInt(7), 7), (LyingInt(7), 7), (Level.EIGHT, 8)):
        plain = check_count(given, "limit")
        assert type(plain) is int and plain == expected
    for given_s, seconds in ((RaisingFloat(2.5), 2.5), (LyingFloat(2.5), 2.5), (RaisingInt(3), 3.0)):
        checked = check_duration(given_s, "timeout_s")
        assert type(checked) is float and checked == seconds
    from agentium_harness._validators import exact_int, exact_number

    assert exact_int(RaisingInt(5)) == 5 and type(exact_int(RaisingInt(5))) is int
    assert type(exact_number(RaisingFloat(0.5))) is float


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(LyingInt(10**13), id="lying-int-over-the-ceiling"),
        pytest.param(LyingInt(0), id="lying-int-under-the-minimum"),
        pytest.param(RaisingInt(-1), id="raising-int-negative"),
        pytest.param(True, id="bool"),
    ],
)
def test_a_count_a_subclass_hides_is_refused(value: object) -> None:
    with pytest.raises(InvalidArgumentError, match="limit must be an integer"):
        check_count(value, "limit")


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(LyingFloat(1e9), id="lying-float-over-the-ceiling"),
        pytest.param(LyingFloat(float("nan")), id="lying-nan"),
        pytest.param(LyingInt(-5), id="lying-int-negative"),
        pytest.param(RaisingFloat(float("inf")), id="raising-inf"),
        pytest.param(10**400, id="int-past-float-range"),
        pytest.param(True, id="bool"),
    ],
)
def test_a_duration_a_subclass_hides_is_refused(value: object) -> None:
    with pytest.raises(InvalidArgumentError, match="timeout_s must be a finite number"):
        check_duration(value, "timeout_s")
    with pytest.raises(InvalidArgumentError):
        check_timeout(value, "hook_timeout_s")


def test_records_keep_the_exact_number_checked() -> None:
    limits = ResidentLimits(max_groups=RaisingInt(8))
    assert type(limits.max_groups) is int and limits.max_groups == 8
    with pytest.raises(InvalidArgumentError):
        ResidentLimits(max_groups=LyingInt(10**13))
    ref = MessageRef(RaisingInt(2), LyingInt(1))
    assert (type(ref.seq), type(ref.index)) == (int, int) and (ref.seq, ref.index) == (2, 1)
    with pytest.raises(InvalidArgumentError):
        MessageRef(LyingInt(-1), 0)
    span = SeqRange(RaisingInt(0), RaisingInt(3))
    assert (type(span.start), type(span.stop)) == (int, int)
    policy = RetentionPolicy(max_archived_groups=RaisingInt(5), max_age_days=RaisingFloat(1.5))
    assert type(policy.max_archived_groups) is int and type(policy.max_age_days) is float
    with pytest.raises(InvalidArgumentError):
        RetentionPolicy(max_age_days=LyingFloat(float("inf")))


def test_the_argument_checkers_return_exact_numbers() -> None:
    assert type(check_expected_revision(RaisingInt(3))) is int
    assert type(check_before_seq(RaisingInt(2), 5)) is int
    with pytest.raises(InvalidArgumentError):
        check_before_seq(LyingInt(9), 5)
    with pytest.raises(InvalidArgumentError):
        check_expected_revision(LyingInt(-1))
    for refused in (True, False):
        with pytest.raises(InvalidArgumentError):
            check_expected_revision(refused)
        with pytest.raises(InvalidArgumentError):
            check_before_seq(refused, 5)
    assert type(check_max_items(RaisingInt(4))) is int
    with pytest.raises(InvalidArgumentError):
        check_max_items(LyingInt(0))
    assert type(check_limit(RaisingInt(4))) is int
    with pytest.raises(InvalidArgumentError):
        check_limit(LyingInt(10**9))
    assert type(checked_count(RaisingInt(4), "limit", "recall discover")) is int
    with pytest.raises(InvalidArgumentError):
        reciprocal_rank_fusion([["a"]], k=LyingInt(-1))


async def test_the_history_api_takes_number_subclasses_as_their_numbers() -> None:
    rt = _runtime(max_groups=8)
    async with rt:
        for n in range(3):
            await rt.append(
                ANA,
                "s1",
                [Message(Role.USER, f"u{n}"), Message(Role.ASSISTANT, f"a{n}")],
                expected_revision=RaisingInt(n),
            )
        page = await rt.read_history(
            ANA, "s1", max_groups=RaisingInt(5), before_seq=RaisingInt(2), max_bytes=RaisingInt(10**6)
        )
        assert [g.seq for g in page.groups] == [0, 1]
        with pytest.raises(InvalidArgumentError):
            await rt.read_history(ANA, "s1", max_groups=LyingInt(10**6))
        with pytest.raises(InvalidArgumentError):
            await rt.read_history(ANA, "s1", max_groups=5, before_seq=LyingInt(99))
        listed = await rt.list_sessions(ANA, limit=RaisingInt(5))
        assert listed.sessions == ("s1",)


# -- payloads: checked as plain JSON by what they hold, not by their own __eq__ -------------------------


class AlwaysEqualDict(dict[str, Any]):
    """A dict that says it equals anything (so a tuple inside would come back a list unnoticed)."""

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    __hash__ = None  # type: ignore[assignment]


class AlwaysEqualList(list[Any]):
    """A list that says it equals anything."""

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    __hash__ = None  # type: ignore[assignment]


class LyingItems(dict[str, Any]):
    """A dict whose items() shows plain JSON while it holds something else."""

    def items(self) -> Any:
        return [(k, [1]) for k in dict.keys(self)]

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    __hash__ = None  # type: ignore[assignment]


class ClaimsToBeStr:
    """An object whose __class__ says str."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # type: ignore[override]
        return str


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(AlwaysEqualDict(x=(1, 2)), id="equal-dict-holding-a-tuple"),
        pytest.param({"x": AlwaysEqualList([(1, 2)])}, id="equal-list-holding-a-tuple"),
        pytest.param([AlwaysEqualDict({"k": {1: "int key"}})], id="equal-dict-holding-an-int-key"),
        pytest.param(LyingItems(x=(1,)), id="items-lie"),
        pytest.param(LyingItems(x=ClaimsToBeStr()), id="items-hide-an-object-claiming-str"),
    ],
)
async def test_a_payload_whose_own_eq_hides_what_json_changes_is_refused(payload: Any) -> None:
    message = Message(Role.USER, "x", payload=payload, payload_format=FORMAT)
    with pytest.raises(InvalidPayloadError, match="not plain JSON"):
        check_messages_encoded([message])
    call = ToolCall("c1", "f", {"ok": 1})
    object.__setattr__(call, "arguments", payload if isinstance(payload, dict) else {"a": payload})
    with pytest.raises(InvalidPayloadError, match="not plain JSON"):
        check_messages_encoded(
            [Message(Role.ASSISTANT, "", tool_calls=(call,)), Message(Role.TOOL, "r", tool_call_id="c1")]
        )
    rt = _runtime()
    async with rt:
        with pytest.raises(InvalidPayloadError):
            await rt.append(ANA, "s1", [message])
        assert (await rt.read_history(ANA, "s1", max_groups=1)).groups == ()


def test_a_payload_of_harmless_subclasses_is_kept_as_plain_json() -> None:
    # Read by what they hold: a str enum, an IntEnum, an OrderedDict, a list whose __eq__ lies
    # but that holds plain JSON, a float subclass.
    payload = OrderedDict(role=Colour.RED, n=Level.EIGHT, items=AlwaysEqualList([1, "a"]), f=LyingFloat(0.5))
    plain = {"role": "red", "n": 8, "items": [1, "a"], "f": 0.5}
    (checked,), _ = check_messages_encoded([Message(Role.USER, "x", payload=payload, payload_format=FORMAT)])
    assert checked.payload == plain and type(checked.payload) is dict
    assert [type(v) for v in checked.payload.values()] == [float, list, int, str]


class HugeInt(int):
    """An int whose own methods raise, holding more digits than Python decodes by default."""

    __abs__ = __neg__ = __index__ = __int__ = __repr__ = __lt__ = __ge__ = _boom  # type: ignore[assignment]


def test_a_huge_int_subclass_in_a_payload_is_refused_by_its_digits() -> None:
    # Only a process that raised its int-to-str limit can encode it: the check then looks for
    # integers too long to read back, which must not run the subclass's own __abs__.
    previous = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        payload = AlwaysEqualDict(n=AlwaysEqualList([HugeInt(10**5000)]))
        with pytest.raises(InvalidPayloadError, match="more than 4300 digits"):
            check_messages_encoded([Message(Role.USER, "x", payload=payload, payload_format=FORMAT)])
    finally:
        sys.set_int_max_str_digits(previous)
