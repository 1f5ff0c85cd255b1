"""Hostile inputs to the minilm embedder: every text is bounded, whatever its type claims."""

from __future__ import annotations

import pytest

from agentium_embedder_minilm import MAX_INPUT_BYTES, MiniLMEmbedder
from agentium_harness import OpContext

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
