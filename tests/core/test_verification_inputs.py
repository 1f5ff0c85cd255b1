"""The verification records a host or verifier builds refuse bad fields with ``InvalidArgumentError``.

``EvidenceEntry(kind=1)`` raised a bare ``TypeError`` and
``CompletionCandidate(claimed_digests=[("a",)])`` a bare ``ValueError`` ("not
enough values to unpack"); ``VerificationResult`` and ``VerifyContext``
accepted anything, and ``fit_evidence`` a negative budget. Each now raises the
library's typed error (still a ``TypeError``/``ValueError`` subclass), naming
the field, and a verifier that trips one yields ``unknown`` on a committed turn.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import pytest

from agentium_harness import InvalidArgumentError, Verdict, VerifiedIdentity, create_harness_runtime
from agentium_harness._scope import Scope
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import (
    CompletionCandidate,
    CompletionVerifier,
    EvidenceEntry,
    OpContext,
    VerificationResult,
    VerifierCapabilities,
    VerifyContext,
    fit_evidence,
)

ANA = VerifiedIdentity("acme", "ana", "test-auth")
ENTRY = EvidenceEntry("artifact", "out.txt", "ok")


@pytest.mark.parametrize(
    "fields",
    [(1, "r", "d"), ("k", None, "d"), ("k", "r", b"d"), ("k\ud800", "r", "d"), ("k", "r", "d\udfff")],
    ids=["int-kind", "none-ref", "bytes-detail", "surrogate-kind", "surrogate-detail"],
)
def test_bad_evidence_fields_are_refused(fields: tuple[Any, Any, Any]) -> None:
    with pytest.raises(InvalidArgumentError, match="evidence"):
        EvidenceEntry(*fields)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"claim": None},
        {"claim": "x\ud800"},
        {"artifacts": "abc"},
        {"artifacts": [1]},
        {"artifacts": None},
        {"claimed_digests": [("a",)]},
        {"claimed_digests": [("a", "b", "c")]},
        {"claimed_digests": ["ab"]},
        {"claimed_digests": [("a", 1)]},
        {"claimed_digests": ("a", "b")},
    ],
)
def test_bad_candidate_fields_are_refused(kwargs: dict[str, Any]) -> None:
    fields: dict[str, Any] = {"claim": "done", **kwargs}
    with pytest.raises(InvalidArgumentError):
        CompletionCandidate(**fields)


def test_a_good_candidate_keeps_its_fields_as_tuples() -> None:
    candidate = CompletionCandidate("done", ["a.txt"], [["a.txt", "f" * 64]])
    assert candidate.artifacts == ("a.txt",) and candidate.claimed_digests == (("a.txt", "f" * 64),)


@pytest.mark.parametrize(
    "args",
    [
        ("passed",),
        (None,),
        (1,),
        (Verdict.PASS, ENTRY),
        (Verdict.PASS, ["not an entry"]),
        (Verdict.PASS, None),
        (Verdict.PASS, (), None),
        (Verdict.PASS, (), "r\ud800"),
    ],
)
def test_bad_result_fields_are_refused(args: tuple[Any, ...]) -> None:
    with pytest.raises(InvalidArgumentError):
        VerificationResult(*args)


def test_a_verdict_given_by_its_value_becomes_the_verdict() -> None:
    assert VerificationResult("fail").verdict is Verdict.FAIL


def _context(**kwargs: Any) -> VerifyContext:
    fields: dict[str, Any] = {"scope": Scope("acme", "ana", "s1"), "op": OpContext(), **kwargs}
    return VerifyContext(**fields)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"scope": "acme/ana/s1"},
        {"op": None},
        {"max_entries": -1},
        {"max_entries": 33},
        {"max_bytes": True},
        {"max_bytes": 8193},
        {"run_started_at": math.nan},
        {"run_started_at": "now"},
        {"revision": -1},
    ],
)
def test_bad_context_fields_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError):
        _context(**kwargs)


@pytest.mark.parametrize(
    "args",
    [([ENTRY], -1, 10), ([ENTRY], 1, -5), ([ENTRY], True, 10), (["x"], 1, 100), (ENTRY, 1, 100)],
)
def test_fit_evidence_refuses_bad_arguments(args: tuple[Any, Any, Any]) -> None:
    with pytest.raises(InvalidArgumentError):
        fit_evidence(*args)


class BuildsBadEvidence(CompletionVerifier):
    capabilities: ClassVar[VerifierCapabilities] = VerifierCapabilities(artifact_digests=True)

    async def verify(self, candidate: CompletionCandidate, ctx: VerifyContext) -> VerificationResult:
        return VerificationResult(Verdict.PASS, [EvidenceEntry("artifact", "name-\udcff.txt", "ok")])


@pytest.mark.anyio
async def test_a_verifier_building_unencodable_evidence_yields_unknown_on_a_committed_turn() -> None:
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["done."], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        verifier=BuildsBadEvidence(),
    )
    result = await runtime.run(ANA, "s1", "do it", completion=True)
    assert result.verification is not None and result.verification.verdict is Verdict.UNKNOWN
    assert result.has("verifier_failed") and "InvalidArgumentError" in result.verification.reason
    assert (await runtime.inspect_session(ANA, "s1")).next_seq == 1
    await runtime.aclose()


class ChangingEvidence(VerificationResult):
    """Valid evidence when first read; entries that are no EvidenceEntry when read again."""

    __slots__ = ("reads",)

    @property  # type: ignore[override]
    def evidence(self) -> tuple[Any, ...]:
        reads = getattr(self, "reads", 0)
        object.__setattr__(self, "reads", reads + 1)
        return (ENTRY,) if reads == 0 else (object(),)

    @evidence.setter
    def evidence(self, value: tuple[EvidenceEntry, ...]) -> None:
        pass


class ChangesItsAnswer(CompletionVerifier):
    capabilities: ClassVar[VerifierCapabilities] = VerifierCapabilities()

    async def verify(self, candidate: CompletionCandidate, ctx: VerifyContext) -> VerificationResult:
        return ChangingEvidence(Verdict.PASS, (), "fine")


@pytest.mark.anyio
async def test_a_result_whose_evidence_changes_when_read_again_is_read_once() -> None:
    # The check read valid entries, the record then read others: a bare AttributeError left run().
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["done."], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        verifier=ChangesItsAnswer(),
    )
    result = await runtime.run(ANA, "s1", "do it", completion=True)
    assert result.verification is not None and result.verification.verdict is Verdict.PASS
    assert result.verification.attempts[0].evidence == (ENTRY,)
    assert (await runtime.inspect_session(ANA, "s1")).next_seq == 1
    await runtime.aclose()


class CountsCalls(CompletionVerifier):
    capabilities: ClassVar[VerifierCapabilities] = VerifierCapabilities()

    def __init__(self) -> None:
        self.calls = 0

    async def verify(self, candidate: CompletionCandidate, ctx: VerifyContext) -> VerificationResult:
        self.calls += 1
        return VerificationResult(Verdict.PASS, (), "fine")


@pytest.mark.anyio
@pytest.mark.parametrize(
    "since",
    [math.nan, math.inf, -1.0, -1, True, "soon", None],
    ids=["nan", "inf", "-1.0", "-1", "True", "soon", "None"],
)
async def test_verify_refuses_a_since_that_is_no_finite_time_before_calling_the_verifier(since: Any) -> None:
    # runtime.verify(since="soon") answered an 'unknown' verdict: the context the verifier was to
    # get refused it inside the call, which took that for the verifier's failure. `agentium verify
    # --since` refuses the same values with exit 2.
    verifier = CountsCalls()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["done."]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        verifier=verifier,
    )
    with pytest.raises(InvalidArgumentError, match="since"):
        await runtime.verify(ANA, "s1", "claim", since=since)
    assert verifier.calls == 0
    record, _ = await runtime.verify(ANA, "s1", "claim", since=0)
    assert record.verdict is Verdict.PASS and verifier.calls == 1
    await runtime.aclose()


def _result_with(**fields: Any) -> VerificationResult:
    """A VerificationResult whose fields bypass its validators (as a subclass or ``__new__`` can)."""
    result = object.__new__(VerificationResult)
    for name, value in {"verdict": Verdict.PASS, "evidence": (), "reason": "", **fields}.items():
        object.__setattr__(result, name, value)
    return result


class Returns(CompletionVerifier):
    capabilities: ClassVar[VerifierCapabilities] = VerifierCapabilities()

    def __init__(self, result: object) -> None:
        self.result = result

    async def verify(self, candidate: CompletionCandidate, ctx: VerifyContext) -> VerificationResult:
        return self.result  # type: ignore[return-value]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("result", "said"),
    [
        (_result_with(verdict="pass"), "whose verdict is a str, not a Verdict"),
        (_result_with(evidence="abc"), "whose evidence is a str, not a tuple"),
        (_result_with(evidence=[ENTRY, 5]), "whose evidence holds a int, not an EvidenceEntry"),
        (_result_with(reason=5), "whose reason is a int, not a str"),
        ("pass", "returned str, not a VerificationResult"),
    ],
)
async def test_a_malformed_result_is_unknown_and_the_reason_names_the_wrong_field(
    result: object, said: str
) -> None:
    # Each read "the verifier returned VerificationResult, not a VerificationResult with a Verdict".
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["done."], cycle=True),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        verifier=Returns(result),
    )
    run = await runtime.run(ANA, "s1", "do it", completion=True)
    assert run.verification is not None and run.verification.verdict is Verdict.UNKNOWN
    assert said in run.verification.reason and run.has("verifier_contract")
    await runtime.aclose()
