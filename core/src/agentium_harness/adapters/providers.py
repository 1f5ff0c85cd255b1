"""Built-in model providers that need no live model: ``scripted`` and ``extractive``.

Both are deterministic, so demos, tests and evaluations are reproducible. The
scripted provider replays responses from a list or a JSONL file; the
extractive provider answers only from the labeled source data in its request,
quoting the best-matching sentence with its source id, and abstains when no
source supports an answer.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from typing import Any, ClassVar

import anyio
import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn

from .._codec import StructureHook, decode_json, register_structure_hook, structure
from .._errors import ConfigError, ConfigIssue, ProviderError, RecordDecodeError
from .._history import Message, Role, ToolCall
from .._plugins.spec import PATH_OPTION
from .._ports import OpContext
from .._ports.provider import ModelProvider, ModelRequest, ModelResponse, ProviderCapabilities
from .._validators import bounded_count

__all__ = [
    "ABSTAIN_TEXT",
    "ExtractiveProvider",
    "ExtractiveProviderConfig",
    "ScriptedProvider",
    "ScriptedProviderConfig",
    "ScriptedReply",
]

#: Largest reply file the scripted and recorded providers read (64 MiB): a ``path`` naming a
#: device such as ``/dev/zero`` or a huge file is refused after one bounded read, not read until
#: memory runs out.
MAX_REPLY_FILE_BYTES = 64 * 1024 * 1024


def read_reply_file(path: str, what: str) -> bytes:
    """At most :data:`MAX_REPLY_FILE_BYTES` of ``path`` (blocking: call it in a worker thread).

    :raises ProviderError: the file is larger; ``OSError`` when it cannot be read.
    """
    with open(path, "rb") as handle:
        data = handle.read(MAX_REPLY_FILE_BYTES + 1)
    if len(data) > MAX_REPLY_FILE_BYTES:
        raise ProviderError(f"{what} {path} is larger than {MAX_REPLY_FILE_BYTES} bytes; it was not read")
    return data


#: What the extractive provider says when no labeled source supports an answer.
ABSTAIN_TEXT = "I have no evidence in the provided sources to answer that."


@attrs.frozen(slots=True)
class ScriptedToolCall:
    """A tool call in a scripted reply."""

    id: str
    name: str
    arguments: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen(slots=True)
class ScriptedReply:
    """One scripted reply: text and optional tool calls."""

    content: str = ""
    tool_calls: tuple[ScriptedToolCall, ...] = ()

    def to_message(self) -> Message:
        """The assistant message this reply stands for."""
        calls = tuple(ToolCall(c.id, c.name, dict(c.arguments)) for c in self.tool_calls)
        return Message(Role.ASSISTANT, self.content, tool_calls=calls)


def _reply_rule(conv: cattrs.Converter) -> StructureHook:
    """How a converter structures a reply: a plain string (its text) or a table.

    The table's fields (``content``, ``tool_calls``) are structured by the
    converter this rule is installed on, so the strict stored-data converter
    and the config loader refuse ``"content": 12`` instead of making it "12".
    """
    from_table = make_dict_structure_fn(ScriptedReply, conv, _cattrs_forbid_extra_keys=True)

    def hook(item: object, _cls: object) -> ScriptedReply:
        if isinstance(item, str):
            return ScriptedReply(content=item)
        if not isinstance(item, dict):
            raise TypeError(f"a scripted reply must be a string or a table, got {type(item).__name__}")
        return from_table(item, ScriptedReply)

    return hook


# Config and JSONL files may give a reply as a bare string; every converter
# made from now on (config's included) learns that here.
register_structure_hook(ScriptedReply, _reply_rule)


def _reply_from_plain(item: object, where: str, source: str | None = None) -> ScriptedReply:
    """Structure one reply strictly; a bad one is a :class:`ConfigError` naming where it was."""
    try:
        return structure(item, ScriptedReply)
    except RecordDecodeError as exc:
        raise ConfigError([ConfigIssue(where, "; ".join(exc.issues))], source) from exc


@attrs.frozen(slots=True)
class ScriptedProviderConfig:
    """Options of the scripted provider.

    - ``responses``: replies in order; each a string or a table with ``content`` and ``tool_calls``.
    - ``path``: a JSONL file of replies (one JSON string or object per line), read on first use;
      in a config file a relative path is resolved against the config file's folder.
    - ``cycle``: start again from the first reply when the script runs out (otherwise an error).
    """

    responses: list[ScriptedReply] = attrs.field(factory=list)
    path: str | None = attrs.field(default=None, metadata={PATH_OPTION: True})
    cycle: bool = False


def _json_line(line: str, number: int, path: str) -> object:
    try:
        return decode_json(line)
    except ValueError as exc:  # InvalidJSONError: malformed, too deep, duplicate keys, NaN
        raise ConfigError([ConfigIssue(f"line {number}", f"not valid JSON: {exc}")], path) from exc


class ScriptedProvider(ModelProvider):
    """Replays a fixed script of replies, one per model call.

    Replies are checked strictly: a reply whose ``content`` is not a string,
    with unknown keys or with a malformed tool call raises
    :class:`~agentium_harness._errors.ConfigError` (inline replies when the
    provider is built, a JSONL file's lines when it is first read).
    """

    capabilities: ClassVar[ProviderCapabilities] = ProviderCapabilities(tool_calls=True, deterministic=True)

    def __init__(
        self,
        config: ScriptedProviderConfig | None = None,
        *,
        replies: Sequence[object] = (),
        cycle: bool | None = None,
    ) -> None:
        self._config = config or ScriptedProviderConfig()
        if cycle is not None:
            self._config = attrs.evolve(self._config, cycle=cycle)
        # Inline replies are validated now (no I/O); a file is read on first use.
        self._replies: list[ScriptedReply] | None = [
            *self._config.responses,
            *(
                r if isinstance(r, ScriptedReply) else _reply_from_plain(r, f"replies[{i}]")
                for i, r in enumerate(replies)
            ),
        ]
        if self._config.path is not None:
            self._replies = None
        self._index = 0
        # Calls may come from several threads, each with its own event loop: take the next reply atomically.
        self._next_lock = threading.Lock()
        self.calls: list[ModelRequest] = []

    async def _load(self) -> list[ScriptedReply]:
        if self._replies is None:
            assert self._config.path is not None
            path = self._config.path
            data = await anyio.to_thread.run_sync(read_reply_file, path, "the replies file")
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ProviderError(
                    f"the replies file {path} is not valid UTF-8 (byte {exc.start})"
                ) from None
            replies = [
                _reply_from_plain(_json_line(line, number, path), f"line {number}", path)
                for number, line in enumerate(text.splitlines(), start=1)
                if line.strip()
            ]
            self._replies = [*self._config.responses, *replies]
        return self._replies

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        """Return the next scripted reply."""
        replies = await self._load()
        with self._next_lock:
            if self._index >= len(replies):
                if not self._config.cycle or not replies:
                    raise ProviderError(f"scripted provider ran out of replies after {len(replies)}")
                self._index = 0
            reply = replies[self._index]
            self._index += 1
            self.calls.append(request)
        return ModelResponse(message=reply.to_message())


@attrs.frozen(slots=True)
class ExtractiveProviderConfig:
    """Options of the extractive provider.

    - ``min_overlap``: how many query words a sentence must share to be quoted.
    """

    min_overlap: int = attrs.field(default=1, validator=bounded_count(minimum=0))


_WORD = re.compile(r"[\w']+", re.UNICODE)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
# Words too common to show that a sentence answers a question.
_STOP = frozenset(
    "a an and are as at be by did do does for from has have how i in is it its me my of on or "
    "our so that the their there this to was we were what when where which who why will with you your".split()
)


def _words(text: str) -> set[str]:
    return {w for w in (m.lower() for m in _WORD.findall(text)) if w not in _STOP}


class ExtractiveProvider(ModelProvider):
    """Answers by quoting the labeled source sentence that best matches the latest user text."""

    capabilities: ClassVar[ProviderCapabilities] = ProviderCapabilities(tool_calls=False, deterministic=True)

    def __init__(self, config: ExtractiveProviderConfig | None = None) -> None:
        self._config = config or ExtractiveProviderConfig()

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        """Quote the best-matching sentence with its source id, or abstain."""
        query = next((m.content for m in reversed(request.turn) if m.role is Role.USER), "")
        wanted = _words(query)
        best: tuple[int, int, str, str] | None = None
        for order, block in enumerate(request.sources):
            for sentence in _SENTENCE.split(block.content.strip()):
                score = len(wanted & _words(sentence))
                # Highest overlap wins; ties go to the earlier (higher-ranked) block.
                if score >= self._config.min_overlap and (best is None or score > best[0]):
                    best = (score, order, sentence.strip(), block.source_id)
        if best is None:
            return ModelResponse(message=Message(Role.ASSISTANT, ABSTAIN_TEXT))
        _, _, sentence, source_id = best
        return ModelResponse(message=Message(Role.ASSISTANT, f'"{sentence}" [source: {source_id}]'))
