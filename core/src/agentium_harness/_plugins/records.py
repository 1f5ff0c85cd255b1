"""What the plugin registry reports: loaded plugins, registered adapters, problems, skips, hook failures.

Plain frozen records, kept apart from the loading machinery in
:mod:`agentium_harness._plugins.registry` (which re-exports them), so the CLI
and the config loader can read a registry's report by these names alone.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping

import attrs

from .._errors import PluginError, PluginLoadError, RegistrationError
from .._ports import Capabilities
from .spec import AdapterSpec

__all__ = [
    "HookFailure",
    "LoadedPlugin",
    "PluginProblem",
    "PluginStatus",
    "ProblemStage",
    "RegisteredAdapter",
    "SkippedPlugin",
]


class PluginStatus(enum.StrEnum):
    """How a plugin distribution fared while loading."""

    #: Everything it offered was registered.
    OK = "ok"
    #: It loaded, but some of its hooks or registrations were rejected (see ``problems``).
    DEGRADED = "degraded"
    #: Nothing of it is active: the module failed to import or pluggy refused it.
    FAILED = "failed"


class ProblemStage(enum.StrEnum):
    """Where a :class:`PluginProblem` happened."""

    #: Importing the entry point's module raised.
    IMPORT = "import"
    #: pluggy refused a hook implementation (bad signature, unknown or misspelt hook, wrapper).
    HOOK_VALIDATION = "hook_validation"
    #: A registration hook raised; its registrations from that call were discarded.
    REGISTER_HOOK = "register_hook"
    #: One adapter spec failed load-time validation.
    REGISTRATION = "registration"
    #: A second registration used a (kind, name) that was already taken.
    CONFLICT = "conflict"
    #: The allow list names a distribution that is not installed.
    ALLOW_LIST = "allow_list"


@attrs.frozen(slots=True)
class PluginProblem:
    """One thing that went wrong while loading plugins, with the culprit's distribution and version."""

    distribution: str
    version: str
    stage: ProblemStage
    error: str
    kind: str | None = None
    name: str | None = None
    hook: str | None = None

    def __str__(self) -> str:
        where = f" {self.kind} {self.name!r}" if self.kind and self.name else ""
        hook = f" in {self.hook}" if self.hook else ""
        return f"{self.distribution} {self.version}{where} [{self.stage.value}{hook}]: {self.error}"

    def to_error(self) -> PluginError:
        """The typed error for this problem, for callers that want to raise it."""
        if self.stage in (ProblemStage.REGISTRATION, ProblemStage.CONFLICT) and self.kind:
            return RegistrationError(self.kind, self.name or "?", self.distribution, self.error)
        return PluginLoadError(self.distribution, self.version, self.error)


@attrs.frozen(slots=True)
class SkippedPlugin:
    """An installed plugin that was not imported, and why."""

    distribution: str
    version: str
    entry_point: str
    reason: str


@attrs.frozen(slots=True)
class HookFailure:
    """A lifecycle hook implementation that raised during :meth:`PluginRegistry.broadcast`."""

    distribution: str
    hook: str
    error: str


@attrs.frozen(slots=True)
class RegisteredAdapter:
    """An accepted registration: the spec and the distribution that provided it."""

    kind: str
    name: str
    distribution: str
    version: str
    spec: AdapterSpec

    @property
    def capabilities(self) -> Capabilities:
        """The capability declaration (validated to exist at registration)."""
        caps = self.spec.capabilities
        if caps is None:  # pragma: no cover - validation guarantees it
            raise RegistrationError(self.kind, self.name, self.distribution, "capabilities vanished")
        return caps


def _sorted_adapter_map(value: Mapping[str, Iterable[str]]) -> dict[str, tuple[str, ...]]:
    return {kind: tuple(sorted(names)) for kind, names in sorted(value.items())}


@attrs.frozen(slots=True)
class LoadedPlugin:
    """A plugin distribution the registry considered, with what it registered.

    ``adapters`` maps kind to the adapter names it provides (sorted);
    ``hooks`` lists the hook names it implements; ``modules`` the plugin modules.
    """

    distribution: str
    version: str
    status: PluginStatus
    adapters: dict[str, tuple[str, ...]] = attrs.field(converter=_sorted_adapter_map)
    hooks: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()

    @property
    def kinds(self) -> tuple[str, ...]:
        """The adapter kinds it provides."""
        return tuple(self.adapters)
