"""A provider's (or recall store's) class name in a span is escaped, as a log line's is.

The ``chat`` span's ``gen_ai.provider.name`` is the provider's declared
``gen_ai_provider_name`` or its class name, and ``agentium run --trace``
prints it in the span tree; the retrieval span is named after the recall
store's class. Both are the adapter's to choose (``type()`` takes any name),
and went in as they were: a line break started what read as a span of the
tree, an ANSI escape rewrote the terminal. They are escaped now, as
``error_type`` escapes a class name in a log record.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from _recall_support import ANA, Scripted, ScriptedSession, runtime

from agentium_harness import Telemetry, create_harness_runtime, current_session_recall_policy
from agentium_harness._observe import tree
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.memory_facts import InMemoryMemoryStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.testing import SpanRecorder

pytestmark = pytest.mark.anyio

#: A class name that forges a line of the span tree and colours the terminal.
ODD = "Odd\n  chat  0.1 ms  [provider=\x1b[31mForged"
ESCAPED = "Odd\\x0a  chat  0.1 ms  [provider=\\x1b[31mForged"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _one_line_each(spans: SpanRecorder) -> str:
    rendered = tree.render(spans.finished)
    # One line per span: none forged by a name, and no escape character left to colour the terminal.
    assert len(rendered.splitlines()) == len(spans.finished) and "\x1b" not in rendered, rendered
    return rendered


async def test_a_provider_class_name_is_escaped_in_the_chat_span() -> None:
    spans = SpanRecorder()
    provider = type(ODD, (ScriptedProvider,), {})(replies=["ok"])
    rt = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        telemetry=Telemetry(tracer_provider=spans.provider),
    )
    async with rt:
        with anyio.fail_after(30):
            await rt.run(ANA, "s1", "hello")
    [chat] = [s for s in spans.finished if s.name == "chat"]
    assert (chat.attributes or {})["gen_ai.provider.name"] == ESCAPED
    assert f"[provider={ESCAPED}" in _one_line_each(spans)


async def test_a_declared_provider_name_and_model_are_escaped_too() -> None:
    spans = SpanRecorder()
    names = {"gen_ai_provider_name": ODD, "gen_ai_request_model": ODD}
    declared = type("Declared", (ScriptedProvider,), names)
    rt = create_harness_runtime(
        provider=declared(replies=["ok"]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        telemetry=Telemetry(tracer_provider=spans.provider),
    )
    async with rt:
        with anyio.fail_after(30):
            await rt.run(ANA, "s1", "hello")
    [chat] = [s for s in spans.finished if (s.attributes or {}).get("gen_ai.operation.name") == "chat"]
    attributes = chat.attributes or {}
    assert attributes["gen_ai.provider.name"] == attributes["gen_ai.request.model"] == ESCAPED
    assert chat.name == f"chat {ESCAPED}"
    _one_line_each(spans)


async def test_a_recall_store_class_name_is_escaped_in_the_retrieval_span() -> None:
    spans = SpanRecorder()
    store = type(ODD, (Scripted,), {})([("kettle", "the kettle was descaled in May")])
    rt, _, _ = runtime(store, telemetry=Telemetry(tracer_provider=spans.provider))
    async with rt:
        with anyio.fail_after(30):
            await rt.run(ANA, "s1", "when was the kettle descaled")
    [retrieval] = [s for s in spans.finished if s.name.startswith("retrieval")]
    assert retrieval.name == f"retrieval {ESCAPED}"
    assert (retrieval.attributes or {})["gen_ai.data_source.id"] == ESCAPED
    _one_line_each(spans)


class _ReadFails(ScriptedSession):
    async def read(self, refs: Any, max_excerpt_bytes: int, ctx: Any) -> Any:
        odd_error = type("OddError", (RuntimeError,), {})
        odd_error.__qualname__ = ODD  # ``type()`` checks a name; ``__qualname__`` takes any str
        raise odd_error("the index went away")


class ReadFails(Scripted):
    async def open(self, scope: Any, limits: Any, ctx: Any) -> _ReadFails:
        return _ReadFails(self)


async def test_an_adapter_exception_class_name_is_escaped_in_its_span_event() -> None:
    spans = SpanRecorder()
    rt, _, _ = runtime(
        ReadFails([("kettle", "the kettle was descaled in May")]),
        telemetry=Telemetry(tracer_provider=spans.provider),
        recall_policy=current_session_recall_policy(on_failed="continue"),
    )
    async with rt:
        with anyio.fail_after(30):
            await rt.run(ANA, "s1", "when was the kettle descaled")
    said = [dict(e.attributes or {}) for s in spans.finished for e in s.events if e.name == "exception"]
    assert {"exception.type": ESCAPED} in said, said


async def test_a_memory_store_class_name_is_escaped_in_the_search_memory_span() -> None:
    spans = SpanRecorder()
    rt = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        memory=type(ODD, (InMemoryMemoryStore,), {})(),
        telemetry=Telemetry(tracer_provider=spans.provider),
    )
    async with rt:
        with anyio.fail_after(30):
            await rt.run(ANA, "s1", "hello")
    [search] = [s for s in spans.finished if s.name == "search_memory"]
    assert (search.attributes or {})["gen_ai.memory.store.id"] == ESCAPED
    _one_line_each(spans)
