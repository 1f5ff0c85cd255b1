"""Construction-time capability checks (R9, R10).

They validate what adapters *declare*; they cannot certify what a backend
does, so the engine still enforces every bound on what adapters return.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._errors import CapabilityError
from .._ports import PORT_KINDS, Capabilities, is_port_stub
from .._ports._base import capabilities_of
from .._text import error_text
from .lifecycle import Ticket

__all__ = ["adapter_problems", "check_adapter", "instance_problems", "probe_adapters"]


def _implemented(cls: type, method: str) -> bool:
    attr = getattr(cls, method, None)
    return attr is not None and callable(attr) and not is_port_stub(attr)


def adapter_problems(kind: str, cls: type, *, require_own_declaration: bool) -> list[str]:
    """Every reason why ``cls`` is not a valid ``kind`` adapter, as messages (empty when valid).

    What is required comes from the kind's :class:`~agentium_harness._ports.PortKind`:
    its capability class and required flags, its core methods, its session
    methods, and the method behind every flag the class declares.

    ``require_own_declaration`` demands that ``capabilities`` be declared in the
    class body itself rather than inherited (load-time rule for registrations).
    """
    port = PORT_KINDS[kind]
    problems: list[str] = []
    declared = (
        cls.__dict__.get("capabilities") if require_own_declaration else getattr(cls, "capabilities", None)
    )
    if declared is None:
        inherited = getattr(cls, "capabilities", None)
        if require_own_declaration and inherited is not None:
            problems.append(
                f"capabilities declared only on a base class; declare {port.capability_class.__name__} "
                f"on {cls.__name__} itself"
            )
        else:
            problems.append(
                f"no capabilities declared; set capabilities = {port.capability_class.__name__}(...)"
            )
        return problems
    if type(declared) is not port.capability_class:
        problems.append(
            f"capabilities must be a {port.capability_class.__name__}, got {type(declared).__name__}"
        )
        return problems
    assert isinstance(declared, Capabilities)
    flags = declared.declared()
    for flag in port.capability_class.REQUIRED:
        if not flags.get(flag, False):
            problems.append(f"missing required capability flag {flag!r}")
    # Session methods live on the class the adapter's ``open`` returns; only
    # kinds whose table entry lists session methods have one.
    has_sessions = bool(port.session_methods) or any(
        target.startswith("session:") for target in port.capability_class.METHODS.values()
    )
    session_cls = getattr(cls, "session_class", None) if has_sessions else None
    wanted = (
        [(m, "core method") for m in port.core_methods]
        + [(f"session:{m}", "session method") for m in port.session_methods]
        + [
            (port.capability_class.METHODS[f], f"declared capability {f!r}")
            for f, on in flags.items()
            if on and f in port.capability_class.METHODS
        ]
    )
    checked: set[str] = set()
    for method, why in wanted:
        if method in checked:
            continue  # a required flag may name a core method again: report it once
        checked.add(method)
        if method.startswith("session:"):
            name = method.removeprefix("session:")
            if not isinstance(session_cls, type):
                problems.append(f"{why} needs a session_class whose {name}() is implemented")
            elif not _implemented(session_cls, name):
                problems.append(f"{why} needs {session_cls.__name__}.{name}() implemented")
        elif not _implemented(cls, method):
            problems.append(f"{why} needs {cls.__name__}.{method}() implemented")
    return problems


def instance_problems(kind: str, adapter: object) -> list[str]:
    """Why ``adapter``'s own ``instance_capabilities`` (if set) is not a valid narrowing of its class's.

    The class declaration is the most any instance can do (its methods were
    checked against it); an instance may turn flags off, never on, and keeps
    every required flag.
    """
    own = getattr(adapter, "instance_capabilities", None)
    if own is None:
        return []
    port = PORT_KINDS[kind]
    if type(own) is not port.capability_class:
        return [f"instance_capabilities must be a {port.capability_class.__name__}, got {type(own).__name__}"]
    assert isinstance(own, Capabilities)
    declared = getattr(type(adapter), "capabilities", None)
    most = declared.declared() if isinstance(declared, Capabilities) else {}
    flags = own.declared()
    problems = [
        f"instance_capabilities lacks required flag {f!r}"
        for f in port.capability_class.REQUIRED
        if not flags[f]
    ]
    problems += [
        f"instance_capabilities declares {f!r}, which the class's capabilities leave off"
        for f, on in flags.items()
        if on and not most.get(f, False)
    ]
    return problems


def check_adapter(kind: str, adapter: object, role: str | None = None) -> Capabilities:
    """Validate an adapter instance for ``kind`` and return its capabilities, or raise CapabilityError.

    The class is checked as at load time; an instance that narrows its
    declaration (``instance_capabilities``, see :func:`capabilities_of`) is
    checked too, and its declaration is the one returned.
    """
    cls = type(adapter)
    problems = adapter_problems(kind, cls, require_own_declaration=False)
    if not problems:
        problems = instance_problems(kind, adapter)
    if problems:
        who = role or kind
        raise CapabilityError(f"{who} adapter {cls.__name__}: " + "; ".join(problems))
    caps = capabilities_of(adapter)
    assert isinstance(caps, Capabilities)
    return caps


async def probe_adapters(ticket: Ticket, adapters: Sequence[tuple[str, Any]]) -> list[tuple[str, str]]:
    """Call each adapter's ``health`` if its capabilities declare ``health_check``; bounded each.

    Returns ``[(role, "ok: …" | "failed: …" | "no health check declared")]`` in order.
    """
    results: list[tuple[str, str]] = []
    for role, adapter in adapters:
        caps = capabilities_of(adapter)
        if getattr(caps, "health_check", False):
            try:
                answer = await ticket.call(f"{role} health", adapter.health)
                results.append((role, f"ok: {answer}"))
            except Exception as exc:
                results.append((role, f"failed: {error_text(exc)}"))
        else:
            results.append((role, "no health check declared"))
    return results
