"""A summary's uncertainty notes read back one by one from the request's summary block.

A note is a summarizer's free text and may quote a group. Joined with
``"; "``, a note holding ``"; "`` read as two notes (a forged one among
them). The block's ``uncertainty`` attribute holds one note per line, each
note's own line breaks (and backslashes) escaped, and the renderer writes
those line breaks as ``&#xA;``: split on line breaks, every note comes back
whole, from the block's attributes and from its rendered text alike.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from typing import Any

import anyio
import attrs
import pytest
from _recall_support import Recording

from agentium_harness import VerifiedIdentity, create_harness_runtime
from agentium_harness._engine.limits import ResidentLimits, RuntimeLimits
from agentium_harness._history import Message, MessageGroup, Role
from agentium_harness._ports import OpContext
from agentium_harness._ports.provider import ModelRequest, SourceBlock, SourceKind
from agentium_harness._ports.summary import SummaryLimits, TaskSummary
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.summarizers import ExtractiveSummarizer

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")

NOTES = (
    "group 2 was read in part; the user confirmed the order",  # one note, though it holds "; "
    "the store said:\nline two of its error",  # a line break inside one note
    r"a backslash-n written out: \n, and a backslash \\",  # what the escape itself looks like
    "&#xA; written as text",  # what the renderer's line break looks like
    "plain",
)

_ESCAPE = re.compile(r"\\(\\|n|r|u[0-9a-f]{4})")


def _one_note(line: str) -> str:
    """A note as written on its line: ``\\n``, ``\\r``, ``\\uXXXX`` and ``\\\\`` read back."""

    def back(match: re.Match[str]) -> str:
        code = match[1]
        return {"\\": "\\", "n": "\n", "r": "\r"}.get(code) or chr(int(code[1:], 16))

    return _ESCAPE.sub(back, line)


def _notes(value: str) -> list[str]:
    return [_one_note(line) for line in value.split("\n")]


class Noting(ExtractiveSummarizer):
    """The real extractive summarizer, its answers carrying :data:`NOTES` as their uncertainty."""

    async def summarize(self, previous: Any, groups: Sequence[MessageGroup], ctx: OpContext) -> TaskSummary:
        answer = await super().summarize(previous, groups, ctx)
        return attrs.evolve(answer, uncertainty=NOTES)


def _summary_block(request: ModelRequest) -> SourceBlock:
    (block,) = [b for b in request.sources if b.kind is SourceKind.SUMMARY]
    return block


async def test_each_uncertainty_note_reads_back_whole_from_the_summary_block() -> None:
    provider = Recording()
    runtime = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        summarizer=Noting(),
        summary_limits=SummaryLimits(background=False),
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
    )
    async with runtime:
        with anyio.fail_after(30):
            for i in range(4):
                await runtime.append(
                    ANA,
                    "s1",
                    [Message(Role.USER, f"Fact {i}: box {i} is blue."), Message(Role.ASSISTANT, "OK.")],
                )
            await runtime.run(ANA, "s1", "Which boxes are blue?")
    block = _summary_block(provider.requests[-1])
    value = dict(block.attributes)["uncertainty"]
    assert _notes(value) == list(NOTES)
    # As the model reads it: the opening tag on one line, the notes in its escaped attribute.
    tag = block.render().split("\n", 1)[0]
    assert tag.startswith('<source-data kind="summary"') and tag.endswith(">")
    (rendered,) = re.findall(r' uncertainty="([^"]*)"', tag)
    assert _notes(html.unescape(rendered)) == list(NOTES)
    assert rendered.count("&#xA;") == len(NOTES) - 1  # a line break between notes, none inside one
