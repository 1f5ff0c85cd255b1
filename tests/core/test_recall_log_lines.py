"""Recall's WARNING records quote an adapter's class names on one line, with no escape sequence.

An adapter chooses its class names (``type()`` takes any string): put in a
log message as they are, a line break in one starts what reads as a record
of its own (``CRITICAL agentium ...``), an ANSI escape rewrites the terminal.
docs/observability.md: "One record is one line: text from outside the
engine that a message quotes (... an exception's class name) has every
character that could end a line or disguise one ... escaped". These records
are written whatever the content capture setting.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pytest

from agentium_harness._engine.embedding import Hybrid, _stored_count, warm_embedder
from agentium_harness._engine.lifecycle import Ticket
from agentium_harness._engine.recall_close import close_late
from agentium_harness.adapters.embedders import HashingEmbedder
from agentium_harness.plugin_api import EmbeddingLimits, OpContext

pytestmark = pytest.mark.anyio

#: A class name that would forge a record and colour the terminal.
ODD = "Gone\nCRITICAL agentium.engine forged \x1b[31mred"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _one_line(caplog: pytest.LogCaptureFixture, says: str) -> str:
    [record] = [r for r in caplog.records if says in r.getMessage()]
    message = record.getMessage()
    assert message.isprintable(), message
    assert "Gone\\x0aCRITICAL" in message and "\\x1b[31m" in message
    return message


class _ClosesBadly:
    async def close(self) -> None:
        raise type(ODD, (OSError,), {})("gone")


async def test_a_late_recall_sessions_failed_close_is_one_line(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="agentium.engine.recall"):
        await close_late(_ClosesBadly())
    _one_line(caplog, "opened past its deadline could not be closed")


class _WarmsBadly(HashingEmbedder):
    async def warm_up(self, ctx: OpContext) -> None:
        raise type(ODD, (OSError,), {})("gone")


async def test_a_failed_embedder_warm_up_is_one_line(caplog: pytest.LogCaptureFixture) -> None:
    embedder = type(ODD, (_WarmsBadly,), {})()
    hybrid = Hybrid(embedder, EmbeddingLimits(), embedder.model)
    with caplog.at_level(logging.WARNING, logger="agentium.engine.recall"):
        assert await warm_embedder(Ticket(None, "test", 30.0), hybrid) is not None
    assert _one_line(caplog, "warm-up failed").count("\\x0aCRITICAL") == 2  # the embedder's and its error's


class _Store:
    pass


def test_a_bad_vector_count_names_the_store_on_one_line(caplog: pytest.LogCaptureFixture) -> None:
    store: Any = type(ODD, (_Store,), {})()
    odd_count: Sequence[Any] = type(ODD, (list,), {})()
    with caplog.at_level(logging.WARNING, logger="agentium.engine.recall"):
        assert _stored_count(odd_count, 2, store) == 0
    assert _one_line(caplog, "index_vectors returned").count("\\x0aCRITICAL") == 2
