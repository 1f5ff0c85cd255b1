"""A small tool registry with effect levels and explicit grants.

A model may ask for any tool; the runtime runs a call only if the tool is
registered *and* granted for the run. Anything else is refused, recorded in
the run result, and answered to the model with a refusal message so the
message group stays complete. A refused call is never executed.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import attrs

from .._errors import InvalidArgumentError, ToolNotGrantedError
from .._ports.provider import ToolSpec, json_schema_object
from .._scope import validate_id
from .._validators import enum_member, plain_str, unicode_text

__all__ = ["EffectLevel", "Tool", "ToolOutcome", "ToolRegistry", "ToolStatus"]

ToolHandler = Callable[[Mapping[str, Any]], Awaitable[str]]


class EffectLevel(enum.StrEnum):
    """What running a tool may change: nothing, reads of host state, or writes."""

    NONE = "none"
    READ = "read"
    WRITE = "write"


class ToolStatus(enum.StrEnum):
    """How one tool call ended."""

    OK = "ok"
    REFUSED_NOT_GRANTED = "refused_not_granted"
    REFUSED_UNKNOWN = "refused_unknown"
    #: A write-effect tool asked for during a verification revision without ``allow_revision_effects``.
    REFUSED_EFFECT = "refused_effect"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    #: The handler ran (its effects happened) but returned something that is not a
    #: ``str``, or text that is not valid Unicode (a lone surrogate); the model got an
    #: error text instead of it.
    INVALID_OUTPUT = "invalid_output"
    #: The run was cancelled (``aclose()``, or the host cancelled ``run()``) while the handler ran
    #: — it may have had its effects — or, for the calls of the same reply after it, before the
    #: handler started (the detail says which).
    CANCELLED = "cancelled"


def _effect(value: EffectLevel | str) -> EffectLevel:
    """An :class:`EffectLevel`, or its value as a string (``"write"``); anything else is refused.

    The effect decides whether a call may run during a verification revision
    (R31): an unchecked string (or a typo of one) would have slipped past that refusal.
    """
    return enum_member(EffectLevel, value, "tool effect")


def _handler(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not callable(value):
        raise InvalidArgumentError(f"tool handler must be callable, got {type(value).__name__}")


def _description(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    # The description is sent to the model with the tool: it must be text a provider can encode.
    unicode_text(value, "tool description")


@attrs.frozen(slots=True)
class Tool:
    """A tool the host offers: a name, its effect level, an async handler returning text.

    ``parameters`` is an optional JSON Schema (``"type": "object"``) of its
    arguments, offered to the model with the tool; it is checked and copied
    when the tool is built. The runtime does not validate arguments against
    it: the handler checks what it receives. ``effect`` is an
    :class:`EffectLevel` or its value (``"write"``). A bad field raises
    :class:`~agentium_harness._errors.InvalidArgumentError`.
    """

    name: str = attrs.field(converter=plain_str, validator=lambda _i, a, v: validate_id(v, a.name))
    handler: ToolHandler = attrs.field(validator=_handler)
    effect: EffectLevel = attrs.field(default=EffectLevel.NONE, converter=_effect)
    description: str = attrs.field(default="", validator=_description)
    parameters: dict[str, Any] | None = attrs.field(default=None, converter=json_schema_object, hash=False)


@attrs.frozen(slots=True)
class ToolOutcome:
    """What happened to one tool call; refusals carry the typed error's message."""

    call_id: str
    name: str
    status: ToolStatus
    effect: EffectLevel | None
    detail: str = ""


class ToolRegistry:
    """Tools by name. Registration is explicit; running needs a per-run grant."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        if isinstance(tools, Tool) or not isinstance(tools, Iterable):
            raise InvalidArgumentError(
                f"tools must be an iterable of Tool objects, got {type(tools).__name__}"
            )
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        """Add a tool; anything but a :class:`Tool`, or a second tool with the same name, is refused.

        Raises :class:`~agentium_harness._errors.InvalidArgumentError`; the registry is unchanged.
        """
        if not isinstance(tool, Tool):
            raise InvalidArgumentError(f"a tool registry holds Tool objects, got {type(tool).__name__}")
        if tool.name in self._tools:
            raise InvalidArgumentError(f"tool {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def specs(self, granted: frozenset[str]) -> tuple[ToolSpec, ...]:
        """Specs of the granted tools, offered to the model, sorted by name."""
        return tuple(
            ToolSpec(name=t.name, description=t.description, parameters=t.parameters)
            for name, t in sorted(self._tools.items())
            if name in granted
        )

    def resolve(self, name: str, granted: frozenset[str]) -> Tool:
        """Return the tool if registered and granted, else raise :class:`ToolNotGrantedError`."""
        tool = self._tools.get(name)
        if tool is None:
            raise ToolNotGrantedError(f"tool {name!r} is not registered; the call was not executed")
        if name not in granted:
            raise ToolNotGrantedError(f"tool {name!r} is not granted for this run; the call was not executed")
        return tool

    def names(self) -> tuple[str, ...]:
        """The registered tools' names, sorted."""
        return tuple(sorted(self._tools))

    def __contains__(self, name: object) -> bool:
        return name in self._tools
