"""What the ``plugin_api.CloseOnce`` tests share: a close that counts its runs, a caller that notes
what it heard, a close cut off before it began, and the WARNINGs said."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from agentium_harness.plugin_api import CloseOnce


def counting_close(began: list[int], pause_s: float = 0) -> Callable[[], Coroutine[Any, Any, None]]:
    """A close that appends 1 to ``began`` as it begins, then sleeps ``pause_s`` (asyncio), or with
    none, yields once (a checkpoint)."""

    async def close() -> None:
        began.append(1)
        if pause_s:
            await asyncio.sleep(pause_s)
        else:
            await anyio.lowlevel.checkpoint()

    return close


def hear(
    once: CloseOnce, close: Any, heard: list[str], returned: str = "returned", backend: str = "asyncio"
) -> None:
    """A caller on a loop of its own (``anyio.run`` on ``backend``): appends ``returned``, or the name
    of the exception its ``once.run(close)`` raised."""
    try:
        anyio.run(once.run, close, backend=backend)
        heard.append(returned)
    except Exception as exc:
        heard.append(type(exc).__name__)


def cut_off(once: CloseOnce, close: Any) -> None:
    """``asyncio.run`` returns as ``aclose()`` began: the close's task is cancelled before its first step."""

    async def main() -> None:
        asyncio.get_running_loop().create_task(once.run(close))

    asyncio.run(main())


def warnings_said(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The messages of the WARNING records ``caplog`` holds."""
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
