"""The documented configs run: ``docs/real-model.md`` against the stub server, and the README's examples.

The docs page's files are used verbatim: its ``${OPENAI_BASE_URL:-…}``
references are filled with the stub server's address, as a reader would
point them at a local server.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from openai_stub_server import Reply, StubServer, running

from agentium_harness import ProviderError, VerifiedIdentity, load_runtime
from agentium_provider_openai import OpenAIProvider, OpenAIProviderConfig

pytestmark = pytest.mark.anyio

PLUGIN = Path(__file__).resolve().parents[1]
ROOT = PLUGIN.parents[1]
PAGE = ROOT / "docs" / "real-model.md"
README = PLUGIN / "README.md"
ME = VerifiedIdentity(tenant="acme", user="ana", verified_by="docs")

_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks(path: Path, language: str) -> list[str]:
    """The fenced blocks of ``language`` in ``path``, in order."""
    return [body for lang, body in _BLOCK.findall(path.read_text("utf-8")) if lang == language]


@pytest.fixture
def keyless() -> Iterator[StubServer]:
    """A stub server that expects no key, as a local server."""
    with running(api_key=None, models=("Qwen/Qwen2.5-7B-Instruct",)) as server:
        yield server


def test_the_page_has_the_documented_configs() -> None:
    """Guard: the tests below use the page's two config files; a new or removed one must be looked at."""
    assert len(blocks(PAGE, "toml")) == 2


async def test_the_local_server_config_runs(tmp_path: Path, keyless: StubServer) -> None:
    """The page's local-server file, pointed at the stub: a turn completes and the probe lists the model."""
    path = tmp_path / "local-model.toml"
    path.write_text(blocks(PAGE, "toml")[0], encoding="utf-8")
    keyless.add(Reply.recorded("plain_answer"))
    runtime = load_runtime(path, environ={"OPENAI_BASE_URL": keyless.base_url})
    async with runtime:
        result = await runtime.run(ME, "s1", "What is a message group?")
        probe = dict(await runtime.probe())["provider"]
    assert result.output == "The deploy runs from the release branch."
    sent = keyless.completions[0]
    assert sent.body["model"] == "Qwen/Qwen2.5-7B-Instruct"
    assert sent.body["messages"][0]["content"].startswith("You are a concise assistant.")
    assert sent.headers["authorization"] == "Bearer no-key"
    assert probe.startswith("ok: 1 model(s)") and "model 'Qwen/Qwen2.5-7B-Instruct' listed" in probe
    assert keyless.violations == []


async def test_record_then_replay_without_the_server(tmp_path: Path) -> None:
    """The page's recorded+openai file: record against the server, then replay with the server gone."""
    text = blocks(PAGE, "toml")[1]
    assert 'mode = "record"' in text
    record = tmp_path / "record.toml"
    record.write_text(text, encoding="utf-8")
    (tmp_path / "recordings").mkdir()
    with running(api_key=None) as server:
        server.add(Reply.recorded("plain_answer"))
        runtime = load_runtime(record, environ={"OPENAI_BASE_URL": server.base_url})
        async with runtime:
            recorded = await runtime.run(ME, "s1", "where do deploys run from?")
        assert len(server.completions) == 1
    lines = (tmp_path / "recordings" / "local-model.jsonl").read_text("utf-8").splitlines()
    assert len(lines) == 1 and '"digest"' in lines[0]

    replay = tmp_path / "replay.toml"
    replay.write_text(text.replace('mode = "record"', 'mode = "replay"', 1), encoding="utf-8")
    # The server is stopped: a replay that tried to reach it would fail.
    runtime = load_runtime(replay, environ={"OPENAI_BASE_URL": server.base_url})
    async with runtime:
        replayed = await runtime.run(ME, "s1", "where do deploys run from?")
        with pytest.raises(ProviderError, match="replay miss"):
            await runtime.run(ME, "s2", "a question never recorded")
    assert replayed.output == recorded.output == "The deploy runs from the release branch."


@pytest.mark.parametrize(
    ("index", "model", "base_url"),
    [
        (0, "gpt-4o-mini", "https://api.openai.com/v1"),
        (1, "Qwen/Qwen2.5-7B-Instruct", "http://127.0.0.1:8000/v1"),
    ],
)
def test_the_readme_configs_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, index: int, model: str, base_url: str
) -> None:
    """Each provider section in the README builds (no I/O) once storage sections are added."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-readme-test-key")
    fragment = blocks(README, "toml")[index]
    path = tmp_path / "agentium.toml"
    path.write_text(
        fragment + '\n[archive]\nplugin = "memory"\n[session_store]\nplugin = "memory"\n', "utf-8"
    )
    runtime = load_runtime(path)
    provider = runtime.provider
    assert isinstance(provider, OpenAIProvider)
    assert (provider.config.model, provider.config.base_url) == (model, base_url)
    assert "sk-readme-test-key" not in repr(provider)


async def test_the_readme_lent_client_example_runs() -> None:
    """The README's python example builds a provider on a lent client, without I/O."""
    (source,) = blocks(README, "python")
    namespace: dict[str, object] = {}
    exec(compile(source, str(README), "exec"), namespace)
    provider = namespace["provider"]
    assert isinstance(provider, OpenAIProvider) and not provider.owns_client
    client = namespace["client"]
    await provider.aclose()
    assert not client.is_closed()  # type: ignore[attr-defined]
    await client.close()  # type: ignore[attr-defined]


def test_the_readme_lists_every_option_with_its_default() -> None:
    """Each option of OpenAIProviderConfig is a row of the README's options table, with its default."""
    text = README.read_text("utf-8")
    table = text[text.index("## Options") : text.index("Options are checked")]
    for field in attrs.fields(OpenAIProviderConfig):
        rows = [
            line
            for line in table.splitlines()
            if line.startswith("|") and f"`{field.name}`" in line.split("|")[1]
        ]
        assert rows, f"{field.name} is not in the README's options table"
        if isinstance(field.default, int) and not isinstance(field.default, bool) and field.default > 1000:
            assert str(field.default) in rows[0], f"{field.name}'s default {field.default} is not stated"
