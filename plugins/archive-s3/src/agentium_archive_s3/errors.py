"""The plugin's typed errors, each in the port's own family.

Every error the archive raises is an :class:`~agentium_harness.plugin_api.ArchiveError`
and every error the session store raises is a
:class:`~agentium_harness.plugin_api.SessionStoreError`; the classes that
both adapters raise (a missing bucket, refused credentials, a throttling storm)
derive from both, so a host catching either family catches them. Messages
name the bucket and the key's operation, never a credential.
"""

from __future__ import annotations

from agentium_harness import AgentiumError
from agentium_harness.plugin_api import (
    ArchiveConflictError,
    ArchiveCorruptError,
    ArchiveError,
    SessionStoreError,
    SnapshotScopeMismatchError,
)

__all__ = [
    "first_failure",
    "S3AccessDeniedError",
    "S3ArchiveError",
    "S3BucketNotFoundError",
    "S3ConflictRetriesExhaustedError",
    "S3CreateUnsettledError",
    "S3Error",
    "S3ObjectTooLargeError",
    "S3RevisionFloorCorruptError",
    "S3SaveOutcomeUnknownError",
    "S3ScopeMismatchError",
    "S3SessionStoreError",
    "S3UnavailableError",
]


class S3Error(AgentiumError):
    """Base of every error this plugin raises (each is also in its port's family).

    ``code`` is S3's error code (``NoSuchBucket``, ``SlowDown``, ...) or a
    short name of the local cause; ``status`` is the HTTP status when there
    was one.
    """

    def __init__(self, message: str, *, code: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


class S3ArchiveError(S3Error, ArchiveError):
    """An archive operation failed on S3 (a request error not covered by a narrower class)."""


class S3SessionStoreError(S3Error, SessionStoreError):
    """A session store operation failed on S3 (a request error not covered by a narrower class)."""


class S3BucketNotFoundError(S3ArchiveError, S3SessionStoreError, LookupError):
    """The configured bucket does not exist (or the endpoint does not serve it). Nothing was written."""


class S3AccessDeniedError(S3ArchiveError, S3SessionStoreError, PermissionError):
    """The server refused the credentials or the request (wrong key, bad signature, missing permission)."""


class S3UnavailableError(S3ArchiveError, S3SessionStoreError):
    """The server kept answering 5xx or throttling, or could not be reached, past the retry bound."""


class S3ConflictRetriesExhaustedError(S3ArchiveError, S3SessionStoreError):
    """A key kept answering 409 (a conflicting concurrent request) past ``conflict_retries``."""


class S3ObjectTooLargeError(S3ArchiveError, S3SessionStoreError, ValueError):
    """A group or snapshot is larger than ``max_object_bytes``: refused before any request."""


class S3SaveOutcomeUnknownError(S3SessionStoreError):
    """A session save failed in a way that may have written it, and reading it back could not tell.

    The snapshot may be stored (the request reached the server, its answer
    did not come back) and the read-back that would decide it failed too.
    Load the session before doing anything else: its revision and content
    say whether the save landed. Deliberately not an
    :class:`S3UnavailableError`: retrying the same turn blindly could commit
    it twice.
    """


class S3ScopeMismatchError(S3SessionStoreError, SnapshotScopeMismatchError):
    """A save's snapshot belongs to another session than its key: refused before any request.

    Its memory scope, or a resident group's retained scope, names another
    tenant, user or session than the key it would be saved under. Such an
    object would be stored, and only refused by the engine's load afterwards;
    it is refused here instead, and nothing is written. The core's
    ``SnapshotScopeMismatchError`` (what every session store raises for it:
    a ``SessionStoreError`` and a ``ScopeMismatchError``), in this plugin's family.
    """


class S3CreateUnsettledError(S3SessionStoreError):
    """A session create's write landed, but it could not be moved past a floor an erasure raised meanwhile.

    Raised only after the create's write landed: the session exists (unless
    another writer changed or erased it since). An erasure in another process
    raised the store's revision floor to ``floor`` while the create was
    running, so the revision the create stored, ``revision``, may be one the
    erased session had; moving the session past the floor (a conditional
    write on the create's own ETag) was refused because another writer got
    there first, failed, or ran out of time. Load the session before using
    it, and save over what the load returns. ``revision`` is the last
    revision this save is known to have stored (the create's, or a move's);
    ``floor`` the last floor it read (``None`` when it could not read one).
    """

    def __init__(self, message: str, *, revision: int, floor: int | None, code: str = "") -> None:
        super().__init__(message, code=code or "CreateUnsettled")
        self.revision = revision
        self.floor = floor


class S3RevisionFloorCorruptError(S3SessionStoreError):
    """The session store's revision floor object is damaged: nothing that reads it proceeds (fail closed).

    A create, an erase, and a save whose store has no ETag cached for the
    session read it.

    The floor keeps revisions of an erased session from repeating when its id
    is used again; a floor that cannot be read exactly could hand one out
    again, so nothing is written or deleted until it is restored.
    """


def first_failure(failures: list[BaseException]) -> BaseException:
    """The error to raise for a batch: a conflict first, then cancellation, then the first failure."""
    for wanted in (ArchiveConflictError, ArchiveCorruptError):
        for exc in failures:
            if isinstance(exc, wanted):
                return exc
    return failures[0]
