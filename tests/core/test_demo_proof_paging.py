"""``agentium demo``'s proof pages the archive from the last group it read, to an empty page.

The demo runs on any configured archive (``--config``: a plugin author
watching their adapter), and ends by reading every archived group back. It
read on from ``len(archived)``, as if seqs had no gap: an archive holding
groups 0-2 and 9 under a boundary of 4 answered a read from 3 with [9],
which added nothing, and the demo read from 3 again, without end. It now
reads on from the last group's ``seq + 1`` and stops at an empty page or
the boundary, and the gap is reported (``sequence numbers are not 0..n``).
"""

from __future__ import annotations

import subprocess
import sys

#: Run in a child, so a proof that never ends fails the test at its timeout instead of hanging it.
_PROVE = """
import io
import anyio
from agentium_harness._demo import run as demo
from agentium_harness._ports import OpContext
from agentium_harness._ports.sessions import SessionSnapshot, seal_snapshot
from agentium_harness._scope import Scope
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.testing import plain_group

SCOPE = Scope("demo-tenant", "demo-user", "s1")
KEY = SCOPE.session_key

async def main() -> None:
    archive, store, ctx = InMemoryArchive(), InMemorySessionStore(), OpContext()
    stored = await archive.append(KEY, [plain_group(s) for s in (0, 1, 2, 9)], ctx)
    receipts = {r.seq: r.digest for r in stored}
    resident = tuple(plain_group(s) for s in range(4, 6))
    snap = seal_snapshot(SessionSnapshot(SCOPE, boundary=4, next_seq=6, resident=resident))
    await store.save(KEY, snap, None, ctx)
    out = io.StringIO()
    ok = await demo._prove(archive, store, KEY, [f"question {s}" for s in range(6)], receipts, out)
    print(ok)
    print(out.getvalue())

anyio.run(main)
"""


def test_the_proof_reads_past_a_gap_in_the_archive_and_reports_it() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROVE], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    ok, report = done.stdout.split("\n", 1)
    assert ok == "False"
    assert "FAILED: sequence numbers are not 0..5" in report
