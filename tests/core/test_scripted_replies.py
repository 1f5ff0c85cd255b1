"""Scripted replies are structured strictly: wrong types and unknown keys are ConfigErrors, not coerced."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from agentium_harness._config import load_config
from agentium_harness._errors import ConfigError, ProviderError
from agentium_harness._ports import OpContext
from agentium_harness._ports.provider import ModelRequest
from agentium_harness.adapters import providers
from agentium_harness.adapters.providers import (
    ScriptedProvider,
    ScriptedProviderConfig,
    ScriptedReply,
    ScriptedToolCall,
)

BAD_REPLIES = {
    "number as content": {"content": 12},
    "null as content": {"content": None},
    "unknown key": {"content": "hi", "tone": "warm"},
    "tool call id as a number": {"tool_calls": [{"id": 7, "name": "search"}]},
    "arguments as a list": {"tool_calls": [{"id": "c1", "name": "search", "arguments": [["q", 1]]}]},
    "tool calls as a string": {"tool_calls": "search"},
    "neither string nor table": 12,
}


@pytest.mark.parametrize("reply", list(BAD_REPLIES.values()), ids=list(BAD_REPLIES))
def test_inline_reply_of_the_wrong_shape_is_a_config_error(reply: object) -> None:
    with pytest.raises(ConfigError) as info:
        ScriptedProvider(replies=["fine", reply])
    [issue] = info.value.issues
    assert issue.path == "replies[1]"


def test_number_content_is_reported_with_its_path_not_made_text() -> None:
    with pytest.raises(ConfigError, match=r"expected a string, got a number \(12\) @ \$\.content"):
        ScriptedProvider(replies=[{"content": 12}])


def test_good_inline_replies_still_work() -> None:
    provider = ScriptedProvider(
        replies=[
            "plain text",
            {"content": "with a call", "tool_calls": [{"id": "c1", "name": "search", "arguments": {"q": 1}}]},
        ]
    )
    assert provider._replies == [
        ScriptedReply("plain text"),
        ScriptedReply("with a call", (ScriptedToolCall("c1", "search", {"q": 1}),)),
    ]


@pytest.mark.anyio
async def test_jsonl_file_line_of_the_wrong_shape_is_a_config_error_naming_the_line(tmp_path: Path) -> None:
    script = tmp_path / "replies.jsonl"
    script.write_text('"first"\n\n{"content": 12}\n', encoding="utf-8")
    provider = ScriptedProvider(ScriptedProviderConfig(path=str(script)))
    with pytest.raises(ConfigError) as info:
        await provider.complete(ModelRequest("answer"), OpContext())
    assert info.value.source == str(script)
    [issue] = info.value.issues
    assert issue.path == "line 3"
    assert "expected a string" in issue.message
    assert provider.calls == []


@pytest.mark.anyio
async def test_jsonl_line_that_is_not_json_is_a_config_error(tmp_path: Path) -> None:
    script = tmp_path / "replies.jsonl"
    script.write_text('"first"\n{"content": \n', encoding="utf-8")
    provider = ScriptedProvider(ScriptedProviderConfig(path=str(script)))
    with pytest.raises(ConfigError, match="not valid JSON") as info:
        await provider.complete(ModelRequest("answer"), OpContext())
    assert info.value.issues[0].path == "line 2"


@pytest.mark.anyio
async def test_a_replies_file_is_read_with_a_bound_and_must_be_utf8(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The file was read whole: a path naming /dev/zero (or a huge file) read until memory ran out;
    # a file that was not UTF-8 raised a bare UnicodeDecodeError.
    monkeypatch.setattr(providers, "MAX_REPLY_FILE_BYTES", 16)
    big = tmp_path / "big.jsonl"
    big.write_text('"a reply longer than sixteen bytes"\n', encoding="utf-8")
    provider = ScriptedProvider(ScriptedProviderConfig(path=str(big)))
    with pytest.raises(ProviderError, match="larger than 16 bytes; it was not read"):
        await provider.complete(ModelRequest("answer"), OpContext())
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'"caf\xe9"\n')
    provider = ScriptedProvider(ScriptedProviderConfig(path=str(latin)))
    with pytest.raises(ProviderError, match="not valid UTF-8"):
        await provider.complete(ModelRequest("answer"), OpContext())
    assert provider.calls == []


def _config(tmp_path: Path, responses: str) -> Path:
    path = tmp_path / "agentium.toml"
    path.write_text(
        textwrap.dedent(
            f"""
            [provider]
            plugin = "scripted"
            options = {{ responses = {responses} }}

            [archive]
            plugin = "memory"

            [session_store]
            plugin = "memory"
            """
        ),
        encoding="utf-8",
    )
    return path


def test_config_file_reply_with_number_content_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(_config(tmp_path, '["ok", { content = 12 }]'), environ={})
    paths = [issue.path for issue in info.value.issues]
    assert any(p.startswith("$.provider.options.responses[1]") for p in paths), info.value.issues


def test_config_file_replies_as_strings_and_tables_still_load(tmp_path: Path) -> None:
    resolved = load_config(_config(tmp_path, '["ok", { content = "table" }]'), environ={})
    options = resolved.provider.options
    assert isinstance(options, ScriptedProviderConfig)
    assert options.responses == [ScriptedReply("ok"), ScriptedReply("table")]
