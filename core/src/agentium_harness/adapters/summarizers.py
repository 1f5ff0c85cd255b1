"""The built-in ``extractive`` summarizer: deterministic and model-free.

It keeps, from each new group, its most informative sentences (the ones
with the most distinct words, what the user said weighed up, and none the
summary already holds word for word), each as one line tagged with the group it
came from (``[g12] ...``), and cites each kept group by seq and digest. The
text is bounded by ``max_chars``: when a new fold would pass it, the oldest
lines go first, whole (a sentence is never cut), and the summary says so
in its uncertainty. Group text is treated as data throughout: a sentence
that reads like an instruction is kept or dropped by the same score as any
other, and the engine shows the summary to the model as labeled source data.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, ClassVar

import attrs

from .._errors import InvalidArgumentError
from .._history import MessageGroup, Role
from .._ports import OpContext
from .._ports.summary import Citation, Summarizer, SummarizerCapabilities, TaskSummary

__all__ = ["ExtractiveSummarizer", "ExtractiveSummarizerConfig"]

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"\w{3,}")
_LINE = re.compile(r"^\[g(\d+)\] ")

POLICY = "extractive"
VERSION = "1"


def _bounded(low: int, high: int) -> Any:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise InvalidArgumentError(f"{attribute.name} must be an integer in {low}..{high}, got {value!r}")

    return check


@attrs.frozen(slots=True)
class ExtractiveSummarizerConfig:
    """Options of the extractive summarizer.

    - ``sentences_per_group``: sentences kept from each group;
    - ``max_sentence_chars``: longer sentences are skipped, never cut;
    - ``max_chars``: the whole summary text stays within this many characters.
    """

    sentences_per_group: int = attrs.field(default=2, validator=_bounded(1, 16))
    max_sentence_chars: int = attrs.field(default=240, validator=_bounded(16, 4_000))
    max_chars: int = attrs.field(default=2_000, validator=_bounded(64, 1_000_000))


def _sentences(group: MessageGroup, limit: int) -> list[tuple[str, bool]]:
    """Whole sentences of the group's user and assistant text, each with whether the user said it."""
    out: list[tuple[str, bool]] = []
    for message in group.messages:
        if message.role not in (Role.USER, Role.ASSISTANT):
            continue
        for raw in _SENTENCE_END.split(message.content):
            sentence = " ".join(raw.split())
            if sentence and len(sentence) <= limit:
                out.append((sentence, message.role is Role.USER))
    return out


#: What the user states carries the task; it outweighs this many distinct words of a reply.
_USER_WEIGHT = 8


def _pick(sentences: list[tuple[str, bool]], count: int) -> list[str]:
    """The ``count`` sentences with the most distinct words (the user's weighed up), in original order."""

    def score(i: int) -> tuple[int, int]:
        text, by_user = sentences[i]
        return (-(len({w.lower() for w in _WORD.findall(text)}) + (_USER_WEIGHT if by_user else 0)), i)

    chosen = sorted(sorted(range(len(sentences)), key=score)[:count])
    return [sentences[i][0] for i in chosen]


class ExtractiveSummarizer(Summarizer):
    """Deterministic extractive summaries with citations (built-in summarizer ``extractive``)."""

    capabilities: ClassVar[SummarizerCapabilities] = SummarizerCapabilities(incremental=True, citations=True)

    def __init__(self, config: ExtractiveSummarizerConfig | None = None) -> None:
        self._config = config or ExtractiveSummarizerConfig()

    async def summarize(
        self, previous: TaskSummary | None, groups: Sequence[MessageGroup], ctx: OpContext
    ) -> TaskSummary:
        """Fold ``groups`` (contiguous from the previous frontier) into a new bounded summary."""
        ctx.raise_if_expired("summarize")
        config = self._config
        lines = [line for line in (previous.text.splitlines() if previous else []) if line]
        citations = {c.seq: c for c in (previous.citations if previous else ())}
        uncertainty = list(previous.uncertainty) if previous else []
        frontier = previous.frontier if previous else 0
        for group in groups:
            ctx.raise_if_expired("summarize")
            # A sentence the summary already holds (a boilerplate reply) says nothing new.
            held = {line.split("] ", 1)[-1] for line in lines}
            fresh = [t for t in _sentences(group, config.max_sentence_chars) if t[0] not in held]
            picked = _pick(fresh, config.sentences_per_group)
            lines.extend(f"[g{group.seq}] {s}" for s in picked)
            if picked:
                citations[group.seq] = Citation(group.seq, group.digest)
            frontier = group.seq + 1
        dropped_upto: int | None = None
        while lines and len("\n".join(lines)) > config.max_chars:
            match = _LINE.match(lines.pop(0))
            if match is not None:
                dropped_upto = int(match.group(1))
        if dropped_upto is not None:
            note = "older groups were condensed away to keep the summary bounded"
            if note not in uncertainty:
                uncertainty.append(note)
        present = {int(m.group(1)) for line in lines if (m := _LINE.match(line)) is not None}
        return TaskSummary(
            text="\n".join(lines),
            frontier=frontier,
            citations=tuple(citations[s] for s in sorted(citations) if s in present),
            policy=POLICY,
            version=VERSION,
            uncertainty=tuple(uncertainty),
        )
