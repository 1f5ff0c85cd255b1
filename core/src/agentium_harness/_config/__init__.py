"""Config files, in two phases (``docs/config.md``).

:mod:`.load` holds the records (:class:`HarnessConfig` …) and the phases
(:func:`parse_config`, :func:`resolve_config`, :func:`load_config`); it uses
:mod:`.source` (reading the file, ``${VAR}`` substitution, discovery),
:mod:`.structure` (TOML tables into records, with typed issues),
:mod:`.shared` (the ``[plugins.<name>]`` connection table) and
:mod:`.checks` (what the runtime would refuse at construction). Last,
:mod:`.runtime` builds a runtime from the resolved config (``load_runtime``):
the engine never imports this package, the config imports the engine.
"""

from __future__ import annotations

from .load import (
    CONFIG_ENV,
    DEFAULT_CONFIG_FILE,
    DEFAULT_INSTRUCTIONS,
    MAX_CONFIG_BYTES,
    MAX_NESTING,
    REQUIRED_SECTIONS,
    SECTION_KINDS,
    ComponentConfig,
    EmbedderConfig,
    HarnessConfig,
    RecallConfig,
    ResolvedComponent,
    ResolvedConfig,
    RuntimeConfig,
    SummarizerConfig,
    VerifierConfig,
    load_config,
    parse_config,
    resolve_config,
    substitute_env,
)

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
