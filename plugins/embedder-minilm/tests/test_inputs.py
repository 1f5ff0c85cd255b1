"""Hostile inputs to the minilm embedder: every text is bounded, whatever its type claims."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import anyio
import numpy as np
import pytest

from agentium_embedder_minilm import MAX_INPUT_BYTES, MiniLMConfig, MiniLMEmbedder
from agentium_harness import InvalidArgumentError, OpContext, OperationCancelledError
from agentium_harness.plugin_api import CancelSignal

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _ShortLen(str):
    """A str that says it is one character long, whatever it holds."""

    def __len__(self) -> int:
        return 1


async def test_a_str_subclass_cannot_slip_past_the_input_bound() -> None:
    embedder = MiniLMEmbedder()
    hidden = _ShortLen("\x01" * MAX_INPUT_BYTES + " hello world")  # the words lie past the cut
    empty, cut = await embedder.embed(["", hidden], OpContext.with_timeout(30.0))
    assert list(cut) == list(empty)  # the words were never read


def _endless() -> Iterator[str]:
    while True:
        yield "again"


@pytest.mark.parametrize(
    "make", [lambda: _endless(), lambda: iter(["a", "b"]), lambda: {"a", "b"}, lambda: {"a": 1}]
)
async def test_texts_that_are_not_a_sequence_are_an_invalid_argument(make: Callable[[], object]) -> None:
    with anyio.fail_after(30.0), pytest.raises(InvalidArgumentError, match="sequence of strings"):
        await MiniLMEmbedder().embed(make(), OpContext.with_timeout(30.0))  # type: ignore[arg-type]


class _LyingLength(Sequence[str]):
    """A sequence that says it holds one text and yields ``size`` when iterated."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, int) and 0 <= index < self.size:
            return "again"
        raise IndexError(index)


@pytest.mark.parametrize(
    "make",
    [
        lambda: ["a", "b", "c"],  # one past max_batch=2
        lambda: ("t",) * 3,
        lambda: _LyingLength(3),
        lambda: ["huge"] * 1_000_000,  # without the bound, embedded until the deadline
    ],
)
async def test_more_texts_than_max_batch_are_refused_before_any_work(make: Callable[[], object]) -> None:
    """A direct call is bounded as the engine's are: at most max_batch texts, else nothing is computed."""
    embedder = MiniLMEmbedder(MiniLMConfig(max_batch=2))
    with anyio.fail_after(20.0), pytest.raises(InvalidArgumentError, match="more than max_batch=2"):
        await embedder.embed(make(), OpContext.with_timeout(30.0))  # type: ignore[arg-type]
    assert embedder._loaded is None  # not even the model was loaded


@pytest.mark.parametrize("bad", [None, 5.0, "ctx"])
async def test_a_ctx_that_is_not_an_op_context_is_an_invalid_argument(bad: object) -> None:
    embedder = MiniLMEmbedder()
    with pytest.raises(InvalidArgumentError, match="ctx"):
        await embedder.embed(["x"], bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="ctx"):
        await embedder.health(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["x", {"threads": 2}, 5])
def test_a_config_that_is_not_a_minilm_config_is_an_invalid_argument(bad: object) -> None:
    # It raised a bare AttributeError ('dict' object has no attribute 'max_batch').
    with pytest.raises(InvalidArgumentError, match="config must be a MiniLMConfig or None"):
        MiniLMEmbedder(bad)  # type: ignore[arg-type]


async def test_the_call_returns_when_its_signal_is_cancelled_while_a_batch_runs() -> None:
    """No deadline, a worker held inside a batch: cancelling the signal still ends the call, typed."""
    embedder = MiniLMEmbedder()
    await embedder.embed(["load the model"], OpContext.with_timeout(30.0))
    ctx = OpContext(signal=CancelSignal())
    # The host cancels from elsewhere (another thread, here) while the call waits on the worker.
    timer = threading.Timer(0.3, ctx.signal.cancel, args=("host stopped the run",))
    embedder._inference.acquire()  # as if another inference were running, uninterruptible
    timer.start()
    try:
        with anyio.fail_after(20.0), pytest.raises(OperationCancelledError) as caught:
            await embedder.embed(["held"], ctx)
    finally:
        timer.cancel()
        embedder._inference.release()
    assert caught.value.reason == "host stopped the run"


class _RecordingSession:
    """Stands in for the onnxruntime session: records each run's shape, answers ones (no compute)."""

    def __init__(self) -> None:
        self.shapes: list[tuple[int, int]] = []

    def run(self, outputs: object, feeds: dict[str, Any]) -> list[Any]:
        rows, width = feeds["input_ids"].shape
        self.shapes.append((rows, width))
        return [np.ones((rows, width, 384), dtype=np.float32)]


async def test_a_large_batch_of_long_texts_runs_in_bounded_runs() -> None:
    """32 texts of 512 word pieces in one run took 3 GB and 20 s; runs stay within the default's cost."""
    embedder = MiniLMEmbedder(MiniLMConfig(max_batch=32, max_tokens=512))
    await embedder.embed(["load the model"], OpContext.with_timeout(30.0))
    session = _RecordingSession()
    embedder._model().session = session
    texts = ["word " * 600] * 30 + ["short", "tiny"]
    vectors = await embedder.embed(texts, OpContext.with_timeout(30.0))
    assert len(vectors) == 32
    assert sum(rows for rows, _ in session.shapes) == 32
    assert all(rows * width * width <= 16 * 256 * 256 for rows, width in session.shapes), session.shapes


async def test_the_default_batch_is_still_one_run() -> None:
    embedder = MiniLMEmbedder()
    await embedder.embed(["load the model"], OpContext.with_timeout(30.0))
    session = _RecordingSession()
    embedder._model().session = session
    await embedder.embed(["word " * 600] * 16, OpContext.with_timeout(30.0))
    assert session.shapes == [(16, 256)]


def _in_embed_work() -> int:
    """How many threads are inside the embedder's worker function (waiting or running)."""
    count = 0
    for frame in sys._current_frames().values():
        stack = frame
        while stack is not None:
            if stack.f_code.co_name == "work" and stack.f_code.co_filename.endswith("embedder.py"):
                count += 1
                break
            stack = stack.f_back
    return count


async def test_workers_of_timed_out_calls_do_not_pile_up_behind_a_long_run() -> None:
    embedder = MiniLMEmbedder()
    await embedder.embed(["load the model"], OpContext.with_timeout(30.0))
    embedder._inference.acquire()  # a long inference, uninterruptible
    try:
        for _ in range(5):
            with pytest.raises(OperationCancelledError):
                await embedder.embed(["held"], OpContext.with_timeout(0.05))
        # Each worker leaves at its deadline, not when the run ends (it holds until released below);
        # a stalled machine may take a moment to let the last one out.
        with anyio.move_on_after(30.0):
            while _in_embed_work():  # noqa: ASYNC110  (threads' stacks: no event to wait on)
                await anyio.sleep(0.05)
        assert _in_embed_work() == 0
    finally:
        embedder._inference.release()
