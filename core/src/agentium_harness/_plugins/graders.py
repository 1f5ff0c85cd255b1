"""Named eval graders that plugins register (R33), looked up by name.

Plugins register them through the ``agentium_register_graders`` hook with
``register(grader)``; the built-in plugin registers the seven graders of
:mod:`agentium_harness.eval`. A grader is any object with a ``name`` (an
identifier), a ``description``, an ``evidence`` flag and a callable
``grade(case, trace)``. A case file names graders; it never holds code.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

from .._errors import PluginNotFoundError

__all__ = ["GRADER_HOOK", "GraderTable", "RegisterGrader"]

#: The registration hook for eval graders.
GRADER_HOOK = "agentium_register_graders"

#: The callable the hook receives: ``register(grader)``.
RegisterGrader = Callable[[Any], None]


class GraderTable:
    """The registered graders by name, in registration order; a name registered twice is refused."""

    def __init__(self) -> None:
        self._by_name: dict[str, tuple[Any, str]] = {}

    def problems_for(self, grader: object, distribution: str) -> str | None:
        """Why ``grader`` cannot be registered, or ``None``."""
        name = getattr(grader, "name", None)
        if not isinstance(name, str) or not name.isidentifier():
            return f"a grader needs an identifier name, got {name!r}"
        if not callable(getattr(grader, "grade", None)):
            return f"grader {name!r} has no callable grade(case, trace)"
        if not isinstance(getattr(grader, "description", None), str):
            return f"grader {name!r} needs a description string"
        if not isinstance(getattr(grader, "evidence", None), bool):
            return f"grader {name!r} needs an evidence flag (True or False)"
        found = self._by_name.get(name)
        if found is not None:
            return f"grader {name!r} is already registered by {found[1]}"
        return None

    def add(self, grader: Any, distribution: str) -> None:
        """Record an accepted grader."""
        self._by_name[grader.name] = (grader, distribution)

    def names(self) -> tuple[str, ...]:
        """Registered grader names, in registration order (built-ins first)."""
        return tuple(self._by_name)

    def get(self, name: str) -> Any:
        """The grader, or :class:`PluginNotFoundError` naming the registered ones and a close match."""
        found = self._by_name.get(name)
        if found is not None:
            return found[0]
        names = self.names()
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise PluginNotFoundError(f"no grader named {name!r}; registered: {', '.join(names) or 'none'}{hint}")

    def distribution(self, name: str) -> str:
        """The distribution that registered ``name``."""
        return self._by_name[name][1]
