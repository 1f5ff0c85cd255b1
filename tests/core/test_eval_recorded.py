"""The recorded provider (R35): record, replay by digest, redaction, and a replay miss as a typed error."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import attrs
import pytest
from _eval_support import FACT_CASE, write_config

from agentium_harness import ConfigError, ProviderError
from agentium_harness._codec import digest_of, unstructure
from agentium_harness._history import Message, Role
from agentium_harness.adapters.recorded import (
    GROUP_REVISION,
    REDACTED,
    RecordedProvider,
    RecordedProviderConfig,
    RecordingError,
    ReplayMissError,
    recorded_request,
    redact,
    request_digest,
)
from agentium_harness.eval import installed_graders, parse_cases, run_eval
from agentium_harness.plugin_api import ModelRequest, OpContext, SourceBlock
from agentium_harness.testing.eval_target import create_harness_eval_target

GRADERS = installed_graders()
SECRET = "sk-live1234567890abcdefXYZ"
DOC_CASE = {
    "id": "doc",
    "setup": [{"document": "The on-call rota changes every Monday.", "id": "rota", "label": "rota"}],
    "probe": f"When does the on-call rota change? My key is {SECRET}",
    "expect": {"evidence": ["rota"], "answer": ["Monday"]},
}


def _recorded_config(tmp_path: Path, mode: str, recording: Path) -> Path:
    options = (
        f'[provider.options]\npath = "{recording}"\nmode = "{mode}"\nprovider = "extractive"\n'
        'redact_fields = ["instructions"]\n'
    )
    return write_config(tmp_path / f"{mode}.toml", provider="recorded", options=options)


def _run(config: Path, *cases: dict[str, object]):  # type: ignore[no-untyped-def]
    parsed = parse_cases("\n".join(json.dumps(c) for c in cases))
    target = create_harness_eval_target(config)
    return target, anyio.run(lambda: run_eval(parsed, target, GRADERS, concurrency=2))


def test_record_then_replay_gives_the_same_answers_without_a_provider(tmp_path: Path) -> None:
    recording = tmp_path / "rec.jsonl"
    target, recorded = _run(_recorded_config(tmp_path, "record", recording), FACT_CASE, DOC_CASE)
    assert target.info.recorded_mode == "record" and target.info.statement is not None
    assert all(r.graded for r in recorded.results)
    lines = [json.loads(line) for line in recording.read_text(encoding="utf-8").splitlines()]
    # Setup turns and probes of both cases: one line per model call, each self-consistent.
    assert len(lines) == 5
    for line in lines:
        assert line["format"] == "agentium.recorded/1"
        assert line["digest"] == digest_of(line["request"])
        assert line["request"]["instructions"] == REDACTED
    text = recording.read_text(encoding="utf-8")
    assert SECRET not in text and REDACTED in text

    target, replayed = _run(_recorded_config(tmp_path, "replay", recording), FACT_CASE, DOC_CASE)
    assert target.info.recorded_mode == "replay"
    assert "does not prove live-model quality" in (target.info.statement or "")
    for before, after in zip(recorded.results, replayed.results, strict=True):
        assert after.graded, after.failure
        assert before.trace is not None and after.trace is not None
        assert after.trace.answer == before.trace.answer
        assert {n: g.status for n, g in after.grades.items()} == {
            n: g.status for n, g in before.grades.items()
        }


def test_a_replay_miss_is_an_infrastructure_failure_and_the_rest_is_graded(tmp_path: Path) -> None:
    recording = tmp_path / "rec.jsonl"
    _run(_recorded_config(tmp_path, "record", recording), FACT_CASE)
    novel = {**FACT_CASE, "id": "novel", "probe": "Which locker is mine, again?"}
    _, run = _run(_recorded_config(tmp_path, "replay", recording), FACT_CASE, novel)
    ok, missed = run.results
    assert ok.graded
    assert missed.failure is not None and "ReplayMissError" in missed.failure.error
    assert "replay miss" in missed.failure.message and str(recording) in missed.failure.message


def test_the_provider_itself(tmp_path: Path) -> None:
    async def main(tmp: Path) -> None:
        request = ModelRequest("be brief", turn=(Message(Role.USER, "hi"),))
        replay = RecordedProvider(RecordedProviderConfig(path=str(tmp / "none.jsonl")))
        with pytest.raises(RecordingError, match="cannot read the recording"):
            await replay.complete(request, OpContext.with_timeout(30))
        empty = tmp / "empty.jsonl"
        empty.write_text("")
        miss = RecordedProvider(RecordedProviderConfig(path=str(empty)))
        with pytest.raises(ReplayMissError) as info:
            await miss.complete(request, OpContext.with_timeout(30))
        assert isinstance(info.value, ProviderError) and info.value.digest == request_digest(request)
        bad = tmp / "bad.jsonl"
        bad.write_text('{"format": "agentium.recorded/1", "digest": "x", "response": {"message": 3}}\n')
        with pytest.raises(RecordingError, match=r"bad.jsonl:1"):
            await RecordedProvider(RecordedProviderConfig(path=str(bad))).complete(
                request, OpContext.with_timeout(30)
            )

    anyio.run(main, tmp_path)


def test_a_recalled_groups_revision_is_recorded_as_a_placeholder_a_documents_is_kept() -> None:
    """Equal conversations written twice differ in their groups' digests (each group's write id)."""

    def request(group_revision: str) -> ModelRequest:
        return ModelRequest(
            "be brief",
            sources=(
                SourceBlock("recall", "group/acme/ana/main/0", "hi", (("revision", group_revision),)),
                SourceBlock("recall", "doc/acme/~/~/~/~/rota", "rota", (("revision", "sha256:" + "d" * 64),)),
            ),
            turn=(Message(Role.USER, "hi"),),
        )

    one, two = request("sha256:" + "1" * 64), request("sha256:" + "2" * 64)
    assert request_digest(one) == request_digest(two)
    recorded = recorded_request(one)
    assert recorded["sources"][0]["attributes"] == [("revision", GROUP_REVISION)]
    assert recorded["sources"][1]["attributes"] == [("revision", "sha256:" + "d" * 64)]
    assert request_digest(one) == digest_of(recorded)
    # A document at another revision is another request.
    changed = attrs.evolve(
        one,
        sources=(
            one.sources[0],
            attrs.evolve(one.sources[1], attributes=(("revision", "sha256:" + "e" * 64),)),
        ),
    )
    assert request_digest(changed) != request_digest(one)


def test_bad_recorded_options_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="needs a path"):
        RecordedProvider(RecordedProviderConfig())
    with pytest.raises(ConfigError, match="needs the provider to wrap"):
        RecordedProvider(RecordedProviderConfig(path="x", mode="record"))
    with pytest.raises(ConfigError, match="cannot wrap itself"):
        RecordedProvider(RecordedProviderConfig(path="x", mode="record", provider="recorded"))
    with pytest.raises(ConfigError, match="did you mean 'extractive'"):
        RecordedProvider(RecordedProviderConfig(path="x", mode="record", provider="extractve"))
    with pytest.raises(ConfigError, match="provider_options"):
        RecordedProvider(
            RecordedProviderConfig(
                path="x", mode="record", provider="extractive", provider_options={"nope": 1}
            )
        )
    assert not (tmp_path / "x").exists()


def test_redaction() -> None:
    data = {
        "api_key": "abc",
        "nested": [{"Authorization": "Bearer zzz"}],
        "text": f"use {SECRET} now",
        "n": 3,
    }
    assert redact(data) == {
        "api_key": REDACTED,
        "nested": [{"Authorization": REDACTED}],
        "text": f"use {REDACTED} now",
        "n": 3,
    }
    assert redact({"email": "a@b"}, frozenset({"email"})) == {"email": REDACTED}
    request = ModelRequest("x", turn=(Message(Role.USER, f"key {SECRET}"),))
    assert SECRET not in json.dumps(redact(unstructure(request)))
