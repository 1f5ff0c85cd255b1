"""Bounds: size, time and cancellation. A 2 GiB sparse artifact is never read whole or held in memory."""

from __future__ import annotations

import logging
import os
import resource
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest
from fs_verifier_helpers import (
    ARTIFACT_BYTES,
    CLAIM,
    context,
    details,
    junit,
    root_fixture,
    verifier_for,
    without_leases,
    write,
)

import agentium_verifier_fs.verifier as verifier_module
from agentium_harness.plugin_api import OpContext, OperationCancelledError, Verdict, VerificationResult
from agentium_verifier_fs import MAX_STRANDED_WORKERS, FsVerifier
from agentium_verifier_fs._junit import TestCounts

pytestmark = pytest.mark.anyio

root = root_fixture()

TWO_GIB = 2 * 1024**3
THREE_GIB = 3 * 1024**3


@pytest.fixture
def sparse(root: Path) -> Path:
    """A 2 GiB artifact with no data blocks (``truncate``): cheap on disk, huge to read."""
    path = root / "big.bin"
    with open(path, "wb") as f:
        f.truncate(TWO_GIB)
    return path


def _open_fds(root: Path) -> int:
    """How many of this process's descriptors point at ``root`` or below it.

    Only these: the whole table also moves when something else in the
    process (a connection another test left to the collector, a worker's
    pipe) closes or opens a descriptor, which made a whole-table count flaky.
    """
    fd_dir = Path("/proc/self/fd")
    if not fd_dir.is_dir():
        pytest.fail("needs /proc/self/fd to count descriptors")
    inside = str(root.resolve())
    count = 0
    for entry in os.listdir(fd_dir):
        try:
            target = os.readlink(fd_dir / entry)
        except OSError:  # closed between listing and reading (listdir's own descriptor)
            continue
        if target == inside or target.startswith(inside + os.sep):
            count += 1
    return count


async def test_a_2gib_sparse_artifact_over_the_bound_is_unknown_unread(root: Path, sparse: Path) -> None:
    tracemalloc.start()
    try:
        result = await verifier_for(root, "big.bin").verify(CLAIM, context())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.verdict is Verdict.UNKNOWN
    assert details(result)["big.bin"] == (
        f"unknown: too large: {TWO_GIB} bytes, more than max_file_bytes=268435456; not read"
    )
    assert peak < 4 * 1024 * 1024, f"peak Python allocation {peak} bytes"


async def test_a_2gib_artifact_within_the_size_bound_stops_at_the_time_bound(
    root: Path, sparse: Path
) -> None:
    """With the size bound raised, the time bound still stops the read; memory stays at one chunk."""
    verifier = verifier_for(root, "big.bin", "after.txt", max_file_bytes=THREE_GIB, read_timeout_s=0.05)
    write(root / "after.txt", ARTIFACT_BYTES)
    tracemalloc.start()
    try:
        result = await verifier.verify(CLAIM, context())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.verdict is Verdict.UNKNOWN
    # Hashing 2 GiB takes far longer than 50 ms on any machine, so the bound, not the end of file, ends it;
    # what was not read yet is unknown as well.
    assert details(result) == {
        "big.bin": "unknown: not read within read_timeout_s=0.05",
        "after.txt": "unknown: not read within read_timeout_s=0.05",
    }
    assert peak < 8 * 1024 * 1024, f"peak Python allocation {peak} bytes"


@pytest.mark.parametrize("leases", [True, False], ids=["leased", "no lease"])
async def test_an_artifact_that_grows_past_the_bound_while_read_is_refused(
    root: Path, monkeypatch: pytest.MonkeyPatch, leases: bool
) -> None:
    if not leases:
        without_leases(monkeypatch)  # as for another user's file: read while the writer writes
    path = write(root / "growing.bin", b"x" * 1024)
    verifier = verifier_for(root, "growing.bin", max_file_bytes=3 * 1024 * 1024)
    stop = threading.Event()

    def grow() -> None:
        with open(path, "ab") as f:
            while not stop.is_set() and f.tell() < 64 * 1024 * 1024:
                f.write(b"y" * 65536)
                f.flush()

    thread = threading.Thread(target=grow)
    thread.start()
    try:
        outcomes = set()
        for _ in range(50):
            outcomes.add(details(await verifier.verify(CLAIM, context()))["growing.bin"].split(";")[0])
            if (root / "growing.bin").stat().st_size > 3 * 1024 * 1024:
                break
    finally:
        stop.set()
        thread.join()
    final = details(await verifier.verify(CLAIM, context()))["growing.bin"]
    assert final.startswith("unknown: too large:")
    # A read the growth raced is "changed" (the file was written while it was read), never a digest of it.
    # Leased (Linux), a file open for writing is not read at all: "busy".
    allowed = ("fail: sha256", "unknown: too large", "unknown: changed", "unknown: busy")
    assert all(o.startswith(allowed) for o in outcomes), outcomes


async def test_a_cancelled_context_raises_before_reading(root: Path) -> None:
    write(root / "report.txt", ARTIFACT_BYTES)
    op = OpContext()
    op.signal.cancel("host shut down")
    with pytest.raises(OperationCancelledError, match="host shut down"):
        await verifier_for(root, "report.txt").verify(CLAIM, context(op=op))


async def test_a_deadline_passing_mid_read_raises_and_closes_every_descriptor(
    root: Path, sparse: Path
) -> None:
    verifier = verifier_for(root, "big.bin", max_file_bytes=THREE_GIB)
    before = _open_fds(root)
    with pytest.raises(OperationCancelledError, match="deadline"):
        await verifier.verify(CLAIM, context(op=OpContext.with_timeout(0.05)))
    assert _open_fds(root) == before


async def test_cancelling_the_signal_from_another_thread_stops_a_read(root: Path, sparse: Path) -> None:
    verifier = verifier_for(root, "big.bin", max_file_bytes=THREE_GIB)
    op = OpContext()
    timer = threading.Timer(0.05, op.signal.cancel, args=("operator pressed stop",))
    timer.start()
    try:
        with pytest.raises(OperationCancelledError, match="operator pressed stop"):
            await verifier.verify(CLAIM, context(op=op))
    finally:
        timer.cancel()


async def test_a_cancelled_caller_does_not_wait_and_the_thread_stops(root: Path, sparse: Path) -> None:
    """The awaiting task leaves at once; the worker stops at its next chunk and closes its descriptors."""
    verifier = verifier_for(root, "big.bin", max_file_bytes=THREE_GIB)
    before = _open_fds(root)
    threads = threading.active_count()
    with anyio.move_on_after(0.05) as scope:
        await verifier.verify(CLAIM, context())
    assert scope.cancelled_caught
    with anyio.fail_after(20):  # the abandoned worker notices within one chunk
        while _open_fds(root) != before:  # noqa: ASYNC110  (polling the kernel's table: no event to wait on)
            await anyio.sleep(0.01)
    assert threading.active_count() <= threads + 1  # anyio may keep its idle worker


async def test_an_unknown_verdict_is_a_warning_without_paths(
    root: Path, sparse: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Evidence that cannot be judged is a WARNING on agentium.plugins.verifier_fs (issue 24)."""
    with caplog.at_level(logging.DEBUG, logger="agentium.plugins.verifier_fs"):
        result = await verifier_for(root, "big.bin").verify(CLAIM, context())
    assert result.verdict is Verdict.UNKNOWN
    [record] = [r for r in caplog.records if r.name == "agentium.plugins.verifier_fs"]
    assert record.levelno == logging.WARNING
    assert record.agentium_unknown_checks == 1 and record.agentium_checks == 1
    assert "big.bin" not in record.getMessage() and "too large" in record.getMessage()


def _slow_record(root: Path, count: int = 4_000_000) -> bytes:
    """A JUnit record of millions of elements: well within its size bound, seconds to parse whole."""
    data = b"<testsuites>" + b"<a/>" * count + b"</testsuites>"
    write(root / "reports" / "junit.xml", data)
    return data


async def _verify_with_the_artifact_read_in_time(verifier: FsVerifier) -> VerificationResult:
    """``verify`` once ``report.txt`` (read first, a few bytes) was judged within ``read_timeout_s``.

    ``read_timeout_s`` bounds the whole verification, so a machine stalled
    past it before even that artifact was read leaves it ``unknown`` too: that
    attempt says nothing about keeping finished work, and is made again (a
    few times at most; a verifier that drops finished work fails every one).
    """
    for _ in range(5):
        result = await verifier.verify(CLAIM, context())
        if not details(result)["report.txt"].startswith("unknown: not read within"):
            break
    return result


async def test_a_record_slow_to_parse_stops_at_the_time_bound(root: Path) -> None:
    """Parsing is fed in steps with the checks between them: the worker stops near the bound."""
    write(root / "report.txt", ARTIFACT_BYTES)
    _slow_record(root)
    verifier = verifier_for(
        root, "report.txt", records=("reports/junit.xml",), max_record_bytes=16 * 1024**2, read_timeout_s=0.3
    )
    started = time.monotonic()
    result = await _verify_with_the_artifact_read_in_time(verifier)
    # Room for a stalled machine; the details below say the bound, not the record's end, stopped it.
    assert time.monotonic() - started < 10
    assert result.verdict is Verdict.UNKNOWN
    assert details(result) == {
        "report.txt": details(result)["report.txt"],
        "reports/junit.xml": "unknown: not read within read_timeout_s=0.3",
    }
    assert details(result)["report.txt"].startswith("pass: sha256")
    # The worker itself stopped, rather than parsing on for seconds after verify returned.
    cpu = time.process_time()
    await anyio.sleep(1.0)
    assert time.process_time() - cpu < 0.5


@pytest.fixture
def blocked_parse(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """``parse_junit`` blocks in its worker until released: a call no check can interrupt (a hung read)."""
    release = threading.Event()

    def parse(data: bytes, check: object = None) -> object:
        release.wait(30)
        raise AssertionError("an abandoned worker's result is never used")

    monkeypatch.setattr("agentium_verifier_fs.verifier.parse_junit", parse)
    yield release
    release.set()


async def test_a_worker_blocked_in_a_call_does_not_hold_verify_past_read_timeout_s(
    root: Path, blocked_parse: threading.Event
) -> None:
    write(root / "report.txt", ARTIFACT_BYTES)
    write(root / "reports" / "junit.xml", b"<testsuite/>")
    verifier = verifier_for(root, "report.txt", records=("reports/junit.xml",), read_timeout_s=0.3)
    started = time.monotonic()
    with anyio.fail_after(20):
        result = await _verify_with_the_artifact_read_in_time(verifier)
    assert time.monotonic() - started < 10  # the parse blocks for 30 s
    assert result.verdict is Verdict.UNKNOWN
    assert details(result)["reports/junit.xml"] == "unknown: not read within read_timeout_s=0.3"
    assert details(result)["report.txt"].startswith("pass: sha256")  # finished work is kept


async def test_a_worker_blocked_in_a_call_does_not_hold_verify_past_the_deadline(
    root: Path, blocked_parse: threading.Event
) -> None:
    write(root / "reports" / "junit.xml", b"<testsuite/>")
    verifier = verifier_for(root, records=("reports/junit.xml",))  # read_timeout_s: 30
    started = time.monotonic()
    with anyio.fail_after(20), pytest.raises(OperationCancelledError, match="deadline"):
        await verifier.verify(CLAIM, context(op=OpContext.with_timeout(0.3)))
    assert time.monotonic() - started < 10  # the parse blocks for 30 s


async def test_a_deep_path_holds_a_few_descriptors_not_one_per_component(root: Path) -> None:
    """The walk keeps only the directory it opens the next component in, whatever the depth."""
    depth = 400
    path = "/".join(["d"] * depth + ["report.txt"])
    write(root / path, ARTIFACT_BYTES)
    verifier = verifier_for(root, path)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + 64, hard))  # far fewer than the depth
    try:
        result = await verifier.verify(CLAIM, context())
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert result.verdict is Verdict.PASS, details(result)


async def test_workers_left_blocked_are_bounded_and_the_verifier_recovers(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each verification of a hung file system leaves a thread behind; past the bound none is started.

    Without the bound every verification added one more thread blocked for
    good (anyio does not count an abandoned thread against its limiter), so a
    service verifying against a file system that stopped answering grew
    threads without end.
    """
    release = threading.Event()
    entered: list[int] = []
    real_parse = verifier_module.parse_junit

    def parse(data: bytes, check: Callable[[], None] = lambda: None) -> TestCounts:
        entered.append(threading.get_ident())
        release.wait(30)
        return real_parse(data, check)

    monkeypatch.setattr(verifier_module, "parse_junit", parse)
    write(root / "reports" / "junit.xml", junit())
    verifier = verifier_for(root, records=("reports/junit.xml",), read_timeout_s=0.5)
    refused = None
    try:
        with anyio.fail_after(60):
            for _ in range(4 * MAX_STRANDED_WORKERS):
                result = await verifier.verify(CLAIM, context())
                detail = details(result)["reports/junit.xml"]
                if "still blocked" in detail:
                    refused = detail
                    break
                assert detail == "unknown: not read within read_timeout_s=0.5"
        assert refused == (
            f"unknown: not read: {MAX_STRANDED_WORKERS} earlier verifications of this verifier are "
            "still blocked reading evidence (a file system that does not answer); none is started "
            "until one returns"
        )
        assert len(entered) == MAX_STRANDED_WORKERS  # no thread was started for the refused one
    finally:
        release.set()
    # Once the file system answers, the workers finish and verification reads again.
    with anyio.fail_after(30):
        while True:
            result = await verifier.verify(CLAIM, context())
            if result.verdict is Verdict.PASS:
                break
            await anyio.sleep(0.05)
