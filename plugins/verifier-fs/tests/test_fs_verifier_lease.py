"""The read lease never signals the host process, whenever a writer arrives.

Taking a lease (``F_SETLEASE``) names the calling process as the one to
signal when it is broken; the verifier then names no process (``F_SETOWN 0``).
A writer that opens the file between those two calls breaks the lease while
the process is still named: the host process gets the break signal, and a
handler the host installed for it runs (in its main thread). The window is
made here deterministic: a writer opens the file right after the real
``F_SETLEASE`` returns. Files are real (tmpfs or the local disk); only the
moment of the writer's open is placed.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from fs_verifier_helpers import CLAIM, details, refuse_read_leases, root_fixture, sha256

from agentium_harness.plugin_api import (
    CancelSignal,
    OpContext,
    Scope,
    Verdict,
    VerificationResult,
    VerifyContext,
)
from agentium_verifier_fs import ExpectedArtifact, FsVerifier, FsVerifierConfig, _lease
from agentium_verifier_fs._confined import CHUNK_BYTES, EvidenceUnavailable, hash_file, open_confined

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="file leases are Linux's"),
]

root = root_fixture()

DATA = b"the expected report\n"


def _report(root: Path, data: bytes = DATA) -> Path:
    """``report.bin`` under ``root``, holding ``data``."""
    path = root / "report.bin"
    path.write_bytes(data)
    return path


async def _verify_report(root: Path, data: bytes, op: OpContext | None = None) -> VerificationResult:
    """Verify ``report.bin`` under ``root`` against ``data``'s digest (run started a minute ago); close."""
    verifier = FsVerifier(
        FsVerifierConfig(
            root=str(root), artifacts=(ExpectedArtifact(path="report.bin", sha256=sha256(data)),)
        )
    )
    ctx = VerifyContext(
        scope=Scope("tenant", "user", "session"),
        op=op if op is not None else OpContext(),
        run_started_at=time.time() - 60,
    )
    try:
        return await verifier.verify(CLAIM, ctx)
    finally:
        await verifier.aclose()


def _writer_in_the_window(monkeypatch: pytest.MonkeyPatch, path: Path) -> list[str]:
    """Right after each read lease is granted, a writer opens ``path`` (non-blocking: it breaks the lease)."""
    import fcntl

    real = fcntl.fcntl
    opens: list[str] = []

    def fcntl_then_writer(fd: Any, cmd: int, arg: Any = 0) -> Any:
        result = real(fd, cmd, arg)
        if cmd == fcntl.F_SETLEASE and arg == fcntl.F_RDLCK:
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
                opens.append("opened")
            except BlockingIOError:  # the lease held it off, and was broken
                opens.append("blocked")
        return result

    monkeypatch.setattr(fcntl, "fcntl", fcntl_then_writer)
    return opens


@pytest.fixture
def sigurg_handler() -> Iterator[list[str]]:
    """A host handler for SIGURG (installed from the main thread), recording the threads it ran in."""
    ran: list[str] = []
    previous = signal.signal(signal.SIGURG, lambda number, frame: ran.append(threading.current_thread().name))
    try:
        yield ran
    finally:
        signal.signal(signal.SIGURG, previous)


async def test_a_writer_between_lease_and_release_of_the_owner_signals_nobody(
    root: Path, monkeypatch: pytest.MonkeyPatch, sigurg_handler: list[str]
) -> None:
    """The break in the window is still seen (``changed``); the host's SIGURG handler never runs."""
    path = _report(root)
    opens = _writer_in_the_window(monkeypatch, path)
    with anyio.fail_after(30):
        result = await _verify_report(root, DATA)
        for _ in range(20):  # give a delivered signal's handler every chance to run here
            await anyio.sleep(0.001)
    assert opens == ["blocked"]
    assert result.verdict is Verdict.UNKNOWN
    assert details(result) == {
        "report.bin": "unknown: changed: 'report.bin' was opened for writing while it was read"
    }
    assert sigurg_handler == []


def test_reading_leaves_the_threads_signal_mask_and_nothing_pending(
    root: Path, monkeypatch: pytest.MonkeyPatch, sigurg_handler: list[str]
) -> None:
    """The reading thread's mask is as it was, no SIGURG is left pending, the disposition is the host's."""
    path = _report(root)
    opens = _writer_in_the_window(monkeypatch, path)
    handler = signal.getsignal(signal.SIGURG)
    seen: dict[str, object] = {}

    def read() -> None:
        before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            with open_confined(fd, ("report.bin",)) as opened:
                try:
                    hash_file(opened, 1024, lambda: None)
                except EvidenceUnavailable as exc:
                    seen["error"] = exc.reason
        finally:
            os.close(fd)
        seen["mask"] = (before, signal.pthread_sigmask(signal.SIG_BLOCK, []))
        seen["pending"] = signal.sigpending()

    worker = threading.Thread(target=read, name="reader")
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive()
    for _ in range(20):
        time.sleep(0.001)
    assert opens == ["blocked"]
    assert seen["error"] == "changed: 'report.bin' was opened for writing while it was read"
    before, after = seen["mask"]  # type: ignore[misc]
    assert before == after
    assert signal.SIGURG not in seen["pending"]  # type: ignore[operator]
    assert signal.getsignal(signal.SIGURG) is handler
    assert sigurg_handler == []


def _refused_with_eagain(monkeypatch: pytest.MonkeyPatch) -> None:
    """``F_SETLEASE F_RDLCK`` answers ``EAGAIN``, as the NFSv4 client does without a delegation."""
    import errno

    refuse_read_leases(monkeypatch, errno.EAGAIN, "Resource temporarily unavailable")


def test_the_file_system_of_a_descriptor_is_its_mounts() -> None:
    """Read from the descriptor's mount: ``/proc`` is proc, ``/dev/shm`` tmpfs."""
    fd = os.open("/proc/self/status", os.O_RDONLY)
    try:
        assert _lease.file_system(fd) == "proc"
    finally:
        os.close(fd)
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm here")
    fd = os.open("/dev/shm", os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert _lease.file_system(fd) == "tmpfs"
    finally:
        os.close(fd)


@pytest.mark.parametrize("file_system", ["nfs4", "cifs"])
async def test_a_lease_a_network_file_system_refuses_with_eagain_is_not_busy(
    root: Path, monkeypatch: pytest.MonkeyPatch, file_system: str
) -> None:
    """NFSv4 (no delegation) and SMB (no oplock) answer ``EAGAIN``: read without the lease, not ``busy``.

    The file is open for writing nowhere: ``busy: ... is open for writing`` would
    be untrue, and every file there would be ``unknown`` for good.
    """
    _report(root)
    _refused_with_eagain(monkeypatch)
    monkeypatch.setattr(_lease, "file_system", lambda fd: file_system)
    with anyio.fail_after(30):
        result = await _verify_report(root, DATA)
    assert result.verdict is Verdict.PASS, details(result)


async def test_eagain_on_a_local_file_system_is_busy(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the local file system (its real type) ``EAGAIN`` means a writer has the file open: ``busy``."""
    _report(root)
    _refused_with_eagain(monkeypatch)
    with anyio.fail_after(30):
        result = await _verify_report(root, DATA)
    assert details(result) == {
        "report.bin": "unknown: busy: 'report.bin' is open for writing, so it could change while it is "
        "read; not read"
    }


class BreakOnce(CancelSignal):
    """Never cancelled. At the first check made under the lease, a writer opens ``path`` (blocking).

    It waits until the lease shows broken (``F_GETLEASE`` on the verifier's own
    descriptor), so the writer is in its open, held off by the lease. Counts the
    checks made after that; the writer counts them again when its open returns.
    """

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.checks = 0
        self.checks_at_break: int | None = None
        self.checks_when_let_in: int | None = None
        self.writer: threading.Thread | None = None

    def _leased_descriptor(self) -> int | None:
        import fcntl

        target = os.path.realpath(self.path)
        for name in os.listdir("/proc/self/fd"):
            try:
                if os.readlink(f"/proc/self/fd/{name}") == target:
                    if fcntl.fcntl(int(name), fcntl.F_GETLEASE) == fcntl.F_RDLCK:
                        return int(name)
            except OSError:
                continue
        return None

    def _write(self) -> None:
        os.close(os.open(self.path, os.O_WRONLY))  # waits while the lease is held
        self.checks_when_let_in = self.checks

    @property
    def cancelled(self) -> bool:
        import fcntl

        self.checks += 1
        if self.writer is None:
            fd = self._leased_descriptor()
            if fd is not None:
                self.writer = threading.Thread(target=self._write, name="writer")
                self.writer.start()
                for _ in range(10_000):  # until the writer's open has broken the lease (≤ 10 s)
                    if fcntl.fcntl(fd, fcntl.F_GETLEASE) != fcntl.F_RDLCK:
                        break
                    time.sleep(0.001)
                self.checks_at_break = self.checks
        return False


async def test_a_writer_waits_for_one_chunk_at_most_once_it_broke_the_lease(root: Path) -> None:
    """A broken lease stops the read at the next chunk: the writer is let in then, not after both reads.

    The file is three chunks long, read twice: without the stop the writer
    (the host's own test runner, say) waited for five more chunk reads, up to
    ``read_timeout_s`` or the kernel's 45 s lease-break time on a slow disk.
    """
    data = b"r" * (3 * CHUNK_BYTES)
    signal_ = BreakOnce(_report(root, data))
    with anyio.fail_after(30):
        result = await _verify_report(root, data, OpContext(signal=signal_))
        assert signal_.writer is not None
        await anyio.to_thread.run_sync(signal_.writer.join, 20)
    assert not signal_.writer.is_alive()
    assert details(result) == {
        "report.bin": "unknown: changed: 'report.bin' was opened for writing while it was read"
    }
    assert signal_.checks_at_break is not None and signal_.checks_when_let_in is not None
    assert signal_.checks_when_let_in - signal_.checks_at_break <= 1, (
        signal_.checks_at_break,
        signal_.checks_when_let_in,
    )
