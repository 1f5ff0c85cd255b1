"""A loopback TCP proxy in front of a real server that can stop forwarding: a network black hole.

:class:`BlackHoleProxy` runs on its own thread and event loop, so a test's
loop can neither slow it nor be slowed by it. While :meth:`black_hole` is in
effect the proxy reads nothing and forwards nothing in either direction, and
new connections are accepted but never forwarded: to a client the server is
silent, exactly as when a network drops packets. :meth:`freeze_existing`
black-holes only the connections open now (new ones flow), as when one path
dies. Bytes sent meanwhile wait in the kernel's buffers, like TCP
retransmissions, and are delivered once :meth:`heal` is called (so a write
cut off in the black hole can still reach the server late, which is what a
write's settlement must cope with). :attr:`connect_delay_s` holds each new
connection that long before it is forwarded, as a loaded machine or a slow
network would.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any


class BlackHoleProxy:
    """Forward ``127.0.0.1:<port>`` to ``127.0.0.1:<target_port>`` until told to black-hole the traffic."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._new_flow = True
        #: Seconds each new connection waits before it is forwarded (set by a test; 0: none).
        self.connect_delay_s = 0.0
        self._flows: list[asyncio.Event] = []
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, name="black-hole-proxy", daemon=True)

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0`` through the proxy."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> BlackHoleProxy:
        """Start listening on a free loopback port."""
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)
        return self

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    @property
    def accepted(self) -> int:
        """How many connections the proxy has accepted so far (forwarded or held)."""
        return len(self._flows)

    def black_hole(self) -> None:
        """Stop forwarding in both directions, on every connection, old and new."""
        self._loop.call_soon_threadsafe(self._set, False, False)

    def freeze_existing(self) -> None:
        """Stop forwarding on the connections open now; new connections are forwarded."""
        self._loop.call_soon_threadsafe(self._set, False, True)

    def heal(self) -> None:
        """Forward again everywhere, delivering what waited in the buffers."""
        self._loop.call_soon_threadsafe(self._set, True, True)

    def _set(self, flowing: bool, new_flow: bool) -> None:
        self._new_flow = new_flow
        for flow in self._flows:
            if flowing:
                flow.set()
            else:
                flow.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        flow = asyncio.Event()
        if self._new_flow:
            flow.set()
        self._flows.append(flow)
        await flow.wait()  # in a black hole even the upstream connection waits
        if self.connect_delay_s:
            await asyncio.sleep(self.connect_delay_s)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.ensure_future(self._pump(source, sink, flow))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, flow: asyncio.Event
    ) -> None:
        try:
            while True:
                await flow.wait()
                data = await source.read(65536)
                await flow.wait()  # read before the hole opened: held until it heals
                if not data:
                    break
                sink.write(data)
                await sink.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            with contextlib.suppress(Exception):
                sink.close()

    def close(self) -> None:
        """Stop the proxy and its thread, closing every connection; idempotent."""
        if not self._thread.is_alive():
            return

        async def stop() -> None:
            if self._server is not None:
                self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._loop.close()
