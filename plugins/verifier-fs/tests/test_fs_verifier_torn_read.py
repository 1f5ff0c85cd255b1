"""A file written while it is read is not judged on the mix of bytes the read saw.

Files are read in 1 MiB chunks. The artifact here is two chunks long and
never holds the expected bytes: it flips between ``[expected first half,
wrong second half]`` and ``[wrong first half, expected second half]``, each
flip writing the half to spoil first, so no moment in between holds both
expected halves either. The flips are placed deterministically: each time the
verifier checks its bounds (between chunks), the file is put in the state
whose half the next chunk reads. A verifier that hashes the chunks as they
come sees the expected bytes and passes a file that never held them.

On Linux the verifier reads under a read lease: a file open for writing is
not read (``busy``), and one opened for writing while it is read is refused
(``changed``). The tests of the checks that stand alone where no lease can be
had (another user's file, NFS) refuse the lease with ``without_leases``.
"""

from __future__ import annotations

import hashlib
import os
import signal as signals
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fs_verifier_helpers import CLAIM, details, root_fixture, without_leases

from agentium_harness.plugin_api import (
    CancelSignal,
    OpContext,
    Scope,
    Verdict,
    VerificationResult,
    VerifyContext,
)
from agentium_verifier_fs import ExpectedArtifact, FsVerifier, FsVerifierConfig
from agentium_verifier_fs._confined import CHUNK_BYTES

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        not sys.platform.startswith("linux"), reason="reads read offsets through /proc/self/fdinfo (Linux)"
    ),
]

root = root_fixture()


async def _verify_under(verifier: FsVerifier, signal: CancelSignal) -> VerificationResult:
    """``verifier``'s result with ``signal`` as the operation's (run started a minute ago); then closed."""
    ctx = VerifyContext(
        scope=Scope("tenant", "user", "session"),
        op=OpContext(signal=signal),
        run_started_at=time.time() - 60,
    )
    try:
        return await verifier.verify(CLAIM, ctx)
    finally:
        await verifier.aclose()


EXPECTED = (b"E" * CHUNK_BYTES, b"e" * CHUNK_BYTES)
WRONG = (b"X" * CHUNK_BYTES, b"x" * CHUNK_BYTES)


def _read_offsets(path: Path, but: int | None = None) -> list[int]:
    """The file offsets of this process's descriptors open on ``path`` (but descriptor ``but``)."""
    target = os.path.realpath(path)
    offsets = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if name == str(but) or os.readlink(f"/proc/self/fd/{name}") != target:
                continue
            with open(f"/proc/self/fdinfo/{name}") as info:
                offsets.append(int(info.readline().split()[1]))  # "pos:\t<offset>"
        except OSError:  # closed meanwhile (the listing's own descriptor)
            continue
    return offsets


class Flipper(CancelSignal):
    """Never cancelled; each check of it puts ``path`` in the state the next chunk read wants."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.flips = 0

    @property
    def cancelled(self) -> bool:
        offsets = _read_offsets(self.path)
        if offsets:  # the verifier has the file open
            self.flips += 1
            with open(self.path, "r+b") as f:
                if offsets[0] == 0:  # the first chunk is read next: [E1, X2], spoiling the second half first
                    f.seek(CHUNK_BYTES)
                    f.write(WRONG[1])
                    f.seek(0)
                    f.write(EXPECTED[0])
                else:  # the second chunk is read next: [X1, E2], spoiling the first half first
                    f.seek(0)
                    f.write(WRONG[0])
                    f.seek(CHUNK_BYTES)
                    f.write(EXPECTED[1])
        return False


async def test_an_artifact_written_while_it_is_read_never_passes_on_the_mix(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    without_leases(monkeypatch)  # the writer opens the file during the read: a lease would hold it
    path = root / "report.bin"
    path.write_bytes(EXPECTED[0] + WRONG[1])
    hour_ago = time.time() - 3600
    os.utime(path, (hour_ago, hour_ago))  # a write during the read moves the time past the clock's tick
    expected = hashlib.sha256(b"".join(EXPECTED)).hexdigest()
    verifier = FsVerifier(
        FsVerifierConfig(root=str(root), artifacts=(ExpectedArtifact(path="report.bin", sha256=expected),))
    )
    signal = Flipper(path)
    result = await _verify_under(verifier, signal)
    assert signal.flips >= 2  # the file was written between the chunks
    assert path.read_bytes() != b"".join(EXPECTED)  # it never held the expected bytes
    assert result.verdict is not Verdict.PASS, details(result)
    assert result.verdict is Verdict.UNKNOWN
    assert details(result) == {"report.bin": "unknown: changed: 'report.bin' was written while it was read"}


class _HeldTimes:
    """``os.fstat`` of one inode, its change time held where it was: a clock that did not tick.

    A same-size write within one tick of the file system's timestamp clock
    leaves the size, ``mtime`` and ``ctime`` as they were (Linux before 6.13
    stamps writes from a clock of a few milliseconds' resolution); the writer
    can set ``mtime`` back itself, but ``ctime`` no process can set, and on
    this machine's kernel a write moves it. The file system is real; only the
    change time the verifier is shown of this one file is held, so the write
    below lands "within the tick" deterministically.
    """

    def __init__(self, path: Path) -> None:
        st = os.stat(path)
        self.ino, self.dev, self.ctime_ns = st.st_ino, st.st_dev, st.st_ctime_ns
        self.real = os.fstat

    def __call__(self, fd: int) -> Any:
        st = self.real(fd)
        if (st.st_ino, st.st_dev) != (self.ino, self.dev):
            return st
        return _Times(st, self.ctime_ns)


class _Times:
    """A stat result with its change time replaced (every other field as read)."""

    def __init__(self, st: os.stat_result, ctime_ns: int) -> None:
        self._st = st
        self.st_ctime_ns = ctime_ns
        self.st_ctime = ctime_ns / 1e9

    def __getattr__(self, name: str) -> Any:
        return getattr(self._st, name)


class OneRewrite(CancelSignal):
    """Never cancelled; once the first chunk was read, rewrites the file whole (same size), ``mtime`` kept."""

    def __init__(self, path: Path, new: bytes) -> None:
        super().__init__()
        self.path, self.new = path, new
        self.mtime_ns = os.stat(path).st_mtime_ns
        self.rewrites = 0

    @property
    def cancelled(self) -> bool:
        if not self.rewrites and CHUNK_BYTES in _read_offsets(self.path):
            self.rewrites += 1
            with open(self.path, "r+b") as f:
                f.write(self.new)  # one write, the same size: [old first half, new second half] is read
            os.utime(self.path, ns=(self.mtime_ns, self.mtime_ns))
        return False


def _two_chunks(head: bytes, tail: bytes, fill: bytes) -> bytes:
    """``head``, padded with ``fill`` to one chunk, then ``tail`` padded (before it) to one chunk."""
    return head + fill * (CHUNK_BYTES - len(head)) + fill * (CHUNK_BYTES - len(tail)) + tail


# An artifact that never held the expected bytes: [E1, X2], then [X1, E2].
ARTIFACT_BEFORE, ARTIFACT_AFTER = EXPECTED[0] + WRONG[1], WRONG[0] + EXPECTED[1]
# A record that fails before and after the rewrite; its first half before and second half after
# make a passing one (the comment opened in the first chunk closes in the second).
RECORD_BEFORE = _two_chunks(
    b'<testsuite tests="1"><testcase name="t"/><!--',
    b'--><testcase name="u"><failure/></testcase></testsuite>',
    b" ",
)
RECORD_AFTER = _two_chunks(
    b'<testsuite tests="1"><testcase name="t"><failure/></testcase><!--', b"--></testsuite>", b" "
)


@pytest.mark.parametrize("kind", ["artifact", "test record"])
async def test_a_same_size_rewrite_within_one_clock_tick_is_seen(
    root: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Size and times alone cannot see this write: the bytes read are read again and compared."""
    without_leases(monkeypatch)
    path = root / "evidence.bin"
    before, after = (ARTIFACT_BEFORE, ARTIFACT_AFTER) if kind == "artifact" else (RECORD_BEFORE, RECORD_AFTER)
    assert len(before) == len(after) == 2 * CHUNK_BYTES
    path.write_bytes(before)
    mix = before[:CHUNK_BYTES] + after[CHUNK_BYTES:]
    if kind == "artifact":
        config = FsVerifierConfig(
            root=str(root),
            artifacts=(ExpectedArtifact(path="evidence.bin", sha256=hashlib.sha256(mix).hexdigest()),),
        )
    else:
        config = FsVerifierConfig(
            root=str(root), test_records=("evidence.bin",), max_record_bytes=4 * CHUNK_BYTES
        )
    verifier = FsVerifier(config)
    monkeypatch.setattr(os, "fstat", _HeldTimes(path))
    signal = OneRewrite(path, after)
    result = await _verify_under(verifier, signal)
    assert signal.rewrites == 1
    assert path.read_bytes() == after  # the file held before, then after; never the mix
    # The mix would pass: the expected digest, or a record with one test that ran and no failure.
    assert result.verdict is Verdict.UNKNOWN, details(result)
    assert details(result) == {
        "evidence.bin": "unknown: changed: 'evidence.bin' was written while it was read"
    }


class InStep(CancelSignal):
    """Never cancelled; flips ``path`` in step with every chunk read, through a descriptor open throughout.

    The flip :class:`Flipper` makes, with the file's ``mtime`` set back to its
    value after each one: both reads of the file see the expected bytes, and
    (``ctime`` held, as a clock that did not tick leaves it) its size and times
    are those of the open. Only something other than the bytes and the times
    can tell. ``fd`` is opened before the verification, or (``fd=None``) each
    flip opens the file itself, without blocking.
    """

    def __init__(self, path: Path, fd: int | None) -> None:
        super().__init__()
        self.path, self.fd = path, fd
        self.mtime_ns = os.stat(path).st_mtime_ns
        self.flips = self.blocked = 0

    @property
    def cancelled(self) -> bool:
        offsets = _read_offsets(self.path, but=self.fd)
        if not offsets:
            return False
        try:
            fd = self.fd if self.fd is not None else os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
        except BlockingIOError:  # a lease is held: the open waits for its release (here: refused)
            self.blocked += 1
            return False
        try:
            if offsets[0] == 0:
                os.pwrite(fd, WRONG[1], CHUNK_BYTES)
                os.pwrite(fd, EXPECTED[0], 0)
            else:
                os.pwrite(fd, WRONG[0], 0)
                os.pwrite(fd, EXPECTED[1], CHUNK_BYTES)
        finally:
            if fd != self.fd:
                os.close(fd)
        os.utime(self.path, ns=(self.mtime_ns, self.mtime_ns))
        self.flips += 1
        return False


@pytest.mark.parametrize("writer", ["open before", "opened during"])
async def test_a_writer_in_step_with_both_reads_within_one_tick_is_seen(
    root: Path, monkeypatch: pytest.MonkeyPatch, writer: str
) -> None:
    """The gap the double read left: a file that never held the expected bytes, read as them twice.

    With a descriptor open for writing before the verification the file is not
    read (``busy``); a writer that opens it during the read breaks the lease
    (its open would wait for the release: here it is non-blocking and fails),
    and the file is refused (``changed``). Without the lease (the old code)
    both reads agree on the expected bytes and the artifact passed.
    """
    path = root / "report.bin"
    path.write_bytes(EXPECTED[0] + WRONG[1])
    expected = hashlib.sha256(b"".join(EXPECTED)).hexdigest()
    verifier = FsVerifier(
        FsVerifierConfig(root=str(root), artifacts=(ExpectedArtifact(path="report.bin", sha256=expected),))
    )
    monkeypatch.setattr(os, "fstat", _HeldTimes(path))
    fd = os.open(path, os.O_WRONLY) if writer == "open before" else None
    signal = InStep(path, fd)
    # A lease break announces itself with a signal to the process named for it: none is named.
    # (SIGIO, the default, would have ended the test process.)
    announced: list[int] = []
    previous = signals.signal(signals.SIGURG, lambda number, frame: announced.append(number))
    try:
        result = await _verify_under(verifier, signal)
    finally:
        if fd is not None:
            os.close(fd)
        signals.signal(signals.SIGURG, previous)
    assert not announced
    assert path.read_bytes() != b"".join(EXPECTED)  # it never held the expected bytes
    assert result.verdict is Verdict.UNKNOWN, (details(result), signal.flips)
    if writer == "open before":
        assert details(result) == {
            "report.bin": "unknown: busy: 'report.bin' is open for writing, so it could change while "
            "it is read; not read"
        }
    else:
        assert signal.blocked >= 1 and signal.flips == 0  # the lease held the writer off
        assert details(result) == {
            "report.bin": "unknown: changed: 'report.bin' was opened for writing while it was read"
        }


async def test_the_lease_is_released_after_the_read(root: Path) -> None:
    """A writer may open the file as soon as the verification has read it (nothing left held)."""
    path = root / "report.bin"
    path.write_bytes(b"".join(EXPECTED))
    expected = hashlib.sha256(b"".join(EXPECTED)).hexdigest()
    verifier = FsVerifier(
        FsVerifierConfig(root=str(root), artifacts=(ExpectedArtifact(path="report.bin", sha256=expected),))
    )
    try:
        result = await verifier.verify(
            CLAIM,
            VerifyContext(
                scope=Scope("tenant", "user", "session"), op=OpContext(), run_started_at=time.time() - 60
            ),
        )
        assert result.verdict is Verdict.PASS, details(result)
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # BlockingIOError if a lease were left
    finally:
        await verifier.aclose()


async def test_a_record_open_for_writing_is_not_read(root: Path) -> None:
    """A passing record a process still holds open for writing could change under the read: busy."""
    path = root / "junit.xml"
    path.write_bytes(b'<testsuite tests="1"><testcase name="t"/></testsuite>')
    verifier = FsVerifier(FsVerifierConfig(root=str(root), test_records=("junit.xml",)))
    fd = os.open(path, os.O_WRONLY)
    try:
        ctx = VerifyContext(
            scope=Scope("tenant", "user", "session"), op=OpContext(), run_started_at=time.time() - 60
        )
        result = await verifier.verify(CLAIM, ctx)
    finally:
        os.close(fd)
        await verifier.aclose()
    assert details(result) == {
        "junit.xml": "unknown: busy: 'junit.xml' is open for writing, so it could change while it is read; "
        "not read"
    }
