"""What the recall store suite's parts share: the ``add_document`` hook's type and scoped calls.

:class:`~agentium_harness.testing.RecallStoreContract` is composed of its own
tests and of mixins (archive indexing, hybrid recall, erasure) in sibling
modules; they open sessions and discover through these helpers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from .._ports import OpContext
from .._ports.recall import (
    Candidate,
    RecallCapabilities,
    RecallLimits,
    RecallSession,
    RecallStore,
    SourceOwner,
    SourceRef,
)
from .._scope import Scope
from ._suite import declared_capabilities

__all__ = ["AddDocument", "discover", "open_session", "recall_caps", "scope_of"]

#: The ``add_document`` fixture's hook: ``(store, owner, doc_id, text) -> SourceRef``.
AddDocument = Callable[[RecallStore, SourceOwner, str, str], Awaitable[SourceRef]]


def recall_caps(store: RecallStore) -> RecallCapabilities:
    """The capabilities ``store`` declares (the test fails if it declares none)."""
    return declared_capabilities(store, RecallCapabilities, "recall store")


def scope_of(owner: SourceOwner, user: str = "u", session: str = "s") -> Scope:
    """A scope that sees ``owner``'s sources (its missing user and session filled in)."""
    return Scope(owner.tenant, owner.user or user, owner.session or session, owner.project, owner.repository)


async def open_session(store: RecallStore, scope: Scope, limits: RecallLimits | None = None) -> RecallSession:
    """A recall session of ``store`` in ``scope`` (default limits), opened with a 10 s deadline."""
    return await store.open(scope, limits or RecallLimits(), OpContext.with_timeout(10.0))


async def discover(
    store: RecallStore, scope: Scope, query: str, n: int = 8, remaining_bytes: int | None = None
) -> list[Candidate]:
    """The candidates one session of ``store`` in ``scope`` discovers for ``query``; the session is closed."""
    session = await open_session(store, scope)
    try:
        ctx = OpContext.with_timeout(10.0, remaining_bytes=remaining_bytes)
        return list(await session.discover(query, n, ctx))
    finally:
        await session.close()
