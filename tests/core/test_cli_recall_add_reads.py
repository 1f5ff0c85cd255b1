"""``agentium recall add`` reads its files off the event loop, under a deadline, and keeps the 4 MiB bound.

The opens, ``fstat`` and read of each document ran on the event loop thread,
so a slow or blocked file system stalled every task of the loop (the erasure
fence, the store's calls). They now run in a worker thread under the engine's
call deadline; a read past it is abandoned and the file skipped.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from _cli_support import SQLITE_RECALL_CONFIG

from agentium_harness._cli import main, recall
from agentium_harness._engine.document_api import MAX_DOCUMENT_BYTES
from agentium_harness.testing.sqlite_rows import with_inflated_rows

CONFIG = SQLITE_RECALL_CONFIG
ANA = ["--tenant", "acme", "--user", "ana", "--session", "s1"]


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "a.toml"
    path.write_text(CONFIG.format(db=(tmp_path / "a.db").as_posix()), encoding="utf-8")
    docs = tmp_path / "docs"
    (docs / "ops").mkdir(parents=True)
    (docs / "vpn.md").write_text("The VPN certificate expires on March 3rd.", encoding="utf-8")
    (docs / "ops" / "lunch.txt").write_text("Lunch is at noon.", encoding="utf-8")
    return path


def _stored_bytes(folder: Path) -> bytes:
    """Every byte of the SQLite database and its log (what the command wrote), deflated rows inflated."""
    return with_inflated_rows(b"".join(p.read_bytes() for p in sorted(folder.glob("a.db*"))))


def test_each_file_is_read_off_the_event_loop_thread(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    readers: list[int] = []
    loop: list[int] = []
    read, index = recall._read_document, recall.index_document_fenced

    def reading(*args: Any, **kwargs: Any) -> bytes:
        readers.append(threading.get_ident())
        return read(*args, **kwargs)

    async def indexing(*args: Any, **kwargs: Any) -> Any:
        loop.append(threading.get_ident())  # awaited by the command: on the event loop's thread
        return await index(*args, **kwargs)

    monkeypatch.setattr(recall, "_read_document", reading)
    monkeypatch.setattr(recall, "index_document_fenced", indexing)
    assert main(["recall", "add", str(config), "--tenant", "acme", str(config.parent / "docs")]) == 0
    assert capsys.readouterr().out == "2 indexed, 0 skipped\n"
    assert len(readers) == 2 and len(set(loop)) == 1
    (loop_thread,) = set(loop)
    assert loop_thread not in readers, "a file was read on the event loop's thread"


def test_the_4_mib_bound_still_holds_off_the_loop_and_writes_nothing_of_a_larger_file(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big = config.parent / "big"
    big.mkdir()
    marker = b"quokkamarker7731 "
    (big / "at-bound.txt").write_bytes(b"fits ".ljust(MAX_DOCUMENT_BYTES, b"a"))
    (big / "over.txt").write_bytes(marker.ljust(MAX_DOCUMENT_BYTES + 1, b"b"))
    assert main(["recall", "add", str(config), "--tenant", "acme", str(big)]) == 0
    out, err = capsys.readouterr()
    assert out == "1 indexed, 1 skipped\n"
    assert f"  skipped {big / 'over.txt'}: binary or larger than {MAX_DOCUMENT_BYTES} bytes\n" in err
    assert "at-bound.txt" not in err
    assert marker.strip() not in _stored_bytes(config.parent), "the larger file's text was written"
    assert main(["recall", "search", str(config), *ANA, "quokkamarker7731"]) == 0
    assert "status no_accessible_evidence" in capsys.readouterr().out


def test_a_read_that_blocks_past_its_deadline_is_abandoned_and_the_file_skipped(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A read stuck in the file system (a stalled network share) held the command for good.
    release = threading.Event()
    read = recall._read_document

    def stuck(path: Path, doc_id: str, *, follow: bool) -> bytes:
        if doc_id == "vpn.md":
            release.wait(20)  # bounded, so a broken implementation fails instead of hanging
        return read(path, doc_id, follow=follow)

    monkeypatch.setattr(recall, "_read_document", stuck)
    monkeypatch.setattr(recall, "READ_TIMEOUT_S", 0.5, raising=False)
    try:
        code = main(["recall", "add", str(config), "--tenant", "acme", str(config.parent / "docs")])
    finally:
        release.set()
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out == "1 indexed, 1 skipped\n"
    assert f"  skipped {config.parent / 'docs' / 'vpn.md'}: not read within 0.5s (abandoned)" in err
    monkeypatch.undo()
    assert main(["recall", "search", str(config), *ANA, "VPN certificate"]) == 0
    assert "March 3rd" not in capsys.readouterr().out  # the abandoned read's late text was discarded


_STUCK_FOR_GOOD = """
import sys, threading
from pathlib import Path
from agentium_harness._cli import main, recall
from agentium_harness.testing.sqlite_rows import with_inflated_rows
never = threading.Event()
read = recall._read_document
def stuck(path, doc_id, *, follow):
    if doc_id == "vpn.md":
        never.wait()  # a read stuck in the file system for good (a hard-mounted share gone away)
    return read(path, doc_id, follow=follow)
recall._read_document = stuck
recall.READ_TIMEOUT_S = 0.5
sys.exit(main(["recall", "add", sys.argv[1], "--tenant", "acme", sys.argv[2]]))
"""


def test_a_read_abandoned_for_good_does_not_keep_the_command_from_exiting(config: Path) -> None:
    # The read ran in one of anyio's worker threads, which are not daemons: the command printed
    # its summary and main() returned, but the process then waited at exit for that thread, so
    # `agentium recall add` never ended while the read stayed stuck.
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = [sys.executable, "-c", _STUCK_FOR_GOOD, str(config), str(config.parent / "docs")]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=25, env=env, check=False)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the command did not exit (stdout {exc.stdout!r})")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "1 indexed, 1 skipped\n"
    assert "vpn.md: not read within 0.5s (abandoned); not indexed" in done.stderr
