"""The engine's check of a summarizer's answer: exact field types, bounds, and what a refusal leaves."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from agentium_harness import VerifiedIdentity, create_harness_runtime
from agentium_harness._engine.limits import ResidentLimits, RuntimeLimits
from agentium_harness._engine.summary_answer import checked_answer
from agentium_harness._errors import InvalidArgumentError, RuntimeCloseError
from agentium_harness._history import Message, MessageGroup, Role
from agentium_harness._ports import OpContext
from agentium_harness._ports.summary import (
    MAX_POLICY_CHARS,
    MAX_SUMMARY_CITATIONS,
    MAX_UNCERTAINTY_BYTES,
    MAX_UNCERTAINTY_NOTES,
    Citation,
    CoverageGap,
    GapReason,
    Summarizer,
    SummarizerCapabilities,
    SummaryLimits,
    SummaryState,
    TaskSummary,
    fit_notes,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ExtractiveProvider
from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
from agentium_harness.adapters.summarizers import ExtractiveSummarizer, ModelSummarizer, ModelSummarizerConfig

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")

Answer = Callable[[TaskSummary | None, list[MessageGroup]], Any]


class Scripted(Summarizer):
    """Answers whatever ``answer`` builds from the groups it is given."""

    capabilities = SummarizerCapabilities(incremental=True, citations=True)

    def __init__(self, answer: Answer) -> None:
        self.answer = answer

    async def summarize(self, previous: TaskSummary | None, groups: Any, ctx: OpContext) -> TaskSummary:
        result: TaskSummary = self.answer(previous, list(groups))
        return result


def _good(previous: TaskSummary | None, groups: list[MessageGroup]) -> TaskSummary:
    return TaskSummary(
        text=f"[g{groups[-1].seq}] fact.",
        frontier=groups[-1].seq + 1,
        citations=(Citation(groups[-1].seq, groups[-1].digest),),
    )


def _forged(**fields: Any) -> Answer:
    """A well-formed answer with ``fields`` set around the record's constructor (as a buggy adapter can)."""

    def answer(previous: TaskSummary | None, groups: list[MessageGroup]) -> TaskSummary:
        out = _good(previous, groups)
        for name, value in fields.items():
            if name == "cite_seq":
                citation = Citation(0, groups[0].digest)
                object.__setattr__(citation, "seq", value)
                object.__setattr__(out, "citations", (citation,))
            else:
                object.__setattr__(out, name, value)
        return out

    return answer


def _runtime(summarizer: Summarizer, store: Any = None, archive: Any = None, **limits: Any) -> Any:
    return create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=archive if archive is not None else InMemoryArchive(),
        session_store=store if store is not None else InMemorySessionStore(),
        summarizer=summarizer,
        summary_limits=SummaryLimits(**{"background": False, **limits}),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )


MALFORMED = {
    "frontier_bool": _forged(frontier=True),
    "frontier_float": _forged(frontier=1.0),
    "frontier_str": _forged(frontier="1"),
    "citation_seq_false": _forged(cite_seq=False),  # False == 0 would pass the allowed set
    "citation_seq_float": _forged(cite_seq=0.0),
    "citation_seq_unhashable": _forged(cite_seq=[0]),
    "citation_not_a_citation": _forged(citations=((0, "sha256:x"),)),
    "policy_int": _forged(policy=7),
    "version_none": _forged(version=None),
    "uncertainty_ints": _forged(uncertainty=[1]),
    "uncertainty_str": _forged(uncertainty="not a tuple"),
    "text_int": _forged(text=123),
    "text_none": _forged(text=None),
    "text_bytes": _forged(text=b"x"),
    "text_surrogate": _forged(text="a\ud800b"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
async def test_a_malformed_answer_fails_the_update_and_the_session_stays_readable(case: str) -> None:
    """Each answer is refused as summary_failed: the committed run returns, and later runs and reads work."""
    runtime = _runtime(Scripted(MALFORMED[case]))
    async with runtime:
        for i in range(3):
            result = await runtime.run(ANA, "s1", f"message {i}.")
            assert result.committed
        assert result.has("summary_failed")
        assert result.summary is None  # nothing was kept
        view = await runtime.inspect_session(ANA, "s1")
        assert view.summary is None and view.next_seq == 3


async def test_a_refused_answer_keeps_the_previous_summary(tmp_path: Path) -> None:
    """On SQLite (a fresh runtime reads the file back): a forged bool frontier never reaches the snapshot."""
    calls = {"n": 0}

    def answer(previous: TaskSummary | None, groups: list[MessageGroup]) -> TaskSummary:
        calls["n"] += 1
        return _good(previous, groups) if calls["n"] == 1 else _forged(frontier=True)(previous, groups)

    config = SQLiteConfig(path=str(tmp_path / "a.db"))
    runtime = _runtime(Scripted(answer), SQLiteSessionStore(config), SQLiteArchive(config))
    async with runtime:
        for i in range(3):
            result = await runtime.run(ANA, "s1", f"message {i}.")
        assert result.has("summary_failed")
        assert result.summary is not None and result.summary.summary.frontier == 1
    again = _runtime(Scripted(_good), SQLiteSessionStore(config), SQLiteArchive(config))
    async with again:
        view = await again.inspect_session(ANA, "s1")
        assert view.summary is not None and view.summary.summary.frontier == 1
        result = await again.run(ANA, "s1", "more.")
        assert result.summary is not None and result.summary.summary.frontier > 1


async def test_a_malformed_answer_in_the_background_is_reported_failed() -> None:
    runtime = _runtime(Scripted(_forged(text=None)), background=True)
    for i in range(2):
        await runtime.run(ANA, "s1", f"message {i}.")
    report = await runtime.resources.settle_summary(ANA, "s1")
    assert report is not None and report.status.value == "failed"
    assert [d.code for d in report.diagnostics] == ["summary_failed"]
    result = await runtime.run(ANA, "s1", "again.")
    assert result.committed and result.has("summary_failed")
    await runtime.resources.settle_summary(ANA, "s1")
    await runtime.aclose()  # each failure was handed to the host already


def _with(**fields: Any) -> Answer:
    """A well-formed answer with ``fields`` replaced through the constructor."""

    def answer(previous: TaskSummary | None, groups: list[MessageGroup]) -> TaskSummary:
        good = _good(previous, groups)
        extra = {k: (v(groups) if callable(v) else v) for k, v in fields.items()}
        return TaskSummary(
            **{
                "text": good.text,
                "frontier": good.frontier,
                "citations": good.citations,
                **extra,
            }
        )

    return answer


async def test_uncertainty_is_cut_to_its_bounds_and_says_so() -> None:
    notes = (*(f"note {i}" for i in range(40)), "U" * 1_000_000)
    runtime = _runtime(Scripted(_with(uncertainty=notes)))
    async with runtime:
        for i in range(3):
            result = await runtime.run(ANA, "s1", f"message {i}.")
        assert result.has("summary_uncertainty_condensed")
        notes = result.summary.summary.uncertainty
        assert len(notes) <= MAX_UNCERTAINTY_NOTES
        assert sum(len(n.encode()) for n in notes) <= MAX_UNCERTAINTY_BYTES
        # The newest notes that fit are kept, the marker first counts the rest.
        assert notes[0] == "26 older uncertainty note(s) were dropped to keep the summary bounded"
        assert notes[-1] == "note 39"


def test_fit_notes_keeps_one_marker_with_the_total() -> None:
    once = fit_notes([f"n{i}" for i in range(20)])
    assert once[0].startswith("5 older") and once[1:] == tuple(f"n{i}" for i in range(5, 20))
    twice = fit_notes([*once, "a", "b"])
    assert twice[0].startswith("7 older") and twice[-2:] == ("a", "b") and len(twice) == MAX_UNCERTAINTY_NOTES
    assert fit_notes(("a", "b")) == ("a", "b")


async def test_repeated_citations_are_kept_once_and_forged_ones_give_one_diagnostic() -> None:
    def answer(previous: TaskSummary | None, groups: list[MessageGroup]) -> TaskSummary:
        good = _good(previous, groups)
        forged = [Citation(10_000 + i, "sha256:" + "0" * 64) for i in range(20_000)]
        return attrs.evolve(good, citations=[*good.citations * 20_000, *forged])

    runtime = _runtime(Scripted(answer))
    async with runtime:
        for i in range(3):
            result = await runtime.run(ANA, "s1", f"message {i}.")
        summary = result.summary.summary
        assert [c.seq for c in summary.citations] == [summary.frontier - 1]
        [note] = [d for d in result.diagnostics if d.code == "summarizer_contract_violation"]
        assert "dropped 39999 citation(s)" in note.message and len(note.message) < 300


def _stating(groups: list[MessageGroup]) -> str:
    """What a hostile summarizer puts in ``policy``/``version``: a fact from the text, in 128 bytes."""
    return groups[0].messages[0].content[:100]


@pytest.mark.parametrize("field", ["policy", "version"])
@pytest.mark.parametrize(
    "value", [_stating, "p" * (MAX_POLICY_CHARS + 1), "", "v1 beta", "p@1", "r\u00e9sum\u00e9", "v1\n"]
)
async def test_a_policy_or_version_that_is_not_a_name_is_refused_whole(field: str, value: Any) -> None:
    # Both are copied into the retained record of every later committed group, which no erasure
    # (forget with erase_sources) rewrites: up to 128 bytes of what the groups said outlived them.
    runtime = _runtime(Scripted(_with(**{field: value})))
    results = []
    async with runtime:
        for i in range(4):
            results.append(await runtime.run(ANA, "s1", f"The vault code is 90{i}1."))
    last = results[-1]
    assert last.summary is None
    (note,) = {d for d in last.diagnostics if d.code == "summarizer_contract_violation"}
    assert f"summary's {field}" in note.message and "vault" not in note.message
    assert note.severity.value == "error"
    for result in results:
        assert getattr(result.retained, f"summary_{field}") is None


@pytest.mark.parametrize("value", ["p" * MAX_POLICY_CHARS, "gpt-4o-mini:v3", "2024-05-01", "a/b_c+d.e"])
async def test_a_policy_and_version_that_are_names_are_kept(value: str) -> None:
    runtime = _runtime(Scripted(_with(policy=value, version=value)))
    async with runtime:
        for i in range(4):
            result = await runtime.run(ANA, "s1", f"message {i}.")
        assert result.summary is not None and result.summary.summary.policy == value
        assert result.retained.summary_policy == value and result.retained.summary_version == value


class Raising(Summarizer):
    capabilities = SummarizerCapabilities(incremental=True, citations=True)

    async def summarize(self, previous: TaskSummary | None, groups: Any, ctx: OpContext) -> TaskSummary:
        raise RuntimeError("summarizer down")


async def test_a_failure_settle_summary_reported_is_not_raised_again_by_aclose() -> None:
    runtime = _runtime(Raising(), background=True)
    for i in range(2):
        await runtime.run(ANA, "s1", f"message {i}.")
    report = await runtime.resources.settle_summary(ANA, "s1")
    assert report is not None and report.status.value == "failed"
    await runtime.aclose()
    assert runtime.state.value == "closed"


async def test_a_failure_close_session_reported_is_not_raised_again_by_aclose() -> None:
    runtime = _runtime(Raising(), background=True)
    for i in range(2):
        await runtime.run(ANA, "s1", f"message {i}.")
    cleanup = await runtime.resources.close_session(ANA, "s1")
    assert any(d.code == "summary_update_failed" for d in cleanup.diagnostics)
    await runtime.aclose()


async def test_a_failure_nobody_was_told_of_is_still_raised_by_aclose() -> None:
    runtime = _runtime(Raising(), background=True)
    for i in range(2):
        await runtime.run(ANA, "s1", f"message {i}.")
    with pytest.raises(RuntimeCloseError, match="failed during shutdown"):
        await runtime.aclose()
    await runtime.aclose()  # reported once


async def test_a_saved_update_with_a_dropped_citation_is_reported_completed() -> None:
    def answer(previous: TaskSummary | None, groups: list[MessageGroup]) -> TaskSummary:
        good = _good(previous, groups)
        return attrs.evolve(good, citations=(*good.citations, Citation(77, "unknown")))

    runtime = _runtime(Scripted(answer), background=True)
    for i in range(2):
        await runtime.run(ANA, "s1", f"message {i}.")
    report = await runtime.resources.settle_summary(ANA, "s1")
    assert report is not None and report.status.value == "completed"
    assert report.state is not None and report.state.summary.frontier == 1
    [note] = report.diagnostics
    assert note.code == "summarizer_contract_violation" and note.severity.value == "warning"
    await runtime.run(ANA, "s1", "more.")
    await runtime.aclose()  # nothing failed: no error


BAD_CONSTRUCTIONS: dict[str, Callable[[], object]] = {
    "limits_background_int": lambda: SummaryLimits(background=1),  # type: ignore[arg-type]
    "summary_text_none": lambda: TaskSummary(text=None, frontier=0),  # type: ignore[arg-type]
    "summary_frontier_negative": lambda: TaskSummary(text="", frontier=-3),
    "summary_frontier_bool": lambda: TaskSummary(text="", frontier=True),
    "summary_policy_int": lambda: TaskSummary(text="", frontier=0, policy=7),  # type: ignore[arg-type]
    "summary_uncertainty_str": lambda: TaskSummary(text="", frontier=0, uncertainty="abc"),
    "summary_uncertainty_ints": lambda: TaskSummary(text="", frontier=0, uncertainty=[1]),  # type: ignore[list-item]
    "summary_citations_int": lambda: TaskSummary(text="", frontier=0, citations=5),  # type: ignore[arg-type]
    "summary_citations_tuples": lambda: TaskSummary(text="", frontier=0, citations=[(0, "d")]),  # type: ignore[list-item]
    "summary_surrogate": lambda: TaskSummary(text="a\ud800", frontier=0),
    "citation_str_seq": lambda: Citation("x", 5),  # type: ignore[arg-type]
    "citation_float_seq": lambda: Citation(0.0, "sha256:x"),  # type: ignore[arg-type]
    "citation_empty_digest": lambda: Citation(0, ""),
    "gap_reason_str": lambda: CoverageGap(1, "bogus"),  # type: ignore[arg-type]
    "gap_seq_bool": lambda: CoverageGap(True, GapReason.CHANGED),
    "gap_detail_int": lambda: CoverageGap(1, GapReason.CHANGED, 5),  # type: ignore[arg-type]
    "state_summary_none": lambda: SummaryState(None),  # type: ignore[arg-type]
    "extractive_config_str": lambda: ExtractiveSummarizer(config="x"),  # type: ignore[arg-type]
    "model_config_str": lambda: ModelSummarizer(config="x"),  # type: ignore[arg-type]
    "model_policy_version_int": lambda: ModelSummarizerConfig(policy_version=1),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("case", sorted(BAD_CONSTRUCTIONS))
def test_bad_summary_records_and_options_raise_a_typed_error(case: str) -> None:
    with pytest.raises(InvalidArgumentError):
        BAD_CONSTRUCTIONS[case]()


def test_good_summary_records_still_construct() -> None:
    summary = TaskSummary("t", 2, [Citation(0, "sha256:a")], "p", "v", ["note"])
    assert summary.citations == (Citation(0, "sha256:a"),) and summary.uncertainty == ("note",)
    assert SummaryState(summary, [CoverageGap(2, GapReason.CHANGED, "x")]).gaps[0].seq == 2


def test_citations_past_their_bound_keep_the_newest_and_say_so() -> None:
    # A summarizer that keeps every citation it ever made: the summary block of every request, and
    # every snapshot save, would grow with the session however short its text is.
    groups = [MessageGroup(seq=i, messages=(Message(Role.USER, f"m{i}"),)) for i in range(600)]
    previous = TaskSummary(
        text="x", frontier=500, citations=tuple(Citation(g.seq, g.digest) for g in groups[:500])
    )
    answer = TaskSummary(
        text="x",
        frontier=600,
        citations=(*previous.citations, *(Citation(g.seq, g.digest) for g in groups[500:])),
    )
    limits = SummaryLimits()
    checked, notes = checked_answer(answer, previous, groups[500:], 500, limits, 600)
    assert checked is not None
    assert [c.seq for c in checked.citations] == list(range(600 - MAX_SUMMARY_CITATIONS, 600))
    assert [d.code for d in notes] == ["summary_citations_condensed"]
    (note,) = checked.uncertainty
    assert "older citations were dropped" in note
    # Said once, however many updates cut: the note carried forward is not added again.
    again, _ = checked_answer(
        attrs.evolve(answer, uncertainty=checked.uncertainty), previous, groups[500:], 500, limits, 600
    )
    assert again is not None and again.uncertainty == checked.uncertainty
    # Within the bound nothing is cut and nothing is said.
    within, quiet = checked_answer(previous, None, groups[:500], 0, limits, 500)
    assert within is not None and len(within.citations) == 500 and quiet == [] and within.uncertainty == ()


class _Counted(Citation):
    """A citation that counts how often the engine reads its ``seq``."""

    __slots__ = ()
    reads = 0

    def __getattribute__(self, name: str) -> Any:
        if name == "seq":
            type(self).reads += 1
        return super().__getattribute__(name)


async def test_a_million_citations_cost_the_check_a_bounded_number_of_reads() -> None:
    # The check runs on the event loop: an answer of millions of citations must not be read whole.
    def answer(previous: TaskSummary | None, groups: list[MessageGroup]) -> TaskSummary:
        good = _good(previous, groups)
        padding = [_Counted(groups[-1].seq, "sha256:" + "0" * 64)] * 1_000_000
        object.__setattr__(good, "citations", [*good.citations, *padding])
        return good

    _Counted.reads = 0
    runtime = _runtime(Scripted(answer))
    async with runtime:
        for i in range(3):
            result = await runtime.run(ANA, "s1", f"message {i}.")
        # Each update reads at most (groups given + previous citations + 512) citations, not a million.
        assert 0 < _Counted.reads <= 3 * 2 * (MAX_SUMMARY_CITATIONS + 8)
        summary = result.summary.summary
        # The genuine citation (first in the list) is read and kept; the padding is dropped and counted.
        assert [c.seq for c in summary.citations] == [summary.frontier - 1]
        [note] = [d for d in result.diagnostics if d.code == "summarizer_contract_violation"]
        assert "dropped 1000000 citation(s)" in note.message and "not read" in note.message


def test_a_million_uncertainty_notes_cost_the_check_a_bounded_number_of_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every note was checked (and measured by fit_notes) on the event loop before the 16 were kept.
    from agentium_harness._ports import summary as summary_port

    reads = [0]
    check = summary_port.check_text

    def counted(value: object, name: str) -> str:
        reads[0] += 1
        return check(value, name)

    groups = [MessageGroup(seq=0, messages=(Message(Role.USER, "m0"),))]
    answer = TaskSummary(text="x", frontier=1, citations=(Citation(0, groups[0].digest),))
    object.__setattr__(answer, "uncertainty", [f"n{i}" for i in range(1_000_000)])
    monkeypatch.setattr(summary_port, "check_text", counted)
    checked, notes = checked_answer(answer, None, groups, 0, SummaryLimits(), 1)
    assert reads[0] < 1_000
    assert checked is not None and [d.code for d in notes] == ["summary_uncertainty_condensed"]
    # The newest notes are kept, and the marker counts every one dropped, read or not.
    assert checked.uncertainty[-1] == "n999999" and len(checked.uncertainty) == MAX_UNCERTAINTY_NOTES
    assert checked.uncertainty[0].startswith(f"{1_000_000 - MAX_UNCERTAINTY_NOTES + 1} older")
