"""Calling hook implementations one plugin at a time, so one plugin's failure cannot stop the others.

The registry's registration hooks and its lifecycle
:meth:`~agentium_harness._plugins.registry.PluginRegistry.broadcast` both call
each implementation through its own pluggy subset caller.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import pluggy

from .._errors import PluginError
from .._observe.spans import unattributed
from .._text import error_text
from .deadline import call_with_deadline
from .hookspecs import LIFECYCLE_HOOKS
from .records import HookFailure

__all__ = ["broadcast_hook", "call_registration_hook", "caller_for", "describe_error", "discard_awaitable"]


def describe_error(exc: BaseException) -> str:
    """``"<ExceptionType>: <message>"``, or the type's name alone for an empty message; never raises.

    The exception is a plugin's: its ``__str__`` may raise, or its text hold a
    lone surrogate. Either used to escape from :meth:`PluginRegistry.load` (so
    one broken plugin failed every command with a traceback) or from a print
    of the problem, so the text is read as :func:`~agentium_harness._text.error_text` reads it.
    """
    message = error_text(exc, named=False)
    return error_text(exc) if message else error_text(exc).removesuffix(": ")


def broadcast_hook(
    pm: pluggy.PluginManager, plugin_dist: Mapping[str, str], hook: str, kwargs: dict[str, Any]
) -> list[HookFailure]:
    """Call each implementation of lifecycle ``hook`` on its own; return the ones that raised.

    ``plugin_dist`` maps a plugin's registered name to its distribution (the
    name a failure reports). See :meth:`PluginRegistry.broadcast`.
    """
    if hook not in LIFECYCLE_HOOKS:
        raise ValueError(f"{hook!r} is not a lifecycle hook; expected one of {', '.join(LIFECYCLE_HOOKS)}")
    caller = getattr(pm.hook, hook)
    expected = set(caller.spec.argnames) if caller.spec is not None else set()
    if set(kwargs) != expected:
        raise TypeError(f"{hook} takes {sorted(expected)}, got {sorted(kwargs)}")
    failures: list[HookFailure] = []
    # Registration order (built-ins first), unlike pluggy's last-in-first-out calls.
    for impl in caller.get_hookimpls():
        distribution = plugin_dist.get(impl.plugin_name, impl.plugin_name)
        try:
            for result in caller_for(pm, hook, impl)(**kwargs):
                if inspect.isawaitable(result):
                    discard_awaitable(result)
                    raise TypeError(
                        "lifecycle hooks must be plain functions; the returned awaitable never ran"
                    )
        except (Exception, SystemExit) as exc:  # isolated and reported, by contract
            failures.append(HookFailure(distribution, hook, describe_error(exc)))
    return failures


def call_registration_hook(
    pm: pluggy.PluginManager,
    hook: str,
    impl: pluggy.HookImpl,
    register: Callable[[Any], None],
    timeout_s: float,
    distribution: str,
) -> None:
    """Call one plugin's registration hook with ``register``, bounded by ``timeout_s``.

    Raises what the hook raised, ``TypeError`` for an async hook, and
    :class:`~agentium_harness._plugins.deadline.HookTimeoutError` for one that
    has not returned by the deadline (a hook blocked forever used to hang the
    registry's load, and with it every command); the caller must then refuse
    the abandoned hook's late ``register`` calls.
    """

    def call() -> None:
        for result in caller_for(pm, hook, impl)(register=register):
            if inspect.isawaitable(result):
                discard_awaitable(result)
                raise TypeError("registration hooks must be plain functions, not async")

    with unattributed():  # registering is no runtime's operation, whatever block the host does it in
        call_with_deadline(call, timeout_s, f"{hook} of plugin {distribution}")


def caller_for(pm: pluggy.PluginManager, hook: str, impl: pluggy.HookImpl) -> pluggy.HookCaller:
    """The pluggy hook caller for ``hook`` restricted to the plugin behind ``impl``.

    ``PluginManager.subset_hook_caller`` is pluggy's public way to call a
    hook on some plugins only: calling each implementation through its own
    subset keeps pluggy's argument handling, tracing and monitoring while
    one implementation's exception cannot stop the others.
    """
    others = [p for p in pm.get_plugins() if p is not impl.plugin]
    caller = pm.subset_hook_caller(hook, remove_plugins=others)
    # pluggy only removes plugins that have an attribute named after the
    # hook; the registry refuses renamed (specname) implementations at load
    # time, so the subset holds exactly this one.
    if caller.get_hookimpls() != [impl]:  # pragma: no cover - guarded at load time
        raise PluginError(f"{hook}: cannot isolate the implementation of {impl.plugin_name}")
    return caller


def discard_awaitable(value: object) -> None:
    """Close a coroutine that will never be awaited, so Python does not warn about it."""
    close: Callable[[], object] | None = getattr(value, "close", None)
    if close is not None:
        close()
