"""Build a runtime from a config file through the plugin registry (D6)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..config import ResolvedConfig, load_config
from ..errors import ConfigError, ConfigIssue
from ..plugins.registry import PluginRegistry
from .runtime import HarnessRuntime, RuntimeLimits, create_harness_runtime

__all__ = ["build_runtime", "load_runtime"]


def build_runtime(resolved: ResolvedConfig) -> HarnessRuntime:
    """Create every configured adapter and the runtime over them.

    Adapters built here are owned by the runtime (closed by ``aclose``).
    Building does no I/O: adapter factories must defer connections to first
    use. A factory that raises is reported as a :class:`ConfigError` at the
    section's path.
    """
    built: dict[str, Any] = {}
    issues: list[ConfigIssue] = []
    for section, component in resolved.components().items():
        try:
            built[section] = component.spec.build(component.options)
        except Exception as exc:  # a plugin factory's failure is a config problem for the user
            issues.append(ConfigIssue(f"$.{section}", f"plugin {component.plugin!r} failed to build: {exc}"))
    if issues:
        raise ConfigError(issues, resolved.source)
    runtime_cfg = resolved.config.runtime
    limits = RuntimeLimits(
        resident=runtime_cfg.resident,
        max_steps=runtime_cfg.max_steps,
        source_tokens=runtime_cfg.source_tokens,
        settle_timeout_s=runtime_cfg.settle_timeout_s,
        op_timeout_s=runtime_cfg.op_timeout_s,
    )
    return create_harness_runtime(
        provider=built["provider"],
        archive=built["archive"],
        session_store=built["session_store"],
        recall=built.get("recall"),
        summarizer=built.get("summary"),
        verifier=built.get("verifier"),
        memory=built.get("memory"),
        limits=limits,
        instructions=runtime_cfg.instructions,
        hooks=resolved.registry,
        owned=list(built.values()),
    )


def load_runtime(
    path: str | os.PathLike[str],
    *,
    registry: PluginRegistry | None = None,
    environ: Mapping[str, str] | None = None,
) -> HarnessRuntime:
    """Parse, validate and resolve ``path``, then build the runtime it describes."""
    return build_runtime(load_config(path, registry, environ=environ))
