"""The plugin registry: entry-point discovery, isolation, validation and lookup.

Loading works like this (see ``docs/plugins.md``):

1. A pluggy ``PluginManager("agentium")`` gets the hook specifications.
2. The built-in module :mod:`agentium_harness.adapters.builtin` is registered
   first, under the distribution name ``agentium-harness``, exactly as an
   external plugin would be.
3. Explicit plugin modules (``extra_plugins``) are registered next.
4. With autoload on, every entry point of the ``agentium`` group is
   considered in a stable order. The allow and block lists (arguments, or the
   ``AGENTIUM_PLUGINS`` and ``AGENTIUM_DISABLE_PLUGINS`` environment
   variables) are applied by distribution name *before* anything is imported.

Each plugin module is isolated: an import error, a hook pluggy refuses (bad
signature, misspelt hook name found by ``check_pending``), a registration hook
that raises, and every rejected :class:`~agentium_harness._plugins.spec.AdapterSpec`
become :class:`PluginProblem` records, and loading continues. A broken plugin
is fatal only when a config selects one of its names; :meth:`PluginRegistry.get`
then explains what went wrong.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import types
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import pluggy

from .._errors import PluginError, PluginNotFoundError
from .._observe.spans import unattributed
from . import hookspecs
from .commands import COMMAND_HOOK, CliCommand, CommandTable
from .deadline import call_with_deadline, check_timeout, hook_timeout
from .discovery import entry_points_of
from .graders import GRADER_HOOK, GraderTable
from .hints import KNOWN_PLUGINS, missing_message
from .hook_calls import broadcast_hook, call_registration_hook, describe_error
from .hookspecs import PROJECT_NAME, REGISTRATION_HOOKS
from .records import (
    HookFailure,
    LoadedPlugin,
    PluginProblem,
    PluginStatus,
    ProblemStage,
    RegisteredAdapter,
    SkippedPlugin,
)
from .selection import (
    ENV_ALLOW,
    ENV_BLOCK,
    normalize_distribution_name,
    operator_plugin_lists,
    parse_name_list,
)
from .spec import AdapterSpec
from .strategies import STRATEGY_HOOK, RecallStrategy, StrategyKind, StrategyTable
from .validation import check_kind, hashable_plugin, hook_problems, spec_problems

__all__ = [
    "BUILTIN_DISTRIBUTION",
    "BUILTIN_MODULE",
    "ENV_ALLOW",
    "ENV_BLOCK",
    "KNOWN_PLUGINS",
    "HookFailure",
    "LoadedPlugin",
    "PluginProblem",
    "PluginRegistry",
    "PluginStatus",
    "ProblemStage",
    "RegisteredAdapter",
    "SkippedPlugin",
    "normalize_distribution_name",
    "operator_plugin_lists",
]

#: The distribution that ships the built-in adapters.
BUILTIN_DISTRIBUTION = "agentium-harness"
#: The module holding the built-in hook implementations.
BUILTIN_MODULE = "agentium_harness.adapters.builtin"


@attrs.define
class _Distribution:
    """Mutable load state of one distribution (internal)."""

    name: str
    version: str
    modules: list[str] = attrs.field(factory=list)
    plugin_names: list[str] = attrs.field(factory=list)
    active: int = 0


class PluginRegistry:
    """Every adapter that plugins registered, the plugins themselves, and what went wrong.

    Build one with :meth:`load`. Registrations are keyed by (kind, name); a
    name registered twice within one kind is *conflicted* and cannot be
    selected. Lookups (:meth:`get`) explain a missing name: installed names of
    the kind, a close match, rejected registrations, load failures and the
    ``pip install`` command of a known plugin distribution.
    """

    def __init__(self, *, autoload: bool = False, hook_timeout_s: float | None = None) -> None:
        """An empty registry with only the hook specifications; prefer :meth:`load`."""
        self._pm = pluggy.PluginManager(PROJECT_NAME)
        self._pm.add_hookspecs(hookspecs)
        self._autoload = autoload
        self._timeout_s = (
            hook_timeout(os.environ)
            if hook_timeout_s is None
            else check_timeout(hook_timeout_s, "hook_timeout_s")
        )
        self._dists: dict[str, _Distribution] = {}
        self._plugin_dist: dict[str, str] = {}
        self._adapters: dict[tuple[str, str], RegisteredAdapter] = {}
        self._conflicts: dict[tuple[str, str], list[str]] = {}
        self._rejected: dict[tuple[str, str], list[PluginProblem]] = {}
        self._problems: list[PluginProblem] = []
        self._skipped: list[SkippedPlugin] = []
        self._stand_ins: dict[int, tuple[object, types.ModuleType]] = {}
        self._strategies = StrategyTable()
        self._graders = GraderTable()
        self._commands = CommandTable()

    # ------------------------------------------------------------------ loading

    @classmethod
    def load(
        cls,
        *,
        autoload: bool = True,
        allow: Iterable[str] | None = None,
        block: Iterable[str] = (),
        environ: Mapping[str, str] | None = None,
        extra_plugins: Iterable[tuple[str, object]] = (),
        hook_timeout_s: float | None = None,
    ) -> PluginRegistry:
        """Load the built-in plugin, ``extra_plugins`` and (with ``autoload``) installed plugins.

        :param autoload: consider entry points of the ``agentium`` group. Off: only
            the built-ins and ``extra_plugins`` load, and entry points are not read.
        :param allow: distribution names to load (PEP 503 normalized). ``None``
            defers to ``AGENTIUM_PLUGINS``; given, it replaces that variable.
        :param block: distribution names never to load, combined with ``AGENTIUM_DISABLE_PLUGINS``.
        :param environ: the environment to read (default :data:`os.environ`).
        :param extra_plugins: ``(distribution, module)`` pairs registered as if they
            were installed, for tests and embedding hosts; allow/block do not apply.
        :param hook_timeout_s: how long each plugin import, registration hook, config class
            (``load_config``) and (in ``build_runtime``) adapter factory may take; one still running then is
            abandoned and reported. ``None``: ``AGENTIUM_HOOK_TIMEOUT`` of ``environ``, else 30 s.
        :raises InvalidArgumentError: a bound (argument or variable) that is not a number of seconds.
        """
        env = os.environ if environ is None else environ
        registry = cls(
            autoload=autoload, hook_timeout_s=hook_timeout(env) if hook_timeout_s is None else hook_timeout_s
        )
        registry.register_plugin(BUILTIN_DISTRIBUTION, importlib.import_module(BUILTIN_MODULE))
        for distribution, module in extra_plugins:
            registry.register_plugin(distribution, module)
        if autoload:
            registry._autoload_entry_points(allow, block, env)
        return registry

    def _autoload_entry_points(
        self, allow: Iterable[str] | None, block: Iterable[str], env: Mapping[str, str]
    ) -> None:
        allow_set: frozenset[str] | None
        if allow is not None:
            allow_set, allow_source = frozenset(normalize_distribution_name(a) for a in allow), "allow list"
        elif ENV_ALLOW in env:
            allow_set, allow_source = parse_name_list(env[ENV_ALLOW]), ENV_ALLOW
        else:
            allow_set, allow_source = None, ""
        explicit_block = frozenset(normalize_distribution_name(b) for b in block)
        env_block = parse_name_list(env.get(ENV_BLOCK, ""))

        seen: set[str] = set()
        entries = []
        found, unreadable = entry_points_of(PROJECT_NAME)
        for name, error in unreadable:
            self._distribution(name, "unknown")
            why = f"its entry points cannot be read, so none was loaded: {error}"
            self._problem(name, "unknown", ProblemStage.IMPORT, why)
        for ep in found:
            try:
                # A distribution without a Name in its metadata is still reported,
                # under its entry point's module name, rather than crashing the load.
                dist_name = (ep.dist.name if ep.dist is not None else None) or ep.value.split(":")[0]
                version = (ep.dist.version if ep.dist is not None else None) or "unknown"
            except Exception as exc:
                # Metadata that cannot be read (not UTF-8: a damaged install) raised out of load(),
                # failing every command. Not loaded: without its name no block-list can apply.
                module = ep.value.split(":")[0]
                self._distribution(module, "unknown").modules.append(ep.value)
                why = (
                    f"its distribution's metadata cannot be read, so it was not loaded: {describe_error(exc)}"
                )
                self._problem(module, "unknown", ProblemStage.IMPORT, why)
                continue
            entries.append((normalize_distribution_name(dist_name), dist_name, version, ep))
        # Sorted, so which of two clashing plugins registers first never
        # depends on sys.path order or file-system listing order.
        entries.sort(key=lambda e: (e[0], e[3].name, e[3].value))
        for normalized, dist_name, version, ep in entries:
            if normalized == BUILTIN_DISTRIBUTION:
                continue  # already registered, from the module itself
            seen.add(normalized)
            reason = None
            if normalized in explicit_block:
                reason = "blocked by the block list"
            elif normalized in env_block:
                reason = f"blocked by {ENV_BLOCK}"
            elif allow_set is not None and normalized not in allow_set:
                reason = f"not in {allow_source}"
            if reason is not None:
                # Recorded without importing anything: a blocked plugin's code never runs.
                self._skipped.append(SkippedPlugin(dist_name, version, f"{ep.name} = {ep.value}", reason))
                continue
            try:
                # Bounded: a module that blocks at import is a failed import, not a hung command.
                with unattributed():  # an import is no runtime's operation, whatever block loads the registry
                    module = call_with_deadline(ep.load, self._timeout_s, f"importing plugin {dist_name}")
            # Any import-time failure is the plugin's, not ours: SystemExit too (a module calling
            # sys.exit at import ended the whole command, exit 0, with nothing said). Ctrl-C stays.
            except (Exception, SystemExit) as exc:
                state = self._distribution(dist_name, version)
                state.modules.append(ep.value)
                self._problem(dist_name, version, ProblemStage.IMPORT, describe_error(exc))
                continue
            self.register_plugin(dist_name, module, version=version, plugin_name=f"{dist_name}:{ep.name}")
        for name in sorted((allow_set or frozenset()) - seen - {BUILTIN_DISTRIBUTION}):
            self._problem(
                name,
                "",
                ProblemStage.ALLOW_LIST,
                f"{allow_source} names {name}, but no installed distribution with that name "
                f"has an {PROJECT_NAME!r} entry point",
            )

    def register_plugin(
        self,
        distribution: str,
        plugin: object,
        *,
        version: str | None = None,
        plugin_name: str | None = None,
    ) -> tuple[PluginProblem, ...]:
        """Register one plugin module (or namespace) and run its registration hooks.

        Everything is isolated: a refused hook, a raising registration hook or
        a rejected spec is recorded and returned, and adapters registered
        earlier (by this or other plugins) are never changed.

        :returns: the problems this call recorded (empty when it all went well).
        """
        if version is None:
            try:
                version = importlib.metadata.version(distribution)
            except importlib.metadata.PackageNotFoundError:
                version = "unknown"
        before = len(self._problems)
        state = self._distribution(distribution, version)
        state.modules.append(getattr(plugin, "__name__", type(plugin).__name__))
        plugin = self._hashable(plugin)
        pname = plugin_name or distribution
        if self._pm.has_plugin(pname):
            pname = f"{pname}#{len(state.plugin_names) + 1}"
        try:
            self._pm.register(plugin, name=pname)
        except (pluggy.PluginValidationError, ValueError) as exc:
            # Bad hook signature, or the same module registered twice. pluggy
            # validates before changing state; unregistering anyway keeps this
            # true should an older pluggy leave a partial registration behind.
            if self._pm.get_plugin(pname) is plugin:
                self._pm.unregister(name=pname)
            self._problem(distribution, version, ProblemStage.HOOK_VALIDATION, describe_error(exc))
            return tuple(self._problems[before:])
        if not self._validate_hooks(distribution, version, plugin):
            self._pm.unregister(plugin)
            return tuple(self._problems[before:])
        self._plugin_dist[pname] = distribution
        state.plugin_names.append(pname)
        state.active += 1
        for kind, hook_name in REGISTRATION_HOOKS.items():
            caller = getattr(self._pm.hook, hook_name)
            for impl in caller.get_hookimpls():
                if impl.plugin is plugin:
                    self._call_registration(kind, hook_name, impl, distribution, version)
        for impl in getattr(self._pm.hook, STRATEGY_HOOK).get_hookimpls():
            if impl.plugin is plugin:
                self._call_table_hook(STRATEGY_HOOK, impl, self._strategies, distribution, version)
        for impl in getattr(self._pm.hook, GRADER_HOOK).get_hookimpls():
            if impl.plugin is plugin:
                self._call_table_hook(GRADER_HOOK, impl, self._graders, distribution, version)
        for impl in getattr(self._pm.hook, COMMAND_HOOK).get_hookimpls():
            if impl.plugin is plugin:
                self._call_table_hook(COMMAND_HOOK, impl, self._commands, distribution, version)
        return tuple(self._problems[before:])

    def _call_table_hook(
        self, hook: str, impl: pluggy.HookImpl, table: Any, distribution: str, version: str
    ) -> None:
        """Call one plugin's grader or strategy hook; a refused item is a registration problem.

        ``table`` (a :class:`GraderTable` or :class:`StrategyTable`) judges each
        item; items are added only once the hook returned, so a hook that raises
        half-way adds nothing.
        """
        accepted: list[Any] = []
        open_ = True

        def register(item: Any) -> None:
            if not open_:  # the hook was abandoned at its deadline, or returned
                raise PluginError(f"{hook}: register() called after the hook returned ({distribution})")
            problem = table.problems_for(item, distribution)
            if problem is None and hook == GRADER_HOOK and any(g.name == item.name for g in accepted):
                problem = f"grader {item.name!r} is registered twice by {distribution}"
            if problem is None and hook == COMMAND_HOOK and any(c.name == item.name for c in accepted):
                problem = f"command {item.name!r} is registered twice by {distribution}"
            if problem is not None:
                self._problem(distribution, version, ProblemStage.REGISTRATION, problem, hook=hook)
                return
            accepted.append(item)

        try:
            call_registration_hook(self._pm, hook, impl, register, self._timeout_s, distribution)
        except (Exception, SystemExit) as exc:
            self._problem(distribution, version, ProblemStage.REGISTER_HOOK, describe_error(exc), hook=hook)
            return
        finally:
            open_ = False
        for item in accepted:
            table.add(item, distribution)

    def grader(self, name: str) -> Any:
        """The eval grader named ``name``; :class:`PluginNotFoundError` (with a close match) if none."""
        return self._graders.get(name)

    def grader_names(self) -> tuple[str, ...]:
        """Registered eval grader names, built-ins first."""
        return self._graders.names()

    def commands(self) -> tuple[tuple[CliCommand, str], ...]:
        """Every plugin subcommand with the distribution that registered it, sorted by name."""
        table = self._commands
        return tuple((table.get(name), table.distribution(name)) for name in table.names())

    def recall_strategy(self, kind: StrategyKind, name: str) -> RecallStrategy:
        """The recall strategy of ``kind`` named ``name``; :class:`PluginNotFoundError` if none."""
        return self._strategies.get(kind, name)

    def recall_strategy_names(self, kind: StrategyKind) -> tuple[str, ...]:
        """Registered recall strategy names of ``kind``."""
        return self._strategies.names(kind)

    def _hashable(self, plugin: object) -> object:
        """``plugin``, or the stand-in module for it if it is unhashable (see :func:`hashable_plugin`)."""
        return hashable_plugin(plugin, self._stand_ins)

    def _validate_hooks(self, distribution: str, version: str, plugin: object) -> bool:
        """Refuse misspelt hook names, renamed implementations and wrappers; True when acceptable."""
        found = hook_problems(self._pm, plugin)
        for message, hook in found:
            self._problem(distribution, version, ProblemStage.HOOK_VALIDATION, message, hook=hook)
        return not found

    def _call_registration(
        self, kind: str, hook_name: str, impl: pluggy.HookImpl, distribution: str, version: str
    ) -> None:
        """Call one registration hook implementation with a ``register`` bound to its distribution."""
        accepted: list[AdapterSpec] = []
        open_ = True

        def register(spec: AdapterSpec) -> None:
            if not open_:
                raise PluginError(f"{hook_name}: register() called after the hook returned ({distribution})")
            problems = spec_problems(kind, spec)
            if problems:
                name = getattr(spec, "name", None)
                name = name if isinstance(name, str) else "?"
                problem = self._problem(
                    distribution,
                    version,
                    ProblemStage.REGISTRATION,
                    "; ".join(problems),
                    kind=kind,
                    name=name,
                    hook=hook_name,
                )
                self._rejected.setdefault((kind, name), []).append(problem)
                return
            accepted.append(spec)

        try:
            # Through pluggy's hook caller, narrowed to this one plugin, so
            # pluggy's tracing and monitoring see the call like any other.
            call_registration_hook(self._pm, hook_name, impl, register, self._timeout_s, distribution)
        except (Exception, SystemExit) as exc:  # the plugin's failure: discard what this call registered
            self._problem(
                distribution,
                version,
                ProblemStage.REGISTER_HOOK,
                describe_error(exc),
                kind=kind,
                hook=hook_name,
            )
            return
        finally:
            open_ = False
        for spec in accepted:
            self._accept(kind, spec, distribution, version, hook_name)

    def _accept(self, kind: str, spec: AdapterSpec, distribution: str, version: str, hook_name: str) -> None:
        key = (kind, spec.name)
        existing = self._adapters.get(key)
        if existing is None:
            self._adapters[key] = RegisteredAdapter(kind, spec.name, distribution, version, spec)
            return
        owners = self._conflicts.setdefault(key, [existing.distribution])
        owners.append(distribution)
        both = (
            f"registered twice by {distribution}"
            if existing.distribution == distribution
            else f"registered by both {existing.distribution} and {distribution}"
        )
        self._problem(
            distribution,
            version,
            ProblemStage.CONFLICT,
            f"{kind} name {spec.name!r} is {both}; it cannot be selected until one is uninstalled "
            f"or blocked with {ENV_BLOCK}",
            kind=kind,
            name=spec.name,
            hook=hook_name,
        )

    def _distribution(self, name: str, version: str) -> _Distribution:
        key = normalize_distribution_name(name)
        state = self._dists.get(key)
        if state is None:
            state = self._dists[key] = _Distribution(name, version)
        return state

    def _problem(
        self,
        distribution: str,
        version: str,
        stage: ProblemStage,
        error: str,
        *,
        kind: str | None = None,
        name: str | None = None,
        hook: str | None = None,
    ) -> PluginProblem:
        problem = PluginProblem(distribution, version, stage, error, kind=kind, name=name, hook=hook)
        self._problems.append(problem)
        return problem

    # ------------------------------------------------------------------ queries

    @property
    def plugin_manager(self) -> pluggy.PluginManager:
        """The underlying pluggy plugin manager (for inspection; register through :meth:`register_plugin`)."""
        return self._pm

    @property
    def hook_timeout_s(self) -> float:
        """How long each plugin import, hook, config class and adapter factory may take (see :meth:`load`)."""
        return self._timeout_s

    @property
    def autoload(self) -> bool:
        """Whether installed entry points were considered."""
        return self._autoload

    @property
    def problems(self) -> tuple[PluginProblem, ...]:
        """Every load problem, in the order found."""
        return tuple(self._problems)

    @property
    def skipped(self) -> tuple[SkippedPlugin, ...]:
        """Installed plugins that were not imported (allow/block lists)."""
        return tuple(self._skipped)

    @property
    def plugins(self) -> tuple[LoadedPlugin, ...]:
        """Every plugin distribution that was registered or failed to load, sorted by name."""
        by_dist: dict[str, dict[str, list[str]]] = {}
        for adapter in self._adapters.values():
            by_dist.setdefault(normalize_distribution_name(adapter.distribution), {}).setdefault(
                adapter.kind, []
            ).append(adapter.name)
        troubled = {
            normalize_distribution_name(p.distribution)
            for p in self._problems
            if p.stage is not ProblemStage.ALLOW_LIST
        }
        result = []
        for key, state in sorted(self._dists.items()):
            if state.active == 0:
                status = PluginStatus.FAILED
            elif key in troubled:
                status = PluginStatus.DEGRADED
            else:
                status = PluginStatus.OK
            hooks = sorted(
                {
                    caller.name
                    for pname in state.plugin_names
                    for caller in self._pm.get_hookcallers(self._pm.get_plugin(pname)) or []
                }
            )
            result.append(
                LoadedPlugin(
                    distribution=state.name,
                    version=state.version,
                    status=status,
                    adapters=by_dist.get(key, {}),
                    hooks=tuple(hooks),
                    modules=tuple(state.modules),
                )
            )
        return tuple(result)

    def adapters(self, kind: str | None = None) -> tuple[RegisteredAdapter, ...]:
        """Accepted registrations (of one kind, or all), sorted by kind then name."""
        return tuple(a for key, a in sorted(self._adapters.items()) if kind is None or a.kind == kind)

    def names(self, kind: str) -> tuple[str, ...]:
        """Selectable adapter names of ``kind``, sorted (conflicted names excluded)."""
        check_kind(kind)
        return tuple(
            name for (k, name) in sorted(self._adapters) if k == kind and (k, name) not in self._conflicts
        )

    def is_conflicted(self, kind: str, name: str) -> bool:
        """True when two registrations claimed ``name`` within ``kind``."""
        return (kind, name) in self._conflicts

    def conflict_owners(self, kind: str, name: str) -> tuple[str, ...]:
        """The distributions that registered a conflicted ``(kind, name)``, first one first."""
        return tuple(self._conflicts.get((kind, name), ()))

    def adapter(self, kind: str, name: str) -> RegisteredAdapter:
        """The registration selected by ``(kind, name)``; :class:`PluginNotFoundError` says why not."""
        check_kind(kind)
        owners = self._conflicts.get((kind, name))
        if owners:
            raise PluginNotFoundError(
                f"{kind} adapter {name!r} is ambiguous: it is registered by {' and '.join(owners)}; "
                f"uninstall one or block it with {ENV_BLOCK}=<distribution>"
            )
        found = self._adapters.get((kind, name))
        if found is None:
            raise PluginNotFoundError(self.missing_message(kind, name))
        return found

    def get(self, kind: str, name: str) -> AdapterSpec:
        """The :class:`AdapterSpec` selected by ``(kind, name)``; raises :class:`PluginNotFoundError`."""
        return self.adapter(kind, name).spec

    def missing_message(self, kind: str, name: str) -> str:
        """Why ``(kind, name)`` cannot be selected, with installed names, a suggestion and an install hint."""
        return missing_message(
            kind,
            name,
            rejected=self._rejected.get((kind, name), []),
            installed=self.names(kind),
            problems=self._problems,
            skipped=self._skipped,
            autoload=self._autoload,
        )

    # ---------------------------------------------------------------- lifecycle

    def broadcast(self, hook: str, /, **kwargs: Any) -> list[HookFailure]:
        """Call each implementation of lifecycle ``hook`` on its own; return the ones that raised.

        Each implementation is called through pluggy's hook caller for ``hook``
        (narrowed to its plugin with ``PluginManager.subset_hook_caller``), in
        registration order, built-ins first. A raising implementation never
        stops the others and never raises here: it becomes a
        :class:`HookFailure`. ``kwargs`` must be exactly the hook's arguments.

        This call is synchronous and runs plugin code that may block. On an
        event loop, call it from a worker thread (``anyio.to_thread.run_sync``),
        as the engine does; it never touches the loop itself. Implementations
        must be plain functions: one that returns an awaitable is reported as
        a failure and the awaitable is closed unrun.
        """
        return broadcast_hook(self._pm, self._plugin_dist, hook, kwargs)
