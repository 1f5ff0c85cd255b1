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
from collections.abc import Callable
from typing import Any, Final
from urllib.parse import urlsplit

import attrs

__all__ = [
    "DEFAULT_BASE_URL",
    "RESERVED_BODY_KEYS",
    "OpenAIProviderConfig",
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

# An environment variable name as POSIX shells spell them.
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def redact_url(url: str) -> str:
    """``url`` without credentials or query string: ``https://***@host:8000/v1``; never raises.

    Safe for messages, logs, probe output and ``repr``.
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        return "<unparsable url>"
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    auth = "***@" if (parts.username or parts.password) else ""
    query = "?***" if parts.query else ""
    return f"{parts.scheme}://{auth}{host}{port}{parts.path}{query}"


def _base_url(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError("base_url must be a non-empty URL such as http://127.0.0.1:8000/v1")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018  # evaluated for its ValueError on a bad port
    except ValueError:
        raise ValueError("base_url is not a valid URL (check its host and port)") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"base_url must be an http:// or https:// URL with a host, got {redact_url(value)!r}"
        )
    if parts.username or parts.password:
        # A key in the URL would reach logs and error messages; it belongs in api_key_env.
        raise ValueError("base_url must not carry credentials; put the key in the variable api_key_env names")


def _model(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value.strip() or len(value) > 256:
        raise ValueError("model must be a non-empty model name of at most 256 characters, e.g. 'gpt-4o-mini'")


def _env_name(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None or value == "":
        return
    if not isinstance(value, str) or not _ENV_NAME.fullmatch(value):
        raise ValueError(
            f"{attribute.name} must name an environment variable (letters, digits and '_', not starting "
            'with a digit), such as OPENAI_API_KEY, or be "" for a server that needs no key'
        )


def _seconds(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 3600:
        raise ValueError(f"{attribute.name} must be a number of seconds in (0, 3600], got {value!r}")


def _retries(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10:
        raise ValueError(f"{attribute.name} must be an integer from 0 to 10, got {value!r}")


def _optional_positive_int(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{attribute.name} must be a positive integer or left out, got {value!r}")


def _optional_int(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"{attribute.name} must be an integer or left out, got {value!r}")


def _temperature(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 2:
        raise ValueError(f"temperature must be a number from 0 to 2 or left out, got {value!r}")


def _one_of(*choices: str) -> Callable[[Any, attrs.Attribute[Any], object], None]:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
        if value not in choices:
            shown = " or ".join(repr(c) for c in choices)
            raise ValueError(f"{attribute.name} must be {shown}, got {value!r}")

    return check


def _json_value(value: object, where: str) -> None:
    if value is None or isinstance(value, bool | int | str):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where} must be a finite number")
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            _json_value(item, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{where} keys must be strings")
            _json_value(item, f"{where}.{key}")
        return
    raise ValueError(f"{where} must be plain JSON data, got {type(value).__name__}")


def _extra_body(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, dict):
        raise ValueError("extra_body must be a table of request fields")
    reserved = sorted(k for k in value if k in RESERVED_BODY_KEYS)
    if reserved:
        raise ValueError(
            f"extra_body may not set {', '.join(reserved)}: the provider sets these itself "
            "(the conversation, the model, the tools, one non-streamed answer)"
        )
    _json_value(value, "extra_body")


@attrs.frozen(slots=True)
class OpenAIProviderConfig:
    """Options of the OpenAI-compatible provider.

    - ``model`` (required): the model name sent with every request
      (``gpt-4o-mini``; ``Qwen/Qwen2.5-7B-Instruct`` on vLLM; ``llama3.1`` on Ollama).
    - ``base_url``: the API root, ending in ``/v1`` for most servers
      (default OpenAI's ``https://api.openai.com/v1``). Ignored when a host lends its own client.
    - ``api_key_env``: the NAME of the environment variable holding the API key
      (default ``OPENAI_API_KEY``). Set it to ``""`` (or ``None``) for a local
      server that needs no key; the client then sends the fixed placeholder
      ``no-key``. The key itself is never an option, and a named variable that is
      unset or empty is an error when the provider is built.
    - ``organization`` / ``project``: OpenAI organization and project ids, if any.
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
    - ``temperature``, ``max_completion_tokens``, ``seed``: sampling options, sent only when set.
    - ``extra_body``: further plain-JSON request fields (``top_p``, ``max_tokens`` for servers
      that want it); it may not set the conversation, model, tools, ``stream`` or ``n``.
    """

    model: str = attrs.field(validator=_model)
    base_url: str = attrs.field(default=DEFAULT_BASE_URL, validator=_base_url, repr=redact_url)
    api_key_env: str | None = attrs.field(default="OPENAI_API_KEY", validator=_env_name)
    organization: str | None = None
    project: str | None = None
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
