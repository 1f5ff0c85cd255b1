"""What a host chooses about telemetry: providers, content capture, how ids are shown.

Everything here is off or private by default: no content in spans or logs,
scope ids hashed. With no OpenTelemetry installed, or no SDK configured,
nothing is recorded and nothing is paid for (docs/observability.md).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from typing import Any

import attrs

from .._errors import InvalidArgumentError

__all__ = ["CAPTURE_CONTENT_ENV", "HASH_KEY_ENV", "Resolved", "Telemetry"]

#: The GenAI semantic conventions' opt-in for content (prompts, replies, queries, tool arguments).
CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
#: A secret key for the hashed ids (HMAC-SHA-256); without it they are plain SHA-256.
HASH_KEY_ENV = "AGENTIUM_TELEMETRY_HASH_KEY"

_TRUE = frozenset({"1", "true", "yes", "on"})


def _provider(name: str, method: str) -> Any:
    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if value is not None and not callable(getattr(value, method, None)):
            raise InvalidArgumentError(
                f"Telemetry.{name} must be an OpenTelemetry {attribute.name.replace('_', ' ')} "
                f"(with {method}()), got {type(value).__name__}"
            )

    return check


def _optional_bool(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, bool):
        raise InvalidArgumentError(f"Telemetry.{attribute.name} must be True, False or None, got {value!r}")


def _bool(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"Telemetry.{attribute.name} must be True or False, got {value!r}")


def _optional_key(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, str):
        raise InvalidArgumentError(f"Telemetry.{attribute.name} must be a string or None")
    if value == "":
        # "" is no key: the hashes would be plain SHA-256 (and AGENTIUM_TELEMETRY_HASH_KEY, which
        # only None reads, ignored), while the setting reads as if a key were given.
        raise InvalidArgumentError(
            f"Telemetry.{attribute.name} must be a non-empty secret; for plain SHA-256 hashes leave "
            f"it None with {HASH_KEY_ENV} unset (or set hash_ids=False to show ids as they are)"
        )


@attrs.frozen(slots=True)
class Telemetry:
    """How a runtime reports itself through OpenTelemetry and logging (docs/observability.md).

    - ``tracer_provider`` / ``meter_provider``: where spans and metrics go;
      ``None`` (the default) uses the global providers the application
      configured (``trace.set_tracer_provider``). With neither, nothing is recorded.
    - ``capture_content``: put message content (user input, replies, recall
      queries, tool arguments and results, diagnostic texts) on spans and in
      log records. ``None`` follows the GenAI conventions' environment
      variable ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` (off
      unless ``true``). Off by default: content may hold personal data.
    - ``hash_ids``: show tenant, user and session ids hashed (the default);
      ``False`` shows them as they are.
    - ``hash_key``: a secret that makes the hashes keyed (HMAC-SHA-256), so
      guessable ids cannot be recovered by hashing guesses; ``None`` reads
      ``AGENTIUM_TELEMETRY_HASH_KEY``, and without either (the variable unset
      or empty) the hash is plain SHA-256. ``""`` is no key and is refused
      with :class:`~agentium_harness.InvalidArgumentError`: leave it ``None``
      for plain hashes.
    """

    tracer_provider: Any = attrs.field(default=None, validator=_provider("tracer_provider", "get_tracer"))
    meter_provider: Any = attrs.field(default=None, validator=_provider("meter_provider", "get_meter"))
    capture_content: bool | None = attrs.field(default=None, validator=_optional_bool)
    hash_ids: bool = attrs.field(default=True, validator=_bool)
    hash_key: str | None = attrs.field(default=None, validator=_optional_key, repr=False)

    def resolve(self) -> Resolved:
        """These settings with the environment's defaults filled in (read once, here)."""
        capture = self.capture_content
        if capture is None:
            capture = os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() in _TRUE
        key = self.hash_key if self.hash_key is not None else os.environ.get(HASH_KEY_ENV, "")
        return Resolved(self, capture, self.hash_ids, key.encode("utf-8", "surrogatepass"))


class Resolved:
    """:class:`Telemetry` with its defaults read: what the instrumentation consults on the hot path."""

    __slots__ = ("capture_content", "hash_ids", "key", "settings")

    def __init__(self, settings: Telemetry, capture_content: bool, hash_ids: bool, key: bytes) -> None:
        self.settings = settings
        self.capture_content = capture_content
        self.hash_ids = hash_ids
        self.key = key

    def ident(self, *parts: str) -> str:
        """An id (or a tuple of ids) as telemetry shows it: hashed unless ``hash_ids`` is off."""
        joined = "/".join(parts)
        if not self.hash_ids:
            return joined
        # The unit separator cannot occur in a valid id, so ("a/b", "c") and ("a", "b/c") differ.
        data = "\x1f".join(parts).encode("utf-8", "surrogatepass")
        if self.key:
            return hmac.new(self.key, data, hashlib.sha256).hexdigest()[:32]
        return hashlib.sha256(data).hexdigest()[:32]
