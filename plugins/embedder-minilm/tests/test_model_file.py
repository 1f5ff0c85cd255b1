"""A user-supplied ``model_path`` is hostile until checked: size, digest, and the very bytes that are loaded.

The file is read once, bounded by the model's known size, its SHA-256 is
checked on those bytes and onnxruntime loads those bytes: a file swapped
after the check is never loaded, a huge file is refused before it is read,
and any failure to read or load is :class:`MiniLMUnavailableError`.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from agentium_embedder_minilm import MiniLMConfig, MiniLMEmbedder, MiniLMUnavailableError
from agentium_embedder_minilm import _wordpiece as wordpiece_module
from agentium_embedder_minilm import embedder as embedder_module
from agentium_embedder_minilm.embedder import _weights_path
from agentium_harness import InvalidArgumentError, OpContext

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _copy_of_the_model(tmp_path: Path) -> Path:
    copy = tmp_path / "model.onnx"
    shutil.copyfile(_weights_path(MiniLMConfig()), copy)
    return copy


async def _embed(path: str) -> object:
    return await MiniLMEmbedder(MiniLMConfig(model_path=path)).embed(["x"], OpContext.with_timeout(30.0))


class _SwapAfterDigest:
    """hashlib, but once a digest is read the file at ``path`` is overwritten with garbage."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def sha256(self, *args: Any) -> Any:
        real = hashlib.sha256(*args)
        path = self.path

        class Digest:
            def update(self, data: bytes) -> None:
                real.update(data)

            def hexdigest(self) -> str:
                value = real.hexdigest()
                size = path.stat().st_size
                path.write_bytes(b"\x00" * size)  # the check passed; now the file is something else
                return value

        return Digest()


async def test_a_file_swapped_after_its_digest_is_checked_is_not_what_is_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = _copy_of_the_model(tmp_path)
    (expected,) = await MiniLMEmbedder().embed(["the tea is hot"], OpContext.with_timeout(30.0))
    monkeypatch.setattr(embedder_module, "hashlib", _SwapAfterDigest(copy))
    swapped = MiniLMEmbedder(MiniLMConfig(model_path=str(copy)))
    (got,) = await swapped.embed(["the tea is hot"], OpContext.with_timeout(30.0))
    assert list(got) == list(expected)  # the checked bytes were loaded, not the swapped file


async def test_a_huge_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    huge = tmp_path / "huge.onnx"
    with huge.open("wb") as f:
        # 64 GiB, sparse: reading it whole cannot even be allocated here (24 GiB of memory), and
        # hashing it would take well over a minute.
        f.truncate(64 << 30)
    started = time.monotonic()
    with pytest.raises(MiniLMUnavailableError, match="bytes"):
        await _embed(str(huge))
    # A stat and a refusal: far under this, which a loaded machine's stall cannot reach.
    assert time.monotonic() - started < 10.0


async def test_a_truncated_copy_is_refused(tmp_path: Path) -> None:
    copy = _copy_of_the_model(tmp_path)
    os.truncate(copy, copy.stat().st_size // 2)
    with pytest.raises(MiniLMUnavailableError, match="truncated or another file"):
        await _embed(str(copy))


@pytest.mark.skipif(not Path("/proc/self/mem").exists(), reason="needs Linux /proc")
async def test_a_file_that_cannot_be_read_is_refused_typed() -> None:
    with pytest.raises(MiniLMUnavailableError):
        await _embed("/proc/self/mem")  # a regular file whose read fails (EIO)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
async def test_a_fifo_at_the_model_path_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "model.onnx"
    os.mkfifo(fifo)
    with pytest.raises(MiniLMUnavailableError, match=r"not a regular file|no model file"):
        await _embed(str(fifo))


async def test_onnxruntime_failing_to_load_the_model_is_typed(monkeypatch: pytest.MonkeyPatch) -> None:
    onnxruntime = importlib.import_module("onnxruntime")

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("[ONNXRuntimeError] : 1 : FAIL : an unsupported opset")

    monkeypatch.setattr(onnxruntime, "InferenceSession", broken)
    with pytest.raises(MiniLMUnavailableError, match="onnxruntime could not load"):
        await MiniLMEmbedder().embed(["x"], OpContext.with_timeout(30.0))


@pytest.mark.parametrize("bad", [5, ["model.onnx"], "model\x00.onnx", "model\n.onnx", "x\ud800", "m" * 5000])
def test_a_model_path_that_names_no_file_is_refused_when_configured(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="model_path"):
        MiniLMConfig(model_path=bad)  # type: ignore[arg-type]


async def test_a_tampered_vocabulary_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = wordpiece_module.vocab_bytes().split(b"\n")
    lines[2023], lines[2003] = lines[2003], lines[2023]  # two words swap ids: same size, other vectors
    tampered = b"\n".join(lines)
    monkeypatch.setattr(wordpiece_module, "vocab_bytes", lambda: tampered)
    monkeypatch.setattr(embedder_module, "vocab_bytes", lambda: tampered, raising=False)
    with pytest.raises(MiniLMUnavailableError, match="vocabulary"):
        await MiniLMEmbedder().embed(["this is"], OpContext.with_timeout(30.0))
