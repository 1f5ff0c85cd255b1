"""Ctrl-C to a core command: a short message and status 130, never a traceback, however many arrive.

``asyncio``'s runner re-raised the first SIGINT as ``KeyboardInterrupt`` out of
``anyio.run`` (no command caught it: a traceback, status -2), and a second one,
while the runtime closed, raised ``KeyboardInterrupt`` inside that cleanup.
Each test runs ``agentium demo`` (a long one) in a child process, SIGINTs it
by its PID once it is running turns, and reopens its database afterwards.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

#: Pauses between the SIGINTs: none (two pending at once, or merged by the kernel into one), and
#: ones that land the later SIGINT while the first one's cancellation closes the runtime.
GAPS = [0.0, 0.02, 0.2]


def _demo(directory: Path, turns: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "agentium_harness", "demo", "--turns", str(turns), "--dir", str(directory)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _interrupt_demo(directory: Path, count: int, gap: float) -> tuple[int, str]:
    """A demo of many turns SIGINTed ``count`` times ``gap`` apart once a turn ran: its status and stderr.

    Bounded by 30 s in all: a child that never runs a turn or never ends is killed and the test fails.
    """
    proc = _demo(directory, 10_000)
    watchdog = threading.Timer(30, proc.kill)
    watchdog.start()
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("agentium demo:")
        assert proc.stdout.readline().startswith("turn")  # the loop runs: the runtime is open
        for i in range(count):
            if i:
                time.sleep(gap)  # a pause, not a measure: nothing asserts how long anything took
            os.kill(proc.pid, signal.SIGINT)  # what Ctrl-C sends, to this child only
        _out, err = proc.communicate(timeout=30)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, err


def _reopens(directory: Path) -> None:
    """The interrupted demo's database opens and runs a turn again: the close left nothing broken."""
    proc = _demo(directory, 1)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "every archived digest matches its receipt: yes" in out


def test_ctrl_c_during_a_core_command_is_reported_not_a_traceback(tmp_path: Path) -> None:
    status, err = _interrupt_demo(tmp_path, 1, 0.0)
    assert "Traceback" not in err, err
    assert status == 130, (status, err)
    assert err.endswith("agentium demo: interrupted\n"), err
    _reopens(tmp_path)


@pytest.mark.parametrize("gap", GAPS)
def test_two_near_simultaneous_ctrl_cs_end_the_command_once_and_cleanly(tmp_path: Path, gap: float) -> None:
    """The second SIGINT came while the first one's cancellation closed the runtime: it raised
    ``KeyboardInterrupt`` in that cleanup, a traceback. It is ignored; the close finishes."""
    status, err = _interrupt_demo(tmp_path, 2, gap)
    assert "Traceback" not in err, err
    assert status == 130, (status, err)
    assert err.endswith("agentium demo: interrupted\n"), err
    assert err.count("agentium demo: interrupted") == 1, err  # reported once, however many came
    _reopens(tmp_path)


#: A command whose work ignores cancellation for good (a close that hangs), its grace cut to 0.5 s.
_HANGING_CLOSE = """
import sys
import anyio
from agentium_harness._cli import interrupt

interrupt.SHUTDOWN_GRACE_S = 0.5

async def work():
    print("started", flush=True)
    with anyio.CancelScope(shield=True):
        await anyio.sleep(3600)

with interrupt.interrupts("stuck"):
    interrupt.run_async(work)
"""


def test_an_interrupted_command_whose_close_hangs_still_exits(tmp_path: Path) -> None:
    """Shutdown after Ctrl-C is bounded: past the grace the process exits, status 130, saying why."""
    script = tmp_path / "hanging_close.py"
    script.write_text(_HANGING_CLOSE, encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    watchdog = threading.Timer(30, proc.kill)
    watchdog.start()
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "started\n"
        os.kill(proc.pid, signal.SIGINT)
        os.kill(proc.pid, signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "Traceback" not in err, err
    assert proc.returncode == 130, (proc.returncode, err)
    assert err == "agentium stuck: interrupted; shutdown did not finish within 0.5s, exiting without it\n"


#: A host calling ``main()`` in its own process (as tests and embedding programs do), Ctrl-C'd while a
#: demo runs turns, then carrying on: what ``main()`` left behind is printed, then the host outlives
#: the (shortened) grace. ``SHUTDOWN_GRACE_S`` is cut to 5 s (room for the demo's close) so that a
#: leaked watchdog fires within the test's bound; the sleep after is a pause for it, not a measure.
_IN_PROCESS = """
import os, signal, sys, threading, time
from agentium_harness._cli import interrupt, main

interrupt.SHUTDOWN_GRACE_S = 5.0
previous = signal.getsignal(signal.SIGINT)
ran = threading.Event()

def ctrl_c():
    while not ran.wait(0.01):
        # inside the command's loop: its cancel is the loop's, not the placeholder around it
        ran.set() if isinstance(interrupt._STATE.cancel, interrupt.partial) else None
    time.sleep(0.2)  # a few turns in
    os.kill(os.getpid(), signal.SIGINT)

threading.Thread(target=ctrl_c, daemon=True).start()
status = main(["demo", "--turns", "10000", "--dir", sys.argv[1]])
print("status", status, flush=True)
print("handler restored", signal.getsignal(signal.SIGINT) is previous, flush=True)
print("timers", [t.name for t in threading.enumerate() if isinstance(t, threading.Timer)], flush=True)
time.sleep(6.0)
print("host still running", flush=True)
"""


def test_main_called_in_process_leaves_no_handler_or_watchdog_behind(tmp_path: Path) -> None:
    """``main()`` returns to its caller: after a Ctrl-C it left SIGINT ignored for the rest of the
    host's life and its watchdog running, which ended the host (status 130) 20 s later, whatever
    the host was doing by then. It restores the handler and stops the watchdog; only the console
    script, which exits right after, keeps them to bound its exit."""
    script = tmp_path / "host.py"
    script.write_text(_IN_PROCESS, encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "demo")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    host = ("status ", "handler restored ", "timers ", "host still running")  # the demo's lines left out
    lines = [line for line in out.splitlines() if line.startswith(host)]
    assert "Traceback" not in err, err
    assert lines[0] == "status 130", (out, err)
    assert err.endswith("agentium demo: interrupted\n"), err  # the watchdog said nothing
    assert lines[1:] == ["handler restored True", "timers []", "host still running"], (out, err)
    assert proc.returncode == 0, (proc.returncode, err)


#: The console script's path (``exiting()``): the command, Ctrl-C'd, leaves a worker thread blocked
#: for good, which the interpreter's exit joins; the watchdog must outlive ``interrupts`` to end that.
_EXIT_JOINS_A_STUCK_THREAD = """
import sys, threading
import anyio
from agentium_harness._cli import interrupt

interrupt.SHUTDOWN_GRACE_S = 0.5
interrupt.exiting()

async def work():
    threading.Thread(target=threading.Event().wait).start()  # not a daemon: the exit joins it
    print("started", flush=True)
    await anyio.sleep(3600)

try:
    with interrupt.interrupts("stuck"):
        interrupt.run_async(work)
except KeyboardInterrupt:
    print("interrupted", flush=True)
sys.exit(130)
"""


def test_the_console_scripts_exit_stays_bounded_after_the_command_returns(tmp_path: Path) -> None:
    """``main()`` restores the handler and stops the watchdog for in-process callers; the console
    script keeps both past it, so an exit held by a thread a close left blocked still ends."""
    script = tmp_path / "stuck_exit.py"
    script.write_text(_EXIT_JOINS_A_STUCK_THREAD, encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "started\n"
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert out == "interrupted\n", (out, err)
    assert proc.returncode == 130, (proc.returncode, err)
    assert err == "agentium stuck: interrupted; shutdown did not finish within 0.5s, exiting without it\n"


def _erase_config(tmp_path: Path) -> Path:
    """One SQLite database for every store, a scripted provider, retention keeping 1 archived group."""
    db = tmp_path / "agentium.db"
    cfg = tmp_path / "agentium.toml"
    stores = "".join(
        f'[{section}]\nplugin = "sqlite"\n[{section}.options]\npath = "{db}"\n'
        for section in ("archive", "session_store", "recall", "memory")
    )
    cfg.write_text(
        '[runtime.resident]\nmax_groups = 1\n[provider]\nplugin = "scripted"\n'
        '[provider.options]\nresponses = ["noted"]\ncycle = true\n'
        f"{stores}[retention]\nmax_archived_groups = 1\n",
        encoding="utf-8",
    )
    return cfg


@pytest.mark.parametrize(
    ("command", "name"),
    [
        ((["erase"], ["--user", "ana", "--session", "s1", "--reason", "r"]), "erase"),
        ((["retention", "apply"], []), "retention"),
    ],
)
def test_ctrl_c_during_an_erasure_says_it_stays_pending(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: tuple[list[str], list[str]],
    name: str,
) -> None:
    """An erasure Ctrl-C stops part way stays pending and fences its scope (a turn there is refused
    until ``erase --resume``): the command said only ``interrupted``, as if nothing had begun."""
    from agentium_harness._cli import main
    from agentium_harness.adapters import _sqlite_archive

    cfg = str(_erase_config(tmp_path))
    turn = ["run", cfg, "--tenant", "acme", "--user", "ana", "--session", "s1"]
    for i in range(3):
        assert main([*turn, f"turn {i}"]) == 0
    erase = _sqlite_archive.SQLiteArchive.erase

    async def ctrl_c_while_erasing(self: Any, *args: Any, **kwargs: Any) -> Any:
        os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C sends; main()'s handler takes it
        await anyio.sleep(30)  # cancelled by it; the test's bound if it is not
        return await erase(self, *args, **kwargs)

    monkeypatch.setattr(_sqlite_archive.SQLiteArchive, "erase", ctrl_c_while_erasing)
    capsys.readouterr()
    words, options = command
    assert main([*words, cfg, "--tenant", "acme", *options]) == 130
    err = capsys.readouterr().err
    assert err.endswith(
        f"agentium {name}: an erasure it had begun stays pending (its scope refuses writes) until "
        f"agentium erase --resume completes it; agentium erase --status shows it\n"
        f"agentium {name}: interrupted\n"
    ), err
    monkeypatch.setattr(_sqlite_archive.SQLiteArchive, "erase", erase)
    assert main([*turn, "refused"]) == 2  # what the message says: the scope is fenced
    assert "is being erased" in capsys.readouterr().err
    assert main(["erase", cfg, "--tenant", "acme", "--resume"]) == 0
    assert main([*turn, "after the resume"]) == 0


@pytest.mark.parametrize("as_json", [False, True])
def test_ctrl_c_after_the_turn_committed_still_reports_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, as_json: bool
) -> None:
    """Ctrl-C while ``agentium run`` waited for the summary update, the turn committed already: it
    printed only ``interrupted`` (with ``--json`` no document either), so whether the turn was
    committed was not said. The RunResult is reported as for any run, then ``interrupted``."""
    import json

    from agentium_harness._cli import main
    from agentium_harness._engine.closing import HarnessResources

    cfg = str(_erase_config(tmp_path))
    turn = ["run", cfg, "--tenant", "acme", "--user", "ana", "--session", "s1"]

    async def ctrl_c_while_settling(self: Any, *args: Any, **kwargs: Any) -> Any:
        os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C sends; main()'s handler takes it
        await anyio.sleep(30)  # cancelled by it; the test's bound if it is not

    monkeypatch.setattr(HarnessResources, "settle_summary", ctrl_c_while_settling)
    assert main([*turn, *(["--json"] if as_json else []), "hello"]) == 130
    out, err = capsys.readouterr()
    assert err.endswith("agentium run: interrupted\n"), err
    if as_json:
        said = json.loads(out)
        assert said["status"] == "completed" and said["committed"] is True, out
    else:
        assert out == "noted\n", out
        assert "run completed" in err, err
    monkeypatch.undo()
    assert main(["session", "inspect", cfg, "--tenant", "acme", "--user", "ana", "--session", "s1"]) == 0
    assert "resident groups 1 [0]" in capsys.readouterr().out  # the turn reported committed is there


def test_ctrl_c_after_the_commit_but_before_run_returned_says_the_turn_may_be_committed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while the groups a turn archived are indexed for recall (after its commit): ``run`` gets
    no RunResult (the cancellation reaches it), and said only ``interrupted``, as if nothing had
    been committed, while the turn was. It says the commit is not known and where to look."""
    from agentium_harness._cli import main
    from agentium_harness.adapters.sqlite_recall import SQLiteRecallStore

    cfg = str(_erase_config(tmp_path))
    who = ["--tenant", "acme", "--user", "ana", "--session", "s1"]
    assert main(["run", cfg, *who, "first"]) == 0  # the next turn archives this one's group (max_groups = 1)
    index_groups = SQLiteRecallStore.index_groups

    async def ctrl_c_while_indexing(self: Any, *args: Any, **kwargs: Any) -> Any:
        os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C sends; main()'s handler takes it
        await anyio.sleep(30)  # cancelled by it; the test's bound if it is not
        return await index_groups(self, *args, **kwargs)

    monkeypatch.setattr(SQLiteRecallStore, "index_groups", ctrl_c_while_indexing)
    capsys.readouterr()
    assert main(["run", cfg, *who, "second"]) == 130
    err = capsys.readouterr().err
    assert err == (
        "agentium run: whether the turn was committed is not known: agentium session inspect shows it\n"
        "agentium run: interrupted\n"
    ), err
    monkeypatch.undo()
    assert main(["session", "inspect", cfg, *who]) == 0
    assert "resident groups 1 [1]" in capsys.readouterr().out  # it was: the second turn's group
