"""A file written while it is read is not judged on the mix of bytes the read saw.

Files are read in 1 MiB chunks. The artifact here is two chunks long and
never holds the expected bytes: it flips between ``[expected first half,
wrong second half]`` and ``[wrong first half, expected second half]``, each
flip writing the half to spoil first, so no moment in between holds both
expected halves either. The flips are placed deterministically: each time the
verifier checks its bounds (between chunks), the file is put in the state
whose half the next chunk reads. A verifier that hashes the chunks as they
come sees the expected bytes and passes a file that never held them.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fs_verifier_helpers import CLAIM, details, root_fixture

from agentium_harness.plugin_api import CancelSignal, OpContext, Scope, Verdict, VerifyContext
from agentium_verifier_fs import ExpectedArtifact, FsVerifier, FsVerifierConfig
from agentium_verifier_fs._confined import CHUNK_BYTES

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        not sys.platform.startswith("linux"), reason="reads read offsets through /proc/self/fdinfo (Linux)"
    ),
]

root = root_fixture()

EXPECTED = (b"E" * CHUNK_BYTES, b"e" * CHUNK_BYTES)
WRONG = (b"X" * CHUNK_BYTES, b"x" * CHUNK_BYTES)


def _read_offsets(path: Path) -> list[int]:
    """The file offsets of this process's descriptors open on ``path``."""
    target = os.path.realpath(path)
    offsets = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") != target:
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


async def test_an_artifact_written_while_it_is_read_never_passes_on_the_mix(root: Path) -> None:
    path = root / "report.bin"
    path.write_bytes(EXPECTED[0] + WRONG[1])
    hour_ago = time.time() - 3600
    os.utime(path, (hour_ago, hour_ago))  # a write during the read moves the time past the clock's tick
    expected = hashlib.sha256(b"".join(EXPECTED)).hexdigest()
    verifier = FsVerifier(
        FsVerifierConfig(root=str(root), artifacts=(ExpectedArtifact(path="report.bin", sha256=expected),))
    )
    signal = Flipper(path)
    ctx = VerifyContext(
        scope=Scope("tenant", "user", "session"),
        op=OpContext(signal=signal),
        run_started_at=time.time() - 60,
    )
    try:
        result = await verifier.verify(CLAIM, ctx)
    finally:
        await verifier.aclose()
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
    ctx = VerifyContext(
        scope=Scope("tenant", "user", "session"),
        op=OpContext(signal=signal),
        run_started_at=time.time() - 60,
    )
    try:
        result = await verifier.verify(CLAIM, ctx)
    finally:
        await verifier.aclose()
    assert signal.rewrites == 1
    assert path.read_bytes() == after  # the file held before, then after; never the mix
    # The mix would pass: the expected digest, or a record with one test that ran and no failure.
    assert result.verdict is Verdict.UNKNOWN, details(result)
    assert details(result) == {
        "evidence.bin": "unknown: changed: 'evidence.bin' was written while it was read"
    }
