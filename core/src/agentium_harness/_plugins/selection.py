"""Which plugin distributions may load: the operator's allow and block lists.

Names are compared after PEP 503 normalization. The lists come from the
process environment (``AGENTIUM_PLUGINS``, ``AGENTIUM_DISABLE_PLUGINS``) and
hold whatever a host passes: see :func:`operator_plugin_lists`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

__all__ = [
    "ENV_ALLOW",
    "ENV_BLOCK",
    "normalize_distribution_name",
    "operator_plugin_lists",
    "parse_name_list",
]

#: Comma-separated allow-list of plugin distributions. Empty: load no external plugin. Unset: load all.
ENV_ALLOW = "AGENTIUM_PLUGINS"
#: Comma-separated block-list of plugin distributions.
ENV_BLOCK = "AGENTIUM_DISABLE_PLUGINS"


def normalize_distribution_name(name: str) -> str:
    """PEP 503 normalization: lowercase, runs of ``-``, ``_`` and ``.`` become one ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_name_list(value: str) -> frozenset[str]:
    """A comma-separated list of distribution names, normalized; blanks ignored."""
    return frozenset(normalize_distribution_name(p.strip()) for p in value.split(",") if p.strip())


def operator_plugin_lists(
    environ: Mapping[str, str] | None = None,
) -> tuple[frozenset[str] | None, frozenset[str]]:
    """The allow-list and block-list that hold for a load: ``(allow, block)`` for :meth:`PluginRegistry.load`.

    The operator's lists in the *process* environment (``AGENTIUM_PLUGINS``,
    ``AGENTIUM_DISABLE_PLUGINS`` in :data:`os.environ`) always apply. Lists in
    ``environ`` (a mapping a host passes for ``${VAR}`` substitution, say) can
    only narrow them: the allow-lists are intersected, the block-lists joined.
    ``allow`` is ``None`` when neither sets ``AGENTIUM_PLUGINS`` (load every
    plugin not blocked).
    """
    sources: list[Mapping[str, str]] = [os.environ]
    if environ is not None and environ is not os.environ:
        sources.append(environ)
    allows = [parse_name_list(env[ENV_ALLOW]) for env in sources if ENV_ALLOW in env]
    allow = frozenset.intersection(*allows) if allows else None
    block = frozenset().union(*(parse_name_list(env.get(ENV_BLOCK, "")) for env in sources))
    return allow, block
