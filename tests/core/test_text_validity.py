"""Text that is not valid Unicode is refused before anything runs (issue 21, item 4).

Never a raw ``UnicodeEncodeError``.

A lone surrogate is what Python makes of bytes that were not UTF-8 (argv,
``surrogateescape``) or of a JSON escape of half a pair. It cannot be encoded,
stored or hashed, so finding it at commit time would be after the model and
the tools ran.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from agentium_harness import (
    ContractViolationError,
    EffectLevel,
    InvalidArgumentError,
    InvalidIdError,
    RecallStatus,
    RunStatus,
    SessionKey,
    SourceBlock,
    SourceKind,
    Tool,
    ToolRegistry,
    ToolStatus,
    VerifiedIdentity,
    create_harness_runtime,
    current_session_recall_policy,
)
from agentium_harness._cli import main
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ExtractiveProvider, ScriptedProvider
from agentium_harness.plugin_api import (
    Candidate,
    Excerpt,
    Message,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    OpContext,
    ProviderCapabilities,
    RecallCapabilities,
    RecallLimits,
    RecallSession,
    RecallStore,
    Role,
    SourceOwner,
    SourceRef,
    ToolCall,
    Validation,
    ValidationStatus,
)

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s1")
MINE = SourceOwner("acme", "ana", "s1")
LONE = "caf\udce9 au lait"  # b"caf\xe9 au lait" (Latin-1) read as UTF-8 with surrogateescape
ROOT = Path(__file__).resolve().parents[2]


class Counting(ExtractiveProvider):
    def __init__(self) -> None:
        super().__init__()
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        self.requests.append(request)
        return await super().complete(request, ctx)


# -- user input and host sources ----------------------------------------------------------------


async def test_user_input_with_a_lone_surrogate_is_refused_before_the_model_runs() -> None:
    provider = Counting()
    store = InMemorySessionStore()
    runtime = create_harness_runtime(provider=provider, archive=InMemoryArchive(), session_store=store)
    async with runtime:
        with pytest.raises(InvalidArgumentError, match=r"user_input is not valid Unicode.*index 3"):
            await runtime.run(ANA, "s1", LONE)
        assert provider.requests == [] and await store.load(KEY, OpContext()) is None
        # A surrogate pair (an emoji) is valid text and runs.
        assert (await runtime.run(ANA, "s1", "ok \U0001f600")).committed


async def test_nul_and_control_characters_in_free_text_are_kept_exactly_through_a_store(
    tmp_path: Path,
) -> None:
    # The documented rule (docs/history-api.md): free text is any valid Unicode, NUL included;
    # only ids refuse control characters. Written to SQLite, read back by new instances.
    from agentium_harness.adapters.sqlite import SQLiteArchive, SQLiteConfig, SQLiteSessionStore
    from agentium_harness.testing import CONTROL_TEXT

    config = SQLiteConfig(path=str(tmp_path / "nul.db"))
    archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"]),
        archive=archive,
        session_store=store,
        owned=[archive, store],
    )
    async with runtime:
        assert (await runtime.run(ANA, "s1", CONTROL_TEXT)).committed
        await runtime.append(ANA, "s2", [Message(Role.USER, CONTROL_TEXT), Message(Role.ASSISTANT, "\x00")])
        with pytest.raises(InvalidIdError, match="U\\+0000"):
            await runtime.append(ANA, "s3", [Message(Role.TOOL, "r", tool_call_id="c\x001")])
    archive, store = SQLiteArchive(config), SQLiteSessionStore(config)
    again = create_harness_runtime(
        provider=ScriptedProvider(replies=[]), archive=archive, session_store=store, owned=[archive, store]
    )
    async with again:
        ran = await again.read_history(ANA, "s1", max_groups=10)
        assert ran.messages[0].content == CONTROL_TEXT
        appended = await again.read_history(ANA, "s2", max_groups=10)
        assert [m.content for m in appended.messages] == [CONTROL_TEXT, "\x00"]
        assert (await again.read_history(ANA, "s3", max_groups=10)).messages == ()


@pytest.mark.parametrize(
    "block",
    [
        SourceBlock(SourceKind.RECALL, "ticket-1", LONE),
        SourceBlock(SourceKind.RECALL, "ticket-1", "fine text", (("author", "\udcff"),)),
    ],
    ids=["content", "attribute value"],
)
async def test_a_host_source_with_a_lone_surrogate_is_refused_before_the_model_runs(
    block: SourceBlock,
) -> None:
    provider = Counting()
    store = InMemorySessionStore()
    runtime = create_harness_runtime(provider=provider, archive=InMemoryArchive(), session_store=store)
    async with runtime:
        with pytest.raises(InvalidArgumentError, match=r"sources\[0\].*lone surrogate"):
            await runtime.run(ANA, "s1", "summarise the ticket", sources=[block])
        assert provider.requests == [] and await store.load(KEY, OpContext()) is None


@pytest.mark.parametrize(
    ("source_id", "named"),
    [
        ("ticket-\ud800", "lone surrogate"),
        ("ticket\x00-1", "U\\+0000"),
        ("ticket-1\n[INFO] forged log line", "U\\+000A"),
        ("\x1b[31mred", "U\\+001B"),
        ("x" * 300 + "\x7f", "U\\+007F"),
        ("", "must not be empty"),
        (7, "expected a string"),
    ],
)
def test_a_source_id_holding_what_an_id_may_not_is_refused_when_the_block_is_built(
    source_id: object, named: str
) -> None:
    # It was taken, then named as written in diagnostics, logs and the committed uncertainty
    # ("source … omitted by the source budget"); a lone surrogate was refused only by run().
    with pytest.raises(InvalidIdError, match=f"source_id: .*{named}"):
        SourceBlock(SourceKind.RECALL, source_id, "fine text")  # type: ignore[arg-type]


def test_a_source_id_is_a_label_of_any_length() -> None:
    # Unlike an id that becomes a key (256 characters at most): a recall id encodes a whole
    # scope, and a host's may be a long URL.
    url = "https://docs.example/" + "a/" * 300 + "page?q=1 2"
    assert SourceBlock(SourceKind.RECALL, url, "text").source_id == url


# -- recall excerpts ----------------------------------------------------------------------------


class OneDoc(RecallStore):
    """A recall store holding one document whose text the test chooses."""

    capabilities: ClassVar[RecallCapabilities] = RecallCapabilities(
        bounded_discovery=True, bounded_reads=True, revision_validation=True, bounded_current_validation=True
    )

    def __init__(self, text: str) -> None:
        self.text = text

    async def open(self, scope: Any, limits: RecallLimits, ctx: OpContext) -> RecallSession:
        return _OneDocSession(self)


class _OneDocSession(RecallSession):
    def __init__(self, store: OneDoc) -> None:
        self.store = store

    async def discover(self, query: str, max_candidates: int, ctx: OpContext) -> Sequence[Candidate]:
        return [Candidate(SourceRef("doc-1", "r1"), MINE, 1.0, 40)]

    async def read(
        self, refs: Sequence[SourceRef], max_excerpt_bytes: int, ctx: OpContext
    ) -> Sequence[Excerpt]:
        return [Excerpt(r, MINE, self.store.text) for r in refs]

    async def validate(self, refs: Sequence[SourceRef], ctx: OpContext) -> Sequence[Validation]:
        return await self.validate_current(refs, ctx)

    async def validate_current(self, refs: Sequence[SourceRef], ctx: OpContext) -> Sequence[Validation]:
        return [Validation(r, ValidationStatus.CURRENT, r.revision) for r in refs]

    async def close(self) -> None:
        return None


OneDoc.session_class = _OneDocSession


@pytest.mark.parametrize("on_partial", ["stop", "continue"])
async def test_a_recall_excerpt_with_a_lone_surrogate_is_dropped_as_a_contract_violation(
    on_partial: str,
) -> None:
    provider = Counting()
    store = InMemorySessionStore()
    runtime = create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=store,
        recall=OneDoc(f"The release train leaves on {LONE}."),
        recall_policy=current_session_recall_policy(on_partial=on_partial),
    )
    async with runtime:
        result = await runtime.run(ANA, "s1", "when does the release train leave?")
    assert result.has("recall_contract_violation")
    assert result.recall is not None and result.recall.status is not RecallStatus.COMPLETE
    # The bad text never reached a request, and whatever was committed encodes.
    assert all("\udce9" not in b.content for r in provider.requests for b in r.sources)
    if on_partial == "stop":
        assert result.status is RunStatus.STOPPED and not result.committed and provider.requests == []
    else:
        assert result.committed
        stored = await store.load(KEY, OpContext())
        assert stored is not None


# -- tool output and provider replies -----------------------------------------------------------


class ToolCaller(ModelProvider):
    """Asks for one tool call, then answers with the text it saw in the tool's result."""

    capabilities: ClassVar[ProviderCapabilities] = ProviderCapabilities(tool_calls=True)

    def __init__(self, arguments: dict[str, Any] | None = None) -> None:
        self.arguments = arguments if arguments is not None else {"path": "notes.txt"}
        self.calls = 0

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        self.calls += 1
        results = [m for m in request.turn if m.role is Role.TOOL]
        if not results:
            return ModelResponse(Message(Role.ASSISTANT, "", (ToolCall("c1", "write_note", self.arguments),)))
        return ModelResponse(Message(Role.ASSISTANT, f"tool said: {results[-1].content[:60]}"))


async def test_tool_output_with_a_lone_surrogate_is_a_typed_outcome_and_the_effect_is_kept() -> None:
    written: list[dict[str, Any]] = []

    async def write_note(arguments: dict[str, Any]) -> str:
        written.append(arguments)  # the effect happens
        return f"wrote {LONE}"

    tools = ToolRegistry([Tool("write_note", write_note, EffectLevel.WRITE)])
    store = InMemorySessionStore()
    runtime = create_harness_runtime(
        provider=ToolCaller(), archive=InMemoryArchive(), session_store=store, tools=tools
    )
    async with runtime:
        result = await runtime.run(ANA, "s1", "write the note", grants=["write_note"])
    assert written == [{"path": "notes.txt"}]
    assert result.committed and result.status is RunStatus.COMPLETED
    [outcome] = result.tool_outcomes
    assert outcome.status is ToolStatus.INVALID_OUTPUT and outcome.effect is EffectLevel.WRITE
    assert "lone surrogate" in (outcome.detail or "")
    assert result.has("tool_invalid_output")
    stored = await store.load(KEY, OpContext())
    assert stored is not None
    [group] = stored.snapshot.resident
    tool_message = next(m for m in group.messages if m.role is Role.TOOL)
    assert tool_message.content.startswith("error: tool 'write_note' ran but returned text")


async def test_a_provider_reply_with_a_lone_surrogate_is_a_contract_violation() -> None:
    store = InMemorySessionStore()
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=[LONE]), archive=InMemoryArchive(), session_store=store
    )
    async with runtime:
        with pytest.raises(ContractViolationError, match="lone surrogate"):
            await runtime.run(ANA, "s1", "hello")
    assert await store.load(KEY, OpContext()) is None


async def test_tool_arguments_nested_too_deep_are_refused_before_the_tool_runs() -> None:
    ran: list[object] = []

    async def write_note(arguments: dict[str, Any]) -> str:
        ran.append(arguments)
        return "ok"

    deep: dict[str, Any] = {}
    node = deep
    for _ in range(100):
        node["a"] = {}
        node = node["a"]
    tools = ToolRegistry([Tool("write_note", write_note, EffectLevel.WRITE)])
    store = InMemorySessionStore()
    runtime = create_harness_runtime(
        provider=ToolCaller(deep), archive=InMemoryArchive(), session_store=store, tools=tools
    )
    async with runtime:
        with pytest.raises(ContractViolationError, match="deeper than 64"):
            await runtime.run(ANA, "s1", "write the note", grants=["write_note"])
    assert ran == [] and await store.load(KEY, OpContext()) is None


# -- the command line ---------------------------------------------------------------------------

CONFIG = """\
[provider]
plugin = "extractive"
[archive]
plugin = "memory"
[session_store]
plugin = "memory"
"""


def _console_script() -> str:
    candidate = Path(sys.executable).with_name("agentium")
    if candidate.exists():
        return str(candidate)
    found = shutil.which("agentium")
    assert found, "the agentium console script is not installed (pip install -e ./core)"
    return found


def _agentium(*args: str | bytes, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIUM_")}
    return subprocess.run(
        [_console_script(), *args], input=stdin, capture_output=True, env=env, timeout=120, check=False
    )


@pytest.mark.parametrize("where", ["argv", "stdin"])
def test_agentium_run_with_invalid_utf8_says_so_and_exits_2(tmp_path: Path, where: str) -> None:
    config = tmp_path / "agentium.toml"
    config.write_text(CONFIG, encoding="utf-8")
    ids = ("--tenant", "acme", "--user", "ana", "--session", "s1")
    latin1 = "café au lait".encode("latin-1")
    if where == "argv":
        result = _agentium("run", str(config), *ids, latin1)
    else:
        result = _agentium("run", str(config), *ids, "-", stdin=latin1)
    err = result.stderr.decode("utf-8", "replace")
    assert result.returncode == 2, err
    assert "not valid UTF-8" in err and "Nothing was run" in err
    assert "Traceback" not in err and result.stdout == b""
    # Valid UTF-8 on stdin runs the turn.
    ok = _agentium("run", str(config), *ids, "-", stdin="café au lait".encode())
    assert ok.returncode == 0, ok.stderr.decode("utf-8", "replace")


def test_agentium_eval_with_a_deeply_nested_case_line_exits_2_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "agentium.toml"
    config.write_text(CONFIG, encoding="utf-8")
    cases = tmp_path / "cases.jsonl"
    cases.write_text('{"id": "deep", "probe": ' + "[" * 1100 + "]" * 1100 + "}\n", encoding="utf-8")
    out = tmp_path / "out"
    assert main(["eval", str(config), str(cases), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "cases.jsonl:1:" in err and "deeper than" in err and "nothing was run" in err
    assert not out.exists()
    cases.write_text('{"id": "dup", "id": "dup2"}\n', encoding="utf-8")
    assert main(["eval", str(config), str(cases), "--out", str(out)]) == 2
    assert "appears twice" in capsys.readouterr().err


def test_the_json_check_of_a_case_line_is_not_fooled_by_brackets_in_strings() -> None:
    from agentium_harness.plugin_api import decode_json

    assert decode_json(json.dumps({"probe": "[" * 5000})) == {"probe": "[" * 5000}
