"""pytest plugin loaded into the SDK's own session tests (``-p sdk_plugin``; see ``sdk_suite.py``).

It marks the tests listed as not applicable (skipped with their reason, and
counted apart from real skips), refuses a list entry that names no collected
test (so the list cannot go stale), and writes one record per test to the
JSON file named by ``AGENTIUM_SDK_REPORT``: its node id and its outcome,
``passed``, ``failed``, ``skipped`` or ``not_applicable``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

_NA_PREFIX = "not applicable to AgentiumSession: "
_listed: dict[str, str] = json.loads(os.environ.get("AGENTIUM_SDK_NOT_APPLICABLE", "{}"))
_results: dict[str, str] = {}
_unmatched: list[str] = []


def _function_id(nodeid: str) -> str:
    """``file::function`` of a node id (its parametrization left out)."""
    return nodeid.split("[", 1)[0]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    seen = set()
    for item in items:
        key = _function_id(item.nodeid)
        if key in _listed:
            seen.add(key)
            item.add_marker(pytest.mark.skip(reason=_NA_PREFIX + _listed[key]))
    _unmatched.extend(sorted(set(_listed) - seen))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    outcome = report.outcome
    if report.when == "call" or (report.when == "setup" and outcome != "passed"):
        if outcome == "skipped":
            reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else ""
            outcome = "not_applicable" if _NA_PREFIX in reason else "skipped"
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.skipped else "xpassed"
        _results.setdefault(report.nodeid, outcome)
    elif report.when == "teardown" and outcome == "failed":
        _results[report.nodeid] = "failed"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = os.environ.get("AGENTIUM_SDK_REPORT")
    if not path:
        return
    data: dict[str, Any] = {
        "tests": [{"id": k, "outcome": v} for k, v in sorted(_results.items())],
        "unmatched_not_applicable": _unmatched,
        "exitstatus": int(exitstatus),
    }
    Path(path).write_text(json.dumps(data, indent=1), "utf-8")
