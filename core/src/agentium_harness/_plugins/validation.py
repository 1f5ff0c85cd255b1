"""Load-time validation of one :class:`~agentium_harness._plugins.spec.AdapterSpec` (D3, R10).

These checks look at what a registration *declares*: a usable name, a class
that declares its own capability object of the right kind, every required
flag, an implementation behind every declared flag, a callable factory and an
attrs config class. They do not certify backend behaviour; the runtime still
enforces every bound on what an adapter returns.
"""

from __future__ import annotations

import difflib
import re
import types

import attrs
import pluggy

from .._engine.checks import adapter_problems
from .._errors import PluginNotFoundError, RegistrationError
from .._ports import PORT_KINDS
from .commands import COMMAND_HOOK
from .graders import GRADER_HOOK
from .hookspecs import LIFECYCLE_HOOKS, PROJECT_NAME, REGISTRATION_HOOKS
from .spec import AdapterSpec
from .strategies import STRATEGY_HOOK

__all__ = [
    "check_kind",
    "ADAPTER_NAME_PATTERN",
    "hashable_plugin",
    "hook_problems",
    "spec_problems",
    "validate_adapter_spec",
]

#: What an adapter name may look like: it is typed into config files and shell
#: commands, so it stays lowercase, short and free of quoting trouble.
ADAPTER_NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


def spec_problems(kind: str, spec: object) -> list[str]:
    """Every reason why ``spec`` is not a valid registration of ``kind`` (empty when valid).

    ``kind`` must be a key of :data:`agentium_harness._ports.PORT_KINDS`.
    """
    if kind not in PORT_KINDS:
        raise ValueError(f"unknown adapter kind {kind!r}; expected one of {', '.join(sorted(PORT_KINDS))}")
    if not isinstance(spec, AdapterSpec):
        return [f"register() takes an AdapterSpec, got {type(spec).__name__}"]
    problems: list[str] = []
    if not isinstance(spec.name, str) or ADAPTER_NAME_PATTERN.fullmatch(spec.name) is None:
        problems.append(
            f"invalid adapter name {spec.name!r}: use 1 to 64 characters of a-z, 0-9, '_' and '-', "
            "starting with a letter or digit"
        )
    if not isinstance(spec.adapter_class, type):
        problems.append(f"adapter_class must be a class, got {type(spec.adapter_class).__name__}")
    else:
        # One rule set for load time and construction time: the engine's checks,
        # with the stricter load-time demand that the class declares its own
        # capabilities (an inherited declaration describes a different class).
        problems.extend(adapter_problems(kind, spec.adapter_class, require_own_declaration=True))
    if spec.factory is not None and not callable(spec.factory):
        problems.append(f"factory must be callable, got {type(spec.factory).__name__}")
    if not isinstance(spec.config_class, type) or not attrs.has(spec.config_class):
        shown = spec.config_class.__name__ if isinstance(spec.config_class, type) else repr(spec.config_class)
        problems.append(f"config_class must be an attrs class, got {shown}")
    if not isinstance(spec.description, str):
        problems.append(f"description must be a string, got {type(spec.description).__name__}")
    return problems


def validate_adapter_spec(kind: str, spec: AdapterSpec, *, distribution: str = "<unknown>") -> None:
    """Raise :class:`~agentium_harness._errors.RegistrationError` if ``spec`` is not a valid ``kind`` adapter.

    The error's ``reason`` joins every problem found, so one message shows all of them.
    """
    problems = spec_problems(kind, spec)
    if problems:
        name = spec.name if isinstance(spec, AdapterSpec) and isinstance(spec.name, str) else "?"
        raise RegistrationError(kind, name, distribution, "; ".join(problems))


def hashable_plugin(plugin: object, stand_ins: dict[int, tuple[object, types.ModuleType]]) -> object:
    """``plugin``, or a stand-in module holding its hook implementations if it is unhashable.

    pluggy's subset callers (how the registry's ``broadcast`` isolates each
    implementation) keep plugins in sets, and a
    :class:`types.SimpleNamespace` is unhashable. The stand-in carries
    exactly the marked functions pluggy would register from ``plugin``, and
    the same object always gets the same stand-in (kept in ``stand_ins``), so
    registering it twice is still refused.
    """
    try:
        hash(plugin)
    except TypeError:
        pass
    else:
        return plugin
    found = stand_ins.get(id(plugin))
    if found is not None and found[0] is plugin:
        return found[1]
    stand_in = types.ModuleType(f"{type(plugin).__name__}-{id(plugin):x}")
    marker = f"{PROJECT_NAME}_impl"  # the attribute pluggy's HookimplMarker sets
    for name in dir(plugin):
        value = getattr(plugin, name, None)
        if callable(value) and hasattr(value, marker):
            setattr(stand_in, name, value)
    # The original is kept alive next to its stand-in, so its id is never reused.
    stand_ins[id(plugin)] = (plugin, stand_in)
    return stand_in


def hook_problems(pm: pluggy.PluginManager, plugin: object) -> list[tuple[str, str | None]]:
    """``(message, hook)`` for each hook of ``plugin`` the registry refuses; empty when acceptable.

    Unknown (misspelt) hook names, implementations under another name
    (``specname``) and wrappers are refused; then pluggy's own
    ``check_pending`` runs as a safety net.
    """
    found: list[tuple[str, str | None]] = []
    known = [*sorted(REGISTRATION_HOOKS.values()), STRATEGY_HOOK, GRADER_HOOK, COMMAND_HOOK, *LIFECYCLE_HOOKS]
    for caller in pm.get_hookcallers(plugin) or []:
        impls = [i for i in caller.get_hookimpls() if i.plugin is plugin]
        if not caller.has_spec() and any(not i.optionalhook for i in impls):
            close = difflib.get_close_matches(caller.name, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            found.append((f"unknown hook {caller.name!r}: no such hook specification{hint}", caller.name))
        elif any(getattr(i.plugin, caller.name, None) != i.function for i in impls):
            # Calls go through pluggy's subset callers, which tell plugins
            # apart by an attribute named after the hook: a renamed
            # implementation could not be isolated from the others.
            found.append(
                (
                    f"{caller.name} is implemented under another name (specname); "
                    f"name the function {caller.name}",
                    caller.name,
                )
            )
        elif any(i.hookwrapper or i.wrapper for i in impls):
            # The registry calls implementations one by one to isolate them;
            # a wrapper around the others has no meaning there.
            found.append(
                (
                    f"{caller.name} is implemented as a wrapper; agentium hooks take plain functions",
                    caller.name,
                )
            )
    if not found:
        try:
            pm.check_pending()
        except pluggy.PluginValidationError as exc:
            text = str(exc)
            found.append((f"{type(exc).__name__}: {text}" if text else type(exc).__name__, None))
    return found


def check_kind(kind: str) -> None:
    """Refuse an adapter kind that is not one of :data:`~agentium_harness._ports.PORT_KINDS`."""
    if kind not in PORT_KINDS:
        raise PluginNotFoundError(
            f"unknown adapter kind {kind!r}; kinds are: {', '.join(sorted(PORT_KINDS))}"
        )
