"""Tests of a turn racing an erasure: a model held mid-turn, erasure-index reads counted.

Nothing here imports pytest. Two runtimes over one store stand for two
processes: one runs a turn whose model call is held (:class:`HeldProvider`)
while the other erases, then the turn is let go and its commit fence has
its say. A store class wrapped by :func:`counting_index_loads` counts the
loads of the erasure index's chains (heads and pages) the fence makes, so
a test can show their number does not grow with the erasures before it:

.. code-block:: python

    def build(provider):
        archive, store = SQLiteArchive(config), counting_index_loads(SQLiteSessionStore)(config)
        runtime = create_harness_runtime(
            provider=provider, archive=archive, session_store=store, owned=(archive, store)
        )
        return runtime, store

    loads, error = await first_turn_during_erasure(build, identity, "s1", target, attestation)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import anyio

from .._engine.erasure import OperatorAttestation
from .._ports import OpContext
from .._ports.erasure_target import EraseTarget
from .._ports.provider import ModelProvider, ModelRequest, ModelResponse
from .._ports.sessions import SessionStore
from .._scope import ERASURE_RECORDS_TENANT, SessionKey, VerifiedIdentity
from ..adapters.providers import ScriptedProvider

__all__ = ["CountsIndexLoads", "HeldProvider", "counting_index_loads", "first_turn_during_erasure"]

#: How long a helper here waits for the held call to start before the test fails.
_WAIT_S = 30.0


class HeldProvider(ScriptedProvider):
    """Answers ``replies`` at once, except the armed call, which waits for ``release`` once ``started``.

    Set ``armed`` before the turn; the next call sets ``started`` and waits
    until the test sets ``release``. Later calls answer at once again.
    """

    def __init__(self, replies: tuple[str, ...] = ("noted",)) -> None:
        super().__init__(replies=list(replies), cycle=True)
        self.armed = False
        self.started, self.release = anyio.Event(), anyio.Event()

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        """The scripted answer; the armed call first says it started and waits for ``release``."""
        if self.armed:
            self.armed = False
            self.started.set()
            await self.release.wait()
        return await super().complete(request, ctx)


class CountsIndexLoads(Protocol):
    """A store made by :func:`counting_index_loads`: its ``index_loads`` so far (a test may reset it)."""

    index_loads: int


StoreT = TypeVar("StoreT", bound=SessionStore)


def counting_index_loads(store_class: type[StoreT]) -> type[StoreT]:
    """A subclass of ``store_class`` counting in ``index_loads`` each load of an erasure-index chain."""

    class Counting(store_class):  # type: ignore[valid-type,misc]
        index_loads = 0

        async def load(self, key: SessionKey, ctx: OpContext) -> Any:
            if key.tenant == ERASURE_RECORDS_TENANT and key.session.startswith(("by-", "index")):
                self.index_loads += 1
            return await super().load(key, ctx)

    Counting.__name__ = Counting.__qualname__ = f"Counting{store_class.__name__}"
    return Counting


async def first_turn_during_erasure(
    build: Callable[[ModelProvider], tuple[Any, CountsIndexLoads]],
    identity: VerifiedIdentity,
    session: str,
    during: EraseTarget,
    attestation: OperatorAttestation,
) -> tuple[int, BaseException | None]:
    """``session``'s turn, held at its model call while another runtime erases ``during``.

    ``build(provider)`` makes a runtime over the store under test and its
    counting store (:func:`counting_index_loads`). Returns the index loads
    from the erasure's end to the turn's end (its commit fence's) and what
    the turn raised (``None`` if it committed). Both runtimes are closed.
    """
    provider = HeldProvider()
    slow, store = build(provider)
    other, _ = build(ScriptedProvider(replies=["ok"], cycle=True))
    caught: list[BaseException] = []

    async def turn() -> None:
        try:
            await slow.run(identity, session, "a new session's first turn")
        except Exception as exc:  # handed to the test
            caught.append(exc)

    try:
        provider.armed = True
        async with anyio.create_task_group() as tg:
            tg.start_soon(turn)
            with anyio.fail_after(_WAIT_S):
                await provider.started.wait()
            await other.erase(during, reason="dsr", attestation=attestation)  # the ledger moves
            store.index_loads = 0
            provider.release.set()
        return store.index_loads, (caught[0] if caught else None)
    finally:
        await slow.aclose()
        await other.aclose()
