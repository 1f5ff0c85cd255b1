"""A reference verifier and verifiers with one realistic bug each, run through VerifierContract.

``test_verifier_contracts.py`` runs this file in a pytester session. The
reference verifier judges an in-process host (file bytes and JUnit-like
record counts held in a dict, the host's expected digests given at build
time) and passes the whole suite; each broken one wraps it and changes one
behaviour.
"""

from __future__ import annotations

import hashlib
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import anyio
import anyio.lowlevel
import attrs
import pytest

from agentium_harness.plugin_api import (
    CompletionCandidate,
    CompletionVerifier,
    EvidenceEntry,
    OpContext,
    Verdict,
    VerificationResult,
    VerifierCapabilities,
    VerifyContext,
    evidence_size,
    fit_evidence,
)
from agentium_harness.testing import VerifierContract

pytestmark = pytest.mark.anyio

GOOD = b"the expected report\n"
ARTIFACTS = ("out/report.txt", "out/summary.txt")
RECORD = "reports/junit.xml"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@attrs.define
class Record:
    mtime: float
    ran: int
    failures: int


@attrs.define
class Host:
    """The evidence: file bytes by path and test records by path."""

    files: dict[str, bytes] = attrs.Factory(dict)
    records: dict[str, Record] = attrs.Factory(dict)

    def snapshot(self) -> tuple[dict[str, bytes], dict[str, tuple[float, int, int]]]:
        return dict(self.files), {k: (r.mtime, r.ran, r.failures) for k, r in self.records.items()}


class ReferenceVerifier(CompletionVerifier):
    capabilities: ClassVar[VerifierCapabilities] = VerifierCapabilities(
        artifact_digests=True, test_records=True
    )

    def __init__(self, host: Host) -> None:
        self.host = host
        self.expected = {path: sha(GOOD) for path in ARTIFACTS}
        self.lock = anyio.Lock()

    def expectations(self, candidate: CompletionCandidate) -> dict[str, str]:
        return self.expected

    async def verify(self, candidate: CompletionCandidate, ctx: VerifyContext) -> VerificationResult:
        ctx.raise_if_expired("verify")
        async with self.lock:
            await anyio.lowlevel.checkpoint()
            ctx.raise_if_expired("verify")
            return self.judge(self.read(candidate, ctx), ctx)

    def read(self, candidate: CompletionCandidate, ctx: VerifyContext) -> list[tuple[Verdict, EvidenceEntry]]:
        out: list[tuple[Verdict, EvidenceEntry]] = []
        for path, expected in self.expectations(candidate).items():
            data = self.host.files.get(path)
            if data is None:
                out.append((Verdict.UNKNOWN, EvidenceEntry("artifact", path, "unknown: missing")))
            elif sha(data) == expected:
                out.append((Verdict.PASS, EvidenceEntry("artifact", path, f"pass: sha256 {sha(data)}")))
            else:
                detail = f"fail: sha256 is {sha(data)}, expected {expected}"
                out.append((Verdict.FAIL, EvidenceEntry("artifact", path, detail)))
        record = self.host.records.get(RECORD)
        if record is None:
            out.append((Verdict.UNKNOWN, EvidenceEntry("test_record", RECORD, "unknown: missing")))
        elif not self.fresh(record, ctx):
            out.append((Verdict.UNKNOWN, EvidenceEntry("test_record", RECORD, "unknown: stale")))
        elif record.failures:
            out.append(
                (Verdict.FAIL, EvidenceEntry("test_record", RECORD, f"fail: {record.failures} failures"))
            )
        else:
            out.append((Verdict.PASS, EvidenceEntry("test_record", RECORD, f"pass: {record.ran} tests ran")))
        return out

    def fresh(self, record: Record, ctx: VerifyContext) -> bool:
        return record.mtime >= ctx.run_started_at

    def combine(self, outcomes: list[tuple[Verdict, EvidenceEntry]], ctx: VerifyContext) -> Verdict:
        verdicts = {v for v, _ in outcomes}
        if Verdict.FAIL in verdicts:
            return Verdict.FAIL
        return Verdict.UNKNOWN if Verdict.UNKNOWN in verdicts else Verdict.PASS

    def fit(self, entries: list[EvidenceEntry], ctx: VerifyContext) -> tuple[EvidenceEntry, ...]:
        return fit_evidence(entries, ctx.max_entries, ctx.max_bytes)[0]

    def judge(self, outcomes: list[tuple[Verdict, EvidenceEntry]], ctx: VerifyContext) -> VerificationResult:
        verdict = self.combine(outcomes, ctx)
        problems = [e.ref for v, e in outcomes if v is not Verdict.PASS]
        reason = "all checks passed" if verdict is Verdict.PASS else "problems: " + ", ".join(problems)
        return VerificationResult(verdict, self.fit([e for _, e in outcomes], ctx), reason)


class InheritedCaps(ReferenceVerifier):
    pass


class PassesAnything(ReferenceVerifier):
    """Takes "the files are there" for proof: a present artifact passes whatever its bytes."""

    capabilities = ReferenceVerifier.capabilities

    def read(self, candidate: CompletionCandidate, ctx: VerifyContext) -> list[tuple[Verdict, EvidenceEntry]]:
        outcomes = super().read(candidate, ctx)
        return [
            (Verdict.PASS, attrs.evolve(e, detail="pass: present")) if v is Verdict.FAIL else (v, e)
            for v, e in outcomes
        ]


class MissingIsFailure(ReferenceVerifier):
    """Reports absent evidence as a contradiction."""

    capabilities = ReferenceVerifier.capabilities

    def combine(self, outcomes: list[tuple[Verdict, EvidenceEntry]], ctx: VerifyContext) -> Verdict:
        verdict = super().combine(outcomes, ctx)
        return Verdict.FAIL if verdict is Verdict.UNKNOWN else verdict


class TrustsClaimedDigests(ReferenceVerifier):
    """Takes the candidate's claimed digests as the expected values, and its word when evidence is absent."""

    capabilities = ReferenceVerifier.capabilities

    def expectations(self, candidate: CompletionCandidate) -> dict[str, str]:
        claimed = {path: digest for path, digest in candidate.claimed_digests if ":" not in digest}
        return {**self.expected, **{p: d for p, d in claimed.items() if p in self.expected}}

    async def verify(self, candidate: CompletionCandidate, ctx: VerifyContext) -> VerificationResult:
        result = await super().verify(candidate, ctx)
        if "Verdict: pass" in candidate.claim and result.verdict is Verdict.UNKNOWN:
            return attrs.evolve(result, verdict=Verdict.PASS, reason="the candidate says it verified")
        return result


class TrustsClaimedDigestsOnly(ReferenceVerifier):
    """Compares each artifact with the digest the candidate claims for it (its only bug)."""

    capabilities = ReferenceVerifier.capabilities

    def expectations(self, candidate: CompletionCandidate) -> dict[str, str]:
        claimed = {path: digest for path, digest in candidate.claimed_digests if ":" not in digest}
        return {**self.expected, **{p: d for p, d in claimed.items() if p in self.expected}}


class CachesTheFirstReading(ReferenceVerifier):
    """Reads the evidence once and answers every later call from that reading."""

    capabilities = ReferenceVerifier.capabilities
    cached: list[tuple[Verdict, EvidenceEntry]] | None = None

    def read(self, candidate: CompletionCandidate, ctx: VerifyContext) -> list[tuple[Verdict, EvidenceEntry]]:
        if self.cached is None:
            self.cached = super().read(candidate, ctx)
        return self.cached


class ForgetsEvidenceOnPass(ReferenceVerifier):
    """Drops the evidence of a pass "to save budget": the pass then rests on nothing shown."""

    capabilities = ReferenceVerifier.capabilities

    def judge(self, outcomes: list[tuple[Verdict, EvidenceEntry]], ctx: VerifyContext) -> VerificationResult:
        result = super().judge(outcomes, ctx)
        return attrs.evolve(result, evidence=()) if result.verdict is Verdict.PASS else result


class IgnoresTheBudget(ReferenceVerifier):
    capabilities = ReferenceVerifier.capabilities

    def fit(self, entries: list[EvidenceEntry], ctx: VerifyContext) -> tuple[EvidenceEntry, ...]:
        return tuple(entries)


class CutsEntriesToFit(ReferenceVerifier):
    """Shortens an entry's detail until it fits instead of leaving the entry out."""

    capabilities = ReferenceVerifier.capabilities

    def fit(self, entries: list[EvidenceEntry], ctx: VerifyContext) -> tuple[EvidenceEntry, ...]:
        kept: list[EvidenceEntry] = []
        for entry in entries[: ctx.max_entries]:
            while entry.detail and sum(map(evidence_size, [*kept, entry])) > ctx.max_bytes:
                entry = attrs.evolve(entry, detail=entry.detail[:-1])
            if sum(map(evidence_size, [*kept, entry])) <= ctx.max_bytes:
                kept.append(entry)
        return tuple(kept)


class IgnoresCancellation(ReferenceVerifier):
    capabilities = ReferenceVerifier.capabilities

    async def verify(self, candidate: CompletionCandidate, ctx: VerifyContext) -> VerificationResult:
        return await super().verify(candidate, attrs.evolve(ctx, op=OpContext.with_timeout(30.0)))


class KeepsItsLockWhenCancelled(ReferenceVerifier):
    """Acquires its guard by hand and releases it only on a normal return."""

    capabilities = ReferenceVerifier.capabilities

    async def verify(self, candidate: CompletionCandidate, ctx: VerifyContext) -> VerificationResult:
        ctx.raise_if_expired("verify")
        self.lock.acquire_nowait()
        await anyio.lowlevel.checkpoint()
        result = self.judge(self.read(candidate, ctx), ctx)
        self.lock.release()
        return result


class RepairsWhatItJudges(ReferenceVerifier):
    """ "Fixes" a wrong artifact by writing the expected bytes, after judging it."""

    capabilities = ReferenceVerifier.capabilities

    def read(self, candidate: CompletionCandidate, ctx: VerifyContext) -> list[tuple[Verdict, EvidenceEntry]]:
        outcomes = super().read(candidate, ctx)
        for verdict, entry in outcomes:
            if verdict is Verdict.FAIL and entry.kind == "artifact":
                self.host.files[entry.ref] = GOOD
        return outcomes


class IgnoresTheRunStart(ReferenceVerifier):
    capabilities = ReferenceVerifier.capabilities

    def fresh(self, record: Record, ctx: VerifyContext) -> bool:
        return True


class GivesUpOnRevisions(ReferenceVerifier):
    """Accepts on the third revision whatever the evidence says, "to end the loop"."""

    capabilities = ReferenceVerifier.capabilities

    def combine(self, outcomes: list[tuple[Verdict, EvidenceEntry]], ctx: VerifyContext) -> Verdict:
        return Verdict.PASS if ctx.revision >= 3 else super().combine(outcomes, ctx)


class StopsDeclaringTestRecords(ReferenceVerifier):
    """Still reads test records, but its declaration lost ``test_records`` (the stale test skipped)."""

    capabilities = VerifierCapabilities(artifact_digests=True)

    def fresh(self, record: Record, ctx: VerifyContext) -> bool:
        return True  # the bug its skipped test would have caught


class LeavesItsChildRunning(ReferenceVerifier):
    """Starts a helper process per call (like ``git cat-file --batch``), stopped only on a normal return."""

    capabilities = ReferenceVerifier.capabilities
    children: ClassVar[list[subprocess.Popen[bytes]]] = []

    async def verify(self, candidate: CompletionCandidate, ctx: VerifyContext) -> VerificationResult:
        ctx.raise_if_expired("verify")
        helper = subprocess.Popen(["sleep", "30"])  # noqa: ASYNC220 - the bug is what happens after
        self.children.append(helper)
        await anyio.sleep(0.02)  # "asks the helper"; cancelled here, the helper is never stopped
        result = await super().verify(candidate, ctx)
        helper.kill()
        helper.wait()
        return result


class LeavesItsThreadRunning(ReferenceVerifier):
    """Reads chunks from a worker thread through a bounded queue; cancelled, the worker blocks forever."""

    capabilities = ReferenceVerifier.capabilities
    stop = threading.Event()

    async def verify(self, candidate: CompletionCandidate, ctx: VerifyContext) -> VerificationResult:
        ctx.raise_if_expired("verify")
        chunks: queue.Queue[int] = queue.Queue(maxsize=1)

        def produce() -> None:
            for chunk in range(5):
                while not self.stop.is_set():  # (the test's teardown sets it; nothing else does)
                    try:
                        chunks.put(chunk, timeout=0.05)
                        break
                    except queue.Full:
                        continue

        threading.Thread(target=produce, name="evidence-reader", daemon=True).start()
        for _ in range(5):
            while True:
                try:
                    chunks.get_nowait()
                    break
                except queue.Empty:
                    await anyio.sleep(0.005)  # cancelled here, the reader is left waiting to put
        return await super().verify(candidate, ctx)


class _Arranged(VerifierContract):
    """The host and the three arrangements every class below shares; each names its verifier class."""

    verifier_class: ClassVar[type[ReferenceVerifier]] = ReferenceVerifier

    @pytest.fixture
    def host(self) -> Host:
        return Host()

    @pytest.fixture
    def verifier(self, host: Host) -> ReferenceVerifier:
        return self.verifier_class(host)

    @pytest.fixture
    def arrange_passing(self, host: Host) -> Callable[[], dict[str, str]]:
        def arrange() -> dict[str, str]:
            host.files.update({path: GOOD for path in ARTIFACTS})
            host.records[RECORD] = Record(time.time(), 3, 0)
            return {path: sha(GOOD) for path in ARTIFACTS}

        return arrange

    @pytest.fixture
    def arrange_failing(self, host: Host) -> Callable[[], dict[str, str]]:
        def arrange() -> dict[str, str]:
            host.files.update({ARTIFACTS[0]: b"not the report\n", ARTIFACTS[1]: GOOD})
            host.records[RECORD] = Record(time.time(), 3, 0)
            return {ARTIFACTS[0]: sha(b"not the report\n"), ARTIFACTS[1]: sha(GOOD)}

        return arrange

    @pytest.fixture
    def arrange_failing_by_kind(self, host: Host) -> dict[str, Callable[[], dict[str, str]]]:
        def wrong_artifact() -> dict[str, str]:
            host.files.update({ARTIFACTS[0]: b"not the report\n", ARTIFACTS[1]: GOOD})
            host.records[RECORD] = Record(time.time(), 3, 0)
            return {ARTIFACTS[0]: sha(b"not the report\n"), ARTIFACTS[1]: sha(GOOD)}

        def failing_tests() -> dict[str, str]:
            host.files.update({path: GOOD for path in ARTIFACTS})
            host.records[RECORD] = Record(time.time(), 3, 2)
            return {path: sha(GOOD) for path in ARTIFACTS}

        return {"artifact_digests": wrong_artifact, "test_records": failing_tests}

    @pytest.fixture
    def arrange_missing(self, host: Host) -> Callable[[], None]:
        def arrange() -> None:
            host.files.clear()
            host.records.clear()

        return arrange

    @pytest.fixture
    def evidence_snapshot(self, host: Host) -> Callable[[], Any]:
        return host.snapshot


class TestReferenceVerifier(_Arranged):
    verifier_class = ReferenceVerifier


class TestInheritedCaps(_Arranged):
    verifier_class = InheritedCaps


class TestPassesAnything(_Arranged):
    verifier_class = PassesAnything


class TestMissingIsFailure(_Arranged):
    verifier_class = MissingIsFailure


class TestTrustsClaimedDigests(_Arranged):
    verifier_class = TrustsClaimedDigests


class TestCachesTheFirstReading(_Arranged):
    verifier_class = CachesTheFirstReading


class TestForgetsEvidenceOnPass(_Arranged):
    verifier_class = ForgetsEvidenceOnPass


class TestIgnoresTheBudget(_Arranged):
    verifier_class = IgnoresTheBudget


class TestCutsEntriesToFit(_Arranged):
    verifier_class = CutsEntriesToFit


class TestIgnoresCancellation(_Arranged):
    verifier_class = IgnoresCancellation


class TestKeepsItsLockWhenCancelled(_Arranged):
    verifier_class = KeepsItsLockWhenCancelled


class TestRepairsWhatItJudges(_Arranged):
    verifier_class = RepairsWhatItJudges


class TestIgnoresTheRunStart(_Arranged):
    verifier_class = IgnoresTheRunStart


class TestGivesUpOnRevisions(_Arranged):
    verifier_class = GivesUpOnRevisions


class TestStopsDeclaringTestRecords(_Arranged):
    verifier_class = StopsDeclaringTestRecords


class TestLeavesItsChildRunning(_Arranged):
    verifier_class = LeavesItsChildRunning

    @pytest.fixture
    def verifier(self, host: Host) -> Iterator[ReferenceVerifier]:
        yield LeavesItsChildRunning(host)
        for child in LeavesItsChildRunning.children:
            child.kill()
            child.wait()


class TestLeavesItsThreadRunning(_Arranged):
    verifier_class = LeavesItsThreadRunning

    @pytest.fixture
    def verifier(self, host: Host) -> Iterator[ReferenceVerifier]:
        LeavesItsThreadRunning.stop.clear()
        yield LeavesItsThreadRunning(host)
        LeavesItsThreadRunning.stop.set()


class TestTrustsClaimedDigestsBehindABothKindsFixture(_Arranged):
    """The author's arrange_failing breaks both kinds at once: the failing records hide the trusted claim."""

    verifier_class = TrustsClaimedDigestsOnly

    @pytest.fixture
    def arrange_failing(self, host: Host) -> Callable[[], dict[str, str]]:
        def arrange() -> dict[str, str]:
            host.files.update({ARTIFACTS[0]: b"not the report\n", ARTIFACTS[1]: GOOD})
            host.records[RECORD] = Record(time.time(), 3, 2)
            return {ARTIFACTS[0]: sha(b"not the report\n"), ARTIFACTS[1]: sha(GOOD)}

        return arrange
