"""Load-time validation of one :class:`~agentium_harness._plugins.spec.AdapterSpec` (D3, R10).

These checks look at what a registration *declares*: a usable name, a class
that declares its own capability object of the right kind, every required
flag, an implementation behind every declared flag, a callable factory and an
attrs config class. They do not certify backend behaviour; the runtime still
enforces every bound on what an adapter returns.
"""

from __future__ import annotations

import re

import attrs

from .._engine.checks import adapter_problems
from .._errors import RegistrationError
from .._ports import PORT_KINDS
from .spec import AdapterSpec

__all__ = ["ADAPTER_NAME_PATTERN", "spec_problems", "validate_adapter_spec"]

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
