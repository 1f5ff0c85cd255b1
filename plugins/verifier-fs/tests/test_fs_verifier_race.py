"""Races: a thread swaps the evidence for a link to the outside while verifications run.

The file inside the root holds the *wrong* bytes; the outside target holds
the expected ones. Whatever the interleaving, a verification may see the
inside file (``fail``) or a refused link (``unknown``), never the outside
file's bytes (``pass``). Each test runs until both outcomes were seen at
least once — the ``unknown`` with the refusal the swap causes, proof that it
really raced the reads — and at least 200 times.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fs_verifier_helpers import ARTIFACT_BYTES, CLAIM, context, root_fixture, verifier_for, write

from agentium_harness.plugin_api import Verdict
from agentium_verifier_fs import FsVerifier

pytestmark = pytest.mark.anyio

root = root_fixture()

WRONG = b"the inside file, with the wrong bytes\n"
MIN_RUNS = 200
MAX_RUNS = 20_000


@contextmanager
def flipping(step: Callable[[int], None]) -> Iterator[Counter[str]]:
    """Run ``step(i)`` in a loop in a thread until the block ends; yields a counter of flips."""
    stop = threading.Event()
    flips: Counter[str] = Counter()

    def loop() -> None:
        i = 0
        while not stop.is_set():
            step(i)
            flips["flips"] += 1
            i += 1

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield flips
    finally:
        stop.set()
        thread.join(timeout=30)
        assert not thread.is_alive()


async def _race(verifier: FsVerifier, refusal: str) -> Counter[Verdict]:
    """Verify until a ``fail`` and an ``unknown`` whose detail contains ``refusal`` were both seen."""
    seen: Counter[Verdict] = Counter()
    refused = 0
    for runs in range(1, MAX_RUNS + 1):
        result = await verifier.verify(CLAIM, context())
        seen[result.verdict] += 1
        assert result.verdict is not Verdict.PASS, f"run {runs} passed on the outside file: {result.evidence}"
        refused += any(refusal in e.detail for e in result.evidence)
        if runs >= MIN_RUNS and seen[Verdict.FAIL] and refused:
            break
    assert refused, f"the swap never raced a read into {refusal!r} in {MAX_RUNS} runs: {seen}"
    return seen


def _dwell() -> None:
    """Hold a state a moment, so reads land inside it as well as on its edges."""
    time.sleep(0.0002)


async def test_a_file_swapped_for_a_symlink_never_passes(root: Path, tmp_path: Path) -> None:
    target = root / "report.txt"
    outside = tmp_path / "outside.txt"
    write(target, WRONG)

    def step(i: int) -> None:
        # Each state is put in place by rename, so the path always exists: only its kind changes.
        link, real = root / f".l{i}", root / f".r{i}"
        os.symlink(outside, link)
        os.replace(link, target)
        _dwell()
        real.write_bytes(WRONG)
        os.replace(real, target)
        _dwell()

    with flipping(step) as flips:
        seen = await _race(verifier_for(root, "report.txt"), "symbolic link")
    assert seen[Verdict.FAIL] and flips["flips"] > 0, (seen, flips)


async def test_a_directory_swapped_for_a_symlink_never_passes(root: Path, tmp_path: Path) -> None:
    write(root / "dist" / "report.txt", WRONG)
    evil = tmp_path / "root-evil"  # holds report.txt with the expected bytes
    assert (evil / "report.txt").read_bytes() == ARTIFACT_BYTES

    def step(i: int) -> None:
        # A directory cannot be renamed over a symlink (or the reverse) in one step,
        # so "dist" is briefly missing between the two states as well.
        os.rename(root / "dist", root / ".real")
        os.symlink(evil, root / "dist", target_is_directory=True)
        _dwell()
        os.unlink(root / "dist")
        os.rename(root / ".real", root / "dist")
        _dwell()

    with flipping(step) as flips:
        seen = await _race(verifier_for(root, "dist/report.txt"), "symbolic link")
    assert seen[Verdict.FAIL] and flips["flips"] > 0, (seen, flips)


async def test_a_file_swapped_for_a_hardlink_to_the_outside_never_passes(root: Path, tmp_path: Path) -> None:
    target = root / "report.txt"
    outside = tmp_path / "outside.txt"
    write(target, WRONG)

    def step(i: int) -> None:
        link, real = root / f".h{i}", root / f".r{i}"
        os.link(outside, link)
        os.replace(link, target)
        _dwell()
        real.write_bytes(WRONG)
        os.replace(real, target)
        _dwell()

    with flipping(step) as flips:
        seen = await _race(verifier_for(root, "report.txt"), "link")
    assert seen[Verdict.FAIL] and flips["flips"] > 0, (seen, flips)


async def test_a_hardlink_unlinked_before_the_fstat_and_relinked_before_the_name_check_never_passes(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The interleaving the race above hit once in CI, made deterministic: the verifier opens the
    # name while it is a hard link to the outside file; the swapper puts the inside file back
    # before the open's fstat (the outside inode has one link again), and links the outside file
    # in again before the after-read check looks the name up. The check read the link count from
    # the descriptor and the name's inode from a later lookup, each fine at its own moment, and
    # the outside bytes passed. The name's lookup must give the link count too.
    target, outside = root / "report.txt", tmp_path / "outside.txt"
    write(target, WRONG)
    real_open, real_stat = os.open, os.stat
    state = {"opened": False}

    def point_at_outside() -> None:
        os.link(outside, root / ".h")
        os.replace(root / ".h", target)

    def opening(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if path == "report.txt" and not state["opened"]:
            point_at_outside()  # the name is a link to the outside file as it is opened
            fd = real_open(path, flags, *args, **kwargs)
            state["opened"] = True
            write(root / ".r", WRONG)
            os.replace(root / ".r", target)  # and the inside file is back before the fstat
            return fd
        return real_open(path, flags, *args, **kwargs)

    def looking_up(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if path == "report.txt" and state["opened"] and kwargs.get("dir_fd") is not None:
            point_at_outside()  # linked in again just before the name's check
            state["opened"] = False
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", opening)
    monkeypatch.setattr(os, "stat", looking_up)
    result = await verifier_for(root, "report.txt").verify(CLAIM, context())
    monkeypatch.undo()
    assert result.verdict is not Verdict.PASS, result.evidence
    assert result.verdict is Verdict.UNKNOWN and "linked elsewhere" in result.evidence[0].detail, result
