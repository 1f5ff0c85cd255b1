"""The OpenAI-compatible embedder (issue 25 item 4) against the project's own HTTP server.

The server computes word-hash embeddings (``openai_stub_server.embedding_of``)
or answers from a script; every request is checked as a strict server would.
Covered: the EmbedderContract; the request sent (model, input, float
encoding, ``dimensions`` only when asked, the bearer key); answers out of
index order put back in order; every unusable answer refused with
``OpenAIEmbeddingReplyError`` (too many, too few, a repeated index, a wrong
dimension, NaN, not JSON); a reply over ``max_reply_bytes``; retries of a
503; a server that hangs stopped by the deadline; and hybrid recall end to
end through ``runtime.run`` with the SQLite store.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from openai_stub_server import Reply, StubServer, embedding_of, running

from agentium_harness import (
    OperationCancelledError,
    RecallStatus,
    ResidentLimits,
    RuntimeLimits,
    VerifiedIdentity,
    create_harness_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ScriptedProvider
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.plugin_api import OpContext, PluginRegistry
from agentium_harness.testing import EmbedderContract
from agentium_provider_openai import (
    OpenAIEmbedder,
    OpenAIEmbedderConfig,
    OpenAIEmbeddingReplyError,
    OpenAIReplyLimitError,
)

pytestmark = pytest.mark.anyio

KEY = "sk-test-0123456789"


def _embedder(server: StubServer, **options: object) -> OpenAIEmbedder:
    config = OpenAIEmbedderConfig(
        model="stub-embed",
        dimension=int(options.pop("dimension", server.embedding_dimension)),  # type: ignore[call-overload]
        base_url=server.base_url,
        api_key_env="STUB_KEY",
        retry_backoff_s=0.01,
        **options,  # type: ignore[arg-type]
    )
    return OpenAIEmbedder(config, environ={"STUB_KEY": KEY})


@pytest.fixture
def server() -> Iterator[StubServer]:
    with running() as stub:
        yield stub


class TestOpenAIEmbedderContract(EmbedderContract):
    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    @pytest.fixture
    async def embedder(self, server: StubServer) -> AsyncIterator[OpenAIEmbedder]:
        built = _embedder(server, max_batch=16)
        yield built
        await built.aclose()


def _ctx() -> OpContext:
    return OpContext.with_timeout(30.0)


async def test_the_request_is_what_a_strict_server_expects(server: StubServer) -> None:
    embedder = _embedder(server)
    vectors = await embedder.embed(["red apple", "green pear"], _ctx())
    assert [list(v) for v in vectors] == [embedding_of("red apple", 8), embedding_of("green pear", 8)]
    (request,) = [r for r in server.requests if r.path.endswith("/embeddings")]
    assert request.body == {
        "model": "stub-embed",
        "input": ["red apple", "green pear"],
        "encoding_format": "float",
    }
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert not server.violations
    asked = _embedder(server, dimension=4, request_dimensions=True)
    assert len((await asked.embed(["x"], _ctx()))[0]) == 4
    assert server.requests[-1].body["dimensions"] == 4
    await embedder.aclose()
    await asked.aclose()


async def test_answers_out_of_index_order_are_put_back_in_order(server: StubServer) -> None:
    a, b = embedding_of("a", 8), embedding_of("b", 8)
    server.embedding_script.append(
        Reply(body={"data": [{"index": 1, "embedding": b}, {"index": 0, "embedding": a}]})
    )
    embedder = _embedder(server)
    assert [list(v) for v in await embedder.embed(["a", "b"], _ctx())] == [a, b]
    await embedder.aclose()


BAD_ANSWERS = {
    "too many": {"data": [{"index": i, "embedding": [1.0] * 8} for i in range(3)]},
    "too few": {"data": [{"index": 0, "embedding": [1.0] * 8}]},
    "repeated index": {"data": [{"index": 0, "embedding": [1.0] * 8}, {"index": 0, "embedding": [1.0] * 8}]},
    "wrong dimension": {"data": [{"index": i, "embedding": [1.0] * 7} for i in range(2)]},
    "not a number": {"data": [{"index": i, "embedding": ["1"] * 8} for i in range(2)]},
    "no data": {"object": "list"},
}


@pytest.mark.parametrize("fault", sorted(BAD_ANSWERS))
async def test_an_unusable_answer_is_refused_whole(server: StubServer, fault: str) -> None:
    server.embedding_script.append(Reply(body=BAD_ANSWERS[fault]))
    embedder = _embedder(server)
    with pytest.raises(OpenAIEmbeddingReplyError):
        await embedder.embed(["a", "b"], _ctx())
    await embedder.aclose()


async def test_nan_and_non_json_are_refused(server: StubServer) -> None:
    server.embedding_script.append(
        Reply(body=b'{"data": [{"index": 0, "embedding": [NaN, 1, 1, 1, 1, 1, 1, 1]}]}')
    )
    server.embedding_script.append(Reply(body=b"<html>gateway</html>"))
    embedder = _embedder(server)
    for _ in range(2):
        with pytest.raises(OpenAIEmbeddingReplyError):
            await embedder.embed(["a"], _ctx())
    await embedder.aclose()


async def test_a_reply_over_max_reply_bytes_is_not_read(server: StubServer) -> None:
    server.embedding_script.append(
        Reply(body={"data": [{"index": 0, "embedding": [0.5] * 8}], "pad": "x" * 5000})
    )
    embedder = _embedder(server, max_reply_bytes=2048)
    with pytest.raises(OpenAIReplyLimitError):
        await embedder.embed(["a"], _ctx())
    await embedder.aclose()


async def test_a_503_is_retried_and_a_hang_is_stopped_by_the_deadline(server: StubServer) -> None:
    server.embedding_script.append(Reply.error(503, "warming up"))
    embedder = _embedder(server)
    assert len(await embedder.embed(["a"], _ctx())) == 1
    server.embedding_script.append(Reply(body={"data": []}, delay_s=30.0))
    started = time.monotonic()
    with pytest.raises(OperationCancelledError):
        await embedder.embed(["a"], OpContext.with_timeout(0.5))
    assert time.monotonic() - started < 10  # the server takes 30 s
    await embedder.aclose()


async def test_the_plugin_registers_the_embedder() -> None:
    spec = PluginRegistry.load().get("embedder", "openai")
    assert spec.adapter_class is OpenAIEmbedder
    assert spec.config_class is OpenAIEmbedderConfig


async def test_hybrid_recall_end_to_end_with_the_openai_embedder(server: StubServer, tmp_path: Path) -> None:
    server.embedding_dimension = 64
    embedder = _embedder(server)
    store = SQLiteRecallStore(SQLiteRecallConfig(path=str(tmp_path / "recall.db"), min_similarity=0.3))
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=["noted"] * 10),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        recall=store,
        embedder=embedder,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
    )
    ana = VerifiedIdentity(tenant="acme", user="ana", verified_by="test")
    for turn in ("The quarterly ledger is in the blue folder.", "Lunch was pasta.", "filler"):
        result = await runtime.run(ana, "s1", turn)
        assert not [d for d in result.diagnostics if d.code.startswith("recall_embed")]
    result = await runtime.run(ana, "s1", "where is the ledger kept?")
    assert result.recall is not None and result.recall.status is RecallStatus.COMPLETE
    assert "group/acme/ana/s1/0" in [ref.source_id for ref in result.recall.included]
    assert any(r.path.endswith("/embeddings") for r in server.requests)
    assert not server.violations
    await store.aclose()
    await embedder.aclose()


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("model", '""', "model must be a non-empty model name"),
        ("base_url", '"ftp://user:pw@host/v1"', "base_url must be an http:// or https:// URL"),
        ("base_url", '"http://user:pw@127.0.0.1/v1"', "base_url must not carry credentials"),
        ("api_key_env", '"NOT-A NAME"', "api_key_env must name an environment variable"),
        ("organization", '"org-\u2019x"', "organization must be an id of printable ASCII"),
        # Passed the check, then failed building the embedder (its model key refuses control characters).
        ("model", '"e\\n"', "without control characters"),
        ("model", '"e\\u001b[2J"', "without control characters"),
    ],
)
def test_a_bad_embedder_option_fails_check_without_probe(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str, expected: str
) -> None:
    """`agentium check` (no --probe) refuses the embedder's options at load, as it does the provider's."""
    from agentium_harness._cli import main

    options = {"model": '"e"', "dimension": "3", "base_url": '"http://127.0.0.1:9/v1"', "api_key_env": '""'}
    options[option] = value
    lines = "\n".join(f"{k} = {v}" for k, v in options.items())
    config = tmp_path / "agentium.toml"
    config.write_text(f'[embedder]\nplugin = "openai"\n[embedder.options]\n{lines}\n', encoding="utf-8")
    assert main(["check", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"$.embedder.options.{option}" in err and expected in err
    assert "pw" not in err
