"""The peer benchmark still runs end to end on tiny sizes (timings are not asserted).

Nothing is installed from here: the script runs with ``--no-install``. The
peer part runs with the peers importable in this interpreter or in a peer
venv made by ``benchmarks/peers.py``; it needs at least the OpenAI Agents SDK,
which the README's test command installs, and fails without it (never skips).
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("agentium_harness.adapters.sqlite", reason="the benchmark needs the SQLite adapters")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "peers.py"


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_peers", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


peers = _load_script()


def _run(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--no-install", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _has(pattern: str, out: str) -> bool:
    return re.search(pattern, out, re.M) is not None


def _row(system: str, size: str, commits: str = r"\d+\.\d\d") -> str:
    # | system | prior msgs | median | p10 | p90 | turns | commits/turn | writes/turn | KB/turn | peak RSS |
    numbers = r" \| \d+\.\d+" * 3 + rf" \| \d+ \| {commits}" + r" \| \d+\.\d" * 3 + r" \|$"
    return rf"^\| {re.escape(system)} \| {size}{numbers}"


def _section(out: str, shape: str) -> str:
    """The part of the output about one shape of history."""
    found = re.search(rf"^## history {shape} .*?(?=^## history |^targets)", out, re.M | re.S)
    assert found, out
    return found.group(0)


def _assert_disk_limit_uses_agentiums_commit_count(whole: str) -> None:
    out = _section(whole, "growing")
    # N is whatever Agentium's turn commits at the largest size (2 before the fast path, 1 with it).
    found = re.search(
        r"^disk limit: (\d+) fsynced commits per turn \(Agentium's (\d+\.\d\d) commits per turn", out, re.M
    )
    assert found, out
    n, counted = int(found.group(1)), float(found.group(2))
    assert n >= 1 and n == max(1, round(counted)), out
    # The disk worker's own count confirms it did N commits per timed turn.
    assert _has(_row(f"disk limit ({n} commits)", "-", rf"{n}\.00"), out), out


def _assert_agentium_and_disk(out: str) -> None:
    for shape in ("growing", "held"):
        section = _section(out, shape)
        for size in ("10", "100"):
            # Held: the restore after each turn writes too, but only the turn's own commit counts.
            assert _has(_row("agentium", size, "1.00" if shape == "held" else r"\d+\.\d\d"), section), out
        assert _has(r"^  Agentium median / one durable commit: 10: \d+\.\d\d   100: \d+\.\d\d$", section), out
    assert _has(r"^  agentium \(agentium-harness \S+; current interpreter\): runtime\.run", out), out
    _assert_disk_limit_uses_agentiums_commit_count(out)
    for target in (
        r"Agentium / one durable commit \(worst size\) <= 4",
        r"Agentium writes per turn \(worst size\) <= 8",
    ):
        verdict = r"\d+(\.\d+)? (PASS|MISS)"
        assert _has(rf"^  {target}: growing {verdict}   held {verdict}$", out), out
    assert "every connection checked after warm-up: journal_mode=wal, synchronous=FULL" in out, out


def test_requirements_name_every_peer_distribution() -> None:
    for peer in peers.PEERS.values():
        lines = peers.peer_requirements(peer)
        assert len(lines) == len(peer.distributions)
        assert all("==" in line for line in lines), lines  # pinned, so reruns measure the same code


def test_without_peers_it_measures_agentium_and_the_disk_and_says_peers_are_missing(tmp_path: Path) -> None:
    venvs = tmp_path / "venvs"
    out = _run("--peer-env", "venv", "--venv-dir", str(venvs))
    for name in ("langgraph", "openai-agents"):
        assert _has(rf"^PEER NOT INSTALLED: {name}: no peer venv at .*--no-install; skipped$", out), out
        assert f"| {name} |" not in out, out
    _assert_agentium_and_disk(out)
    for shape in ("growing", "held"):
        assert _has(r"^  agentium\s+100/10: \d+\.\d+$", _section(out, shape)), out
    assert not venvs.exists(), "the benchmark created a venv despite --no-install"


@pytest.mark.parametrize("sizes", [["3"], ["0"], ["100", "101"]])
def test_odd_or_tiny_sizes_are_refused_before_anything_runs(sizes: list[str], tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--sizes", *sizes, "--no-install", "--venv-dir", str(tmp_path / "v")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "--sizes must be even numbers >= 2" in result.stderr
    assert "seeded" not in result.stdout and not (tmp_path / "v").exists()


@pytest.fixture(scope="module")
def available_peers() -> list[str]:
    found = []
    for name, peer in peers.PEERS.items():
        env = peers.resolve_env(peer, "auto", False, peers.DEFAULT_VENVS)
        if not isinstance(env, str):
            found.append(name)
    return found


def test_with_peers_it_prints_their_rows_ratios_and_includes(available_peers: list[str]) -> None:
    # The OpenAI Agents SDK comes with the openai-agents integration's test extra, which the README's
    # test command installs: without a peer this fails (never skips), as the backend tests do.
    assert "openai-agents" in available_peers, (
        "the OpenAI Agents SDK (openai-agents) is not importable here and no venv under benchmarks/.venvs: "
        "install the integration's test extra (the README's test command does)"
    )
    # One size keeps this under ~15 s: every peer process pays a 1.5-3 s import. Growth over two
    # sizes goes through the same code as Agentium's, checked in the test without peers.
    out = _run("--sizes", "100")
    _assert_disk_limit_uses_agentiums_commit_count(out)
    assert "every connection checked after warm-up: journal_mode=wal, synchronous=FULL" in out, out
    held_commits = {"agentium": "1.00", "openai-agents": "1.00", "langgraph": r"\d+\.\d\d"}
    for shape in ("growing", "held"):
        section = _section(out, shape)
        assert _has(_row("agentium", "100"), section), out
        for name in available_peers:
            commits = held_commits[name] if shape == "held" else r"\d+\.\d\d"
            assert _has(_row(name, "100", commits), section), out
            assert _has(rf"^  vs {name}:\n    100: \d+\.\d+ \(.* \d+\.\dx faster\)$", section), out
    for name in available_peers:
        assert f"PEER NOT INSTALLED: {name}" not in out, out
        assert _has(rf"^  {re.escape(name)} \(.*\): \S", out), out  # what its turn includes
    verdict = r"\d+(\.\d+)? (PASS|MISS)"
    if "openai-agents" in available_peers:
        target = r"Agentium / openai-agents at 100 <= 1"
        assert _has(rf"^  {target}: growing {verdict}   held {verdict}$", out), out
