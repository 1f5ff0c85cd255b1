"""Named recall strategies: query formulators and rankings a config selects by name (R21).

Plugins register them through the ``agentium_register_recall_strategies``
hook with ``register(RecallStrategy(...))``; the built-in plugin registers
``latest_user_text``, ``previous_and_latest_user_text``, ``store_order`` and
``score``. A config names them in ``[recall] query`` and ``[recall] ranking``;
a config never holds code.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any, Literal

import attrs

from .._errors import PluginNotFoundError

__all__ = ["STRATEGY_HOOK", "RecallStrategy", "RegisterStrategy", "StrategyKind", "StrategyTable"]

#: The registration hook for recall strategies.
STRATEGY_HOOK = "agentium_register_recall_strategies"

StrategyKind = Literal["query", "ranking"]


@attrs.frozen(slots=True)
class RecallStrategy:
    """A named query formulator (``kind="query"``) or ranking (``kind="ranking"``).

    A query formulator takes a :class:`~agentium_harness.QueryInput` and
    returns the query text; a ranking takes the discovered candidates and
    returns them reordered (it may drop some, never add).
    """

    kind: StrategyKind
    name: str
    function: Callable[..., Any]
    description: str = ""


RegisterStrategy = Callable[[RecallStrategy], None]


class StrategyTable:
    """The registered strategies by (kind, name); a name registered twice is refused, the first kept."""

    def __init__(self) -> None:
        self._by_key: dict[tuple[str, str], tuple[RecallStrategy, str]] = {}

    def problems_for(self, strategy: object, distribution: str) -> str | None:
        """Why ``strategy`` cannot be registered, or ``None``."""
        if not isinstance(strategy, RecallStrategy):
            return f"register() takes a RecallStrategy, got {type(strategy).__name__}"
        if strategy.kind not in ("query", "ranking"):
            return f"strategy kind must be 'query' or 'ranking', got {strategy.kind!r}"
        if not isinstance(strategy.name, str) or not strategy.name.isidentifier():
            return f"strategy name must be an identifier, got {strategy.name!r}"
        if not callable(strategy.function):
            return f"strategy {strategy.name!r} is not callable"
        found = self._by_key.get((strategy.kind, strategy.name))
        if found is not None:
            return f"{strategy.kind} strategy {strategy.name!r} is already registered by {found[1]}"
        return None

    def add(self, strategy: RecallStrategy, distribution: str) -> None:
        """Record an accepted strategy."""
        self._by_key[(strategy.kind, strategy.name)] = (strategy, distribution)

    def names(self, kind: StrategyKind) -> tuple[str, ...]:
        """Registered names of ``kind``, sorted."""
        return tuple(sorted(n for k, n in self._by_key if k == kind))

    def get(self, kind: StrategyKind, name: str) -> RecallStrategy:
        """The strategy, or :class:`PluginNotFoundError` naming the registered ones and a close match."""
        found = self._by_key.get((kind, name))
        if found is not None:
            return found[0]
        names = self.names(kind)
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise PluginNotFoundError(
            f"no {kind} strategy named {name!r}; registered: {', '.join(names) or 'none'}{hint}"
        )
