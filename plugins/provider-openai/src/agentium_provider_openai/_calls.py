"""What another endpoint's client (the embedder) uses of the provider it sends through."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from agentium_harness.plugin_api import OpContext

from .errors import scrub
from .wire import shown

if TYPE_CHECKING:
    from openai import AsyncOpenAI


__all__ = ["ProviderCalls"]

T = TypeVar("T")


class ProviderCalls:
    """What another endpoint's client (the embedder) uses of a provider it sends through.

    The provider's client, deadline bounding, retries, capped reads and the redacted server address,
    as methods: the embedder builds requests on them without reaching into private attributes.
    """

    __slots__ = ("_api_key", "_attempts", "_bounded", "_client_for", "_read_capped", "_where")

    def __init__(
        self,
        *,
        client_for: Callable[[OpContext, str], Awaitable[AsyncOpenAI]],
        where: Callable[[], str],
        api_key: str | None,
        bounded: Callable[[OpContext, str, Callable[[], Awaitable[Any]]], Awaitable[Any]],
        attempts: Callable[[OpContext, str, Callable[[float], Awaitable[Any]]], Awaitable[Any]],
        read_capped: Callable[[Any, str], Awaitable[bytes]],
    ) -> None:
        # The provider's own methods, handed over by OpenAIProvider.calls(): this module reads no
        # private attribute of another.
        self._client_for = client_for
        self._where = where
        self._api_key = api_key
        self._bounded = bounded
        self._attempts = attempts
        self._read_capped = read_capped

    async def client(self, ctx: OpContext, operation: str) -> AsyncOpenAI:
        """The provider's client (built on first use); refused once closed."""
        return await self._client_for(ctx, operation)

    def where(self) -> str:
        """The server's address for messages, without credentials."""
        return self._where()

    def scrub(self, text: str) -> str:
        """The server's ``text`` as a message may quote it (:func:`scrub` with the provider's key)."""
        return scrub(text, self._api_key)

    def shown(self, value: object) -> str:
        """A server's value for a message: text quoted and scrubbed, anything else by its type only."""
        return shown(value, self._api_key)

    async def bounded(self, ctx: OpContext, operation: str, work: Callable[[], Awaitable[T]]) -> T:
        """Run ``work`` until it ends, the deadline passes or the signal is cancelled."""
        result: T = await self._bounded(ctx, operation, work)
        return result

    async def attempts(self, ctx: OpContext, operation: str, send: Callable[[float], Awaitable[T]]) -> T:
        """Call ``send(timeout)`` as the provider's retry options say."""
        result: T = await self._attempts(ctx, operation, send)
        return result

    async def read_capped(self, response: Any, what: str) -> bytes:
        """The decoded body of ``response`` (the client's httpx response), refused past the cap."""
        return await self._read_capped(response, what)
