"""A verifier's strings must be text that can be stored and sent, or its verdict is ``unknown``.

Every string a verifier returns (its reason, each evidence entry's kind, ref
and detail, and the message of an error it raises) is kept in the committed
record and shown to the model in a revision. One that UTF-8 cannot encode (a
lone surrogate) used to escape as a bare ``UnicodeEncodeError`` or an
``EncodingError`` and lose the whole turn, model calls included; one that is
not a string at all was committed and made the snapshot unreadable.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, ClassVar

import pytest

from agentium_harness import RunStatus, Verdict, VerifiedIdentity, create_harness_runtime
from agentium_harness import verified_completion_policy as policy
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import (
    CompletionCandidate,
    CompletionVerifier,
    EvidenceEntry,
    VerificationResult,
    VerifierCapabilities,
    VerifyContext,
)

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")


class Answers(CompletionVerifier):
    """Answers with what ``make`` returns (or raises)."""

    capabilities: ClassVar[VerifierCapabilities] = VerifierCapabilities(artifact_digests=True)

    def __init__(self, make: Callable[[], VerificationResult]) -> None:
        self.make = make

    async def verify(self, candidate: CompletionCandidate, ctx: VerifyContext) -> VerificationResult:
        return self.make()


def _entry(**fields: Any) -> EvidenceEntry:
    entry = EvidenceEntry("artifact", "out.txt", "differs")
    for name, value in fields.items():
        object.__setattr__(entry, name, value)  # what a careless verifier can still hand back
    return entry


def _reason(value: object) -> VerificationResult:
    result = VerificationResult(Verdict.FAIL, (), "ok")
    object.__setattr__(result, "reason", value)
    return result


class _HidesSurrogates(str):
    """A str subclass whose own ``encode`` would hide the surrogate from a check."""

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return b"fine"


def _result(*entries: EvidenceEntry) -> VerificationResult:
    return VerificationResult(Verdict.FAIL, entries, "ok")


# The constructors refuse such text; these are set past them, as a careless verifier still can.
MALFORMED: dict[str, Callable[[], VerificationResult]] = {
    "surrogate-reason": lambda: _reason("bad \ud800 reason"),
    "surrogate-kind": lambda: _result(_entry(kind="a\udfff")),
    "surrogate-ref": lambda: _result(_entry(ref="a\ud800")),
    "surrogate-detail": lambda: _result(_entry(detail="\ud800")),
    "surrogate-in-a-str-subclass": lambda: _reason(_HidesSurrogates("x\ud800")),
    "non-string-ref": lambda: _result(_entry(ref=5)),
    "non-string-reason": lambda: _reason(None),
}


@pytest.mark.parametrize("make", MALFORMED.values(), ids=MALFORMED.keys())
async def test_a_result_with_unencodable_text_is_unknown_and_the_turn_commits(
    make: Callable[[], VerificationResult], caplog: pytest.LogCaptureFixture
) -> None:
    store = InMemorySessionStore()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["done."], cycle=True),
        archive=InMemoryArchive(),
        session_store=store,
        verifier=Answers(make),
        completion_policy=policy(on_fail="revise", max_revisions=1),
    )
    with caplog.at_level(logging.WARNING):
        result = await runtime.run(ANA, "s1", "do it", completion=True)
    assert result.status is RunStatus.NOT_ACCEPTED and result.committed
    assert result.verification is not None and result.verification.verdict is Verdict.UNKNOWN
    assert result.verification.evidence == () and result.has("verifier_contract")
    assert any("verifier_contract" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    view = await runtime.inspect_session(ANA, "s1")
    assert view.next_seq == 1  # committed, and the stored snapshot reads back
    await runtime.aclose()


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no message")


def _raise(exc: Exception) -> Callable[[], VerificationResult]:
    def make() -> VerificationResult:
        raise exc

    return make


@pytest.mark.parametrize(
    "exc", [ValueError("boom \udc80"), _Unprintable()], ids=["surrogate-message", "unprintable"]
)
async def test_a_verifier_error_whose_message_is_not_text_still_commits_as_unknown(exc: Exception) -> None:
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["done."], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        verifier=Answers(_raise(exc)),
    )
    result = await runtime.run(ANA, "s1", "do it", completion=True)
    assert result.verification is not None and result.verification.verdict is Verdict.UNKNOWN
    assert result.has("verifier_failed") and result.committed
    assert type(exc).__name__ in result.verification.reason
    assert (await runtime.inspect_session(ANA, "s1")).next_seq == 1
    await runtime.aclose()


async def test_nul_and_astral_text_are_kept_as_given() -> None:
    # NUL is valid text (message content may hold it too) and an astral character is one code point.
    verdict = VerificationResult(Verdict.PASS, (EvidenceEntry("artifact", "a\x00b", "ok 😀"),), "r\x00")
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["done."], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        verifier=Answers(lambda: verdict),
    )
    result = await runtime.run(ANA, "s1", "do it", completion=True)
    assert result.status is RunStatus.COMPLETED and result.verification is not None
    assert result.verification.evidence == verdict.evidence and result.verification.reason == "r\x00"
    await runtime.aclose()
