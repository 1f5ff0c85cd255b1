"""``run()``'s ``grants`` and ``sources`` of the host's own iterable type: read once, bounded, typed.

``check_grants`` and ``check_sources`` made a ``tuple`` of whatever iterable
the host passed: one that never ended held the event loop in that
(non-awaiting) check for good, stalling every session of the runtime; one
whose iteration raised reached the host as that bare exception. Now each is
read once, no further than its bound (``MAX_RUN_GRANTS`` items, and no more
distinct names than the registry has tools; ``MAX_RUN_SOURCES`` blocks), and
an exception raised iterating it is refused as :class:`InvalidArgumentError`:
nothing admitted, no model call, nothing written.

Each endless iterable here raises a bare ``RuntimeError`` once read far past
every bound, so the old source fails (with it) instead of hanging.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import anyio
import pytest

from agentium_harness import (
    MAX_RUN_GRANTS,
    MAX_RUN_SOURCES,
    BlockingRuntime,
    CommitState,
    InvalidArgumentError,
    SessionKey,
    SourceBlock,
    Tool,
    ToolRegistry,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import OpContext

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("t", "ana", "test-auth")
KEY = SessionKey("t", "ana", "s1")
#: Far past every bound: an iterable read this far was read without one.
RUNAWAY = 200_000


class Counted:
    """An iterable of the host's own type: ``item(i)`` for each i, endless; it counts what was read."""

    def __init__(self, item: Any, fail_at: int | None = None) -> None:
        self.item, self.fail_at, self.read = item, fail_at, 0

    def __iter__(self) -> Iterator[Any]:
        while True:
            if self.read == self.fail_at:
                raise ValueError("the host's iterable failed")
            if self.read >= RUNAWAY:
                raise RuntimeError("read far past any bound")
            self.read += 1
            yield self.item(self.read)


class IterRaises:
    def __iter__(self) -> Iterator[Any]:
        raise ValueError("no iteration today")


async def _lookup(args: Mapping[str, Any]) -> str:
    return "found"


def _runtime() -> tuple[Any, ScriptedProvider]:
    provider = ScriptedProvider(replies=["done"], cycle=True)
    runtime = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        tools=ToolRegistry([Tool("lookup", _lookup), Tool("other", _lookup)]),
    )
    return runtime, provider


def _block(i: int) -> SourceBlock:
    return SourceBlock("recall", f"doc-{i}", f"content {i}")


async def _refused(**kwargs: Any) -> InvalidArgumentError:
    runtime, provider = _runtime()
    try:
        with anyio.fail_after(30), pytest.raises(InvalidArgumentError) as caught:
            await runtime.run(ANA, "s1", "find it", **kwargs)
        assert caught.value.commit_state is CommitState.NOT_COMMITTED
        assert provider.calls == []
        assert await runtime.session_store.load(KEY, OpContext()) is None
    finally:
        await runtime.aclose()
    return caught.value


@pytest.mark.parametrize(
    ("argument", "item", "bound"),
    [("grants", lambda i: "lookup", MAX_RUN_GRANTS), ("sources", _block, MAX_RUN_SOURCES)],
    ids=["grants", "sources"],
)
async def test_endless_grants_and_sources_are_refused_after_the_bound(
    argument: str, item: Any, bound: int
) -> None:
    endless = Counted(item)
    error = await _refused(**{argument: endless})
    assert endless.read == bound + 1
    assert str(bound) in str(error)


async def test_endless_distinct_grants_are_refused_once_past_the_registry() -> None:
    # Two tools registered: a third distinct name cannot be one of theirs.
    grants = Counted(lambda i: f"tool{i}")
    error = await _refused(grants=grants)
    assert grants.read <= 3
    assert "registered" in str(error)


async def test_a_list_of_sources_past_the_bound_is_refused() -> None:
    await _refused(sources=[_block(i) for i in range(MAX_RUN_SOURCES + 1)])


@pytest.mark.parametrize(
    ("argument", "iterable"),
    [
        ("grants", Counted(lambda i: "lookup", fail_at=1)),
        ("grants", IterRaises()),
        ("sources", Counted(_block, fail_at=2)),
        ("sources", IterRaises()),
    ],
    ids=["grants-next", "grants-iter", "sources-next", "sources-iter"],
)
async def test_grants_and_sources_whose_iteration_raises_are_refused_typed(
    argument: str, iterable: Any
) -> None:
    error = await _refused(**{argument: iterable})
    assert isinstance(error.__cause__, ValueError)


async def test_grants_and_sources_of_the_hosts_own_type_within_the_bounds_run() -> None:
    runtime, provider = _runtime()
    try:
        grants = iter(["lookup", "lookup", "other"])
        sources = (_block(i) for i in range(3))
        result = await runtime.run(ANA, "s1", "find it", grants=grants, sources=sources)
        assert result.commit_state is CommitState.COMMITTED
        assert len(provider.calls) == 1
        assert {t.name for t in provider.calls[0].tools} == {"lookup", "other"}
        assert [b.source_id for b in provider.calls[0].sources if b.source_id.startswith("doc-")] == [
            "doc-0",
            "doc-1",
            "doc-2",
        ]
    finally:
        await runtime.aclose()


def test_blocking_run_refuses_endless_grants_typed() -> None:
    runtime, provider = _runtime()
    grants = Counted(lambda i: "lookup")
    with BlockingRuntime(runtime) as blocking:
        with pytest.raises(InvalidArgumentError) as caught:
            blocking.run(ANA, "s1", "find it", grants=grants)
        assert caught.value.commit_state is CommitState.NOT_COMMITTED
        assert grants.read == MAX_RUN_GRANTS + 1
        assert provider.calls == []
        assert not blocking.inspect_session(ANA, "s1").exists
