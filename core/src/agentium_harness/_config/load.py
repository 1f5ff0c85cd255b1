"""TOML config files: parse and validate, then resolve plugins by (kind, name).

Two phases, as in ``docs/config.md``:

(a) :func:`parse_config` reads TOML (stdlib :mod:`tomllib`), substitutes
    ``${VAR}`` references inside string values, and structures the result into
    :class:`HarnessConfig` with the core's cattrs converter. Every problem is
    collected — unknown keys, wrong types, missing sections, unset variables —
    each with the path to the bad key (``$.recall.budget.max_candidates``).
(b) :func:`resolve_config` looks each component up in a
    :class:`~agentium_harness._plugins.registry.PluginRegistry`, structures its
    ``options`` table into the plugin's attrs config class, and checks
    capability combinations (R9). Nothing is built and no backend is touched:
    that is the runtime's job, from the :class:`ResolvedConfig` returned here.

Config selects plugins by registered name only; it never names an import path,
so reading a config file never runs code the host did not install.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

import attrs
import cattrs

from .._codec import make_converter, shared_converter
from .._engine.limits import ResidentLimits, RuntimeLimits
from .._engine.retention import RetentionPolicy
from .._engine.runtime import DEFAULT_INSTRUCTIONS
from .._engine.verification import CompletionPolicy
from .._errors import ConfigError, ConfigIssue, PluginNotFoundError
from .._observe.spans import unattributed
from .._plugins.deadline import HookTimeoutError, call_with_deadline
from .._plugins.registry import PluginRegistry, RegisteredAdapter, operator_plugin_lists
from .._plugins.spec import AdapterSpec
from .._ports import PORT_KIND_TABLE
from .._ports.embedder import EmbeddingLimits
from .._ports.recall import RecallLimits
from .._ports.summary import SummaryLimits
from .._validators import bounded_duration, prose_text
from .._verdicts import EvidenceLimits
from .arguments import check_base_dir, check_environ, check_path, check_source, check_type
from .checks import combination_issues, raw_strategy_issues, strategy_issues, wrapped_provider_issues
from .shared import SHARED_TABLE, inherit, relocate, shared_issues
from .source import (
    CONFIG_ENV,
    DEFAULT_CONFIG_FILE,
    MAX_CONFIG_BYTES,
    MAX_NESTING,
    find_config,
    hide_env_values,
    parse_toml,
    read_source,
    substitute_env,
)
from .structure import TOML_WORDS, register_env_scalars, structure_config, structure_options

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_CONFIG_FILE",
    "DEFAULT_INSTRUCTIONS",
    "MAX_CONFIG_BYTES",
    "MAX_NESTING",
    "REQUIRED_SECTIONS",
    "SECTION_KINDS",
    "ComponentConfig",
    "HarnessConfig",
    "EmbedderConfig",
    "RecallConfig",
    "SummarizerConfig",
    "VerifierConfig",
    "ResolvedComponent",
    "ResolvedConfig",
    "RuntimeConfig",
    "load_config",
    "parse_config",
    "resolve_config",
    "substitute_env",
]

T = TypeVar("T")

#: Config section → adapter kind, derived from :data:`agentium_harness._ports.PORT_KIND_TABLE`
#: (in table order, which is the order reports list sections in).
SECTION_KINDS: Mapping[str, str] = MappingProxyType({k.section: k.name for k in PORT_KIND_TABLE})

#: Sections that must be present (the kinds every runtime needs).
REQUIRED_SECTIONS: tuple[str, ...] = tuple(k.section for k in PORT_KIND_TABLE if k.required)

# --------------------------------------------------------------------- schema


@attrs.frozen(slots=True)
class RuntimeConfig:
    """``[runtime]``: host instructions and the runtime's limits.

    In the file, the keys of :class:`~agentium_harness._engine.limits.RuntimeLimits`
    sit directly in ``[runtime]`` next to ``instructions`` (``max_steps``,
    ``source_tokens``, ``settle_timeout_s``, ``op_timeout_s``,
    ``tool_timeout_s``, ``close_timeout_s``, and the ``[runtime.resident]``
    table); here they are one ``limits`` record, so the limits are declared
    once, in the engine, and a new limit is configurable without a change here.
    """

    instructions: str = attrs.field(default=DEFAULT_INSTRUCTIONS, validator=prose_text)
    limits: RuntimeLimits = attrs.field(
        factory=RuntimeLimits, validator=attrs.validators.instance_of(RuntimeLimits)
    )

    @property
    def resident(self) -> ResidentLimits:
        """Resident history bounds (``[runtime.resident]``), from :attr:`limits`."""
        return self.limits.resident


def _runtime_table_class() -> type:
    """The ``[runtime]`` table as TOML spells it: ``instructions`` plus every RuntimeLimits field.

    Generated from :class:`RuntimeLimits` (types, defaults and validators), so
    unknown keys, type errors and "did you mean" hints name the real keys and
    nothing is declared twice.
    """
    fields: dict[str, Any] = {
        "instructions": attrs.field(default=DEFAULT_INSTRUCTIONS, type=str, validator=prose_text)
    }
    for field in attrs.fields(attrs.resolve_types(RuntimeLimits)):
        fields[field.name] = attrs.field(default=field.default, validator=field.validator, type=field.type)
    return attrs.make_class("RuntimeTable", fields, frozen=True, slots=True)


_RuntimeTable = _runtime_table_class()


@attrs.frozen(slots=True)
class ComponentConfig:
    """A component section: the registered adapter name and its free ``[<section>.options]`` table.

    The options are checked against the plugin's own config class in phase (b).
    """

    plugin: str
    options: dict[str, Any] = attrs.field(factory=dict)


def _one_of(*choices: str, none: bool = False) -> Callable[[Any, attrs.Attribute[Any], object], None]:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
        if (value is None and none) or value in choices:
            return
        raise ValueError(f"{attribute.name} must be one of {', '.join(choices)}; got {value!r}")

    return check


@attrs.frozen(slots=True)
class RecallConfig:
    """``[recall]``: a component section plus the budgets (``[recall.budget]``, R17) and the policy.

    ``policy`` is ``current_session`` (stop on failed or partial, permit no
    evidence) or ``current_session_strict`` (also stop on no evidence);
    ``on_partial``, ``on_failed`` and ``on_no_evidence`` override its
    decisions; ``query`` and ``ranking`` name registered recall strategies.
    """

    plugin: str
    budget: RecallLimits = attrs.field(factory=RecallLimits)
    options: dict[str, Any] = attrs.field(factory=dict)
    policy: str = attrs.field(
        default="current_session", validator=_one_of("current_session", "current_session_strict")
    )
    on_partial: str = attrs.field(default="stop", validator=_one_of("stop", "continue", "clarify"))
    on_failed: str = attrs.field(default="stop", validator=_one_of("stop", "continue"))
    on_no_evidence: str | None = attrs.field(
        default=None, validator=_one_of("proceed", "stop", "clarify", none=True)
    )
    query: str = "latest_user_text"
    ranking: str = "store_order"


@attrs.frozen(slots=True)
class EmbedderConfig:
    """``[embedder]``: a component section plus the embedding bounds (``[embedder.budget]``).

    The budget's keys are those of :class:`~agentium_harness._ports.embedder.EmbeddingLimits`:
    ``max_batch``, ``max_input_bytes`` and ``timeout_s``. An embedder makes
    recall hybrid; it needs ``[recall]`` with a store that declares
    ``vector_indexing`` and ``hybrid_discovery``.
    """

    plugin: str
    budget: EmbeddingLimits = attrs.field(factory=EmbeddingLimits)
    options: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen(slots=True)
class SummarizerConfig:
    """``[summarizer]``: a component section plus the update budget (``[summarizer.budget]``).

    The budget's keys are those of :class:`~agentium_harness._ports.summary.SummaryLimits`:
    ``max_groups``, ``max_input_bytes``, ``max_summary_bytes``, ``timeout_s``, ``background``
    and ``model_timeout_s``.
    """

    plugin: str
    budget: SummaryLimits = attrs.field(factory=SummaryLimits)
    options: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen(slots=True)
class VerifierConfig:
    """``[verifier]``: a component section plus the completion policy and evidence budget.

    ``[verifier.policy]`` holds ``on_fail`` (``stop`` or ``revise``), ``max_revisions`` (0–8) and
    ``allow_revision_effects``; ``[verifier.budget]`` holds ``max_entries`` (at most 32) and
    ``max_bytes`` (at most 8192), which narrow the evidence budget and may not widen it (R30);
    ``timeout_s`` bounds each verifier call (default: ``[runtime] op_timeout_s``).
    """

    plugin: str
    options: dict[str, Any] = attrs.field(factory=dict)
    policy: CompletionPolicy = attrs.field(factory=CompletionPolicy)
    budget: EvidenceLimits = attrs.field(factory=EvidenceLimits)
    timeout_s: float | None = attrs.field(default=None, validator=bounded_duration(optional=True))


@attrs.frozen(slots=True)
class HarnessConfig:
    """A whole config file after phase (a). Provider, archive and session store are required.

    ``plugins`` holds the ``[plugins.<name>]`` tables: options written once for every section
    that selects plugin ``<name>`` (see ``docs/config.md``, "Settings shared by sections").
    """

    provider: ComponentConfig
    archive: ComponentConfig
    session_store: ComponentConfig
    runtime: RuntimeConfig = attrs.field(factory=RuntimeConfig)
    recall: RecallConfig | None = None
    embedder: EmbedderConfig | None = None
    summarizer: SummarizerConfig | None = None
    verifier: VerifierConfig | None = None
    memory: ComponentConfig | None = None
    #: ``[retention]``: what ``apply_retention`` applies (docs/erasure.md); not a component.
    retention: RetentionPolicy | None = None
    plugins: dict[str, dict[str, Any]] = attrs.field(factory=dict)

    def component(
        self, section: str
    ) -> ComponentConfig | RecallConfig | EmbedderConfig | SummarizerConfig | VerifierConfig | None:
        """The component section named ``section`` (a key of :data:`SECTION_KINDS`), if present."""
        if section not in SECTION_KINDS:
            raise KeyError(section)
        value: ComponentConfig | RecallConfig | EmbedderConfig | SummarizerConfig | VerifierConfig | None = (
            getattr(self, section)
        )
        return value


@attrs.frozen(slots=True)
class ResolvedComponent:
    """One component after phase (b): which registration it selects and its structured options.

    Build the adapter with ``component.spec.build(component.options)``.
    """

    section: str
    kind: str
    plugin: str
    distribution: str
    version: str
    spec: AdapterSpec
    options: Any


@attrs.frozen(slots=True)
class ResolvedConfig:
    """Everything the runtime needs to build itself from a config file, with nothing built yet.

    ``base_dir`` is the config file's directory (``None`` for text). Option
    fields marked as paths (see :data:`~agentium_harness._plugins.spec.PATH_OPTION`)
    were already resolved against it, so each component's ``options`` are
    ready to build from whatever the working directory is. ``registry`` is the
    registry the components came from; it also broadcasts lifecycle hooks.
    """

    config: HarnessConfig
    registry: PluginRegistry = attrs.field(eq=False, repr=False)
    provider: ResolvedComponent
    archive: ResolvedComponent
    session_store: ResolvedComponent
    recall: ResolvedComponent | None = None
    embedder: ResolvedComponent | None = None
    summarizer: ResolvedComponent | None = None
    verifier: ResolvedComponent | None = None
    memory: ResolvedComponent | None = None
    base_dir: Path | None = None
    source: str | None = None

    @property
    def instructions(self) -> str:
        """Host instructions (``[runtime] instructions``)."""
        return self.config.runtime.instructions

    @property
    def limits(self) -> RuntimeLimits:
        """The runtime's limits (``[runtime]`` and ``[runtime.resident]``)."""
        return self.config.runtime.limits

    @property
    def resident(self) -> ResidentLimits:
        """Resident history bounds (``[runtime.resident]``)."""
        return self.config.runtime.limits.resident

    @property
    def recall_limits(self) -> RecallLimits | None:
        """Recall budgets (``[recall.budget]``), or ``None`` without recall."""
        return self.config.recall.budget if self.config.recall is not None else None

    def components(self) -> dict[str, ResolvedComponent]:
        """The configured components by section name, in :data:`SECTION_KINDS` order."""
        found: dict[str, ResolvedComponent] = {}
        for section in SECTION_KINDS:
            value = getattr(self, section)
            if value is not None:
                found[section] = value
        return found


def config_converter() -> cattrs.Converter:
    """The strict stored-data rules with TOML's words, plus the ``[runtime]`` table.

    A config file is written by a person, so ``max_groups = "8"`` or
    ``max_groups = true`` must be an error, not a silent conversion; the
    messages name TOML types ("expected an integer, got string"). Loads share
    the one it makes (:func:`~agentium_harness._codec.shared_converter`: made
    anew once an adapter registered a structure rule); nothing of a load's is
    registered on it (a plugin's paths are resolved after structuring).
    """
    strict = register_env_scalars(make_converter(strict=True, words=TOML_WORDS))

    def runtime_hook(value: Any, _: type) -> RuntimeConfig:
        table: Any = strict.structure(value, _RuntimeTable)
        values = attrs.asdict(table, recurse=False)
        instructions = values.pop("instructions")
        return RuntimeConfig(instructions=instructions, limits=RuntimeLimits(**values))

    strict.register_structure_hook(RuntimeConfig, runtime_hook)
    return strict


# ------------------------------------------------------------------ phase (a)


def _phase_a(
    text: str, source: str | None, environ: Mapping[str, str] | None
) -> tuple[dict[str, Any], HarnessConfig | None, list[ConfigIssue], set[str]]:
    """Parse, substitute and structure; also return the paths of failed substitutions."""
    raw = parse_toml(text, source)
    data, issues = substitute_env(raw, environ)
    config, schema_issues = structure_config(data, HarnessConfig, "$", shared_converter(config_converter))
    unset = {issue.path for issue in issues}
    return data, config, issues + _without(schema_issues, unset), unset


def _without(issues: list[ConfigIssue], unset: set[str]) -> list[ConfigIssue]:
    """Drop issues at paths whose ``${NAME}`` could not be substituted.

    The reference's text stays in place; a type error about that text would
    only repeat the real problem (the unset variable).
    """
    return [issue for issue in issues if issue.path not in unset]


def parse_config(
    source: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None
) -> HarnessConfig:
    """Phase (a): parse TOML and validate it against the schema, reporting every problem.

    :param source: TOML *text* (a ``str``) or the path of a file (a :class:`pathlib.Path`
        or other path-like object).
    :param environ: variables for ``${VAR}`` substitution (default :data:`os.environ`).
    :raises ConfigError: listing every issue, each with its ``$``-path.
    :raises InvalidArgumentError: ``source`` or ``environ`` of the wrong type; nothing was read.
    """
    check_source(source)
    check_environ(environ)
    text, shown, _ = read_source(source)
    data, config, issues, _ = _phase_a(text, shown, environ)
    if issues or config is None:
        raise ConfigError(_ordered(hide_env_values(issues, data)), shown)
    return config


# ------------------------------------------------------------------ phase (b)


def _resolve_component(
    section: str,
    plugin: str,
    options: Any,
    registry: PluginRegistry,
    conv: cattrs.Converter,
    base_dir: Path | None,
    shared: Mapping[str, Any],
) -> tuple[ResolvedComponent | None, RegisteredAdapter | None, list[ConfigIssue]]:
    kind = SECTION_KINDS[section]
    try:
        found = registry.adapter(kind, plugin)
    except PluginNotFoundError as exc:
        return None, None, [ConfigIssue(f"$.{section}.plugin", str(exc))]
    where = f"$.{section}.options"
    if isinstance(options, Mapping):
        options, taken = inherit(shared, options, found.spec.config_class)
    else:
        taken = ()
    # The config class is plugin code (its validators, its __init__): bounded like a factory, in a
    # daemon thread abandoned at the registry's hook_timeout_s; what it returns late is never used.
    what = f"the config class of {kind} adapter {plugin!r} (plugin {found.distribution})"
    structure = partial(structure_options, options, found.spec.config_class, where, conv, base_dir)
    try:
        # No runtime's operation, whatever block the host loads the config in (docs/observability.md).
        with unattributed():
            structured, issues = call_with_deadline(structure, registry.hook_timeout_s, what)
    except HookTimeoutError as exc:
        return None, found, [ConfigIssue(where, str(exc))]
    if issues:
        return None, found, relocate(issues, where, plugin, taken)
    component = ResolvedComponent(
        section=section,
        kind=kind,
        plugin=plugin,
        distribution=found.distribution,
        version=found.version,
        spec=found.spec,
        options=structured,
    )
    return component, found, []


def _resolve_sections(
    sections: Mapping[str, tuple[str, Any]],
    registry: PluginRegistry,
    base_dir: Path | None,
    shared: Mapping[str, Any],
) -> tuple[dict[str, ResolvedComponent], list[ConfigIssue]]:
    conv = shared_converter(config_converter)
    resolved: dict[str, ResolvedComponent] = {}
    adapters: dict[str, RegisteredAdapter] = {}
    selected: dict[str, list[tuple[str, type | None]]] = {}
    issues: list[ConfigIssue] = []
    for section, (plugin, options) in sections.items():
        table = shared.get(plugin)
        component, adapter, found = _resolve_component(
            section, plugin, options, registry, conv, base_dir, table if isinstance(table, Mapping) else {}
        )
        issues.extend(found)
        selected.setdefault(plugin, []).append((section, adapter.spec.config_class if adapter else None))
        if adapter is not None:
            adapters[section] = adapter
        if component is not None:
            resolved[section] = component
    issues.extend(shared_issues(shared, selected))
    issues.extend(combination_issues(adapters, set(sections)))
    issues.extend(wrapped_provider_issues(resolved.get("provider"), registry))
    return resolved, issues


def _sections_of(config: HarnessConfig) -> dict[str, tuple[str, Any]]:
    found: dict[str, tuple[str, Any]] = {}
    for section in SECTION_KINDS:
        value = config.component(section)
        if value is not None:
            found[section] = (value.plugin, value.options)
    return found


def _raw_sections(data: Mapping[str, Any]) -> dict[str, tuple[str, Any]]:
    """The component sections of unvalidated data that can still be resolved.

    Used when phase (a) failed, so one report also covers unknown plugin names
    and bad options of the sections that are well-formed enough to look up.
    """
    found: dict[str, tuple[str, Any]] = {}
    for section in SECTION_KINDS:
        value = data.get(section)
        if isinstance(value, dict) and isinstance(value.get("plugin"), str):
            options = value.get("options", {})
            if isinstance(options, dict):
                found[section] = (value["plugin"], options)
    return found


def _assemble(
    config: HarnessConfig,
    resolved: Mapping[str, ResolvedComponent],
    registry: PluginRegistry,
    base_dir: Path | None,
    source: str | None,
) -> ResolvedConfig:
    return ResolvedConfig(
        config=config,
        registry=registry,
        provider=resolved["provider"],
        archive=resolved["archive"],
        session_store=resolved["session_store"],
        recall=resolved.get("recall"),
        embedder=resolved.get("embedder"),
        summarizer=resolved.get("summarizer"),
        verifier=resolved.get("verifier"),
        memory=resolved.get("memory"),
        base_dir=base_dir,
        source=source,
    )


def resolve_config(
    config: HarnessConfig,
    registry: PluginRegistry,
    *,
    base_dir: Path | None = None,
    source: str | None = None,
) -> ResolvedConfig:
    """Phase (b): select each component's registration and structure its options. Builds nothing.

    With ``base_dir``, relative paths in option fields marked as paths
    (:data:`~agentium_harness._plugins.spec.PATH_OPTION`) are resolved against it.

    :raises ConfigError: listing every unknown or ambiguous plugin (at ``$.<section>.plugin``),
        every bad option (at ``$.<section>.options.<key>``) and every capability
        combination the runtime would refuse.
    :raises InvalidArgumentError: an argument of the wrong type.
    """
    check_type(config, HarnessConfig, "config")
    check_type(registry, PluginRegistry, "registry")
    check_base_dir(base_dir)
    check_type(source, str, "source", optional=True)
    resolved, issues = _resolve_sections(_sections_of(config), registry, base_dir, config.plugins)
    issues.extend(strategy_issues(config, registry))
    if issues:
        raise ConfigError(_ordered(issues), source)
    return _assemble(config, resolved, registry, base_dir, source)


def load_config(
    path: str | os.PathLike[str] | None = None,
    registry: PluginRegistry | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> ResolvedConfig:
    """Both phases for the config file at ``path``, reporting every problem of both at once.

    Relative paths in option fields marked as paths are resolved against the
    config file's folder, whatever the working directory.

    :param path: the config file; ``None`` reads the file ``AGENTIUM_CONFIG`` names, else
        ``agentium.toml`` in the working directory (:func:`find_config`).
    :param registry: where plugins are looked up. By default a registry is
        loaded under the operator's plugin lists: ``AGENTIUM_PLUGINS`` and
        ``AGENTIUM_DISABLE_PLUGINS`` of the *process* environment always
        apply, and those in ``environ`` can only narrow them further (see
        :func:`~agentium_harness._plugins.registry.operator_plugin_lists`).
    :param environ: variables for ``${VAR}`` substitution (default :data:`os.environ`).
    :raises ConfigError: listing every issue found.
    :raises InvalidArgumentError: an argument of the wrong type; nothing was read.
    """
    check_environ(environ)
    check_type(registry, PluginRegistry, "registry", optional=True)
    if path is not None:
        check_path(path)
    text, shown, base_dir = read_source(find_config(path, environ))
    data, config, issues, unset = _phase_a(text, shown, environ)
    if registry is None:
        allow, block = operator_plugin_lists(environ)
        registry = PluginRegistry.load(allow=allow, block=block)
    sections = _sections_of(config) if config is not None else _raw_sections(data)
    shared = config.plugins if config is not None else data.get(SHARED_TABLE)
    resolved, resolve_issues = _resolve_sections(
        sections, registry, base_dir, shared if isinstance(shared, dict) else {}
    )
    issues.extend(_without(resolve_issues, unset))
    # Checked on the raw data when phase (a) failed, so an unknown strategy name is in this report
    # too; a name left as an unset ${VAR}'s text is that variable's issue alone.
    strategies = (
        strategy_issues(config, registry) if config is not None else raw_strategy_issues(data, registry)
    )
    issues.extend(_without(strategies, unset))
    if issues or config is None:
        raise ConfigError(_ordered(hide_env_values(issues, data)), shown)
    return _assemble(config, resolved, registry, base_dir, shown)


def _ordered(issues: list[ConfigIssue]) -> list[ConfigIssue]:
    """Unique issues in a stable order: by path, then message."""
    return sorted(set(issues), key=lambda i: (i.path, i.message))
