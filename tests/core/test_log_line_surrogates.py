"""A class name holding a lone surrogate is escaped in a log record, so a strict handler writes it.

``error_type`` names an adapter's exception by its class in WARNING records,
its line breaks escaped (one record, one line). A class's ``__qualname__`` may
be any ``str``, lone surrogates too, and those went into the message as they
were: a handler writing to a stream that encodes UTF-8 strictly (a file, a
pipe opened so) could not encode the record, printed ``--- Logging error ---``
with a traceback instead, and the warning was lost. A lone surrogate is now
escaped as ``\\udXXX``, as a control character is.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from _recall_support import ANA, Scripted, ScriptedSession, runtime

from agentium_harness._observe.logs import one_line
from agentium_harness._observe.state import error_type
from agentium_harness.plugin_api import OpContext, Scope

pytestmark = pytest.mark.anyio

#: A class name with a lone (high) surrogate in it.
NAME = "Broken\ud800Close"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _odd_error() -> type[Exception]:
    odd = type("Broken", (Exception,), {})
    odd.__qualname__ = NAME  # ``type()`` refuses it as a name; ``__qualname__`` takes any str
    return odd


@pytest.fixture
def strict_stream(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.BytesIO]:
    """What a handler on the ``agentium`` logger wrote, through a UTF-8 stream that encodes strictly."""
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="utf-8", errors="strict", write_through=True)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger = logging.getLogger("agentium")
    failed: list[logging.LogRecord] = []
    monkeypatch.setattr(handler, "handleError", failed.append)  # a record it could not write
    logger.addHandler(handler)
    try:
        yield raw
    finally:
        logger.removeHandler(handler)
    assert not failed, [r.msg for r in failed]


def test_error_type_escapes_a_lone_surrogate() -> None:
    assert error_type(_odd_error()()) == "Broken\\ud800Close"
    assert one_line("a\udc80b") == "a\\udc80b"
    assert one_line("plain é ✓") == "plain é ✓"  # printable text, surrogate-free, is left as it is


class _ClosesBadly(ScriptedSession):
    async def close(self) -> None:
        raise _odd_error()("close broke")


class ClosesBadly(Scripted):
    async def open(self, scope: Scope, limits: Any, ctx: OpContext) -> _ClosesBadly:
        return _ClosesBadly(self)


async def test_an_engine_warning_naming_such_a_class_is_written_by_a_strict_handler(
    strict_stream: io.BytesIO,
) -> None:
    rt, _, _ = runtime(ClosesBadly([("kettle", "the kettle was descaled in May")]))
    async with rt:
        with anyio.fail_after(30):
            await rt.run(ANA, "s1", "when was the kettle descaled")
    written = strict_stream.getvalue().decode("utf-8")
    assert "WARNING a recall session could not be closed: Broken\\ud800Close" in written.splitlines()
