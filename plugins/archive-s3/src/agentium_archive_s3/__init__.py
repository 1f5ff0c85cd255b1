"""``agentium-archive-s3``: an S3 history archive and session store for Agentium.

Select them in a config file with ``[archive] plugin = "s3"`` and
``[session_store] plugin = "s3"`` (options: :class:`S3Config`), or build them
directly and pass them to ``create_harness_runtime(archive=..., session_store=...)``,
optionally lending them a boto3 S3 client. See the distribution's README.
"""

from __future__ import annotations

from .archive import ForgetReport, S3Archive
from .config import S3Config, redact_endpoint
from .errors import (
    S3AccessDeniedError,
    S3ArchiveError,
    S3BucketNotFoundError,
    S3ConflictRetriesExhaustedError,
    S3CreateUnsettledError,
    S3Error,
    S3ObjectTooLargeError,
    S3RevisionFloorCorruptError,
    S3SaveOutcomeUnknownError,
    S3ScopeMismatchError,
    S3SessionStoreError,
    S3UnavailableError,
)
from .sessions import S3SessionStore

__version__ = "0.1.0"

__all__ = [
    "ForgetReport",
    "S3AccessDeniedError",
    "S3Archive",
    "S3ArchiveError",
    "S3BucketNotFoundError",
    "S3Config",
    "S3ConflictRetriesExhaustedError",
    "S3CreateUnsettledError",
    "S3Error",
    "S3ObjectTooLargeError",
    "S3RevisionFloorCorruptError",
    "S3SaveOutcomeUnknownError",
    "S3ScopeMismatchError",
    "S3SessionStore",
    "S3SessionStoreError",
    "S3UnavailableError",
    "__version__",
    "redact_endpoint",
]
