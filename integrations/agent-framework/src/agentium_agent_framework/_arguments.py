"""Checks of ``AgentiumHistoryProvider``'s framework options (its ``HistoryProvider`` arguments)."""

from __future__ import annotations

from collections.abc import Mapping

from agentium_harness import IdentityError, InvalidArgumentError, RecallScope

__all__ = ["checked_options"]


def checked_options(
    source_id: object,
    flags: Mapping[str, object],
    store_context_from: object,
    recall_scope: object,
) -> tuple[str, set[str] | None]:
    """``source_id`` as a plain str and ``store_context_from`` as a new set; bad arguments raise.

    ``InvalidArgumentError`` for a ``source_id`` that is no non-empty str, a
    flag that is not exactly ``True`` or ``False`` and a ``store_context_from``
    that is no set of str; ``IdentityError`` (what ``HarnessRuntime.append``
    raises for it, here at once rather than at the first save) for a
    ``recall_scope`` that is no ``RecallScope``.
    """
    if not isinstance(source_id, str) or not source_id:
        raise InvalidArgumentError(f"source_id must be a non-empty str, got {type(source_id).__name__}")
    for name, flag in flags.items():
        # Taken for its truth, "no" or "false" would turn the behaviour on and "" or 0 off.
        if not isinstance(flag, bool):
            raise InvalidArgumentError(f"{name} must be True or False, got {type(flag).__name__}")
    sources: set[str] | None = None
    if store_context_from is not None:
        # The framework tests `source_id in store_context_from`: a str would match its substrings.
        if not isinstance(store_context_from, set | frozenset) or not all(
            isinstance(source, str) for source in store_context_from
        ):
            raise InvalidArgumentError(
                "store_context_from must be a set of source ids (str) or None, "
                f"got {type(store_context_from).__name__}"
            )
        sources = set(store_context_from)
    if recall_scope is not None and not isinstance(recall_scope, RecallScope):
        raise IdentityError(
            f"recall_scope must be a RecallScope or None, got {type(recall_scope).__name__}; "
            "build it with RecallScope(project=..., repository=...)"
        )
    # A str subclass would run its own code wherever the framework keys context by it.
    return str.__str__(source_id), sources
