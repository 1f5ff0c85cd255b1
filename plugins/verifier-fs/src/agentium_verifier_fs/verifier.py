"""The ``fs`` completion verifier: the host's expected facts checked against the files under a root.

The verdict rests only on what the host configured (artifact digests, test
record paths) and what the file system holds now. The candidate — its claim,
the artifacts it names and the digests it asserts — is never read (R29).

Per item the outcome is:

- artifact: ``pass`` when the confined, opened file's sha256 equals the
  expected one; ``fail`` when it differs; ``unknown`` when it is missing,
  unreadable, refused by confinement (a symlink anywhere on its path, a
  FIFO or device, a file with several hard links), over ``max_file_bytes``,
  open for writing when it is to be read, or written while it was read;
- test record: ``unknown`` when missing, refused, over ``max_record_bytes``,
  last written before the run started or before any expected artifact last
  changed (it did not test the artifact as it is), not well-formed or not
  JUnit, or holding no test that ran; ``fail`` when it reports failures or
  errors; ``pass`` otherwise.

The verdict is ``fail`` when any item failed (the evidence contradicts the
claim), else ``unknown`` when any item could not be established, else
``pass``. Evidence not read within ``read_timeout_s`` is ``unknown``; a
cancelled or expired operation context raises ``OperationCancelledError``.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import ClassVar, Final

import anyio.to_thread
import attrs

from agentium_harness.plugin_api import (
    AgentiumError,
    CapabilityError,
    CompletionCandidate,
    CompletionVerifier,
    EvidenceEntry,
    InvalidArgumentError,
    Verdict,
    VerificationResult,
    VerifierCapabilities,
    VerifyContext,
    checked_argument,
    current_span_event,
    fit_evidence,
)

from ._confined import (
    SUPPORTED,
    EvidenceUnavailable,
    PinClosed,
    RootPin,
    hash_file,
    last_changed,
    open_confined,
    read_file,
    root_descriptor,
    unreadable,
)
from ._junit import parse_junit
from .config import ExpectedArtifact, FsVerifierConfig, RootNotFoundError, check_root, split_relative_path

__all__ = ["ARTIFACT", "MAX_STRANDED_WORKERS", "TEST_RECORD", "FsVerifier", "VerifierClosedError"]

#: Verdicts left unknown by unavailable or stale evidence (WARNING); never paths or file content.
logger = logging.getLogger("agentium.plugins.verifier_fs")

#: ``EvidenceEntry.kind`` of an artifact's outcome.
ARTIFACT: Final = "artifact"
#: ``EvidenceEntry.kind`` of a test record's outcome.
TEST_RECORD: Final = "test_record"

_SEVERITY: Final = {Verdict.FAIL: 0, Verdict.UNKNOWN: 1, Verdict.PASS: 2}
_REASON_REFS: Final = 3
#: How long past read_timeout_s (or the deadline) the awaiting side gives a worker to notice the
#: bound itself before it leaves it behind: one read or parse step takes far less.
_GRACE_S: Final = 0.25
#: Workers a verifier may have left behind still blocked (a hung file system) before it starts no
#: more: each is a thread the process keeps until its call returns, which may be never.
MAX_STRANDED_WORKERS: Final = 4


def _timestamp_slack() -> float:
    """How far before the run's start a record written just after it may be stamped.

    The run's start is read from the fine clock (``time.time()``), while Linux
    stamps a write with its coarse clock, which lags by up to one timer tick
    (1-10 ms): a record written in the first tick of the run was seen as
    written "0.000s before the run started" (a CI failure). Two ticks of the
    coarse clock, at most 20 ms: far less than any earlier run could fit in.
    """
    if not sys.platform.startswith("linux"):
        return 0.0
    try:
        # CLOCK_REALTIME_COARSE (5 in <linux/time.h>), which Python's time module does not name.
        return min(2 * time.clock_getres(getattr(time, "CLOCK_REALTIME_COARSE", 5)), 0.02)
    except OSError:  # a kernel without it stamps files from the fine clock
        return 0.0


#: See :func:`_timestamp_slack`.
_TIMESTAMP_SLACK_S: Final = _timestamp_slack()


class VerifierClosedError(AgentiumError):
    """:meth:`FsVerifier.verify` after :meth:`FsVerifier.aclose`: the root is not held, nothing is read.

    Build a new verifier to verify again. Raised inside ``verify``, the
    runtime records it as a ``verifier_failed`` ``unknown`` verdict.
    """


class _TimeBound(Exception):
    """``read_timeout_s`` ran out: what is not read yet is ``unknown``."""


class _Abandoned(Exception):
    """The awaiting task was cancelled and left the worker thread: stop at once."""


@attrs.frozen(slots=True)
class _Outcome:
    verdict: Verdict
    entry: EvidenceEntry
    short: str


class _Worker:
    """One verification's worker thread: whether it finished, and whether it was left behind running."""

    __slots__ = ("done", "stranded")

    def __init__(self) -> None:
        self.done = False
        self.stranded = 0  # 1 once counted in FsVerifier._stranded


def _outcome(kind: str, ref: str, verdict: Verdict, text: str, short: str) -> _Outcome:
    return _Outcome(verdict, EvidenceEntry(kind=kind, ref=ref, detail=f"{verdict.value}: {text}"), short)


class FsVerifier(CompletionVerifier):
    """Verifies completion from artifact digests and JUnit XML test records under a root directory.

    Building it checks that ``root`` is an existing directory (a clear
    :class:`~agentium_verifier_fs.config.RootNotFoundError` otherwise) and
    opens it, reading nothing else: the verifier holds that one descriptor
    (``O_CLOEXEC``) until :meth:`aclose`, so the directory keeps its device
    and inode, which no other directory can get meanwhile, even once it is
    deleted. Every :meth:`verify` opens the root afresh, so it always judges
    the evidence as it is at that moment, and only in that directory: when
    the path names another directory now (a symlink on it repointed, the
    directory replaced), every item is ``unknown``, refused.

    The runtime closes a verifier it built from config when it closes; a
    verifier a host builds itself is the host's to close (one dropped
    unclosed releases its descriptor when it is garbage-collected).
    """

    capabilities: ClassVar[VerifierCapabilities] = VerifierCapabilities(
        artifact_digests=True, test_records=True
    )

    def __init__(self, config: FsVerifierConfig) -> None:
        if not isinstance(config, FsVerifierConfig):
            raise InvalidArgumentError(f"FsVerifier takes an FsVerifierConfig, got {type(config).__name__}")
        if not SUPPORTED:
            raise CapabilityError(
                "the fs verifier needs os.open and os.stat with dir_fd=, O_NOFOLLOW and O_DIRECTORY "
                "(POSIX systems); this system lacks them, so it cannot confine what it reads"
            )
        self._config = config
        self._root = check_root(config.root)
        self._artifacts = tuple((a, split_relative_path(a.path, "artifact")) for a in config.artifacts)
        self._records = tuple((r, split_relative_path(r, "test record")) for r in config.test_records)
        self._items = (
            *((ARTIFACT, a.path) for a in config.artifacts),
            *((TEST_RECORD, r) for r in config.test_records),
        )
        # The class declares both kinds; this instance reads only the kinds its config lists
        # (the engine and the contract suites read this through capabilities_of).
        self.instance_capabilities = VerifierCapabilities(
            artifact_digests=bool(config.artifacts), test_records=bool(config.test_records)
        )
        # The directory the root names now is the one evidence is read from for the verifier's
        # lifetime: each verification opens the path again and refuses another directory there.
        # Held open (not just its inode number noted), so a new directory created there after
        # a delete cannot get the pinned one's number and pass for it. Opened last: nothing
        # after it can fail and leave the descriptor to the garbage collector.
        try:
            pin = RootPin(self._root)
        except OSError as exc:
            if isinstance(exc, FileNotFoundError | NotADirectoryError):  # replaced since check_root
                raise RootNotFoundError(f"root {self._root!r} is not an existing directory") from exc
            why = exc.strerror or type(exc).__name__
            raise RootNotFoundError(f"root {self._root!r} cannot be opened: {why}") from exc
        self._pin = pin
        # aclose() runs this; a verifier dropped unclosed runs it when collected. It runs once.
        self._release = weakref.finalize(self, pin.close)
        # Workers whose verification stopped waiting for them while they still ran (see verify).
        self._stranded = 0
        self._stranded_lock = threading.Lock()

    @property
    def config(self) -> FsVerifierConfig:
        """The options it was built with."""
        return self._config

    @property
    def root(self) -> str:
        """The absolute root directory evidence is read under."""
        return self._root

    async def verify(self, candidate: CompletionCandidate, ctx: VerifyContext) -> VerificationResult:
        """Judge the configured evidence as it is now; ``candidate`` is deliberately not consulted.

        Raises ``OperationCancelledError`` when ``ctx`` is cancelled or past its
        deadline, before reading or between chunks; a worker stuck in one call is
        not waited for past ``read_timeout_s`` or the deadline (plus a 0.25 s
        grace). The returned evidence is already within ``ctx.max_entries`` /
        ``ctx.max_bytes``: whole entries, problems first, the omitted count in
        the reason. Raises :class:`VerifierClosedError` after :meth:`aclose`
        (also when it ran before this verification checked the root).
        """
        checked_argument(candidate, CompletionCandidate, "candidate", "verify")
        checked_argument(ctx, VerifyContext, "ctx", "verify").raise_if_expired("verify")
        if self._pin.closed:
            raise _closed()
        timeout = self._config.read_timeout_s
        with self._stranded_lock:
            stranded = self._stranded
        if stranded >= MAX_STRANDED_WORKERS:
            # Each verification against a file system that stopped answering would leave one more
            # thread blocked for good: past the bound, nothing is started, the items are unknown.
            why = (
                f"not read: {stranded} earlier verifications of this verifier are still blocked "
                "reading evidence (a file system that does not answer); none is started until one returns"
            )
            refused = [_outcome(k, r, Verdict.UNKNOWN, why, "blocked") for k, r in self._items]
            return self._finish(refused, ctx)
        bound = time.monotonic() + timeout
        abandoned = threading.Event()
        lock = threading.Lock()
        emitted: list[_Outcome] = []  # filled by the worker, item by item

        def check() -> None:
            if abandoned.is_set():
                raise _Abandoned
            ctx.raise_if_expired("verify")
            if time.monotonic() >= bound:
                raise _TimeBound

        def emit(outcome: _Outcome) -> None:
            with lock:  # nothing is added once the awaiting side has taken its snapshot
                if abandoned.is_set():
                    raise _Abandoned
                emitted.append(outcome)

        # The worker checks the bounds between steps; this wait bounds a worker blocked inside
        # one step (a hung read, a parse) too: after the bound plus a grace it is left behind.
        left = ctx.op.time_left()
        wait = (timeout if left is None else min(timeout, left)) + _GRACE_S
        worker = _Worker()

        def work() -> None:
            try:
                self._collect(ctx.run_started_at, check, emit)
            finally:
                with self._stranded_lock:
                    worker.done = True
                    self._stranded -= worker.stranded

        try:
            with anyio.move_on_after(wait):
                await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
        except BaseException:
            # Cancelled while the thread runs: the thread stops before its next step
            # and closes its descriptors; nobody waits for it.
            abandoned.set()
            self._strand(worker)
            raise
        self._strand(worker)
        with lock:
            abandoned.set()
            outcomes = list(emitted)
        if len(outcomes) < len(self._items):
            # The worker is still blocked: an expired context is the caller's error, and
            # what the worker has not finished within read_timeout_s is unknown.
            ctx.raise_if_expired("verify")
            why = f"not read within read_timeout_s={timeout}"
            rest = self._items[len(outcomes) :]
            outcomes += [_outcome(k, r, Verdict.UNKNOWN, why, "time bound") for k, r in rest]
        return self._finish(outcomes, ctx)

    def _strand(self, worker: _Worker) -> None:
        """Count ``worker`` as left behind when it still runs now that its verification stopped waiting."""
        with self._stranded_lock:
            if not worker.done and not worker.stranded:
                worker.stranded = 1
                self._stranded += 1

    def _finish(self, outcomes: list[_Outcome], ctx: VerifyContext) -> VerificationResult:
        """The result of ``outcomes``; an ``unknown`` one is logged as a WARNING (kinds only)."""
        result = _judge(outcomes, ctx)
        unknown = [o for o in outcomes if o.verdict is Verdict.UNKNOWN]
        if result.verdict is Verdict.UNKNOWN:
            # Degraded evidence: the kinds of problem only (a path or a record's text stays out).
            kinds = sorted({o.short for o in unknown}) or ["nothing to check"]
            logger.warning(
                "verdict unknown: %d of %d check(s) could not be judged (%s)",
                len(unknown),
                len(outcomes),
                ", ".join(kinds),
                extra={"agentium_unknown_checks": len(unknown), "agentium_checks": len(outcomes)},
            )
            # And an event on the verifier call's span (the standard for a degraded answer): no paths.
            counts = {
                "agentium.verifier_fs.checks": len(outcomes),
                "agentium.verifier_fs.unknown_checks": len(unknown),
            }
            current_span_event(
                "agentium.verifier_fs.unknown", {**counts, "agentium.verifier_fs.kinds": kinds}
            )
        return result

    async def aclose(self) -> None:
        """Release the root's descriptor held since the build; idempotent.

        A :meth:`verify` after it raises :class:`VerifierClosedError`. A
        verification already past its root check reads on through its own
        descriptors (each verification opens and closes those itself).
        """
        self._release()

    # ------------------------------------------------------------- worker thread

    def _collect(
        self, run_started_at: float, check: Callable[[], None], emit: Callable[[_Outcome], None]
    ) -> None:
        """``emit`` each item's outcome in config order (artifacts, then records); in a worker thread."""
        items: list[tuple[str, str, Callable[[int], _Outcome]]] = []
        # When each artifact read last changed, filled as artifacts are read (they come first):
        # a test record must be written after the artifacts it vouches for.
        changed: list[tuple[float, str]] = []
        for artifact, parts in self._artifacts:
            items.append((ARTIFACT, artifact.path, self._artifact_reader(artifact, parts, check, changed)))
        for record, parts in self._records:
            reader = self._record_reader(record, parts, run_started_at, check, changed)
            items.append((TEST_RECORD, record, reader))
        done = 0
        try:
            with root_descriptor(self._root, self._pin) as root_fd:
                for index, (_, _, read) in enumerate(items):
                    try:
                        check()
                        emit(read(root_fd))
                        done += 1
                    except _TimeBound:
                        why = f"not read within read_timeout_s={self._config.read_timeout_s}"
                        for kind, ref, _ in items[index:]:
                            emit(_outcome(kind, ref, Verdict.UNKNOWN, why, "time bound"))
                        break
        except PinClosed:  # aclose() ran after this verification started: nothing was read
            raise _closed() from None
        except (EvidenceUnavailable, OSError) as exc:  # the root went away, was replaced, or fails
            reason = exc.reason if isinstance(exc, EvidenceUnavailable) else unreadable(exc).reason
            for k, r, _ in items[done:]:
                emit(_outcome(k, r, Verdict.UNKNOWN, reason, "root"))

    def _artifact_reader(
        self,
        artifact: ExpectedArtifact,
        parts: tuple[str, ...],
        check: Callable[[], None],
        changed: list[tuple[float, str]],
    ) -> Callable[[int], _Outcome]:
        def read(root_fd: int) -> _Outcome:
            try:
                with open_confined(root_fd, parts) as opened:
                    actual = hash_file(opened, self._config.max_file_bytes, check)
                    changed.append((last_changed(opened), artifact.path))
            except EvidenceUnavailable as exc:
                return _unknown(ARTIFACT, artifact.path, exc)
            except OSError as exc:  # an fstat or close the walk does not wrap: ESTALE, EIO
                return _unknown(ARTIFACT, artifact.path, unreadable(exc))
            if actual == artifact.sha256:
                return _outcome(ARTIFACT, artifact.path, Verdict.PASS, f"sha256 {actual} as expected", "ok")
            text = f"sha256 is {actual}, expected {artifact.sha256}"
            return _outcome(ARTIFACT, artifact.path, Verdict.FAIL, text, "sha256 mismatch")

        return read

    def _record_reader(
        self,
        record: str,
        parts: tuple[str, ...],
        run_started_at: float,
        check: Callable[[], None],
        changed: list[tuple[float, str]],
    ) -> Callable[[int], _Outcome]:
        def read(root_fd: int) -> _Outcome:
            try:
                with open_confined(root_fd, parts) as opened:
                    # mtime can be set forward by anyone who can write the file (touch -d with a
                    # future date) and would then count a record from an earlier run forever; ctime
                    # cannot be set, and it is at least the last write. The earlier of the two keeps
                    # a record nobody touched since before the run stale.
                    written = min(opened.stat.st_mtime, opened.stat.st_ctime)
                    if written < run_started_at - _TIMESTAMP_SLACK_S:
                        raise EvidenceUnavailable(
                            f"stale: last written {run_started_at - written:.3f}s before the run started"
                        )
                    if changed:
                        # The tests it records ran on the artifacts as they were then: an artifact
                        # changed after it was written was never tested.
                        latest, path = max(changed)
                        if written < latest:
                            raise EvidenceUnavailable(
                                f"stale: last written {latest - written:.3f}s before artifact {path!r} "
                                "last changed, so it did not test the artifact as it is"
                            )
                    data = read_file(opened, self._config.max_record_bytes, check)
                counts = parse_junit(data, check)
            except EvidenceUnavailable as exc:
                return _unknown(TEST_RECORD, record, exc)
            except OSError as exc:  # as for an artifact: one item is unknown, not the verification
                return _unknown(TEST_RECORD, record, unreadable(exc))
            if counts.failures or counts.errors:
                names = f"; failing: {counts.describe_failing()}" if counts.failing else ""
                return _outcome(TEST_RECORD, record, Verdict.FAIL, counts.describe() + names, "tests failed")
            if counts.ran < 1:
                text = f"holds no test that ran ({counts.describe()})"
                return _outcome(TEST_RECORD, record, Verdict.UNKNOWN, text, "no tests")
            return _outcome(TEST_RECORD, record, Verdict.PASS, counts.describe(), "ok")

        return read


def _closed() -> VerifierClosedError:
    return VerifierClosedError("the fs verifier was closed (aclose); build a new one to verify again")


def _unknown(kind: str, ref: str, exc: EvidenceUnavailable) -> _Outcome:
    # The reason's first word ("missing", "refused", "stale"…) is its short form in the verdict's reason.
    return _outcome(kind, ref, Verdict.UNKNOWN, exc.reason, exc.reason.split(":")[0])


def _judge(outcomes: Sequence[_Outcome], ctx: VerifyContext) -> VerificationResult:
    """The verdict of all outcomes and the evidence that fits ``ctx``'s budget, problems first."""
    verdicts = {o.verdict for o in outcomes}
    if Verdict.FAIL in verdicts:
        verdict = Verdict.FAIL
    elif Verdict.UNKNOWN in verdicts or not outcomes:
        verdict = Verdict.UNKNOWN
    else:
        verdict = Verdict.PASS
    # Stable sort: the entries a revision needs (what failed, what is unknown) survive a tight budget.
    ordered = sorted(outcomes, key=lambda o: _SEVERITY[o.verdict])
    kept, omitted = fit_evidence((o.entry for o in ordered), ctx.max_entries, ctx.max_bytes)
    reason = _reason(verdict, ordered)
    if omitted:
        reason += f"; {omitted} evidence entries omitted for the evidence budget"
    return VerificationResult(verdict=verdict, evidence=kept, reason=reason)


def _reason(verdict: Verdict, ordered: Sequence[_Outcome]) -> str:
    total = len(ordered)
    if verdict is Verdict.PASS:
        return f"all {total} checks passed: every expected artifact matches and every test record passed"
    problems = [o for o in ordered if o.verdict is verdict]
    shown = ", ".join(f"{o.entry.ref} ({o.short})" for o in problems[:_REASON_REFS])
    more = f" and {len(problems) - _REASON_REFS} more" if len(problems) > _REASON_REFS else ""
    if verdict is Verdict.FAIL:
        return f"{len(problems)} of {total} checks failed: {shown}{more}"
    return f"{len(problems)} of {total} checks could not be established: {shown}{more}"
