"""A host ranker may only reorder or drop the candidates it was given: its answer is read to that bound.

Before, ``rank()``'s answer was iterated to its end: a sequence that never
ends held the turn (and grew a problem per item), a huge one cost a check and
a problem string per item. Now it is read through its iterator to one item
past ``len(candidates)`` at most; a longer answer, or one that is no
sequence (a generator), fails the round like any other recall failure: a
``recall_failed`` diagnostic, logged and an event on the run's span, and the
policy's ``on_failed`` decides.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import anyio
import pytest
from _recall_support import Scripted
from _recall_support import runtime as recall_runtime
from _telemetry_support import Telemetered

from agentium_harness import RecallStatus, VerifiedIdentity, current_session_recall_policy
from agentium_harness.plugin_api import Candidate

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
DOCS = [
    ("rota", "The release train leaves on Thursday."),
    ("late", "A late train leaves on Friday."),
    ("spare", "The spare train waits at the depot."),
]
#: How far an "endless" answer goes before it gives up by itself: a regression fails by its count of
#: items read instead of hanging the suite.
ENDLESS = 100_000
HUGE = 1_000_000


class EndlessRanking(Sequence[Candidate]):
    """A sequence that says it holds one candidate and whose iterator repeats it (nearly) without end."""

    def __init__(self, item: Candidate) -> None:
        self.item = item
        self.read = 0

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: Any) -> Any:
        return self.item

    def __iter__(self) -> Iterator[Candidate]:
        while self.read < ENDLESS:
            self.read += 1
            yield self.item


def _endless_generator(item: Candidate) -> Iterator[Candidate]:
    while True:
        yield item


class Ranker:
    """A host ranker answering with what ``make`` builds from the candidates; keeps its answers."""

    def __init__(self, make: Callable[[Sequence[Candidate]], object]) -> None:
        self.make = make
        self.given: list[int] = []
        self.answers: list[object] = []

    def __call__(self, candidates: Sequence[Candidate]) -> Sequence[Candidate]:
        self.given.append(len(candidates))
        answer = self.make(candidates)
        self.answers.append(answer)
        return answer  # type: ignore[return-value]  # hostile on purpose


async def _run(ranker: Ranker, caplog: pytest.LogCaptureFixture) -> tuple[Any, Telemetered]:
    t = Telemetered()
    policy = current_session_recall_policy(rank=ranker, on_failed="continue")
    rt, _provider, _sessions = recall_runtime(Scripted(DOCS), recall_policy=policy, telemetry=t.telemetry())
    with caplog.at_level(logging.DEBUG, logger="agentium"), anyio.fail_after(30):
        async with rt:
            result = await rt.run(ANA, "s1", "When does the train leave?")
    return result, t


HOSTILE: dict[str, tuple[Callable[[Sequence[Candidate]], object], str]] = {
    "endless sequence": (lambda cs: EndlessRanking(cs[0]), "more than the 3 candidates it was given"),
    "huge list": (lambda cs: [cs[0]] * HUGE, "more than the 3 candidates it was given"),
    "one too many": (lambda cs: [*cs, cs[0]], "more than the 3 candidates it was given"),
    "endless generator": (lambda cs: _endless_generator(cs[0]), "returned generator, not a sequence"),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
async def test_a_ranker_answer_past_its_candidates_fails_the_round_and_is_read_no_further(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    make, why = HOSTILE[kind]
    ranker = Ranker(make)
    result, t = await _run(ranker, caplog)
    assert ranker.given == [3]
    [answer] = ranker.answers
    if isinstance(answer, EndlessRanking):
        assert answer.read <= 4, f"read {answer.read} items of a ranking of 3 candidates"
    # The round failed as a whole, saying why in one line (no problem per item); nothing of it was used.
    evidence = result.recall
    assert evidence is not None and evidence.status is RecallStatus.FAILED, evidence
    assert evidence.included == ()
    # A degraded outcome like any recall failure: a diagnostic, logged, and an event on the run's span.
    [failed] = [d for d in result.diagnostics if d.code == "recall_failed"]
    assert why in failed.message and "dropped" not in failed.message, failed.message[:500]
    assert any(getattr(r, "agentium_code", None) == "recall_failed" for r in caplog.records)
    assert any(r.levelno >= logging.WARNING for r in caplog.records if r.name.startswith("agentium"))
    events = [
        e
        for span in t.spans
        for e in span.events
        if (e.attributes or {}).get("agentium.diagnostic.code") == "recall_failed"
    ]
    assert events
    assert result.committed  # on_failed="continue": the run went on without recall evidence


async def test_a_ranker_that_reorders_and_drops_is_used_as_it_answered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ranker = Ranker(lambda cs: [cs[2], cs[0]])
    result, _ = await _run(ranker, caplog)
    evidence = result.recall
    assert evidence is not None and evidence.status is RecallStatus.COMPLETE, evidence
    [answer] = ranker.answers
    assert isinstance(answer, list)
    assert [r.source_id for r in evidence.included] == [c.ref.source_id for c in answer]
