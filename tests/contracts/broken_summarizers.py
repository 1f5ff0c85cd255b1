"""Summarizers with one realistic bug each, run through SummarizerContract by a pytester session.

Each wraps the real extractive summarizer and changes one behaviour.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import attrs
import pytest

from agentium_harness.adapters.summarizers import ExtractiveSummarizer
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
        return await super().summarize(previous, groups, OpContext.with_timeout(10.0))


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
