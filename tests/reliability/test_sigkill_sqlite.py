"""SIGKILL a host process mid-work on the built-in SQLite adapters: nothing acknowledged is lost.

A child process (``_sigkill_child.py``) runs the real runtime on SQLite
(archive, session store and recall store on one file, or the archive on a
second file, so that a turn takes two commits; ``synchronous=FULL``; two
resident groups, so nearly every commit evicts into the archive; an extractive
summarizer saving summaries in the background) and loops over ``run``,
``append``, ``retract`` and ``reset_view`` on three sessions, now and then
closing its runtime and opening a new one, printing a ``begin`` line before
each call and an ``ack`` line once the call returned. The parent SIGKILLs it
at a random moment (after a random number of acknowledgements plus a random
delay, or while it is still opening the file), several times in a row on the
same file, each child continuing where the last one died. After every kill a
fresh runtime opens the file and checks, whatever moment the kill landed on:

- SQLite's ``integrity_check`` passes on every file;
- every session loads (no corrupt snapshot, no divergence) and is listed
  exactly when it exists;
- canonical history (``read_history(view=False)``, digest-checked by the
  engine, paged over archive and resident groups) has contiguous seqs from
  0, and every acknowledged group is at its acknowledged seq with exactly the
  acknowledged messages, or control record (a retraction naming exactly the
  acknowledged messages, a reset starting the view right after itself);
- a group nobody acknowledged is the whole of an operation that was begun
  and not acknowledged (the one in flight when the kill landed), never part
  of one, never twice; an operation not found after its kill never appears
  later, and a group once seen never changes (same content, same digest);
- the view (``read_history(view=True)`` and ``inspect_session``) is exactly
  what the canonical control records make it;
- a new ``append`` and a new ``run`` work on the file, and are then held to
  the same checks.

``test_negative_control_catches_ack_before_commit`` runs the child with an
adapter that acknowledges before its COMMIT: the same checks catch the loss.
"""

from __future__ import annotations

import json
import os
import queue
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

from agentium_harness import HarnessRuntime, Message, Role

pytest.importorskip("agentium_harness.adapters.sqlite", reason="needs the SQLite adapters")

# The helper's folder is on sys.path (pytest's default import mode), as for tests/core's _*_support.
import _sigkill_child as child

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL (POSIX)")

CHILD = Path(child.__file__).resolve()
#: One round per seed: a child started on the file, killed, then the file checked (see run_child).
SEEDS = (0, *range(11, 11 + 11 * 14, 11))
#: How long a child may stay silent before the test gives up on it (a hang, not a timing check).
SILENCE_S = 60.0

# (role, content) pairs, and the control record's kind, reason and retracted refs (or None).
GroupKey = tuple[tuple[tuple[str, str], ...], tuple[str, str, tuple[tuple[int, int], ...]] | None]


@attrs.define
class Model:
    """What the children acknowledged and attempted, and what the checks saw."""

    acks: dict[str, dict[int, dict[str, Any]]] = attrs.field(factory=dict)  # session -> seq -> ack
    pending: dict[str, dict[str, Any]] = attrs.field(factory=dict)  # tag -> begun, not acknowledged
    # Every committed group checked so far, with its digest: it never changes (byte for byte).
    seen: dict[tuple[str, int], tuple[GroupKey, str]] = attrs.field(factory=dict)
    kills: int = 0
    acknowledged: int = 0

    def record(self, line: dict[str, Any]) -> None:
        if line["kind"] == "begin":
            self.pending[line["tag"]] = line
        elif line["kind"] == "refused":
            self.pending.pop(line["tag"], None)
        elif line["kind"] == "ack":
            self.pending.pop(line["tag"], None)
            by_seq = self.acks.setdefault(line["session"], {})
            assert line["seq"] not in by_seq, f"seq acknowledged twice: {line} and {by_seq[line['seq']]}"
            earlier = [a for a in by_seq.values() if a["seq"] < line["seq"]]
            assert all(a["revision"] < line["revision"] for a in earlier), line
            by_seq[line["seq"]] = line
            self.acknowledged += 1


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    # The same interpreter sees the same modules: the parent's import path, whatever put it there.
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


def _reader(stream: Any, lines: queue.Queue[str | None]) -> None:
    for raw in stream:
        lines.put(raw)
    lines.put(None)


def run_child(db: Path, layout: str, seed: int, mode: str, model: Model, stderr_path: Path) -> None:
    """Start a child on ``db``, SIGKILL it at a moment chosen by ``seed``, record every line it wrote.

    Seed 0 and a few others kill the child as soon as it is ready, after a
    short delay but for seed 0 (on a new file: while it creates the tables; on
    a used one: while its first operations find what the last kill left). The
    others kill it after a number of acknowledgements,
    then at the next ``begin`` line for half the seeds (an operation in flight),
    and then after a delay of up to a few commits.
    """
    rng = random.Random(seed)
    kill_on_ready = seed == 0 or rng.random() < 0.15
    acks_before_kill = rng.randint(1, 30)
    on_begin = rng.random() < 0.5
    delay = rng.uniform(0.0, 0.05)
    with stderr_path.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, str(CHILD), str(db), layout, str(seed), mode],
            stdout=subprocess.PIPE,
            stderr=err,
            env=_child_env(),
            text=True,
        )
    assert proc.stdout is not None
    lines: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True)
    reader.start()
    try:
        acks = 0
        while True:
            try:
                raw = lines.get(timeout=SILENCE_S)
            except queue.Empty:
                raise AssertionError(f"child {seed} silent for {SILENCE_S}s") from None
            if raw is None:
                raise AssertionError(f"child {seed} ended by itself: {stderr_path.read_text()[-3000:]}")
            line = json.loads(raw)
            if line["kind"] != "ready":
                model.record(line)
            acks += line["kind"] == "ack"
            if mode != "ok":
                # The negative control kills right after an append's (early) acknowledgement.
                trigger = line["kind"] == "ack" and line["op"] == "append"
            else:
                trigger = (
                    line["kind"] == "ready"
                    if kill_on_ready
                    else acks >= acks_before_kill and (not on_begin or line["kind"] == "begin")
                )
            if trigger:
                break
        if seed != 0 or mode != "ok":
            time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        reader.join(SILENCE_S)
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, stderr_path.read_text()[-3000:])
    model.kills += 1
    # Whatever the child wrote before it died was acknowledged too: only a line cut short is not.
    while (raw := lines.get_nowait()) is not None:
        if raw.endswith("\n"):
            model.record(json.loads(raw))


def _key(group: Any) -> GroupKey:
    messages = tuple((m.role.value, m.content) for m in group.messages)
    control = group.control
    if control is None:
        return messages, None
    refs = tuple((r.seq, r.index) for r in control.retracted)
    return messages, (control.kind.value, control.reason, refs)


def _matches_ack(key: GroupKey, ack: dict[str, Any], groups: dict[int, GroupKey]) -> bool:
    messages, control = key
    op = ack["op"]
    if op == "append":
        roles = ["user", "assistant"][: len(ack["texts"])]
        return control is None and list(messages) == [
            (r, t) for r, t in zip(roles, ack["texts"], strict=True)
        ]
    if op == "run":
        return control is None and list(messages) == [
            ("user", ack["texts"][0]),
            ("assistant", ack["texts"][1]),
        ]
    if op == "retract":
        refs = tuple((s, i) for s, i in ack["retracted"])
        texts = [groups[s][0][i][1] for s, i in refs]
        return control == ("retract", ack["tag"], refs) and texts == ack["texts"]
    return control == ("reset_view", ack["tag"], ()) and ack["view_start"] == ack["seq"] + 1


def _matches_begin(key: GroupKey, begin: dict[str, Any]) -> bool:
    """Is ``key`` the whole of the begun operation ``begin`` (its reply and retracted refs unknown)?"""
    messages, control = key
    op, tag = begin["op"], begin["tag"]
    if op == "append":
        roles = ["user", "assistant"][: len(begin["texts"])]
        return control is None and list(messages) == list(zip(roles, begin["texts"], strict=True))
    if op == "run":
        return (
            control is None
            and len(messages) == 2
            and messages[0] == ("user", begin["texts"][0])
            and messages[1][0] == "assistant"
            and messages[1][1] in child.REPLIES
        )
    kind = "retract" if op == "retract" else "reset_view"
    return control is not None and control[:2] == (kind, tag)


async def _all_groups(runtime: HarnessRuntime, session: str, view: bool) -> list[Any]:
    """Every group of the session, oldest first, paged backwards in small pages (archive and resident)."""
    groups: list[Any] = []
    before = None
    while True:
        page = await runtime.read_history(child.IDENTITY, session, before_seq=before, max_groups=7, view=view)
        groups[:0] = page.groups
        if page.next_before_seq is None:
            return groups
        before = page.next_before_seq


async def check_file(db: Path, layout: str, model: Model, round_no: int) -> None:
    """A fresh runtime on the file: everything acknowledged is there and whole; new work succeeds."""
    for path in (db, Path(f"{db}-archive")):
        if path.exists():
            with closing(sqlite3.connect(path)) as conn:
                assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)], path
    async with child.build_runtime(str(db), layout) as runtime:
        listed = set((await runtime.list_sessions(child.IDENTITY, limit=100)).sessions)
        for session in child.SESSIONS:
            await _check_session(runtime, session, model, listed)
        # The file takes new work: an append on every session, a run on one; the next rounds check them.
        for session in child.SESSIONS:
            tag = f"check-{round_no}-{session}"
            done = await runtime.append(child.IDENTITY, session, [Message(Role.USER, f"user {tag}")])
            model.record(
                {
                    "kind": "ack",
                    "session": session,
                    "op": "append",
                    "tag": tag,
                    "seq": done.seq,
                    "revision": done.snapshot_revision,
                    "texts": [f"user {tag}"],
                }
            )
        session = child.SESSIONS[round_no % len(child.SESSIONS)]
        tag = f"check-run-{round_no}"
        ran = await runtime.run(child.IDENTITY, session, f"question {tag}")
        assert ran.committed and ran.group_seq is not None, ran
        model.record(
            {
                "kind": "ack",
                "session": session,
                "op": "run",
                "tag": tag,
                "seq": ran.group_seq,
                "revision": ran.snapshot_revision,
                "texts": [f"question {tag}", ran.output],
            }
        )
        for session in child.SESSIONS:
            await _check_session(runtime, session, model, None)
    # An operation begun by a dead child and not found now can never appear later.
    model.pending.clear()


async def _check_session(
    runtime: HarnessRuntime, session: str, model: Model, listed: set[str] | None
) -> None:
    acks = model.acks.get(session, {})
    state = await runtime.inspect_session(child.IDENTITY, session)
    assert state.exists or not acks, f"{session}: acknowledged work lost, session gone"
    # Listed exactly when it exists (an in-flight op's commit can create it, unacknowledged).
    assert listed is None or (session in listed) == state.exists, (session, listed, state.exists)
    if not state.exists:
        return
    assert state.divergence is None and state.state.value == "ok", state
    newest = max((a["revision"] for a in acks.values()), default=0)
    assert state.revision >= newest, f"{session}: acknowledged revision {newest} lost (at {state.revision})"
    history = await _all_groups(runtime, session, view=False)
    assert [g.group.seq for g in history] == list(range(state.next_seq)), f"{session}: seqs not contiguous"
    groups = {g.group.seq: _key(g.group) for g in history}
    digests = {g.group.seq: g.group.digest for g in history}
    for seq, ack in sorted(acks.items()):
        assert seq in groups, f"{session}: acknowledged group {seq} lost ({ack})"
        assert _matches_ack(groups[seq], ack, groups), f"{session}: group {seq} is {groups[seq]}, acked {ack}"
    matched: set[str] = set()
    for seq, key in groups.items():
        was_seen = (session, seq) in model.seen
        known = model.seen.setdefault((session, seq), (key, digests[seq]))
        assert known == (key, digests[seq]), f"{session}: committed group {seq} changed: {known}, now {key}"
        if seq in acks:
            continue
        begun = [
            b
            for b in model.pending.values()
            if b["session"] == session and b["tag"] not in matched and _matches_begin(key, b)
        ]
        if begun:
            matched.add(begun[0]["tag"])
        else:
            assert was_seen, f"{session}: stray group {seq}: {key}"
    # Once seen, a group stays: the seen ones the model does not ack are the in-flight ops that landed.
    for (s, seq), (key, digest) in model.seen.items():
        if s == session:
            assert (groups.get(seq), digests.get(seq)) == (key, digest), f"{session}: group {seq} gone"
    # The view is exactly what the canonical control records make it.
    view_start = 0
    retracted: set[tuple[int, int]] = set()
    for seq, (_, control) in sorted(groups.items()):
        if control is not None and control[0] == "reset_view":
            view_start = seq + 1
        elif control is not None:
            retracted.update(control[2])
    expected = {
        seq: tuple(i for i in range(len(messages)) if (seq, i) not in retracted)
        for seq, (messages, _) in groups.items()
        if seq >= view_start
    }
    expected = {seq: shown for seq, shown in expected.items() if shown}
    in_view = await _all_groups(runtime, session, view=True)
    assert {g.group.seq: tuple(g.shown) for g in in_view} == expected, f"{session}: view differs"
    assert state.view_start == view_start, (state.view_start, view_start)
    assert state.retracted == sum(1 for s, _ in retracted if s >= view_start), state


def _rounds(tmp_path: Path, layout: str, seeds: tuple[int, ...], mode: str) -> Model:
    db = tmp_path / "agentium.db"
    model = Model()
    for round_no, seed in enumerate(seeds):
        run_child(db, layout, seed, mode, model, tmp_path / f"child-{seed}.err")
        anyio.run(check_file, db, layout, model, round_no)
    return model


@pytest.mark.parametrize("layout", ["one-file", "two-files"])
def test_sigkilled_host_loses_nothing_acknowledged(tmp_path: Path, layout: str) -> None:
    """SIGKILLs in a row on one SQLite file: every acknowledged group, retraction and reset survives."""
    model = _rounds(tmp_path, layout, SEEDS, "ok")
    assert model.kills == len(SEEDS)
    # The kills landed after real work (structure, not timing: most seeds wait for their acks).
    assert model.acknowledged >= 100, model.acknowledged
    ops = {a["op"] for acks in model.acks.values() for a in acks.values()}
    assert ops == {"append", "run", "retract", "reset"}, ops


def test_negative_control_catches_ack_before_commit(tmp_path: Path) -> None:
    """An adapter that acknowledges an append before its COMMIT is caught: the acknowledged group is lost."""
    with pytest.raises(AssertionError, match=r"acknowledged .* lost"):
        _rounds(tmp_path, "one-file", (101,), "ack-before-commit")
