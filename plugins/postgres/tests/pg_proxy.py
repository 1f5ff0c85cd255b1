"""A TCP proxy between a client and the test server that holds a statement on its way (a stalled network)."""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["CANCEL_REQUEST", "HoldingProxy"]

#: A cancel request's first bytes (length 16, code 80877102), on a connection of its own.
CANCEL_REQUEST = (16).to_bytes(4, "big") + (80877102).to_bytes(4, "big")


class HoldingProxy:
    """A TCP proxy to the server that, once ``armed``, holds the client's bytes from ``hold`` on.

    ``hold`` is a statement's text as the client sends it (``b"COMMIT\\x00"``); the bytes
    held go through once ``release`` is set. A cancel request is forwarded ``cancel_delay``
    late, or, with ``drop_cancels``, never (held unanswered until ``close``: a black-holed listener),
    or, with ``hold_cancels``, once ``cancel_release`` is set (``cancel_held`` says one arrived).
    """

    def __init__(self, port: int, hold: bytes) -> None:
        self.armed = False
        self.cancel_delay = 0.0
        self.drop_cancels = False
        self.hold_cancels = False
        self.cancel_held = asyncio.Event()
        self.cancel_release = asyncio.Event()
        self._closing = asyncio.Event()
        self._hold = hold
        self.held = asyncio.Event()
        self.release = asyncio.Event()
        self._port = port
        self._writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        """Listen on a free loopback port (returned)."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Let everything through, then close every connection and the listener."""
        self.release.set()
        self.cancel_release.set()
        self._closing.set()
        for writer in self._writers:
            writer.close()
        if self._server is not None:
            self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._port)
        self._writers += [writer, up_writer]
        await asyncio.gather(self._pump(reader, up_writer, True), self._pump(up_reader, writer, False))

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, upstream: bool) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await src.read(65536):
                if upstream and self.drop_cancels and CANCEL_REQUEST in data:
                    await self._closing.wait()
                    break
                if upstream and self.hold_cancels and CANCEL_REQUEST in data:
                    self.cancel_held.set()
                    await self.cancel_release.wait()
                if upstream and self.cancel_delay and CANCEL_REQUEST in data:
                    await asyncio.sleep(self.cancel_delay)
                if upstream and self.armed and self._hold in data:
                    self.held.set()
                    await self.release.wait()
                dst.write(data)
                await dst.drain()
        dst.close()
