"""Build a runtime from a config file through the plugin registry (D6)."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import anyio

from .._engine.bounded import ABANDON_GRACE_S
from .._engine.build import create_harness_runtime
from .._engine.lifecycle import close_owned
from .._engine.recall_policy import current_session_recall_policy
from .._engine.runtime import HarnessRuntime
from .._engine.tools import ToolRegistry
from .._errors import ConfigError, ConfigIssue
from .._observe.spans import unattributed
from .._plugins.deadline import call_with_deadline
from .._plugins.registry import PluginRegistry
from .._plugins.spec import BUILDING, BuildContext
from .._ports import PORT_KINDS
from .._text import error_text
from .load import SECTION_KINDS, ResolvedComponent, ResolvedConfig, load_config
from .source import hide_env_text

__all__ = [
    "build_component",
    "build_runtime",
    "close_built",
    "hide_config_env",
    "hide_configs_env",
    "load_runtime",
]


def build_component(component: ResolvedComponent, resolved: ResolvedConfig) -> Any:
    """Build one configured adapter, its factory bounded by the registry's ``hook_timeout_s``.

    A factory must do no I/O, but one that blocks forever used to hang the
    host (and every ``agentium`` command) here: past the bound it is abandoned
    in its daemon thread and :class:`~agentium_harness._plugins.deadline.HookTimeoutError`
    (a :class:`~agentium_harness._errors.PluginError`) names the plugin. An
    adapter it returns late is never used.
    """
    build = partial(component.spec.build, component.options, base_dir=resolved.base_dir)
    what = f"the factory of {component.kind} adapter {component.plugin!r} (plugin {component.distribution})"
    # Building is no runtime's operation (the runtime does not exist yet), whatever block it is done in.
    with unattributed():
        return call_with_deadline(build, resolved.registry.hook_timeout_s, what)


def build_runtime(resolved: ResolvedConfig, *, tools: ToolRegistry | None = None) -> HarnessRuntime:
    """Create every configured adapter and the runtime over them.

    Adapters built here are owned by the runtime (closed by ``aclose``). Each
    goes to ``create_harness_runtime`` under its kind's factory argument (from
    :data:`~agentium_harness._ports.PORT_KINDS`). Building does no I/O: adapter
    factories must defer connections to first use. A factory that raises, or
    does not return within the registry's ``hook_timeout_s`` (:func:`build_component`), is
    reported as a :class:`ConfigError` at the section's path, and the adapters
    already built are closed (bounded by ``close_timeout_s``), as they are when
    the runtime itself is refused. ``tools`` is the
    host's tool registry (a config file never names code, so tools come from
    the host).
    """
    built: dict[str, Any] = {}
    issues: list[ConfigIssue] = []
    close_s = resolved.config.runtime.limits.close_timeout_s
    # An adapter that builds another plugin's (the recorded provider) builds it from this registry.
    token = BUILDING.set(BuildContext(resolved.registry, resolved.base_dir))
    try:
        for section, component in resolved.components().items():
            try:
                # Options from load_config already hold resolved paths; base_dir
                # also covers a ResolvedConfig a host assembled itself.
                adapter = build_component(component, resolved)
            except Exception as exc:  # a plugin factory's failure is a config problem for the user
                # error_text: the exception is the plugin's; its __str__ may raise (a traceback
                # instead of this error) or hold a lone surrogate (a message that cannot be printed).
                # Its message may repeat its options: a value from the environment is not shown.
                why = hide_env_text(error_text(exc, named=False), _raw_options(resolved, section))
                issues.append(
                    ConfigIssue(f"$.{section}", f"plugin {component.plugin!r} failed to build: {why}")
                )
                continue
            built[PORT_KINDS[component.kind].factory_arg] = adapter
    finally:
        BUILDING.reset(token)
    if issues:
        # What was built before the failure is closed, not leaked (its problems are listed too).
        issues.extend(ConfigIssue("$", problem) for problem in close_built(list(built.values()), close_s))
        raise ConfigError(issues, resolved.source)
    runtime_cfg = resolved.config.runtime
    recall_cfg = resolved.config.recall
    recall_args: dict[str, Any] = {}
    if recall_cfg is not None and "recall" in built:
        registry = resolved.registry
        recall_args = {
            "recall_limits": recall_cfg.budget,
            "recall_policy": current_session_recall_policy(
                strict=recall_cfg.policy == "current_session_strict",
                on_partial=recall_cfg.on_partial,  # type: ignore[arg-type]  # validated by the config
                on_failed=recall_cfg.on_failed,  # type: ignore[arg-type]
                on_no_evidence=recall_cfg.on_no_evidence,  # type: ignore[arg-type]
                query=registry.recall_strategy("query", recall_cfg.query).function,
                rank=registry.recall_strategy("ranking", recall_cfg.ranking).function,
            ),
        }
    embedder_cfg = resolved.config.embedder
    if embedder_cfg is not None and "embedder" in built:
        recall_args["embedding_limits"] = embedder_cfg.budget
    summarizer_cfg = resolved.config.summarizer
    if summarizer_cfg is not None and "summarizer" in built:
        recall_args["summary_limits"] = summarizer_cfg.budget
    verifier_cfg = resolved.config.verifier
    if verifier_cfg is not None and "verifier" in built:
        recall_args["completion_policy"] = verifier_cfg.policy
        recall_args["evidence_limits"] = verifier_cfg.budget
        recall_args["verify_timeout_s"] = verifier_cfg.timeout_s
    if resolved.config.retention is not None:
        recall_args["retention"] = resolved.config.retention
    try:
        return create_harness_runtime(
            **built,
            **recall_args,
            limits=runtime_cfg.limits,
            instructions=runtime_cfg.instructions,
            tools=tools,
            hooks=resolved.registry,
            owned=list(built.values()),
        )
    except BaseException as exc:
        for problem in close_built(list(built.values()), close_s):
            exc.add_note(problem)
        raise


def _raw_options(resolved: ResolvedConfig, section: str) -> list[Any]:
    """The options of ``section`` as the file wrote them: its own table and its plugin's shared one."""
    config = resolved.config
    written = config.component(section)
    if written is None:
        return []
    return [written.options, config.plugins.get(written.plugin)]


def hide_config_env(text: str, resolved: ResolvedConfig) -> str:
    """``text`` with every value a ``${VAR}`` reference put in an adapter's options hidden.

    For an adapter's own error text (a health check's, an operation's) that a command shows: it
    may repeat any of the options the adapter was given (a SQLite path, a DSN), in any section
    or ``[plugins.<name>]`` table, and a value from the environment may be a secret.
    """
    return hide_env_text(text, _options(resolved))


def hide_configs_env(text: str, resolved: Sequence[ResolvedConfig]) -> str:
    """:func:`hide_config_env` for the values of several configs at once (``agentium eval --compare``).

    One pass over the original text: hiding one config's values first could cut another's longer
    value (``/srv/evals`` inside ``/srv/evals-v2/b.db``) so it is no longer found, leaving its rest shown.
    """
    return hide_env_text(text, [_options(each) for each in resolved])


def _options(resolved: ResolvedConfig) -> list[Any]:
    """The options of every adapter section and ``[plugins.<name>]`` table of ``resolved``."""
    config = resolved.config
    written = [config.component(section) for section in SECTION_KINDS]
    return [[c.options for c in written if c is not None], config.plugins]


def close_built(adapters: list[Any], timeout_s: float) -> list[str]:
    """Close adapters a failed build made, each bounded by ``timeout_s``; the problems, if any.

    ``build_runtime`` is synchronous (it may run inside a host's event loop),
    so the closes run on an event loop of their own in a daemon thread, joined
    for at most about ``timeout_s``. The adapters have done no I/O yet (factories
    must defer it), so closing them away from the host's loop is safe.
    """
    closable = [a for a in adapters if callable(getattr(a, "aclose", None))]
    if not closable:
        return []
    problems: list[str] = []

    def closing() -> None:
        try:
            # Part of the build, no runtime's operation: a new thread's context has no state, and the
            # adapters' closes took the global providers for their spans.
            with unattributed():
                outcome = anyio.run(close_owned, closable, timeout_s)
        except BaseException as exc:  # reported: nothing may escape a daemon thread
            problems.append(f"closing the adapters built before the failure failed: {exc!r}")
            return
        problems.extend(
            f"after the failed build, {problem}" for _adapter, problem in outcome if problem is not None
        )

    worker = threading.Thread(target=closing, name="agentium-build-cleanup", daemon=True)
    worker.start()
    worker.join(timeout_s + ABANDON_GRACE_S + 1.0)
    if worker.is_alive():
        problems.append(f"closing the adapters built before the failure did not finish within {timeout_s}s")
    return list(problems)


def load_runtime(
    path: str | os.PathLike[str] | None = None,
    *,
    registry: PluginRegistry | None = None,
    environ: Mapping[str, str] | None = None,
    tools: ToolRegistry | None = None,
) -> HarnessRuntime:
    """Parse, validate and resolve ``path``, then build the runtime it describes.

    Without ``path``, the file ``AGENTIUM_CONFIG`` names is read, else ``agentium.toml`` in the
    working directory (as :func:`~agentium_harness._config.load_config` does).

    ``environ`` feeds ``${VAR}`` substitution only; the operator's plugin
    lists in the process environment always apply (see ``docs/config.md``).
    """
    return build_runtime(load_config(path, registry, environ=environ), tools=tools)
