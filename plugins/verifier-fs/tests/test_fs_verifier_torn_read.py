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
