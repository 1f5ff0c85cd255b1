"""The root's descriptor: held from the build to ``aclose`` (or the runtime's close), one per verifier.

The verifier holds the root open so the directory cannot be deleted and its
inode number given to a new directory at the same path while it lives (see
``test_fs_verifier_root.py``). These tests count the process's descriptors
that name the root (``/proc/self/fd``, Linux): one per verifier, none after
it is closed, by the host or by the runtime that built it from config.
"""

from __future__ import annotations

import fcntl
import gc
import os
import sys
import threading
from pathlib import Path

import anyio
import pytest
from fs_verifier_helpers import ARTIFACT_BYTES, CLAIM, context, sha256, verifier_for, write

import agentium_verifier_fs.plugin
from agentium_harness import load_runtime
from agentium_harness.plugin_api import AgentiumError, PluginRegistry, Verdict
from agentium_verifier_fs import FsVerifier, VerifierClosedError
from agentium_verifier_fs._confined import PinClosed, RootPin, root_descriptor

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        not sys.platform.startswith("linux"), reason="counts descriptors through /proc/self/fd (Linux)"
    ),
]


def _held(directory: Path) -> list[int]:
    """The descriptors of this process open on ``directory``."""
    target = os.path.realpath(directory)
    held = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") == target:
                held.append(int(name))
        except OSError:  # the listing's own descriptor, closed by now
            continue
    return held


def _workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    write(root / "report.txt", ARTIFACT_BYTES)
    return root


async def test_the_verifier_holds_the_root_open_until_aclose(tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    assert _held(root) == []
    verifier = verifier_for(root, "report.txt")
    (pinned,) = _held(root)
    # Not inherited by a program a child process runs.
    assert fcntl.fcntl(pinned, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
    assert (await verifier.verify(CLAIM, context())).verdict is Verdict.PASS
    assert _held(root) == [pinned]  # a verification closes the descriptors it opened itself

    await verifier.aclose()
    assert _held(root) == []
    await verifier.aclose()  # idempotent: nothing else is closed
    assert _held(root) == []


async def test_each_verifier_holds_one_descriptor(tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    verifiers = [verifier_for(root, "report.txt") for _ in range(3)]
    assert len(_held(root)) == 3
    for verifier in verifiers:
        await verifier.aclose()
    assert _held(root) == []


async def test_a_closed_verifier_refuses_to_verify(tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    verifier = verifier_for(root, "report.txt")
    await verifier.aclose()
    with pytest.raises(VerifierClosedError, match="closed") as raised:
        await verifier.verify(CLAIM, context())
    assert isinstance(raised.value, AgentiumError)
    assert _held(root) == []  # refused before opening anything


def test_a_verifier_dropped_unclosed_releases_the_root_when_collected(tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    verifier = verifier_for(root, "report.txt")
    assert len(_held(root)) == 1
    del verifier
    gc.collect()
    assert _held(root) == []


async def test_the_runtime_closes_the_verifier_it_built_from_config(tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    config = tmp_path / "agentium.toml"
    config.write_text(
        f"""
[provider]
plugin = "scripted"
[provider.options]
responses = ["Done."]
[archive]
plugin = "memory"
[session_store]
plugin = "memory"

[verifier]
plugin = "fs"

[verifier.options]
root = "workspace"

[[verifier.options.artifacts]]
path = "report.txt"
sha256 = "{sha256(ARTIFACT_BYTES)}"
""",
        encoding="utf-8",
    )
    registry = PluginRegistry.load(
        autoload=False, extra_plugins=[("agentium-verifier-fs", agentium_verifier_fs.plugin)]
    )
    runtime = load_runtime(config, registry=registry)
    verifier = runtime.verifier
    assert isinstance(verifier, FsVerifier)
    assert len(_held(root)) == 1
    await runtime.aclose()
    assert _held(root) == []
    with pytest.raises(VerifierClosedError):
        await verifier.verify(CLAIM, context())


def test_a_verification_that_reaches_the_root_check_after_aclose_reads_nothing(tmp_path: Path) -> None:
    # aclose() between verify's own check and its worker's root check: the worker compares with
    # the pin under the pin's lock, so it sees the pin closed, never a reused descriptor number.
    root = _workspace(tmp_path)
    pin = RootPin(str(root))
    pin.close()
    with pytest.raises(PinClosed), root_descriptor(str(root), pin):
        pytest.fail("the root was opened for reading after the pin was closed")
    assert _held(root) == []


async def test_aclose_does_not_wait_for_a_verification_hung_on_the_pinned_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker hung in a file-system call (an NFS root whose server stopped answering) never holds aclose.

    ``aclose`` runs on the event loop's thread: a lock it takes must never be
    held across a file-system call in the worker, or the whole loop stops
    with it (``runtime.aclose()``'s own bound cannot interrupt a blocked thread).
    Here ``fstat`` of the pinned descriptor hangs in the worker until released.
    """
    root = _workspace(tmp_path)
    verifier = verifier_for(root, "report.txt", read_timeout_s=0.3)
    (pinned,) = _held(root)
    release = threading.Event()
    real_fstat = os.fstat

    def hung_fstat(fd: int) -> os.stat_result:
        if fd == pinned and threading.current_thread() is not threading.main_thread():
            release.wait(30)
        return real_fstat(fd)

    monkeypatch.setattr(os, "fstat", hung_fstat)
    timer = threading.Timer(10, release.set)  # unblocks the old code's event loop, failing the test
    timer.start()
    try:
        with anyio.fail_after(20):
            result = await verifier.verify(CLAIM, context())
        assert result.verdict in (Verdict.PASS, Verdict.UNKNOWN)
        await verifier.aclose()
        assert not release.is_set(), "aclose waited for the hung worker (the event loop was blocked)"
    finally:
        release.set()
        timer.cancel()
    assert _held(root) == []
