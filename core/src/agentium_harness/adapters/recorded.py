"""The ``recorded`` provider: record a provider's requests and responses to JSONL, or replay them (R35).

Mode ``record`` wraps another configured provider (``provider`` and
``provider_options``), passes each request to it and appends one JSON line
per call: the request digest, the request and the response, with secrets and
the configured ``redact_fields`` replaced by ``[redacted]``. Mode ``replay``
calls no provider at all: it answers each request with the recorded response
whose digest matches, and a request it has no recording for raises
:class:`ReplayMissError`, never a silent fallback. The digest is taken over
the *redacted* request, so a recording file is self-consistent (anyone can
recompute each digest from its line) and never fingerprints a secret.

A recalled history group's ``revision`` (its digest, which holds the random
``write_id`` every committed group carries) differs each time the same
history is written, so in the recorded request, and the digest over it, it
is :data:`GROUP_REVISION`: a replay of the same conversation finds its
recording. A document's revision is kept.

Recordings are plain JSON structured back strictly by the one codec; no
pickle, and nothing in a recording is executed.
"""

from __future__ import annotations

import json
import os
import re
import threading
from functools import partial
from typing import Any, ClassVar, Literal

import anyio
import attrs

from .._codec import decode_json, digest_of, structure, unstructure
from .._errors import ConfigError, ConfigIssue, ProviderError, RecordDecodeError
from .._observe.spans import unattributed
from .._plugins.deadline import HookTimeoutError, call_with_deadline
from .._plugins.spec import BUILDING, PATH_OPTION
from .._ports import OpContext
from .._ports.provider import ModelProvider, ModelRequest, ModelResponse, ProviderCapabilities
from .providers import read_reply_file

__all__ = [
    "GROUP_REVISION",
    "RECORDING_FORMAT",
    "REDACTED",
    "SECRET_FIELDS",
    "RecordedProvider",
    "RecordedProviderConfig",
    "RecordingError",
    "ReplayMissError",
    "recorded_request",
    "redact",
    "request_digest",
]

#: The ``format`` value of every recorded line.
RECORDING_FORMAT = "agentium.recorded/1"
#: What a redacted value becomes.
REDACTED = "[redacted]"
#: What a recalled history group's revision is recorded as (it differs every time it is written).
GROUP_REVISION = "[group revision]"
#: Keys whose values are always redacted, wherever they appear (case-insensitive).
SECRET_FIELDS = frozenset(
    {"api_key", "apikey", "authorization", "password", "secret", "token", "access_token"}
)
#: Secret-looking text redacted inside any string: API keys, AWS key ids, bearer, GitHub and Slack tokens.
_SECRET_TEXT = re.compile(
    r"sk-[A-Za-z0-9_\-]{16,}|AKIA[0-9A-Z]{16}|(?i:bearer)\s+[A-Za-z0-9._\-]{16,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}|xox[abprs]-[A-Za-z0-9\-]{10,}"
)
_WRITE_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


class ReplayMissError(ProviderError):
    """Replay found no recorded response for a request digest: record it first (``mode = "record"``)."""

    def __init__(self, digest: str, path: str) -> None:
        self.digest = digest
        self.path = path
        super().__init__(
            f"replay miss: no recorded response for request {digest} in {path}; the request differs from "
            'every recorded one; record it with mode = "record" (nothing falls back to a live provider)'
        )


class RecordingError(ProviderError):
    """A recording file that cannot be read back: a malformed line, a wrong format, an unreadable file."""


@attrs.frozen(slots=True)
class RecordedProviderConfig:
    """Options of the recorded provider.

    - ``path``: the recording (JSONL); a path option, relative to the config file.
    - ``mode``: ``replay`` (default; calls no provider) or ``record``.
    - ``provider`` / ``provider_options``: the provider plugin to wrap when recording, and its options.
    - ``redact_fields``: extra keys (anywhere in a request or response) whose values are redacted.
    """

    path: str | None = attrs.field(default=None, metadata={PATH_OPTION: True})
    mode: Literal["record", "replay"] = "replay"
    provider: str | None = None
    provider_options: dict[str, Any] = attrs.field(factory=dict)
    redact_fields: list[str] = attrs.field(factory=list)


def redact(data: Any, fields: frozenset[str] = frozenset()) -> Any:
    """``data`` (plain JSON) with secret keys, ``fields`` and secret-looking text made ``[redacted]``."""
    keys = SECRET_FIELDS | {f.lower() for f in fields}
    if isinstance(data, dict):
        return {k: REDACTED if k.lower() in keys else redact(v, fields) for k, v in data.items()}
    if isinstance(data, list):
        return [redact(v, fields) for v in data]
    if isinstance(data, str):
        return _SECRET_TEXT.sub(REDACTED, data)
    return data


def recorded_request(request: ModelRequest, fields: frozenset[str] = frozenset()) -> Any:
    """``request`` as a recording holds it: redacted, a recalled group's revision :data:`GROUP_REVISION`."""
    data = redact(unstructure(request), fields)
    for source in data.get("sources") or ():
        # Only a group's: a document's revision says which version of it the model was shown.
        if isinstance(source, dict) and str(source.get("source_id", "")).startswith("group/"):
            source["attributes"] = [
                ("revision", GROUP_REVISION) if _is_revision(pair) else pair
                for pair in source.get("attributes") or ()
            ]
    return data


def _is_revision(pair: object) -> bool:
    return isinstance(pair, (list, tuple)) and len(pair) == 2 and pair[0] == "revision"


def request_digest(request: ModelRequest, fields: frozenset[str] = frozenset()) -> str:
    """The digest a recording is keyed by: ``sha256:`` of the canonical JSON of :func:`recorded_request`."""
    return str(digest_of(recorded_request(request, fields)))


def _lock_for(path: str) -> threading.Lock:
    with _LOCKS_GUARD:
        return _WRITE_LOCKS.setdefault(os.path.abspath(path), threading.Lock())


def wrapped_provider(config: RecordedProviderConfig, registry: Any) -> tuple[Any, Any]:
    """The wrapped provider's registration and structured options, or a config error at its key.

    The config check (phase b) calls it too, so ``agentium check`` reports bad
    wrapped options before anything is built.
    """
    if not config.provider:
        raise ConfigError(
            [ConfigIssue("$.provider.options.provider", "mode 'record' needs the provider to wrap")]
        )
    if config.provider == "recorded":
        raise ConfigError(
            [ConfigIssue("$.provider.options.provider", "the recorded provider cannot wrap itself")]
        )
    try:
        found = registry.adapter("provider", config.provider)
        spec = found.spec
        # Its config class is plugin code, bounded as the config's own classes are (docs/config.md):
        # structured on the caller's thread, a validator that blocked hung `agentium check` for good.
        what = f"the config class of provider adapter {config.provider!r} (plugin {found.distribution})"
        with unattributed():  # no runtime's operation, as the config's own classes are not
            options: Any = call_with_deadline(
                partial(structure, config.provider_options, spec.config_class), registry.hook_timeout_s, what
            )
    except HookTimeoutError as exc:
        raise ConfigError([ConfigIssue("$.provider.options.provider_options", str(exc))]) from exc
    except RecordDecodeError as exc:
        raise ConfigError(
            [ConfigIssue("$.provider.options.provider_options", "; ".join(exc.issues))]
        ) from exc
    except Exception as exc:
        raise ConfigError([ConfigIssue("$.provider.options.provider", str(exc))]) from exc
    return spec, options


def _inner_provider(config: RecordedProviderConfig) -> ModelProvider:
    """Build the wrapped provider through the plugin registry; problems are a config error at its key."""
    from .._plugins.registry import PluginRegistry  # the registry imports the built-ins, which import us

    # The host's registry while a config is built (its registry= and environ= choose the plugins,
    # and may only narrow); the installed plugins otherwise (an adapter built by hand).
    building = BUILDING.get()
    registry = building.registry if building is not None else PluginRegistry.load()
    spec, options = wrapped_provider(config, registry)
    # Its relative paths mean paths next to the config file, as the config's own do. Plugin code
    # building an adapter: no runtime's operation, also when a host builds this provider in a block.
    with unattributed():
        inner = spec.build(options, base_dir=building.base_dir if building is not None else None)
    if not isinstance(inner, ModelProvider):
        raise ConfigError(
            [ConfigIssue("$.provider.options.provider", f"{config.provider!r} is not a provider")]
        )
    return inner


class RecordedProvider(ModelProvider):
    """Records another provider's traffic, or replays a recording by request digest.

    Pass ``inner`` to wrap a provider built in code; otherwise record mode
    builds ``provider`` from the registry. The wrapped provider is owned and
    closed by :meth:`aclose` only when this provider built it.
    """

    capabilities: ClassVar[ProviderCapabilities] = ProviderCapabilities(tool_calls=True, deterministic=True)

    def __init__(self, config: RecordedProviderConfig, *, inner: ModelProvider | None = None) -> None:
        if not config.path:
            raise ConfigError([ConfigIssue("$.provider.options.path", "the recorded provider needs a path")])
        if config.mode not in ("record", "replay"):
            raise ConfigError(
                [ConfigIssue("$.provider.options.mode", f"expected record or replay, got {config.mode!r}")]
            )
        self._config = config
        self._fields = frozenset(config.redact_fields)
        self._owns_inner = inner is None and config.mode == "record"
        self._inner = inner if inner is not None or config.mode == "replay" else _inner_provider(config)
        self._replies: dict[str, ModelResponse] | None = None
        self.misses = 0

    @property
    def mode(self) -> str:
        """``record`` or ``replay``."""
        return self._config.mode

    @property
    def wrapped(self) -> ModelProvider | None:
        """The provider being recorded (``None`` in replay mode)."""
        return self._inner

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        """Record mode: call the wrapped provider and append the exchange. Replay: the recorded response."""
        ctx.raise_if_expired("provider complete")
        digest = request_digest(request, self._fields)
        if self._config.mode == "replay":
            replies = await self._load()
            found = replies.get(digest)
            if found is None:
                self.misses += 1
                raise ReplayMissError(digest, str(self._config.path))
            return found
        assert self._inner is not None
        response = await self._inner.complete(request, ctx)
        line = {
            "format": RECORDING_FORMAT,
            "digest": digest,
            "request": recorded_request(request, self._fields),
            "response": redact(unstructure(response), self._fields),
        }
        text = json.dumps(line, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n"
        await anyio.to_thread.run_sync(self._append, text)
        return response

    def _append(self, text: str) -> None:
        path = str(self._config.path)
        with _lock_for(path):  # one whole line per write, even with many runtimes recording to one file
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())

    async def _load(self) -> dict[str, ModelResponse]:
        if self._replies is None:
            path = str(self._config.path)
            try:
                text = (await anyio.to_thread.run_sync(read_reply_file, path, "the recording")).decode(
                    "utf-8"
                )
            except OSError as exc:
                raise RecordingError(f"cannot read the recording {path}: {exc.strerror or exc}") from exc
            except UnicodeDecodeError as exc:
                raise RecordingError(f"the recording {path} is not valid UTF-8 (byte {exc.start})") from exc
            replies: dict[str, ModelResponse] = {}
            for number, line in enumerate(text.splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    data = decode_json(line)
                    if not isinstance(data, dict) or data.get("format") != RECORDING_FORMAT:
                        raise ValueError(f"not a {RECORDING_FORMAT} line")
                    digest = data["digest"]
                    if not isinstance(digest, str):
                        raise ValueError("digest is not a string")
                    response = structure(data["response"], ModelResponse)
                except (ValueError, KeyError, RecordDecodeError) as exc:
                    raise RecordingError(f"{path}:{number}: unusable recorded line: {exc}") from exc
                replies.setdefault(digest, response)
            self._replies = replies
        return self._replies

    async def aclose(self) -> None:
        """Close the wrapped provider if this provider built it."""
        if self._owns_inner and self._inner is not None:
            await self._inner.aclose()
