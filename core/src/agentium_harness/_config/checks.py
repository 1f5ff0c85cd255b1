"""Phase (b)'s checks across sections: capability combinations, recall strategies, a wrapped provider.

What the runtime would refuse at construction, reported by :func:`~agentium_harness._config.load_config`
with every other problem, each at the key to change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._errors import ConfigError, ConfigIssue, PluginNotFoundError
from .._plugins.registry import PluginRegistry, RegisteredAdapter

if TYPE_CHECKING:
    from .load import HarnessConfig, ResolvedComponent

__all__ = ["combination_issues", "raw_strategy_issues", "strategy_issues", "wrapped_provider_issues"]


def combination_issues(adapters: Mapping[str, RegisteredAdapter], sections: set[str]) -> list[ConfigIssue]:
    """Capability combinations the runtime would refuse at construction (R9, R10)."""
    issues: list[ConfigIssue] = []
    recall = adapters.get("recall")
    if recall is not None and "summarizer" in sections:
        if not recall.capabilities.declared().get("canonical_archive_reads", False):
            issues.append(
                ConfigIssue(
                    "$.recall.plugin",
                    f"recall store {recall.name!r} ({recall.distribution}) does not declare "
                    "canonical_archive_reads, which recall together with summaries requires: "
                    "choose a recall store that declares it, or remove [summarizer]",
                )
            )
    embedder = adapters.get("embedder")
    if embedder is not None and "recall" not in sections:
        issues.append(
            ConfigIssue(
                "$.embedder",
                f"embedder {embedder.name!r} ({embedder.distribution}) serves hybrid recall, and there is no "
                "[recall] section: add one with a recall store that declares vector_indexing and "
                "hybrid_discovery, or remove [embedder]",
            )
        )
    elif embedder is not None and recall is not None:
        declared = recall.capabilities.declared()
        missing = [f for f in ("vector_indexing", "hybrid_discovery") if not declared.get(f, False)]
        if missing:
            issues.append(
                ConfigIssue(
                    "$.embedder",
                    f"recall store {recall.name!r} ({recall.distribution}) does not declare "
                    f"{' and '.join(missing)}, which hybrid recall with [embedder] requires: choose a "
                    "recall store with vectors (the built-in 'sqlite' store has them), or remove [embedder] "
                    "for lexical recall",
                )
            )
    return issues


def strategy_issues(config: HarnessConfig, registry: PluginRegistry) -> list[ConfigIssue]:
    """``[recall] query`` and ``ranking`` must name registered strategies; the policy must be coherent."""
    recall = config.recall
    if recall is None:
        return []
    return _recall_issues({key: getattr(recall, key) for key in _RECALL_KEYS}, registry)


def raw_strategy_issues(data: Mapping[str, Any], registry: PluginRegistry) -> list[ConfigIssue]:
    """:func:`strategy_issues` on the data of a file phase (a) refused, so one report has both.

    A problem elsewhere (a bad ``[runtime]`` value) left no structured config to check, and an
    unknown strategy name came only in a second report, once the first was fixed. Only the keys
    ``[recall]`` gives as strings are checked: a key left out takes a default that is coherent and
    registered, and a value of the wrong type is phase (a)'s own issue at that key.
    """
    recall = data.get("recall")
    if not isinstance(recall, Mapping):
        return []
    return _recall_issues(
        {key: recall[key] for key in _RECALL_KEYS if isinstance(recall.get(key), str)}, registry
    )


#: The ``[recall]`` keys the strategy and policy checks read.
_RECALL_KEYS = ("query", "ranking", "policy", "on_no_evidence")


def _recall_issues(values: Mapping[str, Any], registry: PluginRegistry) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    for kind in ("query", "ranking"):
        name = values.get(kind)
        if name is None:
            continue
        try:
            registry.recall_strategy(kind, name)
        except PluginNotFoundError as exc:
            issues.append(ConfigIssue(f"$.recall.{kind}", str(exc)))
    if values.get("policy") == "current_session_strict" and values.get("on_no_evidence") == "proceed":
        issues.append(
            ConfigIssue(
                "$.recall.on_no_evidence",
                "policy current_session_strict stops on no evidence; on_no_evidence='proceed' contradicts it",
            )
        )
    return issues


def wrapped_provider_issues(
    provider: ResolvedComponent | None, registry: PluginRegistry
) -> list[ConfigIssue]:
    """The recorded provider's wrapped provider and its options, checked as the config's own are.

    Checked when the config is checked, not only when the runtime is built:
    ``agentium check`` reports an unknown wrapped provider or a bad option of
    it, where it used to pass and the first run failed.
    """
    from ..adapters.recorded import RecordedProviderConfig, wrapped_provider

    options = provider.options if provider is not None else None
    if not isinstance(options, RecordedProviderConfig) or not options.provider:
        return []  # replay mode wraps nothing; record mode without one is refused when built
    try:
        wrapped_provider(options, registry)
    except ConfigError as exc:
        return list(exc.issues)
    return []
