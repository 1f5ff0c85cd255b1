"""docs/observability.md lists every logger and metric, and names no logger or metric that does not exist."""

from __future__ import annotations

import re
from pathlib import Path

from agentium_harness._observe.logs import LOGGERS

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "observability.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    start = DOC.index(f"## {title}\n")
    end = DOC.find("\n## ", start + 1)
    return DOC[start : end if end != -1 else None]


def _table_names(section: str) -> set[str]:
    """The first-column names of a section's tables (`name` in the first cell)."""
    return set(re.findall(r"^\| `([^`]+)` \|", section, re.M))


def _plugin_loggers() -> set[str]:
    """The loggers the plugins' and the SDK integrations' source ask for."""
    found: set[str] = set()
    for path in [*(ROOT / "plugins").glob("*/src/**/*.py"), *(ROOT / "integrations").glob("*/src/**/*.py")]:
        found.update(re.findall(r'getLogger\("(agentium[^"]*)"\)', path.read_text(encoding="utf-8")))
    return found


def _core_loggers() -> set[str]:
    """Every logger name the core's source asks for (each must be in LOGGERS)."""
    found: set[str] = set()
    for path in (ROOT / "core" / "src").rglob("*.py"):
        found.update(re.findall(r'getLogger\("(agentium[^"]*)"\)', path.read_text(encoding="utf-8")))
    return found


def test_every_logger_is_documented_and_every_documented_logger_exists() -> None:
    logging_names = _table_names(_section("Logging"))
    documented = {n for n in logging_names if n == "agentium" or n.startswith("agentium.")}
    existing = set(LOGGERS) | _plugin_loggers()
    assert _core_loggers() <= set(LOGGERS), "a core logger is missing from _observe.logs.LOGGERS"
    assert {"agentium.plugins.archive_s3", "agentium.plugins.recall_redis"} <= _plugin_loggers()
    assert {"agentium.openai_agents", "agentium.agent_framework"} <= _plugin_loggers()
    assert existing - documented == set(), "loggers missing from docs/observability.md"
    assert documented - existing == set(), "docs/observability.md names loggers that do not exist"


def test_every_metric_is_documented_and_every_documented_metric_exists() -> None:
    source = (ROOT / "core/src/agentium_harness/_observe/metrics.py").read_text(encoding="utf-8")
    created = set(re.findall(r'create_(?:histogram|counter)\(\s*"([^"]+)"', source))
    documented = _table_names(_section("Metrics"))
    assert len(created) >= 10
    assert created == documented


def test_each_core_logger_is_described_in_the_docs_as_in_the_code() -> None:
    rows = {
        m.group(1): m.group(2).replace("`", "")
        for m in re.finditer(r"^\| `(agentium[^`]*)` \| ([^|]+) \|$", _section("Logging"), re.M)
    }
    for name, text in LOGGERS.items():
        assert rows.get(name, "").strip() == text, name
