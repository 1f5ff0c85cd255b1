"""One model call of a turn: the provider's ``complete`` under its own deadline, its failures typed.

The deadline is the runtime's ``model_timeout_s`` (``op_timeout_s`` when unset):
model calls take far longer than store calls, so they get their own bound and
a slow model does not loosen the one that catches a hung session store.
"""

from __future__ import annotations

from .._errors import ContractViolationError, OperationTimeoutError, ProviderError, ProviderTimeoutError
from .._ports.provider import ModelProvider, ModelRequest, ModelResponse
from .._text import error_text
from .lifecycle import Ticket
from .store_errors import fresh_copy

__all__ = ["complete_bounded"]


async def complete_bounded(
    ticket: Ticket, provider: ModelProvider, request: ModelRequest, timeout_s: float | None
) -> ModelResponse:
    """``provider.complete(request)`` within ``timeout_s`` (``None``: the ticket's op deadline).

    Any failure is a :class:`~agentium_harness._errors.ProviderError` (a
    :class:`~agentium_harness._errors.ProviderTimeoutError` naming the deadline
    past it) whose message says the session was not changed, or a fresh copy of
    a :class:`~agentium_harness._errors.ContractViolationError` the provider raised.
    """
    try:
        return await ticket.call(
            "provider complete", lambda ctx: provider.complete(request, ctx), timeout_s=timeout_s, store=False
        )
    except OperationTimeoutError as exc:
        raise ProviderTimeoutError(
            f"provider did not answer within {exc.timeout_s}s and was cancelled; the session was not changed",
            exc.timeout_s,
        ) from exc
    except ContractViolationError as exc:
        # Never the provider's own object: the engine marks the error it raises (commit state, result,
        # "committed as group N"), and a provider may raise one object again, in another tenant's run.
        # A fresh copy, committed as it is said (a committed_detail the provider set is not the engine's).
        fresh = fresh_copy(exc) if exc.commit_state is None and exc.run_result is None else None
        if fresh is None:
            # One raised out of another run (a provider built on a nested runtime): its commit state
            # and result are that run's. Passed on, this run would report them as its own and never
            # commit what its tools did.
            fresh = ContractViolationError(f"provider failed: {error_text(exc)}; the session was not changed")
        raise fresh from exc
    except Exception as exc:
        raise ProviderError(f"provider failed: {error_text(exc)}; the session was not changed") from exc
