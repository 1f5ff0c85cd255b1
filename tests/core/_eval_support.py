"""Shared helpers for the eval tests: config files, a provider that fails on marked cases, traces."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any, ClassVar

import attrs

from agentium_harness import ProviderError, Scope
from agentium_harness.adapters.providers import ExtractiveProvider
from agentium_harness.eval import CaseTrace, EvalCase, LabelInfo, parse_cases
from agentium_harness.plugin_api import (
    AdapterSpec,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    OpContext,
    PluginRegistry,
    ProviderCapabilities,
    hookimpl,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "eval"
RECALL_ON = EXAMPLES / "recall-on.toml"
RECALL_OFF = EXAMPLES / "recall-off.toml"
#: A probe containing this marker makes the flaky provider fail.
FAIL_MARKER = "FAIL-ME"


class FlakyProvider(ModelProvider):
    """Answers like the extractive provider, but raises on a request whose user text holds ``FAIL-ME``."""

    capabilities: ClassVar[ProviderCapabilities] = ProviderCapabilities(deterministic=True)

    def __init__(self, config: object = None) -> None:
        self._inner = ExtractiveProvider()

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        if any(FAIL_MARKER in m.content for m in request.turn):
            raise ProviderError("the upstream model is unavailable (503)")
        return await self._inner.complete(request, ctx)


def _flaky_hooks() -> types.SimpleNamespace:
    @hookimpl
    def agentium_register_providers(register: Any) -> None:
        register(AdapterSpec(name="flaky", adapter_class=FlakyProvider, config_class=_Empty))

    return types.SimpleNamespace(agentium_register_providers=agentium_register_providers)


@attrs.frozen
class _Empty:
    """No options."""


def flaky_registry() -> PluginRegistry:
    """A registry with the built-ins and the ``flaky`` provider."""
    return PluginRegistry.load(autoload=False, extra_plugins=[("flaky-dist", _flaky_hooks())])


def write_config(path: Path, *, provider: str = "extractive", recall: bool = True, options: str = "") -> Path:
    """A config like the examples (SQLite, two resident groups), with another provider or recall off."""
    text = f"""
[runtime.resident]
max_groups = 2

[provider]
plugin = "{provider}"
{options}

[archive]
plugin = "sqlite"
[archive.options]
path = "eval.db"

[session_store]
plugin = "sqlite"
[session_store.options]
path = "eval.db"
"""
    if recall:
        text += '\n[recall]\nplugin = "sqlite"\n[recall.options]\npath = "eval.db"\n'
    path.write_text(text, encoding="utf-8")
    return path


def write_cases(path: Path, cases: list[dict[str, Any]]) -> Path:
    """Write cases as JSONL."""
    path.write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    return path


def case(**fields: Any) -> EvalCase:
    """One case parsed from plain fields (validated like a file line)."""
    fields.setdefault("id", "c1")
    fields.setdefault("probe", "What is my locker number?")
    return parse_cases(json.dumps(fields))[0]


def trace(**fields: Any) -> CaseTrace:
    """A trace with defaults for an ordinary completed run on acme/ana/main with recall."""
    fields.setdefault("case_id", "c1")
    fields.setdefault("scope", Scope("acme", "ana", "main"))
    fields.setdefault("answer", "")
    fields.setdefault("status", "completed")
    fields.setdefault("committed", True)
    fields.setdefault("has_recall", True)
    return CaseTrace(**fields)


def label(source_id: str | None, owner: Any = None) -> LabelInfo:
    """A resolved label."""
    return LabelInfo(source_id, owner)


FACT_CASE: dict[str, Any] = {
    "id": "fact",
    "setup": [
        {"say": "My locker number is 12.", "label": "locker"},
        {"say": "Quick aside: penguins waddle."},
        {"say": "Unrelated: violins need rosin."},
    ],
    "probe": "What is my locker number?",
    "expect": {"evidence": ["locker"], "answer": ["12"], "abstain": False},
}
