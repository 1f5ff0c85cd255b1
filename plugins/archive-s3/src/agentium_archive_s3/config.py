"""The options of the S3 archive and session store (``[archive.options]``, ``[session_store.options]``).

:class:`S3Config` is a frozen attrs class, structured from a config file by the
core's strict loader: unknown keys and wrong types are errors at
``$.archive.options.<key>``. Built in Python, a bad option raises
``InvalidArgumentError`` (a ``ValueError`` and a ``TypeError``). Its
validators never echo a credential, and its ``repr`` hides the secret key
and the session token.
"""

from __future__ import annotations

import itertools
import re
from typing import Any, Final
from urllib.parse import urlsplit

import attrs

from agentium_harness import InvalidArgumentError
from agentium_harness.plugin_api import bounded_count, bounded_duration, redact_url

from .keys import archive_root, sessions_root

__all__ = ["ADDRESSING_STYLES", "S3Config", "redact_endpoint"]

#: botocore's ``s3.addressing_style`` values.
ADDRESSING_STYLES: Final = ("auto", "path", "virtual")

# S3's own bucket-name rules (3-63 characters, lower case, digits, dots and
# hyphens, starting and ending with a letter or digit).
_BUCKET: Final = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")

# A key prefix is plain ASCII path segments: no empty segment, no "." or ".."
# segment, nothing a listing or a proxy could read as a pattern or an escape.
_PREFIX_SEGMENT: Final = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}")

_REGION: Final = re.compile(r"[a-z0-9-]{1,32}")

# The layout's folders below a prefix, as keys.py writes them ("archive/v1/<tenant>/...",
# "sessions/v1/<tenant>/..."): exactly those, so a layout version it does not write ("v2", "v01")
# stays a prefix an existing deployment may use.
_LAYOUT_FOLDERS: Final = frozenset(
    tuple(root("").strip("/").split("/")) for root in (archive_root, sessions_root)
)


def redact_endpoint(url: str | None) -> str:
    """``url`` with any user info or query replaced by ``***`` (``redact_url``); ``None`` reads "default"."""
    return "default endpoint" if url is None else redact_url(url)


def _bucket(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not _BUCKET.fullmatch(value) or ".." in value:
        raise InvalidArgumentError(
            "bucket must be an S3 bucket name: 3-63 characters of lower-case letters, digits, '.' and '-', "
            "starting and ending with a letter or digit"
        )


def _prefix(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or len(value) > 256:
        raise InvalidArgumentError("prefix must be a string of at most 256 characters")
    segments = value.split("/")
    if not all(_PREFIX_SEGMENT.fullmatch(s) and s not in (".", "..") for s in segments):
        raise InvalidArgumentError(
            "prefix must be '/'-separated segments of letters, digits, '_', '.' and '-' (no empty, '.' or "
            "'..' segment, no leading or trailing '/'), for example 'agentium' or 'apps/agentium'"
        )
    # A prefix holding a layout folder ("archive/v1", "sessions/v1") puts its keys inside another
    # prefix's tenant folders (prefix "apps/archive/v1/eu" below "apps"'s tenant "eu"): that prefix's
    # erasure of tenant "eu" deleted this one's every group and snapshot, and its listings met them.
    for kind, version in itertools.pairwise(segments):
        if (kind, version) in _LAYOUT_FOLDERS:
            raise InvalidArgumentError(
                f"prefix must not hold the layout's folder {kind}/{version}: its keys would lie inside "
                "the tenant folders of another prefix, whose erasures and listings would reach them"
            )


def _endpoint(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError("endpoint_url must be an http:// or https:// URL, or left out")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        # No URL holds one: urlsplit drops a newline or a tab (the URL used would not be the one
        # given) and a NUL reached botocore. Not shown: the URL may hold credentials.
        raise InvalidArgumentError("endpoint_url must not contain a NUL or another control character")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018  # evaluated for its ValueError on a bad port
    except ValueError:
        raise InvalidArgumentError("endpoint_url is not a valid URL (check its host and port)") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidArgumentError("endpoint_url must be an http:// or https:// URL with a host")
    if parts.username or parts.password:
        # Credentials belong in access_key_id / secret_access_key (or the standard chain).
        raise InvalidArgumentError(
            "endpoint_url must not carry credentials; use access_key_id / secret_access_key"
        )


def _region(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (not isinstance(value, str) or not _REGION.fullmatch(value)):
        raise InvalidArgumentError("region must be an AWS-style region name such as 'us-east-1', or left out")


def _optional_text(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    # The value may be a secret: say what is wrong without showing it.
    if value is not None and (not isinstance(value, str) or not value or "\n" in value):
        raise InvalidArgumentError(f"{attribute.name} must be a non-empty single-line string, or left out")


def _bounded_int(low: int, high: int) -> Any:
    # The core's one count rule (plugin_api.bounded_count), with this option's range.
    return bounded_count(minimum=low, ceiling=high)


#: The core's one duration rule: finite seconds above 0, at most MAX_DURATION_S (3600).
_seconds = bounded_duration()


def _addressing(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in ADDRESSING_STYLES:
        raise InvalidArgumentError(
            f"addressing_style must be one of {', '.join(ADDRESSING_STYLES)}, got {value!r}"
        )


def _flag(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    # Taken for its truth, "no" or 0 would keep the check on and "" or None turn it off.
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{attribute.name} must be true or false, got {type(value).__name__}")


def _secret_repr(value: object) -> str:
    return "None" if value is None else "'***'"


def _key_id_repr(value: object) -> str:
    # Access key ids are not secret but identify an account: show only their start.
    return "None" if not isinstance(value, str) else repr(value[:4] + "***")


@attrs.frozen(slots=True)
class S3Config:
    """Options of the S3 archive and the S3 session store (the same class for both).

    - ``bucket`` (required): the bucket; it must exist (the adapters never create it).
    - ``prefix``: the first path segments of every key (default ``agentium``);
      the archive writes below ``<prefix>/archive/``, the store below
      ``<prefix>/sessions/``, the health probe below ``<prefix>/probe/``; it may
      not hold a layout folder, ``archive/v1`` or ``sessions/v1``, which would put
      its keys inside another prefix's tenant folders (another version, such as
      ``sessions/v2``, is taken: the layout writes none).
    - ``endpoint_url``: an S3-compatible endpoint (Ceph RGW, MinIO, a local
      server); left out, boto3 uses AWS's endpoint for ``region``.
    - ``region``: the signing region; left out, the standard chain decides.
    - ``access_key_id`` / ``secret_access_key`` / ``session_token``:
      credentials; left out, boto3's standard chain (environment, shared
      files, instance roles) is used. Prefer
      ``secret_access_key = "${S3_SECRET}"`` to writing it in the file. The
      secret and the token are never shown in a message or ``repr``.
    - ``profile``: a named profile of the shared AWS files, for the standard chain.
    - ``addressing_style``: ``auto`` (default), ``path`` or ``virtual``.
    - ``max_object_bytes``: the largest group or snapshot written or read
      (default 16 MiB); larger ones are refused before any request.
    - ``max_concurrency``: S3 requests one adapter runs at once, in worker
      threads (uploads of an eviction, downloads of a read).
    - ``connect_timeout_s`` / ``read_timeout_s``: bounds on one HTTP request.
    - ``close_timeout_s``: how long ``aclose`` waits for requests still
      running (default 5 s) before it returns; one still running then keeps
      the client, and the last to finish closes it, so a write on the wire
      completes and its caller hears whether it landed.
    - ``max_attempts``: botocore's attempts per request (``standard`` retry
      mode: 5xx, throttling, dropped connections), including the first.
    - ``conflict_retries``: extra attempts after a 409 (a conflicting
      concurrent request on the same key), with backoff.
    - ``max_listed_sessions``: the most entries of a user's folder one
      ``list_sessions`` examines before it refuses (ids are sorted by code
      point, which S3's key order is not, so the whole folder is read):
      snapshots, tombstones and objects put there outside the store alike,
      a subfolder counting as one, so stray objects cannot make a listing
      unbounded.
    - ``etag_is_md5``: the server returns a single-part object's MD5 as its
      ETag (true for AWS without SSE-KMS, Ceph RGW, MinIO, moto); then every
      upload's ETag is checked against the bytes sent. Set false for SSE-KMS
      buckets.
    """

    bucket: str = attrs.field(validator=_bucket)
    prefix: str = attrs.field(default="agentium", validator=_prefix)
    endpoint_url: str | None = attrs.field(default=None, validator=_endpoint, repr=redact_endpoint)
    region: str | None = attrs.field(default=None, validator=_region)
    access_key_id: str | None = attrs.field(default=None, validator=_optional_text, repr=_key_id_repr)
    secret_access_key: str | None = attrs.field(default=None, validator=_optional_text, repr=_secret_repr)
    session_token: str | None = attrs.field(default=None, validator=_optional_text, repr=_secret_repr)
    profile: str | None = attrs.field(default=None, validator=_optional_text)
    addressing_style: str = attrs.field(default="auto", validator=_addressing)
    max_object_bytes: int = attrs.field(default=16 * 1024 * 1024, validator=_bounded_int(1024, 5 * 1024**3))
    max_concurrency: int = attrs.field(default=16, validator=_bounded_int(1, 256))
    connect_timeout_s: float = attrs.field(default=5.0, validator=_seconds)
    read_timeout_s: float = attrs.field(default=30.0, validator=_seconds)
    max_attempts: int = attrs.field(default=4, validator=_bounded_int(1, 20))
    conflict_retries: int = attrs.field(default=4, validator=_bounded_int(0, 20))
    max_listed_sessions: int = attrs.field(default=10_000, validator=_bounded_int(1, 1_000_000))
    etag_is_md5: bool = attrs.field(default=True, validator=_flag)
    close_timeout_s: float = attrs.field(default=5.0, validator=_seconds)

    def __attrs_post_init__(self) -> None:
        """Credentials come as a pair, or not at all."""
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise InvalidArgumentError(
                "access_key_id and secret_access_key must be given together, or both left out"
            )
        if self.session_token is not None and self.access_key_id is None:
            raise InvalidArgumentError("session_token needs access_key_id and secret_access_key")
