"""Getting adapters ready and checking them: :meth:`~.runtime.HarnessRuntime.start` and ``probe``.

Mixed into the runtime, so the orchestrator stays small. ``start`` warms
what a first operation would otherwise load inside its own budget (today:
the embedder's model, which a one-shot ``agentium run`` would load inside
the first query's recall budget, every time); ``probe`` runs each adapter's
bounded health check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from .._observe.spans import using
from .._observe.turn import settings_of
from .checks import probe_adapters
from .embedding import warm_embedder
from .results import Diagnostic, Severity

if TYPE_CHECKING:
    from .runtime import HarnessRuntime

__all__ = ["AdapterReadiness"]


class AdapterReadiness:
    """The start and probe methods of the runtime (mixed into :class:`~.runtime.HarnessRuntime`)."""

    __slots__ = ()
    #: docs/api.md documents these methods with :class:`~.runtime.HarnessRuntime` (testing._api_docs).
    __agentium_documented_mixin__ = True

    async def start(self) -> tuple[Diagnostic, ...]:
        """Warm the adapters before the first operation; ``async with runtime`` calls it.

        Today that is the embedder's :meth:`~agentium_harness.plugin_api.Embedder.warm_up`
        (its model loaded now, under ``EmbeddingLimits.warmup_timeout_s``, not
        inside the first query's recall budget). Never fails the start: a
        warm-up that fails or times out is logged as a WARNING and returned
        as an ``embedder_warm_up_failed`` diagnostic, and the first query
        loads the model itself, as without a start. Only the first call
        warms; later ones, and a runtime without an embedder, return ``()``
        at once. The warm-up is admitted shared like :meth:`probe`
        (:class:`RuntimeClosedError` once closing), so ``aclose()`` waits for it.
        """
        runtime = cast("HarnessRuntime", self)
        if runtime.parts.started:
            return ()
        runtime.parts.started = True  # set before awaiting: a concurrent start() does not warm twice
        hybrid = runtime.hybrid
        if hybrid is None:
            return ()
        with using(settings_of(runtime), runtime):
            async with runtime.parts.admission.admit_shared(None, "start") as ticket:
                why = await warm_embedder(ticket, hybrid)
        return () if why is None else (Diagnostic("embedder_warm_up_failed", why, Severity.WARNING),)

    async def probe(self) -> list[tuple[str, str]]:
        """Run each adapter's bounded health check, if it declares one: ``[(role, result)]``.

        Admitted shared like :meth:`inspect_session`, so ``aclose()`` waits for it.
        """
        runtime = cast("HarnessRuntime", self)
        roles: dict[str, Any] = {"archive": runtime.archive, "session_store": runtime.session_store}
        roles.update(recall=runtime.recall, verifier=runtime.verifier, provider=runtime.provider)
        roles["embedder"] = runtime.hybrid.embedder if runtime.hybrid is not None else None
        adapters = [(role, adapter) for role, adapter in roles.items() if adapter is not None]
        with using(settings_of(runtime), runtime):
            async with runtime.parts.admission.admit_shared(None, "probe") as ticket:
                return await probe_adapters(ticket, adapters)
        raise AssertionError("unreachable")  # pragma: no cover
