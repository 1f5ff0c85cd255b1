"""An exception no stage typed (an engine bug) still says truthfully whether the operation committed.

Adapter calls and tool handlers are wrapped already; these tests make an
internal stage itself raise a plain ``RuntimeError`` — during the tool loop
after a tool ran, before the commit, during the save, after the commit —
and check that ``run()`` and ``append()`` raise an ``AgentiumError`` caused by
it, whose ``commit_state`` matches what the session holds when read back, and
that the WARNING logged says so without the exception's text.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from _effects_support import DEPLOY

from agentium_harness import (
    AgentiumError,
    CommitState,
    EffectLevel,
    InterruptionCause,
    Message,
    Role,
    RunStatus,
    Tool,
    ToolRegistry,
    ToolStatus,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness._engine import commit as commit_module
from agentium_harness._engine import effects, history_write, turn_budget, turn_commit
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
#: In the injected exception's text: it may be content, so no log record may carry it.
SECRET = "the secret plan"


def _boom(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError(f"engine bug near {SECRET}")


def _runtime(log: list[str]) -> Any:
    async def deploy(args: Any) -> str:
        log.append(f"deployed to {args['to']}")
        return "deployed v2 to prod"

    return create_harness_runtime(
        provider=ScriptedProvider(replies=[DEPLOY, "Deployed."]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        tools=ToolRegistry([Tool("deploy", deploy, EffectLevel.WRITE)]),
    )


async def _failed_run(runtime: Any, caplog: pytest.LogCaptureFixture) -> AgentiumError:
    with caplog.at_level(logging.WARNING, logger="agentium"), pytest.raises(AgentiumError) as caught:
        await runtime.run(ANA, "s1", "deploy v2", grants=["deploy"])
    error = caught.value
    assert isinstance(error.__cause__, RuntimeError) and SECRET in str(error.__cause__)
    assert "unexpected error" in str(error)
    # One WARNING for the run, with the state it ended in (once what ran was committed, or not).
    warned = [
        r for r in caplog.records if r.getMessage().startswith("run failed with an unexpected RuntimeError")
    ]
    assert len(warned) == 1 and warned[0].levelno == logging.WARNING
    assert warned[0].agentium_commit_state == error.commit_state.value  # type: ignore[attr-defined,union-attr]
    for record in caplog.records:  # never the exception's text (nor the input) in a log record
        shown = record.getMessage() + repr(vars(record))
        assert SECRET not in shown and "deploy v2" not in shown
    return error


async def _groups(runtime: Any) -> list[list[Role]]:
    page = await runtime.read_history(ANA, "s1", max_groups=10)
    return [[m.role for m in g.messages] for g in page.groups]


async def test_a_failure_in_the_tool_loop_after_a_tool_ran_commits_the_call_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    log: list[str] = []
    runtime = _runtime(log)
    monkeypatch.setattr(turn_budget.TurnBudget, "fit", _boom)  # on the tool's output, after it ran
    error = await _failed_run(runtime, caplog)
    assert log == ["deployed to prod"]
    # The tool ran, so its call is canonical history: committed without an answer, and the error says so.
    assert error.commit_state is CommitState.COMMITTED
    assert "were committed as group 0" in str(error) and "interruption step_failed" in str(error)
    assert "nothing was committed" not in str(error)
    report = error.run_result
    assert report is not None and report.status is RunStatus.INTERRUPTED and report.committed
    assert report.group_seq == 0 and report.has("turn_interrupted_committed")
    # The call whose handler ran is reported: it may have had its effects.
    [outcome] = report.tool_outcomes
    assert outcome.name == "deploy" and outcome.status is ToolStatus.CANCELLED
    assert "when the run failed; it may have run" in outcome.detail
    monkeypatch.undo()
    [kept] = (await runtime.read_history(ANA, "s1", max_groups=10, view=False)).groups
    assert [m.role for m in kept.group.messages] == [Role.USER, Role.ASSISTANT, Role.TOOL]
    assert kept.group.is_complete and "it may have run" in kept.group.messages[-1].content
    stopped = kept.group.retained.interruption if kept.group.retained is not None else None
    assert stopped is not None and stopped.cause is InterruptionCause.STEP_FAILED
    assert "RuntimeError" in stopped.detail  # the error named; the next turn's model sees the call ran
    assert (await runtime.inspect_session(ANA, "s1")).interrupted == ((0, stopped),)


async def test_a_failure_after_the_turn_before_its_commit_is_not_committed(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    log: list[str] = []
    runtime = _runtime(log)
    monkeypatch.setattr(effects, "commit_turn", _boom)  # the turn's commit, and that of what ran
    error = await _failed_run(runtime, caplog)
    assert log == ["deployed to prod"]
    assert error.commit_state is CommitState.NOT_COMMITTED
    assert "could not be committed either" in str(error) and "nothing was committed" in str(error)
    # The second unexpected exception, in the commit of what ran, is logged as such.
    assert any(
        r.getMessage().startswith("run (committing what ran) failed with an unexpected RuntimeError")
        for r in caplog.records
    )
    report = error.run_result
    assert report is not None and not report.committed and report.group_seq is None
    assert report.has("effects_commit_failed")
    assert [(o.name, o.status) for o in report.tool_outcomes] == [("deploy", ToolStatus.OK)]
    assert not (await runtime.inspect_session(ANA, "s1")).exists


async def test_a_failure_once_the_save_began_is_unknown_and_the_save_may_have_landed(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = _runtime([])
    real_save = commit_module._save

    async def saved_then_bug(*args: Any, **kwargs: Any) -> int:
        await real_save(*args, **kwargs)
        raise RuntimeError(f"engine bug near {SECRET}")

    monkeypatch.setattr(commit_module, "_save", saved_then_bug)
    error = await _failed_run(runtime, caplog)
    assert error.commit_state is CommitState.UNKNOWN
    assert "inspect the session" in str(error) and "nothing was committed" not in str(error)
    # Unknown, and indeed the save had landed: inspecting the session tells the host.
    monkeypatch.setattr(commit_module, "_save", real_save)
    assert await _groups(runtime) == [[Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]]


async def test_a_failure_after_the_commit_is_committed(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = _runtime([])
    monkeypatch.setattr(turn_commit, "final_answer", _boom)  # builds the result, after the commit
    error = await _failed_run(runtime, caplog)
    assert error.commit_state is CommitState.COMMITTED
    assert "do not retry it" in str(error)
    report = error.run_result
    assert report is not None and report.committed and report.group_seq == 0
    assert [(o.name, o.status) for o in report.tool_outcomes] == [("deploy", ToolStatus.OK)]
    assert await _groups(runtime) == [[Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]]


@pytest.mark.parametrize(
    ("stage", "state", "groups"),
    [("check_group_size", CommitState.NOT_COMMITTED, 0), ("AppendResult", CommitState.COMMITTED, 1)],
)
async def test_append_says_whether_it_committed_when_a_stage_fails_unexpectedly(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    stage: str,
    state: CommitState,
    groups: int,
) -> None:
    runtime = _runtime([])
    monkeypatch.setattr(history_write, stage, _boom)
    with caplog.at_level(logging.WARNING, logger="agentium"), pytest.raises(AgentiumError) as caught:
        await runtime.append(ANA, "s1", [Message(Role.USER, "hello")])
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert caught.value.commit_state is state
    assert any("append failed with an unexpected RuntimeError" in r.getMessage() for r in caplog.records)
    assert all(SECRET not in r.getMessage() + repr(vars(r)) for r in caplog.records)
    monkeypatch.undo()
    view = await runtime.inspect_session(ANA, "s1")
    assert len(view.resident_seqs) == groups


class Interrupted(BaseException):
    """Not an Exception: like KeyboardInterrupt, it must leave the run as it is."""


async def test_a_base_exception_that_is_not_an_exception_goes_on_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runtime = _runtime([])

    def interrupt(*args: Any, **kwargs: Any) -> Any:
        raise Interrupted

    monkeypatch.setattr(turn_commit, "final_answer", interrupt)
    with pytest.raises(Interrupted):
        await runtime.run(ANA, "s1", "deploy v2", grants=["deploy"])
