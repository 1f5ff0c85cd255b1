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
from typing import Any, ClassVar

import pytest

from agentium_harness import (
    EraseTarget,
    HarnessRuntime,
    IdentityError,
    InvalidIdError,
    MemoryScope,
    RecallScope,
    ResidentLimits,
    RuntimeLimits,
    Scope,
    SessionKey,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._ports.recall_sources import SourceOwner, document_source_id
from agentium_harness._scope import ERASURE_RECORDS_TENANT, encode_segment, validate_id
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.plugin_api import (
    Message,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    OpContext,
    ProviderCapabilities,
    Role,
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
