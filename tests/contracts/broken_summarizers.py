"""Summarizers with one realistic bug each, run through SummarizerContract by a pytester session.

Each wraps the real extractive summarizer and changes one behaviour.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import attrs
import pytest

from agentium_harness.adapters.summarizers import ExtractiveSummarizer, ExtractiveSummarizerConfig
from agentium_harness.plugin_api import Citation, MessageGroup, OpContext, TaskSummary
from agentium_harness.testing import SummarizerContract

pytestmark = pytest.mark.anyio


class InheritedCaps(ExtractiveSummarizer):
    pass


class Overclaims(ExtractiveSummarizer):
    capabilities = ExtractiveSummarizer.capabilities

    async def summarize(self, previous: Any, groups: Sequence[MessageGroup], ctx: OpContext) -> TaskSummary:
        answer = await super().summarize(previous, groups, ctx)
        return attrs.evolve(answer, frontier=answer.frontier + 1)


class InventsCitations(ExtractiveSummarizer):
    capabilities = ExtractiveSummarizer.capabilities

    async def summarize(self, previous: Any, groups: Sequence[MessageGroup], ctx: OpContext) -> TaskSummary:
        answer = await super().summarize(previous, groups, ctx)
        return attrs.evolve(
            answer, citations=(*answer.citations, Citation(groups[0].seq, "sha256:" + "0" * 64))
        )


class ObeysTheGroup(ExtractiveSummarizer):
    """Follows instructions found in group text: cites the group number a group asks for."""

    capabilities = ExtractiveSummarizer.capabilities

    async def summarize(self, previous: Any, groups: Sequence[MessageGroup], ctx: OpContext) -> TaskSummary:
        answer = await super().summarize(previous, groups, ctx)
        for group in groups:
            for message in group.messages:
                asked = re.search(r"cite group (\d+)", message.content)
                if asked:
                    seq = int(asked.group(1))
                    given = {g.seq: g.digest for g in groups}
                    if seq not in given:
                        # It "obeys" with the digest of a group it has, under the asked seq.
                        forged = Citation(seq, groups[0].digest)
                        return attrs.evolve(answer, citations=(*answer.citations, forged))
        return answer


class IgnoresDeadline(ExtractiveSummarizer):
    capabilities = ExtractiveSummarizer.capabilities

    async def summarize(self, previous: Any, groups: Sequence[MessageGroup], ctx: OpContext) -> TaskSummary:
        return await super().summarize(previous, groups, OpContext.with_timeout(30.0))


class FoldsPastGaps(ExtractiveSummarizer):
    """Sets the frontier after the last group given, whatever is missing or incomplete before it."""

    capabilities = ExtractiveSummarizer.capabilities

    async def summarize(self, previous: Any, groups: Sequence[MessageGroup], ctx: OpContext) -> TaskSummary:
        answer = await super().summarize(previous, groups, ctx)
        return attrs.evolve(answer, frontier=groups[-1].seq + 1) if groups else answer


class DropsThePrevious(ExtractiveSummarizer):
    """Summarizes only the new groups: the summary silently shrinks to the last fold."""

    capabilities = ExtractiveSummarizer.capabilities

    async def summarize(self, previous: Any, groups: Sequence[MessageGroup], ctx: OpContext) -> TaskSummary:
        return await super().summarize(None, groups, ctx)


class FrontierBehindCitations(ExtractiveSummarizer):
    """Keeps the last group "open" (frontier one lower) but cites it anyway."""

    capabilities = ExtractiveSummarizer.capabilities

    async def summarize(self, previous: Any, groups: Sequence[MessageGroup], ctx: OpContext) -> TaskSummary:
        answer = await super().summarize(previous, groups, ctx)
        start = previous.frontier if previous is not None else 0
        return attrs.evolve(answer, frontier=max(start, answer.frontier - 1))


class ChecksCancellationAtTheEnd(ExtractiveSummarizer):
    """Does the whole fold, then looks at the context."""

    capabilities = ExtractiveSummarizer.capabilities

    async def summarize(self, previous: Any, groups: Sequence[MessageGroup], ctx: OpContext) -> TaskSummary:
        answer = await super().summarize(previous, groups, OpContext.with_timeout(30.0))
        ctx.raise_if_expired("summarize")
        return answer


class ChecksCancellationAtTheStart(ExtractiveSummarizer):
    """Looks at the context once, before the fold, never during it."""

    capabilities = ExtractiveSummarizer.capabilities

    async def summarize(self, previous: Any, groups: Sequence[MessageGroup], ctx: OpContext) -> TaskSummary:
        ctx.raise_if_expired("summarize")
        return await super().summarize(previous, groups, OpContext.with_timeout(30.0))


class GrowsWithoutBound(ExtractiveSummarizer):
    """Keeps every line it ever wrote (no condensing)."""

    capabilities = ExtractiveSummarizer.capabilities

    def __init__(self) -> None:
        super().__init__(ExtractiveSummarizerConfig(max_chars=1_000_000))


class TestInheritedCaps(SummarizerContract):
    @pytest.fixture
    def summarizer(self) -> InheritedCaps:
        return InheritedCaps()


class TestOverclaims(SummarizerContract):
    @pytest.fixture
    def summarizer(self) -> Overclaims:
        return Overclaims()


class TestInventsCitations(SummarizerContract):
    @pytest.fixture
    def summarizer(self) -> InventsCitations:
        return InventsCitations()


class TestObeysTheGroup(SummarizerContract):
    @pytest.fixture
    def summarizer(self) -> ObeysTheGroup:
        return ObeysTheGroup()


class TestIgnoresDeadline(SummarizerContract):
    @pytest.fixture
    def summarizer(self) -> IgnoresDeadline:
        return IgnoresDeadline()


class TestFoldsPastGaps(SummarizerContract):
    @pytest.fixture
    def summarizer(self) -> FoldsPastGaps:
        return FoldsPastGaps()


class TestDropsThePrevious(SummarizerContract):
    @pytest.fixture
    def summarizer(self) -> DropsThePrevious:
        return DropsThePrevious()


class TestFrontierBehindCitations(SummarizerContract):
    @pytest.fixture
    def summarizer(self) -> FrontierBehindCitations:
        return FrontierBehindCitations()


class TestChecksCancellationAtTheEnd(SummarizerContract):
    @pytest.fixture
    def summarizer(self) -> ChecksCancellationAtTheEnd:
        return ChecksCancellationAtTheEnd()


class TestChecksCancellationAtTheStart(SummarizerContract):
    @pytest.fixture
    def summarizer(self) -> ChecksCancellationAtTheStart:
        return ChecksCancellationAtTheStart()


class TestGrowsWithoutBound(SummarizerContract):
    @pytest.fixture
    def summarizer(self) -> GrowsWithoutBound:
        return GrowsWithoutBound()
