"""Config files, in two phases (``docs/config.md``).

:mod:`.load` holds the records (:class:`HarnessConfig` …) and the phases
(:func:`parse_config`, :func:`resolve_config`, :func:`load_config`); it uses
:mod:`.source` (reading the file, ``${VAR}`` substitution, discovery),
:mod:`.env_text` (where the values of ``${VAR}`` references stand, and hiding them from messages),
:mod:`.structure` (TOML tables into records, with typed issues),
:mod:`.shared` (the ``[plugins.<name>]`` connection table) and
:mod:`.checks` (what the runtime would refuse at construction). Last,
:mod:`.runtime` builds a runtime from the resolved config (``load_runtime``):
the engine never imports this package, the config imports the engine.
"""

from __future__ import annotations

from .load import *  # noqa: F403  (the package's names are its loader's)
from .load import __all__ as __all__
