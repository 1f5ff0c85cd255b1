"""A summary update's summarizer call runs under the runtime's model deadline when it sets one.

Before, the summarizer call ran under ``SummaryLimits.timeout_s`` (10 s by
default) whatever the runtime's ``model_timeout_s`` said: a host that raised
its model deadline for a slow model still had the same model cut off when it
summarized, and a runtime with a short model deadline still waited
``SummaryLimits.timeout_s`` on a hung summarizer. Now the summarizer call is
bounded by the runtime's ``model_timeout_s`` when set (else
``SummaryLimits.timeout_s``, as before); the group read keeps
``SummaryLimits.timeout_s``; a summarizer blocked in a worker thread is walked
away from at the model deadline; and shutdown stays bounded by the settle and
close limits however long the model deadline is.

``SummaryLimits.model_timeout_s`` (``[summarizer.budget] model_timeout_s``)
gives the summarizer its own deadline, which comes before the runtime's:
order summary's, runtime's, ``SummaryLimits.timeout_s``. Bad values are
typed errors (``InvalidArgumentError``, ``ConfigError`` at the key's path).

Only the call a test wants to time out gets a short deadline; what must
succeed gets 30 s.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import attrs
import pytest

from agentium_harness import SessionKey, VerifiedIdentity, create_harness_runtime
from agentium_harness._config.runtime import load_runtime
from agentium_harness._engine.limits import ResidentLimits, RuntimeLimits
from agentium_harness._errors import ConfigError, InvalidArgumentError
from agentium_harness._ports import OpContext
from agentium_harness._ports.summary import SummaryLimits, TaskSummary
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ExtractiveProvider
from agentium_harness.adapters.summarizers import ExtractiveSummarizer

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s1")
#: The deadline of everything a test expects to succeed.
ROOMY_S = 30.0
#: Scheduling slack on a loaded two-core machine: far under what a bound left unenforced would take.
SLACK_S = 10.0
#: How long a blocked worker thread blocks at most (the test releases it earlier); past SLACK_S.
BLOCK_S = 20.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def thread_gate() -> Iterator[threading.Event]:
    """Released at the end of the test so the blocked thread returns (late) instead of waiting BLOCK_S."""
    event = threading.Event()
    yield event
    event.set()


class SlowSummarizer(ExtractiveSummarizer):
    """The real extractive summarizer behind a model that takes ``delay`` seconds, or never answers."""

    def __init__(self, delay: float = 0.0, hang: bool = False) -> None:
        super().__init__()
        self.delay = delay
        self.hang = hang
        self.contexts: list[OpContext] = []
        self.started = anyio.Event()

    async def summarize(self, previous: Any, groups: Any, ctx: OpContext) -> TaskSummary:
        self.contexts.append(ctx)
        self.started.set()
        if self.hang:
            await anyio.sleep_forever()
        await anyio.sleep(self.delay)
        return await super().summarize(previous, groups, ctx)


class BlockingClientSummarizer(ExtractiveSummarizer):
    """A summarizer over a blocking model client: its call blocks a worker thread cancellation cannot stop."""

    def __init__(self, gate: threading.Event) -> None:
        super().__init__()
        self.gate = gate

    async def summarize(self, previous: Any, groups: Any, ctx: OpContext) -> TaskSummary:
        await anyio.to_thread.run_sync(self.gate.wait, BLOCK_S)
        return await super().summarize(previous, groups, ctx)


def runtime(summarizer: Any, summary: SummaryLimits, **limits: Any) -> Any:
    """Two resident groups: the third turn archives group 0, and a summary update folds it."""
    limits.setdefault("op_timeout_s", ROOMY_S)
    return create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        summarizer=summarizer,
        summary_limits=summary,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2), **limits),
    )


async def three_turns(rt: Any) -> Any:
    result = None
    for i in range(3):
        result = await rt.run(ANA, "s1", f"Fact {i}: the widget number {i} weighs {i * 7} grams.")
    assert result is not None and result.committed and result.boundary == 1
    return result


async def stored_summary(rt: Any) -> Any:
    stored = await rt.session_store.load(KEY, OpContext.with_timeout(ROOMY_S))
    return stored.snapshot.summary


def summary_failure(result: Any) -> str:
    [note] = [d for d in result.diagnostics if d.code == "summary_failed"]
    return str(note.message)


# -- a slow model is not cut off by the summary's short deadline -----------------------------------


async def test_a_slow_summarizer_completes_under_the_runtimes_model_deadline() -> None:
    # SummaryLimits.timeout_s (0.2 s) would cut the 0.5 s summarizer off; the model deadline is 30 s.
    summary = SummaryLimits(timeout_s=0.2, background=False)
    rt = runtime(SlowSummarizer(delay=0.5), summary, model_timeout_s=ROOMY_S)
    result = await three_turns(rt)
    assert not result.has("summary_failed")
    assert result.summary is not None and result.summary.summary.frontier == 1
    assert await stored_summary(rt) == result.summary
    await rt.aclose()


async def test_a_slow_background_update_completes_under_the_runtimes_model_deadline() -> None:
    summarizer = SlowSummarizer(delay=0.5)
    rt = runtime(summarizer, SummaryLimits(timeout_s=0.2), model_timeout_s=ROOMY_S, settle_timeout_s=ROOMY_S)
    await three_turns(rt)
    report = await rt.resources.settle_summary(ANA, "s1")
    assert report is not None and report.status.value == "completed", report
    assert report.state is not None and report.state.summary.frontier == 1
    assert await stored_summary(rt) == report.state
    await rt.aclose()


async def test_without_a_model_deadline_the_summary_timeout_still_bounds_the_summarizer() -> None:
    # Nothing changes for a runtime that sets no model deadline: SummaryLimits.timeout_s applies.
    rt = runtime(SlowSummarizer(hang=True), SummaryLimits(timeout_s=0.3, background=False))
    with anyio.fail_after(SLACK_S):
        result = await three_turns(rt)
    assert "within 0.3s" in summary_failure(result)
    assert result.summary is None
    await rt.aclose()


# -- a hung model is still bounded, by the model deadline ------------------------------------------


async def test_a_hung_summarizer_times_out_at_the_runtimes_model_deadline() -> None:
    # SummaryLimits.timeout_s is 30 s: only the model deadline (0.3 s) can end the call in time.
    summarizer = SlowSummarizer(hang=True)
    rt = runtime(summarizer, SummaryLimits(timeout_s=ROOMY_S, background=False), model_timeout_s=0.3)
    started = time.monotonic()
    with anyio.fail_after(SLACK_S):
        result = await three_turns(rt)
    assert time.monotonic() - started < SLACK_S
    assert "summarize did not finish within 0.3s" in summary_failure(result)
    assert summarizer.contexts[0].signal.cancelled
    assert result.summary is None and await stored_summary(rt) is None  # nothing kept
    await rt.aclose()


async def test_a_hung_background_update_times_out_at_the_model_deadline() -> None:
    summarizer = SlowSummarizer(hang=True)
    rt = runtime(summarizer, SummaryLimits(timeout_s=ROOMY_S), model_timeout_s=0.3, settle_timeout_s=ROOMY_S)
    await three_turns(rt)
    with anyio.fail_after(SLACK_S):
        report = await rt.resources.settle_summary(ANA, "s1")
    assert report is not None and report.status.value == "failed", report
    assert any("within 0.3s" in d.message for d in report.diagnostics), report.diagnostics
    assert await stored_summary(rt) is None
    await rt.aclose()


async def test_a_summarizer_blocked_in_a_worker_thread_is_walked_away_from(
    thread_gate: threading.Event,
) -> None:
    summarizer = BlockingClientSummarizer(thread_gate)
    rt = runtime(summarizer, SummaryLimits(timeout_s=ROOMY_S, background=False), model_timeout_s=0.3)
    started = time.monotonic()
    with anyio.fail_after(SLACK_S):
        result = await three_turns(rt)
    assert time.monotonic() - started < SLACK_S
    message = summary_failure(result)
    assert "within 0.3s" in message and "abandoned" in message
    assert result.summary is None and await stored_summary(rt) is None
    thread_gate.set()
    await rt.aclose()


# -- shutdown is bounded by the settle and close limits, not by the model deadline -----------------


async def test_aclose_does_not_wait_out_a_long_model_deadline() -> None:
    # The model deadline is an hour; only the settle (0.2 s) is meant to run out.
    summarizer = SlowSummarizer(hang=True)
    rt = runtime(
        summarizer, SummaryLimits(), model_timeout_s=3600, settle_timeout_s=0.2, close_timeout_s=ROOMY_S
    )
    await three_turns(rt)
    with anyio.fail_after(SLACK_S):
        await summarizer.started.wait()
        await rt.aclose()
    assert rt.state.value == "closed"
    assert not rt.parts.work.busy(KEY)
    assert summarizer.contexts[0].signal.cancelled
    assert await stored_summary(rt) is None


async def test_aclose_walks_away_from_a_blocked_update_under_a_long_model_deadline(
    thread_gate: threading.Event,
) -> None:
    rt = runtime(
        BlockingClientSummarizer(thread_gate),
        SummaryLimits(),
        model_timeout_s=3600,
        settle_timeout_s=0.2,
        close_timeout_s=ROOMY_S,
    )
    await three_turns(rt)
    with anyio.fail_after(SLACK_S):
        await rt.aclose()
    assert rt.state.value == "closed"
    assert not rt.parts.work.busy(KEY)
    thread_gate.set()  # the abandoned thread returns now (trio ends its run only after it has)


async def test_the_next_run_waits_for_an_update_as_long_as_its_model_deadline() -> None:
    # The next run on the session settles the earlier update first: the wait adds up the update's
    # own deadlines (read, summarizer, save), the summarizer's being the model deadline now.
    rt = runtime(
        SlowSummarizer(hang=True),
        SummaryLimits(timeout_s=0.1),
        model_timeout_s=600,
        settle_timeout_s=0.2,  # aclose cancels the update the last run started
        close_timeout_s=ROOMY_S,
    )
    waits: list[float] = []
    settle = rt.parts.work.settle

    async def recorded(key: SessionKey, timeout_s: float) -> Any:
        waits.append(timeout_s)
        return await settle(key, 0.1)  # do not wait it out: the value is what is checked

    rt.parts.work.settle = recorded
    await three_turns(rt)
    await rt.run(ANA, "s1", "Fact 3: one more.")
    assert waits and set(waits) == {0.1 + 600 + ROOMY_S}
    del rt.parts.work.settle
    await rt.aclose()


# -- from a config file ------------------------------------------------------------------------------

CONFIG = """
[provider]
plugin = "extractive"

[archive]
plugin = "memory"

[session_store]
plugin = "memory"

[summarizer]
plugin = "extractive"

[summarizer.budget]
timeout_s = 30
background = false

[runtime]
op_timeout_s = 30
model_timeout_s = 0.3

[runtime.resident]
max_groups = 2
"""


async def test_the_configs_model_timeout_bounds_the_summarizer(tmp_path: Path) -> None:
    path = tmp_path / "agentium.toml"
    path.write_text(CONFIG, "utf-8")
    rt = load_runtime(path, environ={})
    summarizer = SlowSummarizer(hang=True)
    rt.summarizer = summarizer
    with anyio.fail_after(SLACK_S):
        result = await three_turns(rt)
    assert "within 0.3s" in summary_failure(result)
    assert result.summary is None
    await rt.aclose()


# -- the summary's own model deadline (SummaryLimits.model_timeout_s) beats the runtime's ----------
#
# Order: SummaryLimits.model_timeout_s, else RuntimeLimits.model_timeout_s, else SummaryLimits.timeout_s.


async def test_the_summarys_own_deadline_lets_a_slow_summarizer_finish_under_a_short_runtime_one() -> None:
    # The runtime's model deadline (0.2 s) would cut the 0.5 s summarizer off; the summary's is 30 s.
    # (The provider's own call is in-process and instant: the runtime's 0.2 s does not trouble it.)
    summary = SummaryLimits(timeout_s=ROOMY_S, background=False, model_timeout_s=ROOMY_S)
    rt = runtime(SlowSummarizer(delay=0.5), summary, model_timeout_s=0.2)
    result = await three_turns(rt)
    assert not result.has("summary_failed")
    assert result.summary is not None and result.summary.summary.frontier == 1
    assert await stored_summary(rt) == result.summary
    await rt.aclose()


async def test_the_summarys_own_deadline_beats_its_timeout_without_a_runtime_model_deadline() -> None:
    summary = SummaryLimits(timeout_s=0.2, model_timeout_s=ROOMY_S)
    rt = runtime(SlowSummarizer(delay=0.5), summary, settle_timeout_s=ROOMY_S)
    await three_turns(rt)
    report = await rt.resources.settle_summary(ANA, "s1")
    assert report is not None and report.status.value == "completed", report
    assert report.state is not None and report.state.summary.frontier == 1
    assert await stored_summary(rt) == report.state
    await rt.aclose()


async def test_a_hung_summarizer_times_out_at_the_summarys_own_deadline() -> None:
    # The runtime's model deadline and timeout_s are 30 s: only the summary's 0.3 s can end it in time.
    summarizer = SlowSummarizer(hang=True)
    summary = SummaryLimits(timeout_s=ROOMY_S, background=False, model_timeout_s=0.3)
    rt = runtime(summarizer, summary, model_timeout_s=ROOMY_S)
    with anyio.fail_after(SLACK_S):
        result = await three_turns(rt)
    assert "summarize did not finish within 0.3s" in summary_failure(result)
    assert summarizer.contexts[0].signal.cancelled
    assert result.summary is None and await stored_summary(rt) is None  # nothing kept
    await rt.aclose()


async def test_a_hung_background_update_times_out_at_the_summarys_own_deadline() -> None:
    summarizer = SlowSummarizer(hang=True)
    summary = SummaryLimits(timeout_s=ROOMY_S, model_timeout_s=0.3)
    rt = runtime(summarizer, summary, model_timeout_s=ROOMY_S, settle_timeout_s=ROOMY_S)
    await three_turns(rt)
    with anyio.fail_after(SLACK_S):
        report = await rt.resources.settle_summary(ANA, "s1")
    assert report is not None and report.status.value == "failed", report
    assert any("within 0.3s" in d.message for d in report.diagnostics), report.diagnostics
    assert summarizer.contexts[0].signal.cancelled
    assert await stored_summary(rt) is None
    await rt.aclose()


async def test_the_next_run_waits_for_an_update_as_long_as_the_summarys_own_deadline() -> None:
    rt = runtime(
        SlowSummarizer(hang=True),
        SummaryLimits(timeout_s=0.1, model_timeout_s=600),
        model_timeout_s=ROOMY_S,
        settle_timeout_s=0.2,  # aclose cancels the update the last run started
        close_timeout_s=ROOMY_S,
    )
    waits: list[float] = []
    settle = rt.parts.work.settle

    async def recorded(key: SessionKey, timeout_s: float) -> Any:
        waits.append(timeout_s)
        return await settle(key, 0.1)  # do not wait it out: the value is what is checked

    rt.parts.work.settle = recorded
    await three_turns(rt)
    await rt.run(ANA, "s1", "Fact 3: one more.")
    assert waits and set(waits) == {0.1 + 600 + ROOMY_S}
    del rt.parts.work.settle
    await rt.aclose()


async def test_aclose_does_not_wait_out_a_long_summary_deadline() -> None:
    # The summary's model deadline is an hour; only the settle (0.2 s) is meant to run out.
    summarizer = SlowSummarizer(hang=True)
    rt = runtime(
        summarizer,
        SummaryLimits(model_timeout_s=3600),
        settle_timeout_s=0.2,
        close_timeout_s=ROOMY_S,
    )
    await three_turns(rt)
    with anyio.fail_after(SLACK_S):
        await summarizer.started.wait()
        await rt.aclose()
    assert rt.state.value == "closed"
    assert not rt.parts.work.busy(KEY)
    assert summarizer.contexts[0].signal.cancelled
    assert await stored_summary(rt) is None


async def test_close_session_does_not_wait_out_a_long_summary_deadline() -> None:
    summarizer = SlowSummarizer(hang=True)
    rt = runtime(summarizer, SummaryLimits(model_timeout_s=3600), settle_timeout_s=0.2)
    await three_turns(rt)
    with anyio.fail_after(SLACK_S):
        await summarizer.started.wait()
        await rt.resources.close_session(ANA, "s1")
    assert not rt.parts.work.busy(KEY)
    assert summarizer.contexts[0].signal.cancelled
    assert await stored_summary(rt) is None
    await rt.aclose()


def test_the_summarys_deadline_is_the_last_field_and_positional_construction_keeps_its_meaning() -> None:
    limits = SummaryLimits(4, 1024, 512, 2.0, False)
    assert (limits.max_groups, limits.timeout_s, limits.background) == (4, 2.0, False)
    assert limits.model_timeout_s is None
    assert SummaryLimits(4, 1024, 512, 2.0, False, 7.5).model_timeout_s == 7.5


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), 3601, 1e308, "30", True])
def test_a_bad_summary_deadline_in_code_is_a_typed_error_and_changes_nothing(bad: object) -> None:
    good = SummaryLimits(model_timeout_s=5.0)
    with pytest.raises(InvalidArgumentError, match="model_timeout_s"):
        SummaryLimits(model_timeout_s=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="model_timeout_s"):
        attrs.evolve(good, model_timeout_s=bad)
    assert good.model_timeout_s == 5.0


# -- [summarizer.budget] model_timeout_s ------------------------------------------------------------

OWN_CONFIG = CONFIG.replace("model_timeout_s = 0.3", "model_timeout_s = 30").replace(
    "background = false\n", "background = false\nmodel_timeout_s = 0.3\n"
)


async def test_the_configs_summary_deadline_beats_the_runtimes(tmp_path: Path) -> None:
    path = tmp_path / "agentium.toml"
    path.write_text(OWN_CONFIG, "utf-8")
    rt = load_runtime(path, environ={})
    assert rt.summary_limits.model_timeout_s == 0.3 and rt.limits.model_timeout_s == ROOMY_S
    summarizer = SlowSummarizer(hang=True)
    rt.summarizer = summarizer
    with anyio.fail_after(SLACK_S):
        result = await three_turns(rt)
    assert "summarize did not finish within 0.3s" in summary_failure(result)
    assert result.summary is None and await stored_summary(rt) is None
    await rt.aclose()


@pytest.mark.parametrize("bad", ["0", "-1", "nan", "inf", "3601", "1e308", '"30"', "true"])
def test_a_bad_summary_deadline_in_config_is_an_error_at_its_key(tmp_path: Path, bad: str) -> None:
    path = tmp_path / "agentium.toml"
    path.write_text(OWN_CONFIG.replace("model_timeout_s = 0.3", f"model_timeout_s = {bad}"), "utf-8")
    with pytest.raises(ConfigError) as info:
        load_runtime(path, environ={})
    [issue] = [i for i in info.value.issues if i.path == "$.summarizer.budget.model_timeout_s"]
    assert "unknown" not in issue.message.lower(), issue  # the value is refused, not the key
