"""Completion verification in the turn (issue 10, R27–R31).

The verifier here judges a small dict of *host* evidence (artifact name to the
digest of its current content), the way the filesystem verifier judges files:
the expectation comes from the host's task, never from the candidate.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, ClassVar

import anyio
import pytest

from agentium_harness import (
    CompletionPolicy,
    EvidenceLimits,
    Message,
    Role,
    RunStatus,
    SessionKey,
    ToolCall,
    Verdict,
    VerifiedIdentity,
    verified_completion_policy,
)
from agentium_harness._codec import canonical_json, from_json, unstructure
from agentium_harness._config import parse_config
from agentium_harness._engine.build import create_harness_runtime
from agentium_harness._engine.limits import RuntimeLimits
from agentium_harness._engine.tools import EffectLevel, Tool, ToolRegistry, ToolStatus
from agentium_harness._errors import ConfigError, InvalidArgumentError, RecordDecodeError
from agentium_harness._history import MessageGroup, RetainedRecord
from agentium_harness._ports import OpContext
from agentium_harness._ports.provider import (
    ModelProvider,
    ModelRequest,
    ModelResponse,
    ProviderCapabilities,
    SourceKind,
)
from agentium_harness._ports.verify import (
    CompletionCandidate,
    CompletionVerifier,
    EvidenceEntry,
    VerificationResult,
    VerifierCapabilities,
    VerifyContext,
)
from agentium_harness._scope import Scope
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore

pytestmark = pytest.mark.anyio

ALICE = VerifiedIdentity(tenant="acme", user="alice", verified_by="test")


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Replies(ModelProvider):
    """Answers from a list, recording every request it gets."""

    capabilities: ClassVar[ProviderCapabilities] = ProviderCapabilities(tool_calls=True, deterministic=True)

    def __init__(self, replies: Sequence[Message]) -> None:
        self.replies = list(replies)
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        self.requests.append(request)
        return ModelResponse(self.replies.pop(0))


def say(text: str) -> Message:
    return Message(Role.ASSISTANT, text)


def call(name: str, call_id: str, **arguments: Any) -> Message:
    return Message(Role.ASSISTANT, "", tool_calls=(ToolCall(call_id, name, arguments),))


class HostEvidence(CompletionVerifier):
    """Pass when every expected artifact's current digest matches the host's expectation."""

    capabilities: ClassVar[VerifierCapabilities] = VerifierCapabilities(artifact_digests=True)

    def __init__(self, files: dict[str, str], expected: dict[str, str]) -> None:
        self.files = files
        self.expected = expected
        self.contexts: list[VerifyContext] = []
        self.candidates: list[CompletionCandidate] = []

    async def verify(self, candidate: CompletionCandidate, ctx: VerifyContext) -> VerificationResult:
        ctx.raise_if_expired("verify")
        self.contexts.append(ctx)
        self.candidates.append(candidate)
        evidence: list[EvidenceEntry] = []
        verdict = Verdict.PASS
        reasons: list[str] = []
        for name, want in sorted(self.expected.items()):
            content = self.files.get(name)
            if content is None:
                evidence.append(EvidenceEntry("artifact", name, "missing"))
                reasons.append(f"{name} is missing")
                verdict = Verdict.UNKNOWN if verdict is not Verdict.FAIL else verdict
                continue
            got = sha(content)
            ok = got == want
            evidence.append(
                EvidenceEntry("artifact", name, f"sha256 {got[:12]} {'matches' if ok else 'differs'}")
            )
            if not ok:
                reasons.append(f"{name} has digest {got[:12]}, expected {want[:12]}")
                verdict = Verdict.FAIL
        return VerificationResult(verdict, evidence, "; ".join(reasons) or "all artifacts match")


class Scripted(CompletionVerifier):
    """Returns results from a list (or raises / hangs), recording contexts."""

    capabilities: ClassVar[VerifierCapabilities] = VerifierCapabilities()

    def __init__(self, results: Sequence[Any]) -> None:
        self.results = list(results)
        self.contexts: list[VerifyContext] = []

    async def verify(self, candidate: CompletionCandidate, ctx: VerifyContext) -> VerificationResult:
        self.contexts.append(ctx)
        result = self.results.pop(0)
        if result == "hang":
            await anyio.sleep(60)
        if isinstance(result, BaseException):
            raise result
        return result  # type: ignore[no-any-return]


def runtime(provider: ModelProvider, verifier: CompletionVerifier | None, **kwargs: Any) -> Any:
    return create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        verifier=verifier,
        **kwargs,
    )


# -- the verdicts --------------------------------------------------------------------------------


async def test_pass_accepts_and_is_kept_in_the_result_and_the_retained_record() -> None:
    files = {"report.txt": "final"}
    verifier = HostEvidence(files, {"report.txt": sha("final")})
    async with runtime(Replies([say("The report is written.")]), verifier) as rt:
        result = await rt.run(ALICE, "s1", "write the report", completion=True)
    assert result.status is RunStatus.COMPLETED
    assert result.verification is not None and result.verification.accepted
    assert result.verification.verdict is Verdict.PASS
    assert result.verification.revisions == 0
    assert result.verification.evidence == (
        EvidenceEntry("artifact", "report.txt", f"sha256 {sha('final')[:12]} matches"),
    )
    assert result.retained.verification == result.verification
    assert verifier.candidates[0].claim == "The report is written."


async def test_the_verdict_survives_the_store_round_trip() -> None:
    verifier = HostEvidence({"a": "x"}, {"a": sha("y")})
    store = InMemorySessionStore()
    rt = create_harness_runtime(
        provider=Replies([say("done")]), archive=InMemoryArchive(), session_store=store, verifier=verifier
    )
    async with rt:
        result = await rt.run(ALICE, "s1", "go", completion=True)
        stored = await store.load(SessionKey.of(ALICE, "s1"), OpContext.with_timeout(30))
    assert stored is not None
    raw = store.raw(SessionKey.of(ALICE, "s1"))
    assert raw is not None and b'"verification"' in raw[1]
    kept = stored.snapshot.resident[-1].retained
    assert kept is not None and kept.verification == result.verification
    assert kept.verification is not None and kept.verification.verdict is Verdict.FAIL


async def test_claims_prove_nothing_when_host_evidence_disagrees() -> None:
    """R29: the model claims success, every tool call succeeded, the host evidence says otherwise."""
    files = {"build/app.bin": "broken build"}
    verifier = HostEvidence(files, {"build/app.bin": sha("good build")})
    tools = ToolRegistry([Tool("run_tests", lambda _a: _ok("all 12 tests passed"), EffectLevel.READ)])
    claim = f"Task complete: all tests pass and build/app.bin has sha256 {sha('good build')}."
    provider = Replies([call("run_tests", "c1"), say(claim)])
    async with runtime(provider, verifier, tools=tools) as rt:
        result = await rt.run(ALICE, "s1", "build and test", grants=["run_tests"], completion=True)
    assert all(o.status is ToolStatus.OK for o in result.tool_outcomes)
    assert result.verification is not None
    assert result.verification.verdict in (Verdict.FAIL, Verdict.UNKNOWN)
    assert not result.verification.accepted
    assert result.status is RunStatus.NOT_ACCEPTED
    assert result.has("completion_not_accepted")


async def _ok(text: str) -> str:
    return text


async def test_fail_stops_by_default_with_no_revision() -> None:
    verifier = HostEvidence({"a": "wrong"}, {"a": sha("right")})
    provider = Replies([say("done"), say("never asked")])
    async with runtime(provider, verifier) as rt:
        result = await rt.run(ALICE, "s1", "go", completion=True)
    assert result.status is RunStatus.NOT_ACCEPTED
    assert result.verification is not None and result.verification.verdict is Verdict.FAIL
    assert result.verification.revisions == 0
    assert len(provider.requests) == 1 and len(verifier.contexts) == 1
    assert result.verification.policy == "stop"


async def test_revise_feeds_reasons_back_as_labeled_data_and_then_passes() -> None:
    files = {"out.txt": "draft"}
    verifier = HostEvidence(files, {"out.txt": sha("final")})

    async def write(arguments: Any) -> str:
        files["out.txt"] = arguments["text"]
        return "written"

    tools = ToolRegistry([Tool("write_file", write, EffectLevel.WRITE)])
    provider = Replies([say("done"), call("write_file", "w1", text="final"), say("fixed and done")])
    policy = verified_completion_policy(on_fail="revise", max_revisions=2, allow_revision_effects=True)
    async with runtime(provider, verifier, tools=tools) as rt:
        result = await rt.run(ALICE, "s1", "produce out.txt", grants=["write_file"], completion=policy)
    assert result.status is RunStatus.COMPLETED
    record = result.verification
    assert record is not None and record.accepted and record.revisions == 1
    assert [a.verdict for a in record.attempts] == [Verdict.FAIL, Verdict.PASS]
    assert [c.revision for c in verifier.contexts] == [0, 1]
    revision_request = provider.requests[1]
    feedback = [b for b in revision_request.sources if b.kind is SourceKind.VERIFICATION]
    assert len(feedback) == 1
    assert "out.txt has digest" in feedback[0].content
    assert "out.txt has digest" not in revision_request.instructions
    assert "source-data" in feedback[0].render()
    assert result.output == "fixed and done"
    # The whole turn, revision included, is one committed group.
    assert [m.role for m in revision_request.turn][:2] == [Role.USER, Role.ASSISTANT]
    assert result.has("revision_requested")


async def test_revisions_are_bounded_by_max_revisions() -> None:
    verifier = HostEvidence({"a": "wrong"}, {"a": sha("right")})
    provider = Replies([say("done"), say("done again"), say("and again"), say("unreachable")])
    policy = verified_completion_policy(on_fail="revise", max_revisions=2)
    async with runtime(provider, verifier) as rt:
        result = await rt.run(ALICE, "s1", "go", completion=policy)
    assert result.status is RunStatus.NOT_ACCEPTED
    assert result.verification is not None
    assert result.verification.revisions == 2
    assert len(result.verification.attempts) == 3
    assert len(provider.requests) == 3
    assert result.has("revisions_exhausted")


async def test_unknown_always_stops_even_when_revising() -> None:
    verifier = HostEvidence({}, {"a": sha("right")})
    provider = Replies([say("done"), say("unreachable")])
    policy = verified_completion_policy(on_fail="revise", max_revisions=3)
    async with runtime(provider, verifier) as rt:
        result = await rt.run(ALICE, "s1", "go", completion=policy)
    assert result.verification is not None and result.verification.verdict is Verdict.UNKNOWN
    assert result.verification.revisions == 0 and len(provider.requests) == 1
    assert result.status is RunStatus.NOT_ACCEPTED


# -- failing verifiers are unknown, never accepted ---------------------------------------------------


async def test_a_raising_verifier_yields_unknown_with_the_error_in_diagnostics() -> None:
    verifier = Scripted([RuntimeError("disk on fire")])
    async with runtime(Replies([say("done")]), verifier) as rt:
        result = await rt.run(ALICE, "s1", "go", completion=True)
    assert result.verification is not None and result.verification.verdict is Verdict.UNKNOWN
    assert "disk on fire" in result.verification.reason
    assert result.has("verifier_failed")
    assert result.status is RunStatus.NOT_ACCEPTED


async def test_a_hanging_verifier_is_cancelled_at_its_deadline_and_yields_unknown() -> None:
    verifier = Scripted(["hang"])
    async with runtime(Replies([say("done")]), verifier, verify_timeout_s=0.2) as rt:
        with anyio.fail_after(30):
            result = await rt.run(ALICE, "s1", "go", completion=True)
    assert result.verification is not None and result.verification.verdict is Verdict.UNKNOWN
    assert result.has("verifier_timeout")
    assert verifier.contexts[0].op.signal.cancelled


@pytest.mark.parametrize(
    "bad",
    [None, "pass", VerificationResult.__new__(VerificationResult)],
    ids=["none", "a-string", "an-uninitialised-result"],
)
async def test_a_verifier_returning_garbage_yields_unknown(bad: Any) -> None:
    verifier = Scripted([bad])
    async with runtime(Replies([say("done")]), verifier) as rt:
        result = await rt.run(ALICE, "s1", "go", completion=True)
    assert result.verification is not None and result.verification.verdict is Verdict.UNKNOWN
    assert result.has("verifier_contract") or result.has("verifier_failed")


async def test_evidence_items_that_are_not_entries_yield_unknown() -> None:
    bad = VerificationResult(Verdict.PASS, [EvidenceEntry("a", "b", "c")])
    object.__setattr__(bad, "evidence", ("not an entry",))
    async with runtime(Replies([say("done")]), Scripted([bad])) as rt:
        result = await rt.run(ALICE, "s1", "go", completion=True)
    assert result.verification is not None and result.verification.verdict is Verdict.UNKNOWN


# -- the evidence budget -----------------------------------------------------------------------------


def entries(n: int, size: int = 10) -> list[EvidenceEntry]:
    return [EvidenceEntry("artifact", f"file-{i:03d}", "x" * size) for i in range(n)]


async def test_evidence_is_cut_by_whole_entries_at_32_with_the_omitted_count() -> None:
    verifier = Scripted([VerificationResult(Verdict.PASS, entries(40))])
    async with runtime(Replies([say("done")]), verifier) as rt:
        result = await rt.run(ALICE, "s1", "go", completion=True)
    record = result.verification
    assert record is not None
    assert len(record.evidence) == 32 and record.omitted == 8
    assert [e.ref for e in record.evidence] == [f"file-{i:03d}" for i in range(32)]
    assert verifier.contexts[0].max_entries == 32 and verifier.contexts[0].max_bytes == 8192
    assert result.has("evidence_omitted")


async def test_evidence_is_cut_at_8192_bytes_without_cutting_inside_an_entry() -> None:
    big = entries(20, size=1000)
    verifier = Scripted([VerificationResult(Verdict.PASS, big)])
    async with runtime(Replies([say("done")]), verifier) as rt:
        result = await rt.run(ALICE, "s1", "go", completion=True)
    record = result.verification
    assert record is not None
    kept_bytes = sum(len(canonical_json(unstructure(e))) for e in record.evidence)
    assert kept_bytes <= 8192
    assert all(e.detail == "x" * 1000 for e in record.evidence)  # whole entries only
    assert len(record.evidence) + record.omitted == 20 and record.omitted > 0


async def test_a_narrowed_budget_is_given_to_the_verifier_and_enforced() -> None:
    verifier = Scripted([VerificationResult(Verdict.PASS, entries(10))])
    async with runtime(
        Replies([say("done")]), verifier, evidence_limits=EvidenceLimits(max_entries=3, max_bytes=2000)
    ) as rt:
        result = await rt.run(ALICE, "s1", "go", completion=True)
    assert verifier.contexts[0].max_entries == 3 and verifier.contexts[0].max_bytes == 2000
    assert result.verification is not None and len(result.verification.evidence) == 3
    assert result.verification.omitted == 7


async def test_revisions_share_the_original_budget() -> None:
    fail = VerificationResult(Verdict.FAIL, entries(30), "not yet")
    verifier = Scripted([fail, VerificationResult(Verdict.PASS, entries(5))])
    policy = verified_completion_policy(on_fail="revise", max_revisions=3)
    async with runtime(Replies([say("done"), say("done now")]), verifier) as rt:
        result = await rt.run(ALICE, "s1", "go", completion=policy)
    assert [c.max_entries for c in verifier.contexts] == [32, 2]
    record = result.verification
    assert record is not None and record.accepted
    assert len(record.evidence) == 32 and record.omitted == 3


async def test_an_exhausted_budget_stops_revising() -> None:
    fail = VerificationResult(Verdict.FAIL, entries(32), "not yet")
    verifier = Scripted([fail, VerificationResult(Verdict.PASS)])
    policy = verified_completion_policy(on_fail="revise", max_revisions=3)
    async with runtime(Replies([say("done"), say("unreachable")]), verifier) as rt:
        result = await rt.run(ALICE, "s1", "go", completion=policy)
    assert result.verification is not None and result.verification.verdict is Verdict.FAIL
    assert result.has("evidence_budget_exhausted") and len(verifier.contexts) == 1


@pytest.mark.parametrize("field, value", [("max_entries", 33), ("max_bytes", 8193), ("max_entries", 0)])
def test_the_budget_cannot_be_widened_or_emptied(field: str, value: int) -> None:
    with pytest.raises(ValueError, match=field):
        EvidenceLimits(**{field: value})


@pytest.mark.parametrize("field, value", [("max_entries", 64), ("max_bytes", 100000)])
def test_config_that_widens_the_budget_is_refused_with_its_path(field: str, value: int) -> None:
    text = f"""
[provider]
plugin = "scripted"
[archive]
plugin = "memory"
[session_store]
plugin = "memory"
[verifier]
plugin = "fs"
[verifier.budget]
{field} = {value}
"""
    with pytest.raises(ConfigError) as caught:
        parse_config(text)
    assert any(issue.path == f"$.verifier.budget.{field}" for issue in caught.value.issues)


@pytest.mark.parametrize(
    "line, path",
    [
        ('on_fail = "retry-forever"', "$.verifier.policy.on_fail"),
        ("max_revisions = 99", "$.verifier.policy.max_revisions"),
        ('allow_revision_effects = "yes"', "$.verifier.policy.allow_revision_effects"),
    ],
)
def test_config_policy_values_are_checked_with_their_path(line: str, path: str) -> None:
    text = f"""
[provider]
plugin = "scripted"
[archive]
plugin = "memory"
[session_store]
plugin = "memory"
[verifier]
plugin = "fs"
[verifier.policy]
{line}
"""
    with pytest.raises(ConfigError) as caught:
        parse_config(text)
    assert path in {issue.path for issue in caught.value.issues}


def test_config_builds_the_policy_and_budget() -> None:
    text = """
[provider]
plugin = "scripted"
[archive]
plugin = "memory"
[session_store]
plugin = "memory"
[verifier]
plugin = "fs"
timeout_s = 2.5
[verifier.policy]
on_fail = "revise"
max_revisions = 2
[verifier.budget]
max_entries = 8
"""
    config = parse_config(text)
    assert config.verifier is not None
    assert config.verifier.policy == CompletionPolicy("revise", 2, False)
    assert config.verifier.budget == EvidenceLimits(max_entries=8, max_bytes=8192)
    assert config.verifier.timeout_s == 2.5


# -- effects during revisions (R31) ------------------------------------------------------------------


def _writer(log: list[str]) -> Tool:
    async def write(arguments: Any) -> str:
        log.append("wrote")
        return "written"

    return Tool("write_file", write, EffectLevel.WRITE)


async def test_write_tools_are_refused_during_a_revision_by_default() -> None:
    log: list[str] = []
    verifier = Scripted([VerificationResult(Verdict.FAIL, (), "wrong"), VerificationResult(Verdict.FAIL)])
    provider = Replies([say("done"), call("write_file", "w1"), say("tried")])
    policy = verified_completion_policy(on_fail="revise", max_revisions=1)
    async with runtime(provider, verifier, tools=ToolRegistry([_writer(log)])) as rt:
        result = await rt.run(ALICE, "s1", "go", grants=["write_file"], completion=policy)
    assert log == []
    refused = [o for o in result.tool_outcomes if o.status is ToolStatus.REFUSED_EFFECT]
    assert len(refused) == 1 and refused[0].name == "write_file"
    assert result.has("revision_effect_refused")
    tool_result = next(m for m in provider.requests[-1].turn if m.role is Role.TOOL)
    assert tool_result.content.startswith("refused:")


async def test_write_tools_run_before_the_revision_as_ordinary() -> None:
    log: list[str] = []
    verifier = Scripted([VerificationResult(Verdict.PASS)])
    provider = Replies([call("write_file", "w1"), say("done")])
    async with runtime(provider, verifier, tools=ToolRegistry([_writer(log)])) as rt:
        result = await rt.run(ALICE, "s1", "go", grants=["write_file"], completion=True)
    assert log == ["wrote"] and result.status is RunStatus.COMPLETED


async def test_allowed_revision_effects_still_need_the_grant() -> None:
    log: list[str] = []
    verifier = Scripted([VerificationResult(Verdict.FAIL, (), "wrong"), VerificationResult(Verdict.FAIL)])
    provider = Replies([say("done"), call("write_file", "w1"), say("tried")])
    policy = verified_completion_policy(on_fail="revise", max_revisions=1, allow_revision_effects=True)
    async with runtime(provider, verifier, tools=ToolRegistry([_writer(log)])) as rt:
        result = await rt.run(ALICE, "s1", "go", grants=[], completion=policy)
    assert log == []
    assert [o.status for o in result.tool_outcomes] == [ToolStatus.REFUSED_NOT_GRANTED]


async def test_allowed_revision_effects_run_when_granted() -> None:
    log: list[str] = []
    verifier = Scripted([VerificationResult(Verdict.FAIL, (), "wrong"), VerificationResult(Verdict.PASS)])
    provider = Replies([say("done"), call("write_file", "w1"), say("fixed")])
    policy = verified_completion_policy(on_fail="revise", max_revisions=1, allow_revision_effects=True)
    async with runtime(provider, verifier, tools=ToolRegistry([_writer(log)])) as rt:
        result = await rt.run(ALICE, "s1", "go", grants=["write_file"], completion=policy)
    assert log == ["wrote"] and result.status is RunStatus.COMPLETED


# -- bad input and edges -----------------------------------------------------------------------------


async def test_asking_for_verification_without_a_verifier_is_refused_and_changes_nothing() -> None:
    store = InMemorySessionStore()
    provider = Replies([say("done")])
    rt = create_harness_runtime(provider=provider, archive=InMemoryArchive(), session_store=store)
    async with rt:
        with pytest.raises(InvalidArgumentError, match="no verifier"):
            await rt.run(ALICE, "s1", "go", completion=True)
    assert provider.requests == [] and store.raw(SessionKey.of(ALICE, "s1")) is None


@pytest.mark.parametrize("bad", ["yes", 1, {"on_fail": "stop"}])
async def test_a_wrong_completion_argument_is_refused(bad: object) -> None:
    async with runtime(Replies([say("done")]), Scripted([])) as rt:
        with pytest.raises(InvalidArgumentError, match="completion must be"):
            await rt.run(ALICE, "s1", "go", completion=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [{"on_fail": "maybe"}, {"max_revisions": 9}, {"max_revisions": -1}, {"allow_revision_effects": "yes"}],
)
def test_policy_arguments_are_checked(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError):
        verified_completion_policy(**kwargs)


def test_runtime_options_are_type_checked() -> None:
    with pytest.raises(InvalidArgumentError, match="completion_policy"):
        runtime(Replies([]), Scripted([]), completion_policy="revise")
    with pytest.raises(InvalidArgumentError, match="verify_timeout_s"):
        runtime(Replies([]), Scripted([]), verify_timeout_s=0)


async def test_a_turn_that_hits_the_step_limit_is_not_verified() -> None:
    tools = ToolRegistry([Tool("look", lambda _a: _ok("nothing"), EffectLevel.READ)])
    provider = Replies([call("look", f"c{i}") for i in range(3)])
    verifier = Scripted([])
    async with runtime(provider, verifier, tools=tools, limits=RuntimeLimits(max_steps=3)) as rt:
        result = await rt.run(ALICE, "s1", "go", grants=["look"], completion=True)
    assert result.status is RunStatus.STEP_LIMIT
    assert result.verification is None and result.has("not_verified") and verifier.contexts == []


async def test_a_run_without_completion_is_not_verified() -> None:
    verifier = Scripted([])
    async with runtime(Replies([say("hi")]), verifier) as rt:
        result = await rt.run(ALICE, "s1", "hello")
    assert result.verification is None and result.status is RunStatus.COMPLETED and verifier.contexts == []


def test_records_without_a_verification_keep_their_bytes() -> None:
    """Groups committed before verification existed must keep their digests."""
    scope = Scope.of(ALICE, "s1", None)
    record = RetainedRecord(scope=scope)
    assert "verification" not in unstructure(record)
    group = MessageGroup(seq=0, messages=(Message(Role.USER, "hi"),), retained=record)
    data = canonical_json(unstructure(group))
    assert b"verification" not in data
    assert from_json(data, MessageGroup) == group


async def test_a_verified_record_decodes_strictly() -> None:
    verifier = HostEvidence({"a": "x"}, {"a": sha("x")})
    async with runtime(Replies([say("done")]), verifier) as rt:
        result = await rt.run(ALICE, "s1", "go", completion=True)
    data = canonical_json(unstructure(result.retained))
    assert from_json(data, RetainedRecord) == result.retained
    tampered = data.replace(b'"pass"', b'"passed"')
    with pytest.raises(RecordDecodeError, match=r"verdict|passed"):
        from_json(tampered, RetainedRecord)


async def test_the_verifier_gets_the_run_start_time_and_scope() -> None:
    import time

    before = time.time()
    verifier = Scripted([VerificationResult(Verdict.PASS)])
    async with runtime(Replies([say("done")]), verifier) as rt:
        await rt.run(ALICE, "s1", "go", completion=True)
    ctx = verifier.contexts[0]
    assert before <= ctx.run_started_at <= time.time()
    assert ctx.scope.tenant == "acme" and ctx.scope.session == "s1" and ctx.revision == 0
