"""``Runner.run``, ``Runner.run_sync`` and ``Runner.run_streamed`` with an AgentiumSession.

The model is the SDK's own ``agents.testing.ScriptedModel`` (no network).
Each turn runs in an event loop of its own (``asyncio.run``, or the one
``run_sync`` makes), so one runtime and one session serve successive loops,
as a sync web app would use them. A turn with a function tool checks that
the call and its output are committed together, in the turn's group.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from sdk_sessions import ANA, build_runtime

from agentium_harness import HarnessRuntime
from agentium_openai_agents import AgentiumSession

METHODS = ("run", "run_sync", "run_streamed")

# No trace exporter: these tests make no network call at all.
set_tracing_disabled(True)


@function_tool
def get_weather(city: str) -> str:
    """The weather in ``city``."""
    return f"sunny in {city}"


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[HarnessRuntime]:
    built = build_runtime(tmp_path / "agentium.db")
    yield built
    asyncio.run(built.aclose())


def run_turn(method: str, agent: Agent[Any], text: str, session: AgentiumSession) -> Any:
    if method == "run_sync":
        return Runner.run_sync(agent, text, session=session)

    async def turn() -> Any:
        if method == "run":
            return await Runner.run(agent, text, session=session)
        result = Runner.run_streamed(agent, text, session=session)
        async for _ in result.stream_events():
            pass
        return result

    return asyncio.run(turn())


@pytest.mark.parametrize("method", METHODS)
def test_the_runner_keeps_its_history_in_agentium(method: str, runtime: HarnessRuntime) -> None:
    session = AgentiumSession(runtime, ANA, f"chat-{method}")
    model = ScriptedModel()
    agent = Agent(name="weather", model=model, tools=[get_weather])

    model.enqueue([function_call("get_weather", {"city": "Paris"}, call_id="call_1")])
    model.enqueue([assistant_message("It is sunny in Paris.")])
    first = run_turn(method, agent, "Weather in Paris?", session)
    assert first.final_output == "It is sunny in Paris."

    model.enqueue([assistant_message("You asked about Paris.")])
    second = run_turn(method, agent, "What did I ask?", session)
    assert second.final_output == "You asked about Paris."

    # The model saw the first turn, tool call and output included, before the new question.
    seen = model.calls[-1].input
    assert isinstance(seen, list)
    assert [i.get("type", "message") for i in seen] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
        "message",
    ]
    assert seen[0]["content"] == "Weather in Paris?" and seen[-1]["content"] == "What did I ask?"
    assert "sunny in Paris" in str(seen[2]["output"])

    items = asyncio.run(session.get_items())
    assert len(items) == 6 and items[:5] == seen
    assert items[5]["role"] == "assistant" and items[5]["content"][0]["text"] == "You asked about Paris."
    page = asyncio.run(runtime.read_history(ANA, f"chat-{method}", max_groups=100))
    # No group holds half a tool exchange: the call and its output share one group.
    call_groups = {
        g.seq for g in page.groups for m in g.messages if (m.payload or {}).get("type") == "function_call"
    }
    output_groups = {
        g.seq
        for g in page.groups
        for m in g.messages
        if (m.payload or {}).get("type") == "function_call_output"
    }
    assert call_groups == output_groups and len(call_groups) == 1

    # pop_item takes the last answer out of what the model is given next.
    popped = asyncio.run(session.pop_item())
    assert popped is not None and "You asked about Paris." in str(popped)
    model.enqueue([assistant_message("ok")])
    run_turn(method, agent, "Again?", session)
    assert "You asked about Paris." not in str(model.calls[-1].input)


def test_the_history_read_benchmark_runs_and_prints_its_ratios() -> None:
    """benchmarks/history_read.py --small still runs end to end (its timings are not asserted)."""
    import re
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[3] / "benchmarks" / "history_read.py"
    result = subprocess.run(
        [sys.executable, str(script), "--small"], capture_output=True, text=True, timeout=300, check=False
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    for label, target in (
        ("add_items\\(2\\) at 100", "1"),
        ("add_items\\(2\\) at 400", "1"),
        ("get_items\\(20\\) at 400", "1.5"),
        ("get_items\\(\\) at 400", "2"),
    ):
        figures = r"agentium\s+\d+\.\d+ ms\s+sdk\s+\d+\.\d+ ms\s+ratio\s+\d+\.\d+"
        pattern = rf"^{label}\s+wall: {figures}\s+target <= {target}\s+(PASS|MISS)\s+cpu: {figures}$"
        assert re.search(pattern, out, re.M), out
