"""A second ``aclose()`` waits for the first's close to end (real server).

It returned at once: its caller was told the adapter was closed while the
first caller's close still had the pool open.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import anyio
import pytest

from agentium_harness.plugin_api import OpContext, SessionKey
from agentium_postgres import PostgresArchive, PostgresConfig, PostgresError

pytestmark = pytest.mark.anyio


async def _open_with_slow_close(app_config: PostgresConfig) -> tuple[PostgresArchive, list[str]]:
    """An archive whose loop pool is open, its real close delayed by 0.3 s; ``ended`` says when it closed."""
    archive = PostgresArchive(app_config)
    await archive.read_groups(SessionKey("acme", "ana", "close-once"), 0, 1, OpContext.with_timeout(10))
    pool: Any = archive.link._owned.get().pool
    assert pool is not None  # the call opened this loop's pool
    real_close = pool.close
    ended: list[str] = []

    async def slow_close(timeout: float) -> None:  # noqa: ASYNC109  # psycopg_pool's signature
        await asyncio.sleep(0.3)
        await real_close(timeout=timeout)
        ended.append("closed")

    pool.close = slow_close
    return archive, ended


async def test_second_aclose_waits_for_the_first(app_config: PostgresConfig) -> None:
    archive, ended = await _open_with_slow_close(app_config)
    first = asyncio.get_running_loop().create_task(archive.aclose())
    await asyncio.sleep(0.05)  # the first has begun closing
    await archive.aclose()
    assert ended == ["closed"]  # the second returned only once the first's close had ended
    await first
    assert ended == ["closed"]  # closed once


async def test_a_natively_cancelled_first_aclose_still_holds_the_second(app_config: PostgresConfig) -> None:
    archive, ended = await _open_with_slow_close(app_config)
    first = asyncio.get_running_loop().create_task(archive.aclose())
    await asyncio.sleep(0.05)
    first.cancel()  # native: passes anyio's shield
    with pytest.raises(asyncio.CancelledError):
        await first
    await archive.aclose()
    assert ended == ["closed"]  # the close went on, and the second waited for it


async def _open_with_failing_close(app_config: PostgresConfig) -> tuple[PostgresArchive, list[str]]:
    """An archive whose loop pool is open, its close failing after 0.1 s; ``closes`` counts the closes."""
    archive = PostgresArchive(app_config)
    await archive.read_groups(SessionKey("acme", "ana", "close-once"), 0, 1, OpContext.with_timeout(10))
    pool: Any = archive.link._owned.get().pool
    assert pool is not None
    real_close = pool.close
    closes: list[str] = []

    async def failing_close(timeout: float) -> None:  # noqa: ASYNC109  # psycopg_pool's signature
        closes.append("began")
        await asyncio.sleep(0.1)
        await real_close(timeout=timeout)  # nothing left open by the test
        raise OSError("the pool did not close")

    pool.close = failing_close
    return archive, closes


async def test_a_second_aclose_hears_the_first_closes_failure(app_config: PostgresConfig) -> None:
    # The second returned without a word once the first's close had ended: its caller was told the
    # adapter had closed, while only the first heard that its pool had not.
    archive, closes = await _open_with_failing_close(app_config)
    first = asyncio.get_running_loop().create_task(archive.aclose())
    await asyncio.sleep(0.02)
    with pytest.raises(PostgresError, match="did not close"):
        await archive.aclose()
    with pytest.raises(PostgresError, match="did not close"):
        await first
    assert closes == ["began"]  # closed once


async def test_a_natively_cancelled_first_aclose_leaves_its_failure_logged_and_raised_to_the_next(
    app_config: PostgresConfig, caplog: pytest.LogCaptureFixture
) -> None:
    # The close went on in its own task, but the problems it returned were heard by no one.
    archive, closes = await _open_with_failing_close(app_config)
    with caplog.at_level(logging.WARNING, logger="agentium.plugins.postgres"):
        first = asyncio.get_running_loop().create_task(archive.aclose())
        await asyncio.sleep(0.02)
        first.cancel()  # native: passes anyio's shield
        with pytest.raises(asyncio.CancelledError):
            await first
        with pytest.raises(PostgresError, match="did not close"):
            await archive.aclose()
    assert closes == ["began"]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("postgres archive" in m and "closing failed" in m for m in warned), warned


async def test_a_call_past_the_closed_check_as_another_thread_closes_opens_no_pool(
    app_config: PostgresConfig,
) -> None:
    # _pool() checked "closed", then made this loop's pool: a thread that closed the link in between
    # had collected the pools already, so the new one (its connections, its workers) was never closed.
    import threading

    archive = PostgresArchive(app_config)
    link = archive.link
    owned = link._owned

    class ClosedMeanwhile:
        """The link's pools, closed by another thread just before this loop's is made."""

        def get(self) -> Any:
            closer = threading.Thread(target=anyio.run, args=(archive.aclose,))
            closer.start()
            closer.join(5)
            return owned.get()

        def __getattr__(self, name: str) -> Any:
            return getattr(owned, name)

    link._owned = ClosedMeanwhile()  # type: ignore[assignment]
    try:
        with pytest.raises(PostgresError, match="closed"):
            await link._pool()
    finally:
        link._owned = owned
        left = [slot.pool for _loop, slot in owned.items() if slot.pool is not None]
        for pool in left:
            await pool.close(timeout=1.0)
    assert left == []  # no pool made after the close collected them
