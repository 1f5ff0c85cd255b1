"""Cut-off answers and reply limits, against the stub server over real HTTP.

An answer the server says it cut off (``finish_reason`` ``length`` or
``content_filter``), a body past ``max_reply_bytes``, tool arguments past
``max_tool_arguments_bytes`` or nested past ``max_tool_arguments_depth``, and JSON that
is ambiguous (duplicate keys, ``NaN``, lone surrogates) are each a typed
provider error: inside a run no tool runs and nothing is committed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from openai_helpers import KEY_ENV, make_provider
from openai_stub_server import Reply, StubServer, recording

from agentium_harness import (
    ConfigError,
    ProviderError,
    RunStatus,
    Tool,
    ToolRegistry,
    VerifiedIdentity,
    load_runtime,
)
from agentium_harness.plugin_api import Message, ModelRequest, OpContext, Role
from agentium_provider_openai import (
    DEFAULT_MAX_REPLY_BYTES,
    DEFAULT_MAX_TOOL_ARGUMENTS_BYTES,
    MAX_TOOL_ARGUMENTS_DEPTH,
    OpenAIIncompleteReplyError,
    OpenAIMalformedReplyError,
    OpenAIProvider,
    OpenAIProviderConfig,
    OpenAIReplyLimitError,
)

pytestmark = pytest.mark.anyio

ME = VerifiedIdentity(tenant="acme", user="ana", verified_by="test")
REQUEST = ModelRequest(instructions="Be brief.", turn=(Message(Role.USER, "hi"),))


def write_config(tmp_path: Path, stub: StubServer, options: str = "") -> Path:
    """A config selecting the openai provider for ``stub``, with in-memory storage, no retries."""
    path = tmp_path / "agentium.toml"
    path.write_text(
        f"""
[runtime]
instructions = "You write files."

[provider]
plugin = "openai"

[provider.options]
model = "stub-model"
base_url = "{stub.base_url}"
api_key_env = "{KEY_ENV}"
max_retries = 0
{options}

[archive]
plugin = "memory"

[session_store]
plugin = "memory"
""",
        encoding="utf-8",
    )
    return path


@pytest.fixture
def key_in_env(stub: StubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    assert stub.api_key
    monkeypatch.setenv(KEY_ENV, stub.api_key)


def tool_call_body(
    arguments: object, *, finish_reason: str = "tool_calls", content: str | None = None
) -> Any:
    """The recorded tool-call answer with ``arguments`` (a JSON string, or an object), for tool write_file."""
    body = recording("tool_call")
    choice = body["choices"][0]
    choice["finish_reason"] = finish_reason
    choice["message"]["content"] = content
    function = choice["message"]["tool_calls"][0]["function"]
    function["name"] = "write_file"
    function["arguments"] = arguments
    return body


def nested(depth: int) -> str:
    """A JSON object ``depth`` levels deep: {"a":{"a":...{}...}}."""
    return '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)


class WriteTool:
    """A write tool that records every call it ran."""

    def __init__(self) -> None:
        self.ran: list[dict[str, Any]] = []

    async def __call__(self, arguments: Mapping[str, Any]) -> str:
        self.ran.append(dict(arguments))
        return "written"

    def registry(self) -> ToolRegistry:
        return ToolRegistry([Tool("write_file", self, description="Write a file.")])


async def run_once(tmp_path: Path, stub: StubServer, options: str = "") -> tuple[WriteTool, BaseException]:
    """One run that must fail with a ProviderError: the tool, the error; asserts nothing was committed."""
    tool = WriteTool()
    runtime = load_runtime(write_config(tmp_path, stub, options), tools=tool.registry())
    async with runtime:
        with pytest.raises(ProviderError) as caught:
            await runtime.run(ME, "s1", "write the config file", grants=["write_file"])
        view = await runtime.inspect_session(ME, "s1")
    assert not view.exists, "nothing may be committed"
    assert tool.ran == [], "no tool may run"
    assert len(stub.completions) == 1, "a refused answer is not asked for again"
    assert stub.violations == []
    cause = caught.value.__cause__
    assert cause is not None
    return tool, cause


# -- finish_reason --------------------------------------------------------------------


@pytest.mark.parametrize("finish_reason", ["length", "content_filter"])
async def test_a_cut_off_answer_never_runs_its_tool_calls(
    tmp_path: Path, stub: StubServer, key_in_env: None, finish_reason: str
) -> None:
    """Arguments that parse fine are still not run when the server says it cut the answer off."""
    stub.add(
        Reply(body=tool_call_body('{"path":"app.conf","content":"port=80"}', finish_reason=finish_reason))
    )
    _, cause = await run_once(tmp_path, stub)
    assert isinstance(cause, OpenAIIncompleteReplyError)
    assert cause.finish_reason == finish_reason and cause.tool_calls == 1
    assert "none of which ran" in str(cause)


async def test_a_cut_off_answer_with_broken_arguments_is_reported_as_cut_off(
    stub: StubServer, provider: OpenAIProvider
) -> None:
    """Arguments cut mid-string: the cause is the cut-off, not a JSON syntax error."""
    stub.add(Reply(body=tool_call_body('{"path":"app.conf","content":"por', finish_reason="length")))
    with pytest.raises(OpenAIIncompleteReplyError, match="max_completion_tokens") as caught:
        await provider.complete(REQUEST, OpContext.with_timeout(30))
    assert caught.value.finish_reason == "length"


@pytest.mark.parametrize("finish_reason", ["length", "content_filter"])
async def test_a_cut_off_text_answer_is_not_used(
    stub: StubServer, provider: OpenAIProvider, finish_reason: str
) -> None:
    """A text answer the server cut off is not returned as if it were the model's whole answer."""
    body = recording("plain_answer")
    body["choices"][0]["finish_reason"] = finish_reason
    stub.add(Reply(body=body))
    with pytest.raises(OpenAIIncompleteReplyError) as caught:
        await provider.complete(REQUEST, OpContext.with_timeout(30))
    assert caught.value.finish_reason == finish_reason and caught.value.tool_calls == 0


@pytest.mark.parametrize("finish_reason", ["stop", "tool_calls", None, "eos"])
async def test_other_finish_reasons_are_answers(
    stub: StubServer, provider: OpenAIProvider, finish_reason: str | None
) -> None:
    """stop, tool_calls, a missing value and a server's own spelling are complete answers."""
    stub.add(Reply(body=tool_call_body('{"path":"a"}', finish_reason=finish_reason)))  # type: ignore[arg-type]
    response = await provider.complete(REQUEST, OpContext.with_timeout(30))
    assert response.message.tool_calls[0].arguments == {"path": "a"}


@pytest.mark.parametrize("shape", ["legacy function_call", "tool_calls", "function_call"])
async def test_an_answer_that_calls_a_tool_but_holds_no_tool_call_commits_nothing(
    tmp_path: Path, stub: StubServer, key_in_env: None, shape: str
) -> None:
    """A legacy function_call, or a call finish_reason with no tool call: refused, never an empty answer."""
    body = tool_call_body(
        '{"path":"a"}', finish_reason="function_call" if shape.startswith("legacy") else shape
    )
    message = body["choices"][0]["message"]
    function = message.pop("tool_calls")[0]["function"]
    if shape.startswith("legacy"):
        message["function_call"] = function
    stub.add(Reply(body=body))
    _, cause = await run_once(tmp_path, stub)
    assert type(cause) is OpenAIMalformedReplyError
    assert ("function_call ('write_file')" if shape.startswith("legacy") else "holds no tool call") in str(
        cause
    )


async def test_a_null_function_call_beside_an_answer_is_no_call(
    stub: StubServer, provider: OpenAIProvider
) -> None:
    """ "function_call": null (as some servers send it) says nothing: the text is the answer, as before."""
    body = recording("plain_answer")
    body["choices"][0]["message"]["function_call"] = None
    stub.add(Reply(body=body))
    response = await provider.complete(REQUEST, OpContext.with_timeout(30))
    assert response.message.content == recording("plain_answer")["choices"][0]["message"]["content"]


# -- max_reply_bytes ------------------------------------------------------------------


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_a_body_past_max_reply_bytes_is_refused(
    tmp_path: Path, stub: StubServer, key_in_env: None, chunked: bool
) -> None:
    """With or without a Content-Length, a body past the cap is refused; its tool call never runs."""
    padding = "x" * 70_000
    stub.add(Reply(body=tool_call_body('{"path":"a"}', content=padding), chunked=chunked))
    _, cause = await run_once(tmp_path, stub, "max_reply_bytes = 65536")
    assert isinstance(cause, OpenAIReplyLimitError)
    assert (cause.limit, cause.value) == ("max_reply_bytes", 65536)
    assert "max_reply_bytes=65536" in str(cause)


async def test_the_default_reply_cap(stub: StubServer, provider: OpenAIProvider) -> None:
    """Unconfigured, a body just past DEFAULT_MAX_REPLY_BYTES (4 MiB) is refused; one under it is used."""
    assert provider.config.max_reply_bytes == DEFAULT_MAX_REPLY_BYTES == 4 * 1024 * 1024
    under = recording("plain_answer")
    under["choices"][0]["message"]["content"] = "y" * (DEFAULT_MAX_REPLY_BYTES - 1024)
    over = recording("plain_answer")
    over["choices"][0]["message"]["content"] = "y" * DEFAULT_MAX_REPLY_BYTES
    stub.add(Reply(body=under, chunked=True), Reply(body=over, chunked=True))
    response = await provider.complete(REQUEST, OpContext.with_timeout(30))
    assert len(response.message.content) == DEFAULT_MAX_REPLY_BYTES - 1024
    with pytest.raises(OpenAIReplyLimitError, match="max_reply_bytes"):
        await provider.complete(REQUEST, OpContext.with_timeout(30))


# -- max_tool_arguments_bytes --------------------------------------------------------------


async def test_tool_arguments_past_the_default_cap_never_run(
    tmp_path: Path, stub: StubServer, key_in_env: None
) -> None:
    """Arguments of 1.5 MiB (the reply itself under its cap): refused, not parsed, not run, not committed."""
    big = json.dumps(
        {
            "path": "a",
            "content": "z" * (DEFAULT_MAX_TOOL_ARGUMENTS_BYTES + DEFAULT_MAX_TOOL_ARGUMENTS_BYTES // 2),
        }
    )
    stub.add(Reply(body=tool_call_body(big)))
    _, cause = await run_once(tmp_path, stub)
    assert isinstance(cause, OpenAIReplyLimitError)
    assert (cause.limit, cause.value) == ("max_tool_arguments_bytes", DEFAULT_MAX_TOOL_ARGUMENTS_BYTES)


async def test_the_arguments_cap_counts_utf8_bytes_exactly(stub: StubServer) -> None:
    """At the configured cap the call is used; one byte over (a two-byte character) it is refused."""
    at_cap = '{"c":"' + "é" * 496 + '"}'  # 6 + 992 + 2 = 1000 bytes
    assert len(at_cap.encode()) == 1000
    over = '{"c":"' + "é" * 496 + 'a"}'
    for as_object in (False, True):
        stub.add(Reply(body=tool_call_body(json.loads(at_cap) if as_object else at_cap)))
        stub.add(Reply(body=tool_call_body(json.loads(over) if as_object else over)))
    provider = make_provider(stub, max_tool_arguments_bytes=1000)
    try:
        for _ in range(2):
            response = await provider.complete(REQUEST, OpContext.with_timeout(30))
            assert response.message.tool_calls[0].arguments == json.loads(at_cap)
            with pytest.raises(
                OpenAIReplyLimitError, match="1001 bytes, more than max_tool_arguments_bytes=1000"
            ):
                await provider.complete(REQUEST, OpContext.with_timeout(30))
    finally:
        await provider.aclose()


# -- max_tool_arguments_depth -------------------------------------------------------------


@pytest.mark.parametrize("depth", [MAX_TOOL_ARGUMENTS_DEPTH + 1, 5_000, 100_000])
async def test_deeply_nested_arguments_never_run(
    tmp_path: Path, stub: StubServer, key_in_env: None, depth: int
) -> None:
    """Just past the cap, past the parser's own recursion limit, and far past it: a typed limit error."""
    stub.add(Reply(body=tool_call_body(nested(depth))))
    _, cause = await run_once(tmp_path, stub)
    assert isinstance(cause, OpenAIReplyLimitError)
    assert (cause.limit, cause.value) == ("max_tool_arguments_depth", MAX_TOOL_ARGUMENTS_DEPTH)
    assert "max_tool_arguments_depth=64" in str(cause)


@pytest.mark.parametrize("depth", [MAX_TOOL_ARGUMENTS_DEPTH + 1, 100_000])
async def test_a_deeply_nested_body_is_a_limit_error(
    stub: StubServer, provider: OpenAIProvider, depth: int
) -> None:
    """Arguments sent as an object inside the body, nested past the cap: refused, never a RecursionError."""
    body = json.dumps(tool_call_body({"path": "a"})).replace('{"path": "a"}', nested(depth))
    stub.add(Reply(body=body.encode()))
    with pytest.raises(OpenAIReplyLimitError, match="max_tool_arguments_depth=64") as caught:
        await provider.complete(REQUEST, OpContext.with_timeout(30))
    assert caught.value.limit == "max_tool_arguments_depth"


@pytest.mark.parametrize(
    ("cap", "as_object"), [(MAX_TOOL_ARGUMENTS_DEPTH, False), (MAX_TOOL_ARGUMENTS_DEPTH, True), (3, False)]
)
async def test_arguments_at_the_depth_cap_run_and_commit(
    tmp_path: Path, stub: StubServer, key_in_env: None, cap: int, as_object: bool
) -> None:
    """The cap is a bound, not a refusal of nesting: arguments exactly at it run the tool and commit."""
    tool = WriteTool()
    arguments = json.loads(nested(cap)) if as_object else nested(cap)
    stub.add(Reply(body=tool_call_body(arguments)), Reply.recorded("after_tool"))
    config = write_config(tmp_path, stub, f"max_tool_arguments_depth = {cap}")
    runtime = load_runtime(config, tools=tool.registry())
    async with runtime:
        result = await runtime.run(ME, "s1", "write the config file", grants=["write_file"])
        view = await runtime.inspect_session(ME, "s1")
    assert result.status is RunStatus.COMPLETED and result.committed and view.exists
    assert len(tool.ran) == 1


async def test_a_lower_depth_cap_is_honoured(stub: StubServer) -> None:
    """max_tool_arguments_depth = 3: four levels are refused."""
    stub.add(Reply(body=tool_call_body(nested(4))))
    provider = make_provider(stub, max_tool_arguments_depth=3)
    try:
        with pytest.raises(OpenAIReplyLimitError, match="max_tool_arguments_depth=3"):
            await provider.complete(REQUEST, OpContext.with_timeout(30))
    finally:
        await provider.aclose()


# -- ambiguous JSON -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"path":"a","path":"/etc/passwd"}', "'path' appears twice"),
        ('{"n":NaN}', "NaN is not valid"),
        ('{"n":-Infinity}', "-Infinity is not valid"),
        ('{"n":1e999}', "too large to be finite"),
        ('{"path":"\\ud800"}', "lone surrogate"),
    ],
)
async def test_ambiguous_arguments_never_run(
    tmp_path: Path, stub: StubServer, key_in_env: None, arguments: str, expected: str
) -> None:
    """Duplicate keys, non-numbers and lone surrogates: malformed, so the tool never sees a guess."""
    stub.add(Reply(body=tool_call_body(arguments)))
    _, cause = await run_once(tmp_path, stub)
    assert isinstance(cause, OpenAIMalformedReplyError) and not isinstance(cause, OpenAIReplyLimitError)
    assert expected in str(cause)


async def test_a_lone_surrogate_in_the_answer_text(stub: StubServer, provider: OpenAIProvider) -> None:
    """Text that no UTF-8 encoder accepts is refused here, not found later by the engine."""
    stub.add(Reply(body=json.dumps(recording("plain_answer")).replace("release", "rel\\udc00ase").encode()))
    with pytest.raises(OpenAIMalformedReplyError, match="lone surrogate"):
        await provider.complete(REQUEST, OpContext.with_timeout(30))


# -- the options ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "key", "expected"),
    [
        ("max_reply_bytes = 100", "max_reply_bytes", "from 1024 to 268435456"),
        ("max_reply_bytes = 1e9", "max_reply_bytes", ""),
        ("max_tool_arguments_bytes = 0", "max_tool_arguments_bytes", "from 2 to"),
        ("max_tool_arguments_bytes = 268435457", "max_tool_arguments_bytes", "from 2 to 268435456"),
        ("max_tool_arguments_depth = 0", "max_tool_arguments_depth", "from 1 to 64"),
        ("max_tool_arguments_depth = 65", "max_tool_arguments_depth", "from 1 to 64"),
        ("max_tool_arguments_depth = true", "max_tool_arguments_depth", ""),
    ],
)
def test_bad_limits_are_config_errors_at_their_key(
    tmp_path: Path, stub: StubServer, options: str, key: str, expected: str
) -> None:
    """Each limit is validated when the config is loaded, and reported at its key."""
    with pytest.raises(ConfigError) as caught:
        load_runtime(write_config(tmp_path, stub, options))
    messages = {i.path: i.message for i in caught.value.issues}
    assert any(p.startswith(f"$.provider.options.{key}") for p in messages), messages
    assert expected in " ".join(messages.values())
    assert stub.requests == []


def test_the_limits_have_documented_defaults() -> None:
    """The defaults the README states."""
    config = OpenAIProviderConfig(model="m")
    assert (config.max_reply_bytes, config.max_tool_arguments_bytes, config.max_tool_arguments_depth) == (
        4 * 1024 * 1024,
        1024 * 1024,
        64,
    )


async def test_the_probe_model_list_is_capped_too(stub: StubServer) -> None:
    """GET /models past max_reply_bytes, or nested too deep: a typed error from the probe, no crash."""
    many = [{"id": f"model-{i:06d}", "object": "model"} for i in range(2_000)]
    stub.model_replies.extend(
        [
            Reply(body={"object": "list", "data": many}, chunked=True),
            Reply(body=('{"object":"list","data":' + "[" * 50_000 + "]" * 50_000 + "}").encode()),
        ]
    )
    capped = make_provider(stub, max_reply_bytes=4096)
    try:
        with pytest.raises(OpenAIReplyLimitError, match="max_reply_bytes=4096"):
            await capped.health(OpContext.with_timeout(30))
    finally:
        await capped.aclose()
    provider = make_provider(stub)
    try:
        with pytest.raises(OpenAIMalformedReplyError, match="no model list"):
            await provider.health(OpContext.with_timeout(30))
    finally:
        await provider.aclose()
