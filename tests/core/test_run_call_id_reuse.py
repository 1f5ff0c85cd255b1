"""``run()`` never commits a turn that names one tool call id on two calls.

Models that number their calls per response (``call_0`` on every step, Kimi's
``functions.edit:0``) or derive the id from the response name an id an
earlier step of the same turn already used. Committed as given, the group
would hold two ``tool`` results of one id, which ``run()`` sends on every
later turn and Chat Completions refuses ("Duplicate value for
'tool_call_id'"); refused, every turn of two tool steps with such a model
failed. Such a call runs under an id of its own, ``"<id>_<n>"`` (the first
``n`` from 1 no call of the turn or the history sent uses, the id cut to fit 64
characters; an id of nine ASCII letters and digits keeps that form), and the
run says so in an INFO diagnostic (``tool_call_ids_renamed``, a count, no id
or content). So does a call naming an id twice in one reply (the second is
renamed), and a history sent holding one id in two groups (the later is sent,
not stored, under an id of its own). Each keeps to ``[A-Za-z0-9_-]`` when the
model's id does: Anthropic and Bedrock refuse any other character.
"""

from __future__ import annotations

import logging
import re
from typing import Any, ClassVar

import anyio
import pytest
from _call_ids_support import exchange
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentium_harness import (
    AgentiumError,
    EffectLevel,
    Message,
    Role,
    RunResult,
    Severity,
    Telemetry,
    Tool,
    ToolCall,
    ToolRegistry,
    Verdict,
    VerifiedIdentity,
    create_harness_runtime,
    verified_completion_policy,
)
from agentium_harness._engine.call_ids import distinct_history
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.plugin_api import (
    CompletionCandidate,
    CompletionVerifier,
    EvidenceEntry,
    VerificationResult,
    VerifierCapabilities,
    VerifyContext,
    sent_id_form,
)

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
SECRET_INPUT = "tangerine-input-77"
SECRET_OUTPUT = "tangerine-page-42"


def _calls(*ids: str) -> dict[str, Any]:
    return {"content": "", "tool_calls": [{"id": i, "name": "fetch", "arguments": {"q": i}} for i in ids]}


async def _run(
    script: list[object], grants: list[str], caplog: pytest.LogCaptureFixture
) -> tuple[RunResult | AgentiumError, list[str], list[Message], ScriptedProvider, InMemorySpanExporter]:
    """A run of ``script``; what it returned or raised, the calls that ran, the history, the next request."""
    ran: list[str] = []

    async def fetch(arguments: dict[str, Any]) -> str:
        ran.append(arguments["q"])
        return SECRET_OUTPUT

    exporter = InMemorySpanExporter()
    traces = TracerProvider()
    traces.add_span_processor(SimpleSpanProcessor(exporter))
    provider = ScriptedProvider(replies=[*script, "next answer"])
    runtime = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        tools=ToolRegistry([Tool("fetch", fetch, EffectLevel.READ)]),
        telemetry=Telemetry(tracer_provider=traces),
    )
    async with runtime:
        with anyio.fail_after(30), caplog.at_level(logging.DEBUG, logger="agentium"):
            try:
                outcome: RunResult | AgentiumError = await runtime.run(ANA, "s1", SECRET_INPUT, grants=grants)
            except AgentiumError as exc:
                outcome = exc
            history = list((await runtime.read_history(ANA, "s1", max_groups=10)).messages)
            # The session goes on: the next turn's request holds each tool call id once.
            after = await runtime.run(ANA, "s1", "and now?")
    assert after.output == "next answer"
    return outcome, ran, history, provider, exporter


def _tool_ids(messages: list[Message]) -> tuple[list[str], list[str]]:
    calls = [c.id for m in messages for c in m.tool_calls]
    results = [m.tool_call_id or "" for m in messages if m.role is Role.TOOL]
    return calls, results


async def _completes(
    script: list[object], grants: list[str], caplog: pytest.LogCaptureFixture
) -> tuple[RunResult, list[str], list[Message], ScriptedProvider, InMemorySpanExporter]:
    outcome, ran, history, provider, exporter = await _run([*script, "done"], grants, caplog)
    assert isinstance(outcome, RunResult), outcome
    assert outcome.output == "done"
    return outcome, ran, history, provider, exporter


def _renamed(result: RunResult) -> list[str]:
    return [d.message for d in result.diagnostics if d.code == "tool_call_ids_renamed"]


@pytest.mark.parametrize(
    ("second", "committed"),
    [
        pytest.param(("c1",), ["c1", "c1_1"], id="same-id"),
        pytest.param(("c2", "c1"), ["c1", "c2", "c1_1"], id="second-call-of-the-reply"),
        pytest.param(("c1", "c1_1"), ["c1", "c1_2", "c1_1"], id="the-new-id-taken-in-the-reply"),
    ],
)
async def test_a_reply_reusing_an_earlier_call_id_runs_under_an_id_of_its_own(
    second: tuple[str, ...], committed: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    outcome, ran, history, provider, exporter = await _completes(
        [_calls("c1"), _calls(*second)], ["fetch"], caplog
    )
    assert ran == ["c1", *second]  # every call ran, with the arguments the model gave
    assert _tool_ids(history) == (committed, committed)
    # What the next run sent: every tool call id once, each answered.
    request = provider.calls[-1]
    calls, results = _tool_ids([*request.history, *request.turn])
    assert calls == results == committed
    # Said, as a count: no id, no content.
    (note,) = [d for d in outcome.diagnostics if d.code == "tool_call_ids_renamed"]
    assert note.severity is Severity.INFO and note.message.startswith("1 tool call ")
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert SECRET_INPUT not in logged and SECRET_OUTPUT not in logged
    for span in exporter.get_finished_spans():
        shown = repr(dict(span.attributes or {})) + repr([dict(e.attributes or {}) for e in span.events])
        assert SECRET_INPUT not in shown and SECRET_OUTPUT not in shown


async def test_a_model_numbering_its_calls_per_response_completes_a_turn_of_many_steps(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # call_0 (and call_1) on every step: each step's calls run, each under an id of its own.
    outcome, ran, history, _provider, _exporter = await _completes(
        [_calls("call_0", "call_1"), _calls("call_0"), _calls("call_0", "call_1")], ["fetch"], caplog
    )
    assert ran == ["call_0", "call_1", "call_0", "call_0", "call_1"]
    ids = ["call_0", "call_1", "call_0_1", "call_0_2", "call_1_1"]
    assert _tool_ids(history) == (ids, ids)
    assert [note.split(" ", 1)[0] for note in _renamed(outcome)] == ["1", "2"]  # a note per reply


async def test_a_reused_id_of_calls_that_never_ran_is_renamed_too(caplog: pytest.LogCaptureFixture) -> None:
    # No grant: each call is refused, not run, and recorded under an id of its own.
    _outcome, ran, history, _provider, _exporter = await _completes([_calls("c1"), _calls("c1")], [], caplog)
    assert ran == []
    assert _tool_ids(history) == (["c1", "c1_1"], ["c1", "c1_1"])


async def test_a_reused_long_id_is_cut_to_fit_64_characters(caplog: pytest.LogCaptureFixture) -> None:
    # Over 64 characters, the first call runs under an id of its own too (no provider takes more).
    long = "x" * 256
    _outcome, ran, history, _provider, _exporter = await _completes(
        [_calls(long), _calls(long)], ["fetch"], caplog
    )
    assert ran == [long, long]
    first = sent_id_form(long)
    ids = [first, first[:62] + "_1"]
    assert len(first) == 64 and first.startswith("x" * 47 + "_")
    assert _tool_ids(history) == (ids, ids)


async def test_fresh_ids_on_every_step_are_kept(caplog: pytest.LogCaptureFixture) -> None:
    outcome, ran, history, _provider, _exporter = await _completes(
        [_calls("c1"), _calls("c2", "c3")], ["fetch"], caplog
    )
    assert ran == ["c1", "c2", "c3"]
    assert _tool_ids(history) == (["c1", "c2", "c3"], ["c1", "c2", "c3"])
    assert _renamed(outcome) == []


class _Fails(CompletionVerifier):
    """Always ``fail``: the run revises its answer."""

    capabilities: ClassVar[VerifierCapabilities] = VerifierCapabilities(artifact_digests=True)

    async def verify(self, candidate: CompletionCandidate, ctx: VerifyContext) -> VerificationResult:
        return VerificationResult(Verdict.FAIL, (EvidenceEntry("artifact", "out.txt", "differs"),), "draft")


async def test_a_revision_reusing_an_id_of_the_turn_it_continues_runs_under_an_id_of_its_own() -> None:
    # A revision continues the turn (one group): an id its turn already used is renamed there too.
    ran: list[str] = []

    async def fetch(arguments: dict[str, Any]) -> str:
        ran.append(arguments["q"])
        return "page"

    provider = ScriptedProvider(replies=[_calls("c1"), "Done.", _calls("c1"), "Revised."])
    runtime = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        tools=ToolRegistry([Tool("fetch", fetch, EffectLevel.READ)]),
        verifier=_Fails(),
    )
    policy = verified_completion_policy(on_fail="revise", max_revisions=1)
    async with runtime:
        with anyio.fail_after(30):
            result = await runtime.run(ANA, "s1", "write the report", grants=["fetch"], completion=policy)
            history = list((await runtime.read_history(ANA, "s1", max_groups=10)).messages)
    assert result.committed
    assert ran == ["c1", "c1"]
    assert _tool_ids(history) == (["c1", "c1_1"], ["c1", "c1_1"])


async def test_a_call_naming_an_id_of_the_history_sent_runs_under_an_id_of_its_own() -> None:
    # A model numbering its calls per response names call_0 on the first step of every turn: the
    # request of the next step carries the earlier turn's group (call_0 and its result) beside this
    # turn's, and Chat Completions refuses two tool results of one id anywhere in a request.
    async def fetch(arguments: dict[str, Any]) -> str:
        return "page"

    provider = ScriptedProvider(replies=[_calls("call_0"), "one", _calls("call_0"), "two", "three"])
    runtime = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        tools=ToolRegistry([Tool("fetch", fetch, EffectLevel.READ)]),
    )
    async with runtime:
        with anyio.fail_after(30):
            await runtime.run(ANA, "s1", "first", grants=["fetch"])
            second = await runtime.run(ANA, "s1", "second", grants=["fetch"])
            await runtime.run(ANA, "s1", "third")
            history = list((await runtime.read_history(ANA, "s1", max_groups=10)).messages)
    assert second.output == "two"
    # Every request of the session: each tool call id once, each answered once.
    for request in provider.calls:
        calls, results = _tool_ids([*request.history, *request.turn])
        assert len(set(calls)) == len(calls) and sorted(results) == sorted(calls)
    assert len(_renamed(second)) == 1
    ids = ["call_0", "call_0_1"]
    assert _tool_ids(history) == (ids, ids)


STRICT = re.compile(r"[A-Za-z0-9_-]{1,64}")


@pytest.mark.parametrize(
    ("script", "committed"),
    [
        pytest.param([_calls("c1", "c1")], ["c1", "c1_1"], id="twice-in-one-reply"),
        pytest.param([_calls("c1"), _calls("c1", "c1")], ["c1", "c1_1", "c1_2"], id="twice-and-earlier"),
        pytest.param([_calls("c1", "c1_1", "c1")], ["c1", "c1_1", "c1_2"], id="the-new-id-taken-after-it"),
    ],
)
async def test_a_reply_naming_one_id_twice_runs_the_second_under_an_id_of_its_own(
    script: list[object], committed: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    # It was refused (ContractViolationError, no tool run): the second call and its result are
    # renamed instead, so each result answers one call, and the model reads which.
    outcome, ran, history, provider, _exporter = await _completes(script, ["fetch"], caplog)
    assert sorted(ran) == sorted(c for reply in script for c in _ids_of(reply))
    assert _tool_ids(history) == (committed, committed)
    calls, results = _tool_ids([*provider.calls[-1].history, *provider.calls[-1].turn])
    assert calls == results == committed
    given = [c for reply in script for c in _ids_of(reply)]
    assert sum(int(note.split(" ", 1)[0]) for note in _renamed(outcome)) == len(given) - len(set(given))


def _ids_of(reply: object) -> list[str]:
    assert isinstance(reply, dict)
    return [call["id"] for call in reply["tool_calls"]]


@pytest.mark.parametrize(
    ("given", "own"),
    [
        pytest.param("call_0", "call_0_1", id="openai-like"),
        pytest.param("toolu_01A09q90qw90lq917835lq9", "toolu_01A09q90qw90lq917835lq9_1", id="anthropic-like"),
        pytest.param("aB3dE5gH7", "aB3dE5gH1", id="mistral-nine-alphanumerics"),
        pytest.param("aB3dE5gH1", "aB3dE5gH2", id="mistral-ending-in-the-digit"),
        pytest.param("functions.edit:0", "functions.edit:0_1", id="kimi-keeps-its-own-alphabet"),
        pytest.param("y" * 64, "y" * 62 + "_1", id="long"),
    ],
)
async def test_an_id_of_its_own_keeps_the_strict_alphabet_and_form_of_the_given_id(
    given: str, own: str, caplog: pytest.LogCaptureFixture
) -> None:
    _outcome, _ran, history, _provider, _exporter = await _completes(
        [_calls(given), _calls(given)], ["fetch"], caplog
    )
    assert _tool_ids(history) == ([given, own], [given, own])
    if STRICT.fullmatch(given[:64]):
        assert STRICT.fullmatch(own)  # nothing Anthropic's or Bedrock's [A-Za-z0-9_-] refuses
    if given.isalnum() and len(given) == 9:
        assert own.isalnum() and own.isascii() and len(own) == 9  # Mistral's form


async def test_groups_appended_with_one_id_are_sent_each_under_an_id_of_its_own() -> None:
    # append's rule is per group: two groups may hold call c1 (and one c1_1). Sent as stored, a
    # request held two results of c1, which Chat Completions refuses; the later is sent under an
    # id of its own, its result too, in the request only: history stays as committed.
    async def fetch(arguments: dict[str, Any]) -> str:
        return f"result {arguments['q']}"

    provider = ScriptedProvider(replies=[_calls("c1"), "done", "again"])
    runtime = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        tools=ToolRegistry([Tool("fetch", fetch, EffectLevel.READ)]),
    )
    async with runtime:
        with anyio.fail_after(30):
            for call_id, tag in (("c1", "A"), ("c1", "B"), ("c1_1", "C"), ("c1", "D")):
                await runtime.append(ANA, "s1", exchange(call_id, tag))
            result = await runtime.run(ANA, "s1", "go on", grants=["fetch"])
            again = await runtime.run(ANA, "s1", "and again")
            history = list((await runtime.read_history(ANA, "s1", max_groups=10)).messages)
    assert result.output == "done" and again.output == "again"
    for request in provider.calls:
        messages = [*request.history, *request.turn]
        calls, results = _tool_ids(messages)
        assert len(set(calls)) == len(calls) and sorted(results) == sorted(calls)
        asked = {c.id: c.arguments["q"] for m in messages for c in m.tool_calls}
        for m in messages:  # each result still answers its own call
            if m.role is Role.TOOL:
                assert m.content == f"result {asked[m.tool_call_id or '']}"
        assert all(STRICT.fullmatch(c) for c in calls)
    first = [*provider.calls[0].history]
    # Named by their group's seq (B is 1, D is 3); C's own c1_1 was B's name: C's gets one of its own.
    assert _tool_ids(first)[0] == ["c1", "c1_1", "c1_1_2", "c1_3"]
    # Canonical history is as appended and as run() committed (its call named c1: an id of its own).
    assert _tool_ids(history)[0] == ["c1", "c1", "c1_1", "c1", "c1_2"]
    notes = [d for d in result.diagnostics if d.code == "tool_call_ids_renamed"]
    # The history's (B, C, D: C's c1_1 is B's name), the reply's.
    assert [n.message.split(" ", 1)[0] for n in notes] == ["3", "1"]
    assert all(n.severity is Severity.INFO for n in notes)


def test_a_group_naming_one_id_on_two_steps_pairs_each_result_with_its_call() -> None:
    # run() committed such groups before it renamed ids: each result answers the earliest open
    # call of its id, as match_tool_results pairs them, and follows it to its id of its own.
    group = (
        Message(Role.ASSISTANT, "", tool_calls=(ToolCall("c1", "fetch", {"q": "1"}),)),
        Message(Role.TOOL, "r1", tool_call_id="c1"),
        Message(Role.ASSISTANT, "", tool_calls=(ToolCall("c1", "fetch", {"q": "2"}),)),
        Message(Role.TOOL, "r2", tool_call_id="c1"),
    )
    sent, count = distinct_history([(7, group)])
    assert count == 1
    assert [(m.tool_calls[0].id if m.tool_calls else m.tool_call_id) for m in sent] == [
        "c1",
        "c1",
        "c1_7",  # the form numbered by the group's seq
        "c1_7",
    ]
    assert distinct_history([(7, group[:2])]) == (group[:2], 0)


def test_the_history_sent_tries_each_form_of_an_id_once_however_often_the_id_repeats(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The dedupe runs on every turn, on the event loop. A session run() committed before it
    # renamed ids holds call_0 in every group, and in every step of a group (models that number
    # their calls per response): trying n from 1 again for each repeat cost repeats²/2 forms
    # (1,000 groups: seconds a turn, the loop blocked). A duplicate's first form is numbered by its
    # group's seq; only a repeat within one group goes on to further forms, each tried once.
    from agentium_harness._engine import call_ids

    tried = 0
    real = call_ids.own_id_form

    def counting(call_id: str, n: int) -> str:
        nonlocal tried
        tried += 1
        return real(call_id, n)

    monkeypatch.setattr(call_ids, "own_id_form", counting)
    long = "x" * 70  # over 64: each sent in its valid form (sent_id_form), five apart
    given = ["call_0", "c1", "c1", "c1_1", "aB3dE5gH7", "aB3dE5gH7", *(f"{long}{i}" for i in range(5))]
    ids = [*(["call_0"] * 300), *(given * 30)]
    groups = [(seq, exchange(call_id, str(seq))) for seq, call_id in enumerate(ids)]
    steps = [m for i in range(300) for m in exchange("call_0", f"step{i}")[1:3]]  # one group, 300 steps
    groups.append((len(ids), steps))
    sent, count = distinct_history(groups)
    calls, results = _tool_ids(list(sent))
    assert count == len(ids) + 300 - len(set(ids))
    assert len(set(calls)) == len(calls) and results == calls
    assert all(len(c) <= 64 for c in set(calls) - set(ids))  # ids of its own; the given kept as given
    asked = {c.id: c.arguments["q"] for m in sent for c in m.tool_calls}
    assert all(m.content == f"result {asked[m.tool_call_id or '']}" for m in sent if m.role is Role.TOOL)
    assert tried <= 2 * count  # the seq's form, and one more for each repeat within a group
    seen: set[str] = set()  # each given id kept (in its valid form) where first named, else its group's form
    for (seq, _messages), given_id, sent_id in zip(groups, ids, calls, strict=False):
        form = call_ids.sent_id_form(given_id)
        assert sent_id == (real(form, seq) if given_id in seen else form)
        seen.add(given_id)
