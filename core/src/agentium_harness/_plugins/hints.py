"""What the registry says when a config selects an adapter it cannot provide.

The message lists the installed adapters of the kind, suggests a close
match, gives the ``pip install`` command of a known plugin distribution, and
names plugins that failed to load (one of them may be the one meant).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence

from .records import PluginProblem, SkippedPlugin
from .selection import normalize_distribution_name

__all__ = ["KNOWN_PLUGINS", "LOAD_FAILURE_STAGES", "missing_message"]

#: Adapters published as separate distributions, for the "pip install" hint
#: when a config selects one that is not installed.
#: A test (tests/core/test_install_hints.py) checks every adapter the repository's plugins register.
KNOWN_PLUGINS: Mapping[tuple[str, str], str] = {
    ("archive", "postgres"): "agentium-postgres",
    ("archive", "s3"): "agentium-archive-s3",
    ("embedder", "minilm"): "agentium-embedder-minilm",
    ("embedder", "openai"): "agentium-provider-openai",
    ("memory", "postgres"): "agentium-postgres",
    ("provider", "openai"): "agentium-provider-openai",
    ("recall", "postgres"): "agentium-postgres",
    ("recall", "redis"): "agentium-recall-redis",
    ("session_store", "postgres"): "agentium-postgres",
    ("session_store", "s3"): "agentium-archive-s3",
    ("verifier", "fs"): "agentium-verifier-fs",
}

#: Stages whose failure means some or all of a distribution's adapters are
#: missing, so an unknown name may be explained by them.
LOAD_FAILURE_STAGES = frozenset({"import", "hook_validation", "register_hook"})


def missing_message(
    kind: str,
    name: str,
    *,
    rejected: Sequence[PluginProblem],
    installed: Sequence[str],
    problems: Iterable[PluginProblem],
    skipped: Iterable[SkippedPlugin],
    autoload: bool,
) -> str:
    """Why ``(kind, name)`` cannot be selected; ``rejected`` are its registrations refused at load."""
    problems = tuple(problems)
    parts: list[str] = []
    if rejected:
        parts.extend(
            f"{kind} adapter {name!r} from {p.distribution} {p.version} was rejected at load time: {p.error}"
            for p in rejected
        )
    else:
        parts.append(f"no {kind} adapter named {name!r}")
    parts.append(
        f"installed {kind} adapters: {', '.join(installed)}"
        if installed
        else f"no {kind} adapters are installed"
    )
    close = difflib.get_close_matches(name, installed, n=1)
    if close:
        parts.append(f"did you mean {close[0]!r}?")
    known = KNOWN_PLUGINS.get((kind, name))
    if known is not None and not rejected:
        parts.append(_install_hint(known, problems, tuple(skipped), autoload))
    if not rejected:
        failed = [
            p
            for p in problems
            if p.stage.value in LOAD_FAILURE_STAGES
            and normalize_distribution_name(p.distribution) != normalize_distribution_name(known or "")
        ]
        if failed:
            listed = "; ".join(f"{p.distribution} {p.version} ({p.error})" for p in failed)
            parts.append(f"plugins that failed to load (one may provide it): {listed}")
    return "; ".join(parts)


def _install_hint(
    distribution: str, problems: Sequence[PluginProblem], skipped: Sequence[SkippedPlugin], autoload: bool
) -> str:
    key = normalize_distribution_name(distribution)
    for p in problems:
        if normalize_distribution_name(p.distribution) == key and p.stage.value in LOAD_FAILURE_STAGES:
            return f"{distribution} {p.version} is installed but failed to load: {p.error}"
    for s in skipped:
        if normalize_distribution_name(s.distribution) == key:
            return f"{distribution} {s.version} is installed but was skipped ({s.reason})"
    # No distribution is on PyPI yet, and installing an unclaimed name from an index is how
    # dependency confusion happens: point at the checkout folder until the first release.
    folder = "./plugins/" + distribution.removeprefix("agentium-")
    hint = (
        f"it is provided by {distribution}, which is not published on PyPI yet: "
        f"from a checkout of the Agentium repository, pip install {folder}"
    )
    if not autoload:
        hint += " (plugin autoload is off, so installed plugins were not loaded)"
    return hint
