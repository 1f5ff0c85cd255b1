"""A model provider's requests, kept for a test to look at: :func:`record_requests`.

Nothing here imports pytest. A test that asks what a turn sent the model
(which history, which recalled evidence, which summary) records the requests
of the provider it built the runtime with, whatever its class:

.. code-block:: python

    provider = ScriptedProvider(replies=["ok"], cycle=True)
    requests = record_requests(provider)
    runtime = create_harness_runtime(provider=provider)
    ...
    assert "remember the blue door" in requests[-1].messages[-1].content
"""

from __future__ import annotations

from .._ports import OpContext
from .._ports.provider import ModelProvider, ModelRequest, ModelResponse
from .._validators import require_instance

__all__ = ["record_requests"]


def record_requests(provider: ModelProvider) -> list[ModelRequest]:
    """Keep every request ``provider`` is asked from now on, in order, in the list returned.

    The provider answers as before: its own ``complete`` is called with each
    request after the request is added to the list (a request that fails is
    kept too). Only this instance records; its class and its capabilities
    are unchanged, so the runtime treats it as it would the provider alone.
    Recording the same provider twice gives two lists that both fill.
    ``provider`` must be a :class:`~agentium_harness.plugin_api.ModelProvider`
    instance (the port's base class gives every one an instance ``__dict__``);
    anything else is :class:`~agentium_harness.InvalidArgumentError`.
    """
    require_instance(provider, ModelProvider, "record_requests: provider")
    requests: list[ModelRequest] = []
    answer = provider.complete  # the bound method (or an earlier recording of it)

    async def complete(request: ModelRequest, ctx: OpContext) -> ModelResponse:
        requests.append(request)
        return await answer(request, ctx)

    # Set on the instance: looked up before the class's method, so only this provider records.
    vars(provider)["complete"] = complete
    return requests
