"""The cost of one task-summary update with 100 vs 10,000 archived groups.

Updates are incremental: one update reads only the groups between the
summary's frontier and the archive boundary, folds them into the previous
(bounded) summary and saves the snapshot. So an update that folds one new
group should cost about the same whether 100 or 10,000 groups lie below the
frontier (target: 10,000/100 <= 1.2).

Setup: for each size N, one SQLite file holding N archived groups of one
session (real ``SQLiteArchive`` appends) and a session snapshot whose
boundary is N, with a summary built by the built-in ``extractive``
summarizer covering groups 0..N-2. One timing is one engine update
(``update_summary``: bounded read of group N-1, digest and scope checks, the
summarizer call, the engine's answer checks) plus its compare-and-set save
(``save_summary``). The summary state is put back after each timing so every
repetition folds the same group. Sizes are timed side by side, alternating
which goes first, so drift in machine load hits both alike.

Prints each size's median and the ratio against its target with PASS or
MISS. Exits 0 either way: it is a benchmark, not a test. ``--quick`` uses
20 and 400 groups for a smoke run.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

from agentium_harness import Message, MessageGroup, RetainedRecord, Role
from agentium_harness._engine.lifecycle import Ticket
from agentium_harness._engine.summary import save_summary, update_summary
from agentium_harness._ports import OpContext
from agentium_harness._ports.sessions import SessionSnapshot, seal_snapshot
from agentium_harness._ports.summary import SummaryLimits, SummaryState
from agentium_harness._scope import Scope
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.summarizers import ExtractiveSummarizer

SCOPE = Scope("acme", "ana", "bench")
KEY = SCOPE.session_key
TARGET = 1.2


def _group(seq: int) -> MessageGroup:
    return MessageGroup(
        seq,
        (
            Message(Role.USER, f"Step {seq}: configure service {seq % 97} with replica count {seq % 7}."),
            Message(Role.ASSISTANT, f"Configured service {seq % 97}; replicas now {seq % 7}. Anything else?"),
        ),
        RetainedRecord(SCOPE),
    )


class Setup:
    """One size: its archive, session store, reader and the summary covering all but the last group."""

    def __init__(self, root: Path, size: int) -> None:
        self.size = size
        config = SQLiteConfig(path=str(root / f"s{size}.db"))
        self.archive = SQLiteArchive(config)
        self.store = SQLiteSessionStore(config)
        self.summarizer = ExtractiveSummarizer()
        self.state: SummaryState | None = None
        self.revision = 0

    async def build(self) -> None:
        ctx = OpContext.with_timeout(600)
        summary = None
        for start in range(0, self.size, 500):
            batch = [_group(s) for s in range(start, min(self.size, start + 500))]
            await self.archive.append(KEY, batch, ctx)
            # The prior summary covers every group but the last one.
            foldable = [g for g in batch if g.seq < self.size - 1]
            if foldable:
                summary = await self.summarizer.summarize(summary, foldable, ctx)
        assert summary is not None
        self.state = SummaryState(summary)
        snapshot = seal_snapshot(
            SessionSnapshot(SCOPE, boundary=self.size, next_seq=self.size, summary=self.state)
        )
        self.revision = await self.store.save(KEY, snapshot, None, ctx)

    async def one_update(self) -> float:
        ticket = Ticket(KEY, "bench", 30.0)
        began = time.perf_counter()
        update = await update_summary(
            ticket,
            summarizer=self.summarizer,
            reader=self.archive.read_groups,
            key=KEY,
            current=self.state,
            boundary=self.size,
            receipts={},
            limits=SummaryLimits(),
        )
        assert update.state is not None and update.state.summary.frontier == self.size, update
        saved, notes = await save_summary(ticket, self.store, KEY, self.revision, update.state)
        elapsed = time.perf_counter() - began
        assert saved is not None, notes
        # Put the previous summary back (untimed), so each repetition folds the same group.
        assert self.state is not None
        restored, _ = await save_summary(ticket, self.store, KEY, saved, self.state)
        assert restored is not None
        self.revision = restored
        return elapsed

    async def aclose(self) -> None:
        await self.archive.aclose()
        await self.store.aclose()


async def measure(small: int, large: int, repetitions: int) -> dict[int, float]:
    """Median seconds per update for each size, timed side by side."""
    with tempfile.TemporaryDirectory() as tmp:
        setups = [Setup(Path(tmp), small), Setup(Path(tmp), large)]
        for s in setups:
            await s.build()
        times: dict[int, list[float]] = {s.size: [] for s in setups}
        for _ in range(5):  # warm caches and connections
            for s in setups:
                await s.one_update()
        for rep in range(repetitions):
            order = setups if rep % 2 == 0 else setups[::-1]
            for s in order:
                times[s.size].append(await s.one_update())
        for s in setups:
            await s.aclose()
    return {size: statistics.median(values) for size, values in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 and 400 groups, fewer repetitions")
    args = parser.parse_args(argv)
    small, large, reps = (20, 400, 30) if args.quick else (100, 10_000, 200)
    print(f"python {platform.python_version()} on {platform.machine()}; one summary update folding one group")
    medians = anyio.run(measure, small, large, reps)
    for size, median in medians.items():
        print(f"  archived={size:>6}: median {median * 1000:8.3f} ms/update")
    ratio = medians[large] / medians[small]
    verdict = "PASS" if ratio <= TARGET else "MISS"
    print(f"ratio {large}/{small}: {ratio:.2f}  target <= {TARGET}  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
