"""The document fence's WARNINGs name the recall store's error by its class, on one line.

A document indexed while an erasure of its owner ran is deleted again; when
that delete fails, a WARNING says so with the error's class name: the
store's to choose (``type()`` takes any string). Written as it was, a line
break in it started what read as a record of its own and an ANSI escape
reached the terminal, whatever the content capture setting
(docs/observability.md: "One record is one line").
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from test_document_erasure_fence import ANA_DOC, _erase, _Hooks, _index, _pair

from agentium_harness import ErasureInProgressError, SourceOwner
from agentium_harness.plugin_api import OpContext

pytestmark = pytest.mark.anyio

#: A class name that would forge a record and colour the terminal.
ODD = "Gone\nCRITICAL agentium.engine forged \x1b[31mred"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_failed_take_back_of_a_document_names_the_error_on_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    hooks = _Hooks()
    eraser, writer = _pair("in-memory", tmp_path, hooks)
    store = writer.recall
    assert store is not None

    async def refuses(owner: SourceOwner, doc_id: str, ctx: OpContext) -> bool:
        raise type(ODD, (OSError,), {})("gone")

    async with eraser, writer:

        async def erase_meanwhile() -> None:
            await _erase(eraser, "ana")
            store.delete_document = refuses  # type: ignore[method-assign]  # after the erasure's own

        hooks.before_index = erase_meanwhile
        with caplog.at_level(logging.WARNING), pytest.raises(ErasureInProgressError):
            await _index(writer, ANA_DOC, "vpn.md")
    [message] = [r.getMessage() for r in caplog.records if "could not be taken back" in r.getMessage()]
    assert message.isprintable(), message
    assert "Gone\\x0aCRITICAL" in message and "\\x1b[31m" in message
