"""What every peer-benchmark worker shares: the messages, the command loop, commit counting, RSS.

Standard library only: this module runs inside each peer's own venv, where
neither Agentium nor the other peers are installed. ``benchmarks/peers.py``
starts each worker as a script, so this directory is on ``sys.path``.

A worker script runs in one of two modes:

- ``--seed DB=N ...``: preload N prior messages into each fresh database DB,
  check each, print one JSON line per database, exit. One seeder process per
  system seeds every size, so that seeding memory never counts in a timed
  worker's peak RSS and each heavy import is paid once.
- ``--db DB --messages N --shape SHAPE``: import, wait for ``open``, open
  the seeded database, then answer one JSON line per command read from stdin
  (see :func:`serve`). One such process per (system, history size, shape).

Two shapes of history, because they measure different things:

- ``growing``: each timed turn adds its two messages, as a real session
  does; a worker that started at N prior messages ends a few hundred past it.
- ``held``: after each timed turn, and untimed, the system is put back to the
  N messages it had before the turn (each worker does it through its
  system's own API where there is one: see its ``restore``), so every timed
  turn sees exactly N prior messages.

Each timed turn also records the write system calls and the bytes written
that the whole process made during it, from ``/proc/self/io`` (``syscw`` and
``wchar``, every thread included; read outside the timed span).
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from typing import IO, Any, Protocol

#: Every message of every system, history and timed turns alike, has exactly this many characters.
MESSAGE_CHARS = 500

#: Preload batch size where the system's API takes a batch (Agentium's archive, the Agents SDK session).
SEED_BATCH = 1000

#: Session / thread id used by every system.
SESSION_ID = "bench-session"

#: The shapes of history a worker can run (see the module docstring).
SHAPES = ("growing", "held")

_FILLER = (
    "The quick brown fox jumps over the lazy dog while the archive keeps every word. "
    "Pack my box with five dozen liquor jugs, then list the jugs again for later. "
)


def message_text(i: int, role: str) -> str:
    """Message ``i`` of the conversation (``role`` is ``user`` or ``assistant``), exactly 500 characters."""
    head = f"[{role} message {i}] "
    body = (_FILLER * (MESSAGE_CHARS // len(_FILLER) + 2))[: MESSAGE_CHARS - len(head)]
    return head + body


#: The canned model reply of every timed turn (no model is called by any system).
REPLY = message_text(0, "canned reply")


def role_of(i: int) -> str:
    """Messages alternate user, assistant, user, ... from message 0."""
    return "user" if i % 2 == 0 else "assistant"


def peak_rss_mb() -> float:
    """This process's peak resident set size in MB (Linux reports kB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def io_counters() -> tuple[int, int] | None:
    """``(syscw, wchar)`` of this whole process so far, from ``/proc/self/io``; ``None`` where it is missing.

    ``syscw`` counts write system calls (``write``, ``pwrite64``, ...), ``wchar``
    the bytes they were asked to write, whether or not they reached the disk
    yet. SQLite in WAL mode writes each page of a commit as two calls (a
    24-byte frame header and the page), so these count what a commit costs
    the file system, fsyncs aside.
    """
    try:
        with open("/proc/self/io", "rb") as f:
            text = f.read()
    except OSError:
        return None
    values = dict(line.split(b":", 1) for line in text.splitlines() if b":" in line)
    return int(values[b"syscw"]), int(values[b"wchar"])


#: True while a timed turn runs (between ``TurnLog.start`` and ``stop``): commits are counted only then,
#: so the untimed restores of the ``held`` shape are not.
_IN_TURN = [False]
#: The statement trace of a commit count under way (see count_commits), else None.
_COUNTING: list[Callable[[str], None] | None] = [None]


class TurnLog:
    """What each timed turn cost: wall time, and the writes the process made meanwhile."""

    def __init__(self) -> None:
        self.ns: list[int] = []
        self.syscw: list[int] = []
        self.wchar: list[int] = []
        self._io: tuple[int, int] | None = None
        self._start = 0

    def __len__(self) -> int:
        return len(self.ns)

    def start(self) -> None:
        """Right before the turn: the I/O counters first, then the clock (so reading them is not timed)."""
        self._io = io_counters()
        _IN_TURN[0] = True
        self._start = time.perf_counter_ns()

    def stop(self) -> None:
        """Right after the turn: the clock first, then the counters."""
        self.ns.append(time.perf_counter_ns() - self._start)
        _IN_TURN[0] = False
        after = io_counters()
        if after is not None and self._io is not None:
            self.syscw.append(after[0] - self._io[0])
            self.wchar.append(after[1] - self._io[1])

    def payload(self) -> dict[str, list[int]]:
        """The reply to a ``run`` command."""
        return {"ns": self.ns, "syscw": self.syscw, "wchar": self.wchar}


def durable_wal(conn: sqlite3.Connection) -> None:
    """The settings every system runs with: WAL journal, ``synchronous=FULL`` (an fsync per commit)."""
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()
    if mode is None or str(mode[0]).lower() != "wal":
        raise SystemExit(f"could not switch the database to WAL (got {mode!r})")
    conn.execute("PRAGMA synchronous = FULL")


def pragmas(conns: Sequence[sqlite3.Connection]) -> list[dict[str, Any]]:
    """``journal_mode`` and ``synchronous`` of each connection, as the parent reports them."""
    names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
    out = []
    for conn in conns:
        journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
        sync = conn.execute("PRAGMA synchronous").fetchone()[0]
        out.append({"journal_mode": str(journal).lower(), "synchronous": names.get(sync, str(sync))})
    return out


class System(Protocol):
    """One system under test, opened on a seeded database by a timing worker."""

    #: Package versions measured, for the report.
    versions: dict[str, str]
    #: What one timed turn does, in one sentence, for the report.
    includes: str

    def run(self, n: int, max_seconds: float) -> TurnLog:
        """Run up to ``n`` turns (at least one), stopping once ``max_seconds`` have passed.

        In the ``held`` shape each turn is followed, untimed, by putting the
        history back to where it was before it.
        """
        ...

    def connections(self) -> Sequence[sqlite3.Connection]:
        """The SQLite connections the system writes through (for PRAGMAs and commit counting)."""
        ...

    def close(self) -> None:
        """Release the system's resources."""
        ...


def timed_loop(
    turn: Callable[[int], None],
    first: int,
    n: int,
    max_seconds: float,
    restore: Callable[[], None] | None = None,
) -> TurnLog:
    """Time ``turn(first)``, ``turn(first + 1)``, ...: up to ``n`` turns, at least one, in ``max_seconds``.

    With ``restore`` (the ``held`` shape) every turn is ``turn(first)``,
    followed by ``restore()`` outside the timed span.
    """
    log = TurnLog()
    deadline = time.perf_counter() + max_seconds
    for k in range(n):
        if k and time.perf_counter() >= deadline:
            break
        log.start()
        turn(first if restore is not None else first + k)
        log.stop()
        if restore is not None:
            restore()
    return log


def count_commits(system: System, turns: int) -> float | None:
    """Commits per turn over ``turns`` untimed turns, counted with SQLite's statement trace.

    Python's ``Connection.commit()`` and an explicit ``COMMIT`` both reach the
    trace as a ``COMMIT`` statement. Only commits inside a turn count (not the
    ``held`` shape's restores after it). ``None`` when the system exposes no
    connection to trace. The trace slows statements, so these turns are
    never timed.
    """
    conns = list(system.connections())
    if not conns:
        return None
    seen = [0]

    def trace(statement: str) -> None:
        head = statement.lstrip().upper()
        if _IN_TURN[0] and head.startswith(("COMMIT", "END")):
            seen[0] += 1

    for conn in conns:
        conn.set_trace_callback(trace)
    # A system may open a connection while counting (the Agents SDK opens one per worker
    # thread, and asyncio's executor starts a new thread whenever none is idle at the
    # moment of submission): such a connection is traced from its first statement, by
    # the worker calling follow_connection when it configures it.
    _COUNTING[0] = trace
    try:
        system.run(turns, math.inf)
    finally:
        _COUNTING[0] = None
        for conn in {id(c): c for c in [*conns, *system.connections()]}.values():
            try:
                conn.set_trace_callback(None)
            except sqlite3.ProgrammingError:
                pass  # closed meanwhile by its system (the SDK closes the connections of exited threads)
    return seen[0] / turns


def follow_connection(conn: sqlite3.Connection) -> None:
    """Trace ``conn`` too if commits are being counted: call it on every connection a system opens."""
    trace = _COUNTING[0]
    if trace is not None:
        conn.set_trace_callback(trace)


def _reply(stream: IO[str], payload: dict[str, Any]) -> None:
    stream.write(json.dumps(payload) + "\n")
    stream.flush()


def serve(open_system: Callable[[], System]) -> None:
    """Answer the parent's commands, one JSON line each, until ``quit`` or end of input.

    The worker first says ``loaded`` (its imports are done) and waits for
    ``open``, so the parent can start it while the database is still being
    seeded; it then opens the system and says ``ready``. Then:

    - ``run N SECONDS``: ``{"ns": [...], "syscw": [...], "wchar": [...]}``, up to
      N timed turns within SECONDS (the lists are empty without ``/proc/self/io``);
    - ``count N``: ``{"commits_per_turn": x}`` over N untimed turns;
    - ``info``: versions, what a turn includes, each connection's PRAGMAs;
    - ``rss``: ``{"peak_rss_mb": x}``;
    - ``quit``.
    """
    out = sys.stdout
    _reply(out, {"loaded": True})
    if sys.stdin.readline().strip() != "open":
        return
    system = open_system()
    _reply(out, {"ready": True})
    try:
        for line in sys.stdin:
            command, *args = line.split()
            if command == "run":
                _reply(out, system.run(int(args[0]), float(args[1])).payload())
            elif command == "count":
                _reply(out, {"commits_per_turn": count_commits(system, int(args[0]))})
            elif command == "info":
                conns = system.connections()
                _reply(
                    out, {"versions": system.versions, "includes": system.includes, "pragmas": pragmas(conns)}
                )
            elif command == "rss":
                _reply(out, {"peak_rss_mb": peak_rss_mb()})
            elif command == "quit":
                break
            else:
                raise SystemExit(f"unknown command {line!r}")
    finally:
        system.close()


def arguments(description: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line every worker takes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seed", nargs="+", metavar="DB=N", help="preload N messages into each DB and exit")
    parser.add_argument("--db", help="timing: the seeded database file")
    parser.add_argument("--messages", type=int, default=0, help="timing: prior messages in the history")
    parser.add_argument("--shape", choices=SHAPES, default="growing", help="timing: history growing or held")
    parser.add_argument("--commits", type=int, default=2, help="disk worker only: commits per turn")
    args = parser.parse_args(argv)
    if not args.seed and not args.db:
        parser.error("give --seed DB=N ... or --db DB --messages N")
    return args


def seed_all(pairs: Sequence[str], seed: Callable[[str, int], dict[str, Any]]) -> None:
    """Run ``seed(db, n)`` for each ``DB=N`` in turn; one JSON line per database on stdout."""
    for pair in pairs:
        db, _, n = pair.rpartition("=")
        started = time.perf_counter()
        info = seed(db, int(n))
        _reply(sys.stdout, {"db": db, "messages": int(n), "seconds": time.perf_counter() - started, **info})
