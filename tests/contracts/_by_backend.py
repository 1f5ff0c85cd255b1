"""Run a pytester directory's tests in two processes at once, one per anyio backend; read back each result.

The broken-adapter checks run a whole contract suite against thirty-odd
broken adapters on both anyio backends. In one process (``inline_run``)
they took about two and a half minutes of CI's twenty; the main pytest
process only waits meanwhile, so two processes, one running the
``asyncio`` cases and one the rest (``trio`` and any test without a
backend), use CI's two cores and halve it. Every test still runs, exactly
once: the two ``-k`` expressions split the selection in two. A caller may
run the ``trio`` cases of its expected failures only (``on_trio``).
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from pathlib import Path

import attrs
import pytest

__all__ = ["Outcome", "run_by_backend"]

#: Generous: each half takes well under a minute on a loaded two-core machine.
_TIMEOUT_S = 900


@attrs.frozen
class Outcome:
    """One test's result: its node id as ``inline_run`` would name it, and whether it failed (any phase)."""

    nodeid: str
    failed: bool


def _outcomes(xml: Path) -> list[Outcome]:
    found: list[Outcome] = []
    for case in ET.parse(xml).getroot().iter("testcase"):
        module, _, cls = case.attrib["classname"].rpartition(".")
        nodeid = f"{module.replace('.', '/')}.py::{cls}::{case.attrib['name']}"
        # A setup or teardown error is an <error>, a failed call a <failure>: both are a failure.
        failed = any(child.tag in ("failure", "error") for child in case)
        found.append(Outcome(nodeid, failed))
    return found


def run_by_backend(
    pytester: pytest.Pytester, keyword: str | None = None, *, on_trio: Iterable[str] | None = None
) -> list[Outcome]:
    """Each test of ``pytester``'s directory (those ``-k keyword`` selects), run in two processes at once.

    With ``on_trio``, the ``trio`` cases run only for tests whose names
    contain one of those names (the expected failures): every test still runs
    on ``asyncio``, which is where an unexpected failure shows, and each
    expected failure is still shown on both backends. The full ``trio`` half
    doubled these suites' CPU time for nothing the ``asyncio`` half does not
    already show.

    Raises ``AssertionError`` with the process's output when a half did not
    end with its tests run (pytest's exit codes 0, 1, or 5 for a half that
    selected none).
    """
    selected = f"({keyword}) and " if keyword else ""
    rest = f"{selected}not asyncio"
    if on_trio is not None:
        names = sorted(set(on_trio))
        rest += f" and (not trio or {' or '.join(names)})" if names else " and not trio"
    halves = {"asyncio": f"{selected}asyncio", "rest": rest}
    running: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
    try:
        for name, expression in halves.items():
            xml = pytester.path / f"results-{name}.xml"
            command = [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                "no:asyncio",  # as in the main run (pyproject.toml's addopts): the suites use anyio
                f"--junitxml={xml}",
                "-k",
                expression,
            ]
            process = subprocess.Popen(
                command, cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
            running[name] = (process, xml)
        outcomes: list[Outcome] = []
        for name, (process, xml) in running.items():
            output, _ = process.communicate(timeout=_TIMEOUT_S)
            if process.returncode not in (0, 1, 5):
                tail = output.decode("utf-8", "replace")[-4000:]
                raise AssertionError(f"the {name} half exited {process.returncode}:\n{tail}")
            if process.returncode != 5:
                outcomes.extend(_outcomes(xml))
        return outcomes
    finally:
        for process, _ in running.values():
            if process.poll() is None:
                process.kill()
                process.wait()
