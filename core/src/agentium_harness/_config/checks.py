"""Phase (b)'s checks across sections: capability combinations, recall strategies, a wrapped provider.

What the runtime would refuse at construction, reported by :func:`~agentium_harness._config.load_config`
with every other problem, each at the key to change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from .._errors import ConfigError, ConfigIssue, PluginNotFoundError
from .._plugins.registry import PluginRegistry, RegisteredAdapter

if TYPE_CHECKING:
    from .load import HarnessConfig, ResolvedComponent

__all__ = ["combination_issues", "strategy_issues", "wrapped_provider_issues"]


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
    issues: list[ConfigIssue] = []
    for field, kind in (("query", "query"), ("ranking", "ranking")):
        try:
            registry.recall_strategy(kind, getattr(recall, field))  # type: ignore[arg-type]
        except PluginNotFoundError as exc:
            issues.append(ConfigIssue(f"$.recall.{field}", str(exc)))
    if recall.policy == "current_session_strict" and recall.on_no_evidence == "proceed":
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
