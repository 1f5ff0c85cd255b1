"""The memory store's errors (a module of its own beside :mod:`._errors`, which is at its length bound).

Hosts import them from ``agentium_harness``, adapter authors from ``agentium_harness.plugin_api``.
"""

from __future__ import annotations

from ._errors import AgentiumError

__all__ = ["MemoryFactForgottenError", "MemoryFactNotFoundError", "MemoryRejectedError", "MemoryStoreError"]


class MemoryStoreError(AgentiumError):
    """The memory store could not complete an operation; nothing was written by the failed call."""


class MemoryRejectedError(MemoryStoreError, ValueError):
    """A fact was refused; ``reason`` says why. Nothing was written.

    Causes: empty text, text over the size limit or holding NUL or a lone
    surrogate, a validity window ending before it starts, too many
    provenance groups, or the host's own rule.
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"fact rejected: {reason}; nothing was written")


class MemoryFactNotFoundError(MemoryStoreError, LookupError):
    """No fact with this id is visible to the caller's tenant and user.

    The same error (and message) is raised whether the id does not exist or
    belongs to someone else, so a refusal never reveals another tenant's ids.
    ``fact_id`` is the id asked for; the message does not name it (hosts log
    error texts, and an id is content: the built-in stores cannot see whether
    the host captures content).
    """

    def __init__(self, message: str, fact_id: str = "") -> None:
        self.fact_id = fact_id
        super().__init__(message)


class MemoryFactForgottenError(MemoryStoreError):
    """The fact was forgotten: its content is gone and it cannot be corrected. Remember a new fact.

    ``fact_id`` is the fact's id; the message does not name it (as :class:`MemoryFactNotFoundError`).
    """

    def __init__(self, message: str, fact_id: str = "") -> None:
        self.fact_id = fact_id
        super().__init__(message)
