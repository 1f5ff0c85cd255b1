"""The options of the OpenAI-compatible provider (``[provider.options]``) and safe URL rendering.

:class:`OpenAIProviderConfig` is a frozen attrs class, structured from a
config file by the core's strict loader: unknown keys and wrong types are
errors at ``$.provider.options.<key>``. The API key is never an option: the
config names the *environment variable* that holds it (``api_key_env``), the
key is read when the provider is built, and no message, ``repr`` or probe
ever shows it.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Mapping
from typing import Any, Final
from urllib.parse import urlsplit

import attrs

from agentium_harness.plugin_api import InvalidArgumentError, bounded_count, bounded_duration, redact_url

from .errors import OpenAIConfigError

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_MAX_REPLY_BYTES",
    "DEFAULT_MAX_TOOL_ARGUMENTS_BYTES",
    "MAX_REPLY_BYTES_CEILING",
    "MAX_TOOL_ARGUMENTS_DEPTH",
    "REPLY_ENVELOPE_DEPTH",
    "RESERVED_BODY_KEYS",
    "OpenAIProviderConfig",
    "check_base_url",
    "check_env_name",
    "check_header_id",
    "check_model",
    "read_key",
    "redact_url",
]

#: Where requests go when no ``base_url`` is given: OpenAI's own API.
DEFAULT_BASE_URL: Final = "https://api.openai.com/v1"

#: Request fields the provider sets itself; ``extra_body`` may not override them,
#: so config can add sampling options but never change what is sent as the
#: conversation, ask for a stream, or ask for several answers.
RESERVED_BODY_KEYS: Final = frozenset(
    {"messages", "model", "tools", "tool_choice", "stream", "stream_options", "n", "functions"}
)

#: The largest chat completion body read (after any content decoding), in bytes. A
#: reply holds one answer; OpenAI's longest outputs are well under 1 MiB of JSON.
DEFAULT_MAX_REPLY_BYTES: Final = 4 * 1024 * 1024

#: The most ``max_reply_bytes`` may be set to.
MAX_REPLY_BYTES_CEILING: Final = 256 * 1024 * 1024

#: The largest ``arguments`` of one tool call, in UTF-8 bytes of its JSON text.
DEFAULT_MAX_TOOL_ARGUMENTS_BYTES: Final = 1024 * 1024

#: The deepest nesting of arrays and objects in one tool call's arguments
#: (``{}`` is depth 1): the default of ``max_tool_arguments_depth`` and the most it
#: may be set to. It matches the engine's own bound on a tool call's arguments,
#: so arguments that pass here are never refused later when the turn is stored.
MAX_TOOL_ARGUMENTS_DEPTH: Final = 64

#: How much deeper than ``max_tool_arguments_depth`` a whole reply body may nest:
#: its own envelope (body, ``choices``, a choice, its ``message``, ``tool_calls``,
#: a call and its ``function`` are 7 levels; ``logprobs`` reach 9).
REPLY_ENVELOPE_DEPTH: Final = 10

# An environment variable name as POSIX shells spell them.
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")

#: What an HTTP header can carry as a key or an id: printable ASCII, no space. The key and
#: the ``organization``/``project`` ids are sent as headers; a newline, a control character
#: or a non-ASCII character (a pasted curly quote) would fail every request, untyped.
HEADER_TOKEN: Final = re.compile(r"[\x21-\x7e]+")


def check_base_url(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    """Check (an attrs validator) an ``http``/``https`` URL with a host and no credentials in it."""
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError("base_url must be a non-empty URL such as http://127.0.0.1:8000/v1")
    if any(ch.isspace() or not ch.isprintable() for ch in value):
        # The HTTP client refuses these only when the first call is made, with its own exception.
        raise InvalidArgumentError("base_url must not hold spaces, line breaks or control characters")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018  # evaluated for its ValueError on a bad port
    except ValueError:
        raise InvalidArgumentError("base_url is not a valid URL (check its host and port)") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidArgumentError(
            f"base_url must be an http:// or https:// URL with a host, got {redact_url(value)!r}"
        )
    if parts.username or parts.password:
        # A key in the URL would reach logs and error messages; it belongs in api_key_env.
        raise InvalidArgumentError(
            "base_url must not carry credentials; put the key in the variable api_key_env names"
        )


def check_model(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    """Check (an attrs validator) a non-empty model name of at most 256 characters, none a control one."""
    if (
        not isinstance(value, str)
        or not value.strip()
        or len(value) > 256
        or not _is_unicode(value)
        # No server names a model so; the name is shown in span names and messages (an escape
        # sequence would be obeyed there), and an embedder's model key refuses one when built.
        or any(unicodedata.category(ch) == "Cc" for ch in value)
    ):
        raise InvalidArgumentError(
            "model must be a non-empty model name of at most 256 characters without control characters, "
            "e.g. 'gpt-4o-mini'"
        )


def check_env_name(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    """Check (an attrs validator) the name of an environment variable, or ``""``/``None`` for no key."""
    if value is None or value == "":
        return
    if not isinstance(value, str) or not _ENV_NAME.fullmatch(value):
        raise InvalidArgumentError(
            f"{attribute.name} must name an environment variable (letters, digits and '_', not starting "
            'with a digit), such as OPENAI_API_KEY, or be "" for a server that needs no key'
        )


def check_header_id(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    """Check (an attrs validator) an id sent as an HTTP header (``organization``/``project``) or ``None``."""
    if value is not None and not (isinstance(value, str) and HEADER_TOKEN.fullmatch(value)):
        raise InvalidArgumentError(
            f"{attribute.name} must be an id of printable ASCII characters without spaces "
            "(it is sent as an HTTP header), or be left out"
        )


#: The core's one duration rule: finite seconds above 0, at most MAX_DURATION_S (3600).
_seconds = bounded_duration()


_retries = bounded_count(minimum=0, ceiling=10)


_optional_positive_int = bounded_count(optional=True)


#: The integers a request body may carry: 64-bit, signed or not. A server reads no larger one,
#: and past 4300 digits JSON encoding raised a bare ValueError from every call.
MIN_BODY_INT: Final = -(2**63)
MAX_BODY_INT: Final = 2**64 - 1
#: How deep ``extra_body`` may nest arrays and objects (itself the first level).
MAX_EXTRA_BODY_DEPTH: Final = 64


def _optional_int(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise InvalidArgumentError(f"{attribute.name} must be an integer or left out, got {value!r}")
    if value is not None and not MIN_BODY_INT <= value <= MAX_BODY_INT:
        # Not shown: an int of many digits cannot even be turned into text.
        raise InvalidArgumentError(f"{attribute.name} must be a 64-bit integer (-2**63 to 2**64 - 1)")


def _int_in(low: int, high: int) -> Callable[[Any, attrs.Attribute[Any], object], None]:
    # The core's one count rule (plugin_api.bounded_count), with this option's range.
    return bounded_count(minimum=low, ceiling=high)


def _temperature(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 2:
        raise InvalidArgumentError(f"temperature must be a number from 0 to 2 or left out, got {value!r}")


def _one_of(*choices: str) -> Callable[[Any, attrs.Attribute[Any], object], None]:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
        if value not in choices:
            shown = " or ".join(repr(c) for c in choices)
            raise InvalidArgumentError(f"{attribute.name} must be {shown}, got {value!r}")

    return check


def _is_unicode(text: str) -> bool:
    # A lone surrogate cannot be encoded, so it cannot be sent: the client would raise UnicodeEncodeError.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _json_value(value: object, where: str, depth: int = 1) -> None:
    if isinstance(value, str) and not _is_unicode(value):
        raise InvalidArgumentError(f"{where} must be valid Unicode text (it holds a lone surrogate)")
    if isinstance(value, int) and not isinstance(value, bool) and not MIN_BODY_INT <= value <= MAX_BODY_INT:
        raise InvalidArgumentError(f"{where} must be a 64-bit integer (-2**63 to 2**64 - 1)")
    if value is None or isinstance(value, bool | int | str):
        return
    if isinstance(value, list | dict) and depth > MAX_EXTRA_BODY_DEPTH:
        # A deeper (or cyclic) value raised a bare RecursionError here.
        raise InvalidArgumentError(
            f"extra_body may nest arrays and objects at most {MAX_EXTRA_BODY_DEPTH} levels deep"
        )
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidArgumentError(f"{where} must be a finite number")
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            _json_value(item, f"{where}[{i}]", depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str) or not _is_unicode(key):
                raise InvalidArgumentError(f"{where} keys must be strings of valid Unicode text")
            _json_value(item, f"{where}.{key}", depth + 1)
        return
    raise InvalidArgumentError(f"{where} must be plain JSON data, got {type(value).__name__}")


def _extra_body(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, dict):
        raise InvalidArgumentError("extra_body must be a table of request fields")
    reserved = sorted(k for k in value if k in RESERVED_BODY_KEYS)
    if reserved:
        raise InvalidArgumentError(
            f"extra_body may not set {', '.join(reserved)}: the provider sets these itself "
            "(the conversation, the model, the tools, one non-streamed answer)"
        )
    _json_value(value, "extra_body")


@attrs.frozen(slots=True)
class OpenAIProviderConfig:
    """Options of the OpenAI-compatible provider.

    - ``model`` (required): the model name sent with every request, at most 256 characters and
      no control character (``gpt-4o-mini``; ``Qwen/Qwen2.5-7B-Instruct`` on vLLM; ``llama3.1`` on Ollama).
    - ``base_url``: the API root, ending in ``/v1`` for most servers
      (default OpenAI's ``https://api.openai.com/v1``). Ignored when a host lends its own client.
    - ``api_key_env``: the NAME of the environment variable holding the API key
      (default ``OPENAI_API_KEY``). Set it to ``""`` (or ``None``) for a local
      server that needs no key; the client then sends the fixed placeholder
      ``no-key``. The key itself is never an option, and a named variable that is
      unset, empty, or holds a character an HTTP header cannot carry (a space, a
      line break, a control or non-ASCII character) is an error when the provider is built.
    - ``organization`` / ``project``: OpenAI organization and project ids, if any
      (printable ASCII without spaces: they are sent as headers).
    - ``timeout_s``: the most one HTTP attempt may take; the operation's deadline can only shorten it.
    - ``max_retries``: how many times a retryable failure (HTTP 429, 500, 502, 503,
      504, a connection error or an attempt's timeout) is retried; 0 to 10.
    - ``retry_backoff_s`` / ``retry_backoff_max_s``: the first wait between attempts
      and its cap; the wait doubles each time, and a server's ``Retry-After`` is
      honoured up to the cap. No wait ever runs past the operation's deadline.
    - ``probe_timeout_s``: the bound on ``agentium check --probe`` listing the server's models.
    - ``instructions_role``: ``system`` (default) or ``developer`` for the host instructions.
    - ``source_placement``: ``separate`` (default) sends the labeled source data as its own
      user-role message after the system message; ``with_input`` sends it as a separate
      text part of the turn's first user message, for chat templates that require
      strictly alternating user and assistant messages. Either way the source data is
      never merged into the instructions.
    - ``temperature``, ``max_completion_tokens``, ``seed``: sampling options, sent only when set
      (``seed`` a 64-bit integer).
    - ``extra_body``: further plain-JSON request fields (``top_p``, ``max_tokens`` for servers
      that want it); it may not set the conversation, model, tools, ``stream`` or ``n``, nest
      more than 64 levels deep or hold an integer that is not 64-bit.
    - ``max_reply_bytes``: the largest chat completion body read, in bytes (default 4 MiB,
      1024 to 256 MiB). A larger body is refused while it arrives, before any of it is parsed.
    - ``max_tool_arguments_bytes``: the largest ``arguments`` of one tool call, in UTF-8
      bytes (default 1 MiB, 2 to 256 MiB; the arguments arrive inside the reply, so
      ``max_reply_bytes`` bounds them too). A reply with a larger one is refused and none
      of its tool calls runs.
    - ``max_tool_arguments_depth``: the deepest nesting of arrays and objects in one tool
      call's arguments (default and most 64, the engine's own bound; least 1). The whole
      body may nest :data:`REPLY_ENVELOPE_DEPTH` (10) levels deeper.
    """

    model: str = attrs.field(validator=check_model)
    base_url: str = attrs.field(default=DEFAULT_BASE_URL, validator=check_base_url, repr=redact_url)
    api_key_env: str | None = attrs.field(default="OPENAI_API_KEY", validator=check_env_name)
    organization: str | None = attrs.field(default=None, validator=check_header_id)
    project: str | None = attrs.field(default=None, validator=check_header_id)
    timeout_s: float = attrs.field(default=60.0, validator=_seconds)
    max_retries: int = attrs.field(default=2, validator=_retries)
    retry_backoff_s: float = attrs.field(default=0.5, validator=_seconds)
    retry_backoff_max_s: float = attrs.field(default=8.0, validator=_seconds)
    probe_timeout_s: float = attrs.field(default=5.0, validator=_seconds)
    instructions_role: str = attrs.field(default="system", validator=_one_of("system", "developer"))
    source_placement: str = attrs.field(default="separate", validator=_one_of("separate", "with_input"))
    temperature: float | None = attrs.field(default=None, validator=_temperature)
    max_completion_tokens: int | None = attrs.field(default=None, validator=_optional_positive_int)
    seed: int | None = attrs.field(default=None, validator=_optional_int)
    extra_body: dict[str, Any] = attrs.field(factory=dict, validator=_extra_body)
    max_reply_bytes: int = attrs.field(
        default=DEFAULT_MAX_REPLY_BYTES, validator=_int_in(1024, MAX_REPLY_BYTES_CEILING)
    )
    max_tool_arguments_bytes: int = attrs.field(
        default=DEFAULT_MAX_TOOL_ARGUMENTS_BYTES, validator=_int_in(2, MAX_REPLY_BYTES_CEILING)
    )
    max_tool_arguments_depth: int = attrs.field(
        default=MAX_TOOL_ARGUMENTS_DEPTH, validator=_int_in(1, MAX_TOOL_ARGUMENTS_DEPTH)
    )


def read_key(config: OpenAIProviderConfig, environ: Mapping[str, str]) -> str | None:
    """The key from the variable ``api_key_env`` names (``None`` for no key), or :class:`OpenAIConfigError`.

    The error names the variable, never its value.
    """
    name = config.api_key_env
    if not name:
        return None
    value = environ.get(name, "")
    if not value.strip():
        raise OpenAIConfigError(
            f"the environment variable {name} (api_key_env) is not set or empty; export the API key "
            f'as {name}, or set api_key_env = "" for a server that needs no key'
        )
    if not HEADER_TOKEN.fullmatch(value):
        # The value is never quoted: it is the key (or most of it).
        raise OpenAIConfigError(
            f"the environment variable {name} (api_key_env) holds a space, a line break, a control "
            "character or a character that is not ASCII (a trailing newline or a pasted curly quote?); "
            "the key is sent in an HTTP header, which cannot carry it: export the key alone"
        )
    return value
