"""Run the OpenAI Agents SDK's own session tests against ``AgentiumSession``.

The tests ship in the SDK's source distribution; nothing of the SDK is kept
in this repository. :func:`fetch_sdist` gets the pinned sdist with
``pip download --no-binary :all: --no-deps openai-agents==<PINNED>`` (or
takes the file named by ``AGENTIUM_OPENAI_AGENTS_SDIST``), :func:`prepare`
extracts the three test files with their conftest, helpers and pytest
configuration into a temporary folder and changes one thing in them: right
after the line that imports ``SQLiteSession`` (``AsyncSQLiteSession``), the
name is rebound to the Agentium class of ``sdk_sessions.py``. :func:`run`
runs pytest on the copy in a subprocess, with a plugin (``sdk_plugin.py``)
that marks the tests listed in ``sdk_not_applicable.txt`` as not applicable
and writes every outcome to a JSON report.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from collections import Counter
from pathlib import Path
from typing import Any

import agents

HERE = Path(__file__).resolve().parent
#: The SDK release the integration implements; its tests are the ones run.
PINNED = "0.24.0"
#: The test files run, with the modules they import (``tests/conftest.py`` and its helpers).
TEST_FILES = (
    "tests/memory/test_session.py",
    "tests/memory/test_session_limit.py",
    "tests/extensions/memory/test_async_sqlite_session.py",
)
SUPPORT_FILES = ("pyproject.toml", "tests/__init__.py", "tests/conftest.py", "tests/testing_processor.py")
SUPPORT_FILES += ("tests/test_responses.py",)
#: Runs of ``pip download`` before the sdist is given up on (see :func:`fetch_sdist`).
FETCH_ATTEMPTS = 3
#: Lines for pytest's terminal summary (the suite's counts), printed even when the test passes.
SUMMARY: list[str] = []
#: name in the SDK's test file -> the Agentium class bound to it instead.
REBIND = {
    "SQLiteSession": "AgentiumSQLiteSession",
    "AsyncSQLiteSession": "AgentiumAsyncSQLiteSession",
}


def fetch_sdist(into: Path) -> Path:
    """The pinned sdist: ``AGENTIUM_OPENAI_AGENTS_SDIST`` if set, else downloaded by pip."""
    given = os.environ.get("AGENTIUM_OPENAI_AGENTS_SDIST")
    if given:
        return Path(given)
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:", "--no-deps"]
    # More and longer tries per request than pip's defaults: the index is a network service.
    command += ["--retries", "10", "--timeout", "60", "--dest", str(into), f"openai-agents=={PINNED}"]
    for attempt in range(1, FETCH_ATTEMPTS + 1):
        # pip retries a failed connection, not a download cut off midway: the whole download is
        # run again; the last run's failure (check=True) fails the test.
        if subprocess.run(command, check=attempt == FETCH_ATTEMPTS, timeout=300).returncode == 0:
            break
    (sdist,) = into.glob("openai_agents-*.tar.gz")
    return sdist


def rebind(text: str, path: str) -> str:
    """``text`` with the session class rebound to Agentium's after the line importing it (once per name)."""
    out = text
    for name, replacement in REBIND.items():
        pattern = re.compile(rf"^from agents(?:\.[\w.]+)? import [^\n]*\b{name}\b[^\n]*$", re.M)
        found = pattern.findall(out)
        if not found:
            continue
        assert len(found) == 1, f"{path}: {name} is imported {len(found)} times; the rebinding is ambiguous"
        line = f"from sdk_sessions import {replacement} as {name}"
        out = pattern.sub(lambda m, line=line: f"{m.group(0)}\n{line}", out)
    assert out != text, f"{path} imports no session class to rebind"
    return out


def prepare(sdist: Path, into: Path) -> Path:
    """Extract the tests and support files from ``sdist`` under ``into``; rebind the class under test."""
    with tarfile.open(sdist) as tar:
        top = tar.getnames()[0].split("/")[0]
        for name in (*SUPPORT_FILES, *TEST_FILES):
            member = tar.getmember(f"{top}/{name}")
            source = tar.extractfile(member)
            assert source is not None, name
            target = into / name
            target.parent.mkdir(parents=True, exist_ok=True)
            text = source.read().decode("utf-8")
            target.write_text(rebind(text, name) if name in TEST_FILES else text, "utf-8")
    return into


def not_applicable() -> dict[str, str]:
    """``{file::function: reason}`` from ``sdk_not_applicable.txt``."""
    entries: dict[str, str] = {}
    for line in (HERE / "sdk_not_applicable.txt").read_text("utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            test, _, reason = line.partition("|")
            entries[test.strip()] = reason.strip()
    return entries


def run(workdir: Path, timeout_s: float = 900) -> dict[str, Any]:
    """Run the prepared suite in a subprocess; the plugin's report, with the outcome counts."""
    report = workdir / "agentium-report.json"
    env = dict(os.environ)
    # sdk_sessions and sdk_plugin import from here; the copy's own folder comes first (its tests package).
    env["PYTHONPATH"] = os.pathsep.join([str(workdir), str(HERE), env.get("PYTHONPATH", "")])
    env["AGENTIUM_SDK_REPORT"] = str(report)
    env["AGENTIUM_SDK_NOT_APPLICABLE"] = json.dumps(not_applicable())
    env.pop("PYTEST_ADDOPTS", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "sdk_plugin",
            "--rootdir",
            str(workdir),
            "-c",
            str(workdir / "pyproject.toml"),
            *TEST_FILES,
        ],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert report.is_file(), f"the SDK suite wrote no report:\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    data: dict[str, Any] = json.loads(report.read_text("utf-8"))
    data["counts"] = dict(Counter(t["outcome"] for t in data["tests"]))
    data["returncode"] = proc.returncode
    data["output"] = proc.stdout
    data["sdk_version"] = agents.__version__ if hasattr(agents, "__version__") else "?"
    return data


def main() -> int:
    """Fetch, prepare and run the suite; print the counts (``python tests/sdk_suite.py``)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "dl").mkdir()
        workdir = prepare(fetch_sdist(root / "dl"), root / "suite")
        data = run(workdir)
        shutil.rmtree(root / "dl", ignore_errors=True)
    print(data["output"][-4000:])
    print("counts:", data["counts"])
    return 0 if not data["counts"].get("failed") else 1


if __name__ == "__main__":
    raise SystemExit(main())
