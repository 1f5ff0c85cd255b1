"""The connection base of the embedded SQLite adapters: options, lazy open, WAL, cancellation.

Every built-in SQLite adapter (archive, session store, recall store, memory
store) is a :class:`SQLiteAdapterBase`: one lazily opened connection per
adapter, used from worker threads one call at a time (the public
:class:`~agentium_harness.adapters.threaded.ThreadBoundAdapter`), in WAL mode,
with ``secure_delete`` on and a progress handler that stops a running
statement when the call is cancelled. :mod:`agentium_harness.adapters.sqlite`
describes the whole design.
"""

from __future__ import annotations

import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, ClassVar, Final, TypeVar

import anyio.to_thread
import attrs

from .._errors import AgentiumError, InvalidArgumentError
from .._plugins.spec import PATH_OPTION
from .._ports import OpContext
from .._ports.erasure import PhysicalErasure
from .._ports.recall_args import checked_ctx
from .._validators import bounded_count
from ._sqlite_sql import (
    SCHEMA_VERSION,
    SchemaError,
    SQLiteRevisionFloorError,
    SQLiteStorageError,
    ensure_schema,
    scrub_log,
    stored_version,
)
from .threaded import ThreadBoundAdapter, host_task_cancelled

__all__ = [
    "SCHEMA_VERSION",
    "SYNCHRONOUS_MODES",
    "SQLiteConfig",
    "SQLiteRevisionFloorError",
    "SQLiteStorageError",
    "data_version",
]

T = TypeVar("T")

#: Accepted ``PRAGMA synchronous`` levels. ``OFF`` is refused because both
#: adapters declare ``durable``: with ``OFF`` an OS crash or power loss can
#: drop acknowledged writes.
SYNCHRONOUS_MODES: Final = frozenset({"NORMAL", "FULL", "EXTRA"})

# How many SQLite virtual-machine steps run between two cancellation checks.
# Small enough to stop a long scan promptly, large enough to cost nothing on
# the short statements these adapters issue.
_PROGRESS_STEPS: Final = 1000
# Closes in this process, one at a time. SQLite checkpoints the WAL into the database file and
# removes it only when the closing connection is the file's last; two adapters on one file
# closed together (the runtime closes its adapters concurrently) can each see the other still
# open, and then neither checkpoints: the file alone would lack every commit until the next
# open. Closing in turn makes the last one to close do it.
_CLOSE_LOCK: Final = threading.Lock()


#: Set around a write whose work begins with :meth:`SQLiteAdapterBase.begin_immediate`, which waits for
#: another writer's lock itself (see there). The worker thread runs in a copy of the caller's context.
WAITS_ITSELF: Final[ContextVar[bool]] = ContextVar("agentium_sqlite_write_waits_itself", default=False)


def _path_validator(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgumentError(f"{attribute.name} must be a non-empty file path, got {value!r}")
    if value == ":memory:" or value.startswith("file:"):
        # A private in-memory database would make the "durable" declaration and
        # the shared-file design untrue; the memory adapters serve that need.
        raise InvalidArgumentError(
            f"{attribute.name} must be a file path, not {value!r}; "
            "use the 'memory' adapters for in-process storage"
        )
    if "\x00" in value:
        raise InvalidArgumentError(f"{attribute.name} must not contain NUL")
    try:
        os.fsencode(value)
    except UnicodeEncodeError:
        # A lone surrogate the file system cannot encode: sqlite3.connect would fail at first use.
        raise InvalidArgumentError(
            f"{attribute.name} holds a character no file name can: {value!r}"
        ) from None


def _synchronous_validator(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in SYNCHRONOUS_MODES:
        raise InvalidArgumentError(
            f"{attribute.name} must be one of {', '.join(sorted(SYNCHRONOUS_MODES))}, got {value!r}"
        )


@attrs.frozen(slots=True)
class SQLiteConfig:
    """Options of the SQLite archive and session store (the same for both).

    - ``path``: the database file. In a config file a relative path is
      resolved against the config file's folder (it is a path option); built
      directly, against the working directory when the adapter is built. Both
      adapters default to the same file, ``agentium.db``, each with its own
      tables, which lets their commits share one transaction.
    - ``busy_timeout_ms``: how long a call waits for another writer's lock
      before failing (capped by the operation's deadline).
    - ``synchronous``: ``PRAGMA synchronous`` level, one of ``NORMAL``,
      ``FULL`` (default) or ``EXTRA``. In WAL mode ``NORMAL`` survives a
      process crash but may lose the last commits on power loss.
    """

    path: str = attrs.field(default="agentium.db", validator=_path_validator, metadata={PATH_OPTION: True})
    busy_timeout_ms: int = attrs.field(default=5000, validator=bounded_count(minimum=0, ceiling=600_000))
    synchronous: str = attrs.field(default="FULL", validator=_synchronous_validator)


def data_version(conn: sqlite3.Connection) -> int:
    """``PRAGMA data_version``: changes when another connection commits to the file (not for own commits)."""
    row = conn.execute("PRAGMA data_version").fetchone()
    return int(row[0])


class SQLiteAdapterBase(ThreadBoundAdapter[sqlite3.Connection]):
    """Connection handling shared by both adapters: lazy open, worker threads, close.

    Built on the public :class:`~agentium_harness.adapters.threaded.ThreadBoundAdapter`;
    SQLite adds WAL mode, the schema check and a progress handler that stops
    a running statement when the call is cancelled.
    """

    storage_error: ClassVar[type[AgentiumError]] = SQLiteStorageError
    adapter_name: ClassVar[str] = "sqlite adapter"
    backend_errors: ClassVar[tuple[type[BaseException], ...]] = (sqlite3.Error,)

    def __init__(self, config: SQLiteConfig | None = None) -> None:
        super().__init__()
        self._config = config if config is not None else SQLiteConfig()
        # Resolved once, without touching the file system's contents, so a later
        # chdir does not move the database.
        self._path = os.path.abspath(self._config.path)
        self._prefix = f"sqlite://{os.path.basename(self._path)}"  # see _location_prefix
        # The connection's busy timeout as last set (ms): a call sets it only when it changes.
        self._busy_ms = -1
        # The connection once WAL mode, its pragmas and the schema are set (the first call's work).
        self._prepared: sqlite3.Connection | None = None
        # The call's context while its lock wait is left to ``begin_immediate`` (see ``call_guard``).
        self._wait_ctx: OpContext | None = None
        # The cursor ``_peek_data_version`` reuses, with the connection it belongs to (a cursor
        # made per peek was a sixth of its cost). Used only under the connection lock.
        self._peek_cursor: tuple[sqlite3.Connection, sqlite3.Cursor] | None = None

    @property
    def config(self) -> SQLiteConfig:
        """The options this adapter was built with."""
        return self._config

    @property
    def path(self) -> str:
        """The absolute path of the database file."""
        return self._path

    def _location_prefix(self) -> str:
        return self._prefix  # the path is fixed when the adapter is built: made once

    # -- erasure clean-up ---------------------------------------------------------------------

    @property
    def scrub_file_key(self) -> str:
        """The identity of the database file, the same for every adapter on it (device and inode).

        The engine's erasure rebuilds each file once, whichever adapters and
        paths share it (``erase(..., scrub=False)``, then :meth:`scrub_erased`);
        a file not there yet is named by its resolved path.
        """
        try:
            info = os.stat(self._path)
        except OSError:
            return f"path:{os.path.realpath(self._path)}"
        return f"inode:{info.st_dev}:{info.st_ino}"

    async def scrub_erased(self, ctx: OpContext) -> tuple[PhysicalErasure, str]:
        """Rebuild the file and empty its log, once the erasing stores on it are done.

        What an ``erase`` does after its deletion (:func:`scrub_log`, bounded by
        ``ctx``'s time), for every store on the file at once: the rebuild
        removes the copies of every store's erased rows, so one suffices.
        Returns how physical the erasure is and, if not ``removed``, why.
        """
        return await self.run(
            ctx, "erasure clean-up", lambda conn: scrub_log(conn, time_left=ctx.time_left())
        )

    # -- connection ---------------------------------------------------------------------------

    def open_connection(self) -> sqlite3.Connection:
        """Open the adapter's own connection (worker thread); the first call on it prepares it.

        Opening takes no lock. Switching to WAL and creating (or migrating)
        the schema wait for another connection's write lock, so they run in
        :meth:`call_guard`, bounded by the call's deadline like any other
        wait: a file another process holds locked cannot keep a call with a
        short deadline waiting for the whole busy timeout.
        """
        return sqlite3.connect(
            self._path,
            timeout=self._config.busy_timeout_ms / 1000,
            # Transactions are begun and ended explicitly.
            isolation_level=None,
            # Successive calls run on different worker threads; the base class
            # guarantees only one of them uses the connection at a time.
            check_same_thread=False,
        )

    def _prepare(self, conn: sqlite3.Connection, ctx: OpContext) -> None:
        """Switch to WAL, set the pragmas and create the schema (a failure closes the connection)."""
        mode = self._switch_to_wal(conn, ctx)
        if mode is None or str(mode[0]).lower() != "wal":
            raise self.storage_error(
                f"{self.adapter_name}: could not switch {self._path} to WAL mode (got {mode!r}); "
                "is the file on a file system that supports shared memory?"
            )
        # The level comes from a validated, closed set; PRAGMA takes no parameters.
        conn.execute(f"PRAGMA synchronous = {self._config.synchronous}")
        conn.execute("PRAGMA foreign_keys = ON")
        # Deleted and overwritten rows are zeroed in place, not left in free
        # pages: an erased group, an old snapshot revision or a forgotten
        # fact leaves no bytes behind in the file (docs/erasure.md).
        conn.execute("PRAGMA secure_delete = ON")
        self._ensure_schema(conn)
        self._prepared = conn

    def close_connection(self, conn: sqlite3.Connection) -> None:
        """Close the connection (the WAL is checkpointed on the last close)."""
        self._peek_cursor = None  # under the connection lock, as every peek
        self._prepared = None
        with _CLOSE_LOCK:
            conn.close()

    #: True for an adapter whose loads peek (``_peek_data_version``) after its writes: a call that
    #: wrote leaves the connection's busy timeout at 0, as the peek needs it, so the pragma runs
    #: in the worker thread at the end of the write instead of on the event loop in the next peek.
    peeks_after_writes: ClassVar[bool] = False

    @contextmanager
    def call_guard(self, conn: sqlite3.Connection, ctx: OpContext) -> Iterator[None]:
        """Cap the lock wait by the deadline and abort a running statement when the call is cancelled."""
        if self._prepared is conn and self._busy_ms == 0 and WAITS_ITSELF.get():
            # A write that begins with ``begin_immediate`` on a connection left at a busy timeout of
            # 0 (by its last write, for the loads' peeks): the timeout is set only if the write
            # lock is taken, so an uncontended write runs no pragma before it nor after it.
            self._wait_ctx = ctx
        else:
            self._apply_deadline(conn, ctx)
        if self._prepared is not conn:  # the first call on this connection
            # Before the progress handler: the schema's transaction removes it before its COMMIT.
            try:
                self._prepare(conn, ctx)
            except BaseException:
                # The next call opens the file afresh (it may have been replaced or repaired meanwhile).
                self._close_locked()
                raise
        conn.set_progress_handler(lambda: int(ctx.expired or host_task_cancelled()), _PROGRESS_STEPS)
        changes = conn.total_changes
        try:
            yield
        finally:
            self._wait_ctx = None
            conn.set_progress_handler(None, 0)
            if self.peeks_after_writes and self._busy_ms != 0 and conn.total_changes != changes:
                self._zero_busy_timeout(conn)

    def begin_immediate(self, conn: sqlite3.Connection) -> None:
        """``BEGIN IMMEDIATE``, waiting for another writer's lock within the call's deadline.

        For a write run under :data:`WAITS_ITSELF`: when ``call_guard`` left
        the connection's busy timeout at 0, the lock is first asked for
        without waiting; only if another connection holds it is the busy
        timeout set as every other call sets it (the busy timeout, capped by
        the deadline) and the lock asked for again, waiting. Otherwise a plain
        ``BEGIN IMMEDIATE`` under the timeout ``call_guard`` already set.
        """
        ctx, self._wait_ctx = self._wait_ctx, None
        if ctx is None:
            conn.execute("BEGIN IMMEDIATE")
            return
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY:
                raise
            self._apply_deadline(conn, ctx)
            conn.execute("BEGIN IMMEDIATE")

    def _zero_busy_timeout(self, conn: sqlite3.Connection) -> None:
        """Set the busy timeout to 0 (every call sets its own first); a failure leaves it as it was."""
        try:
            conn.execute("PRAGMA busy_timeout = 0")
        except sqlite3.Error:  # the call's own outcome stands; the peek sets it again if it must
            return
        self._busy_ms = 0

    def failure_message(self, operation: str, exc: BaseException) -> str:
        """Name the database file in the message."""
        return f"{self.adapter_name}: {operation} failed on {self._path}: {exc}"

    def _switch_to_wal(self, conn: sqlite3.Connection, ctx: OpContext) -> Any:
        """Set WAL mode, retrying while another connection holds a write lock, up to the busy timeout.

        On a file still in rollback-journal mode SQLite refuses the switch at
        once with SQLITE_BUSY (its busy handler does not wait for a lock
        upgrade), so two adapters opening a new file together would fail
        without this retry. The wait is capped by the call's deadline too.
        """
        wait = self._config.busy_timeout_ms / 1000
        left = ctx.time_left()
        deadline = time.monotonic() + (wait if left is None else min(wait, left))
        delay = 0.002
        while True:
            try:
                return conn.execute("PRAGMA journal_mode = WAL").fetchone()
            except sqlite3.OperationalError as exc:
                busy = "locked" in str(exc) or "busy" in str(exc)
                if not busy or time.monotonic() + delay > deadline:
                    raise
            # A worker thread, never the event loop, runs this: sleeping is fine.
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def _ensure_schema(self, conn: sqlite3.Connection) -> None:
        # Creates the tables, or migrates a file of schema version 1 or 2, in one transaction.
        try:
            ensure_schema(conn)
        except SchemaError as exc:
            raise self.storage_error(f"{self.adapter_name}: {self._path}: {exc}") from exc

    def _apply_deadline(self, conn: sqlite3.Connection, ctx: OpContext) -> None:
        # Waiting for another writer's lock must not outlast the caller's deadline.
        timeout_ms = self._config.busy_timeout_ms
        left = ctx.time_left()
        if left is not None:
            timeout_ms = min(timeout_ms, math.ceil(left * 1000))
        if int(timeout_ms) != self._busy_ms:  # a statement per call otherwise; the value rarely changes
            conn.execute(f"PRAGMA busy_timeout = {int(timeout_ms)}")
            self._busy_ms = int(timeout_ms)

    def _peek_data_version(self) -> int | None:
        """``PRAGMA data_version`` of the open connection, read on the calling thread; ``None`` if not now.

        The value changes whenever another connection (of this process or any
        other) commits to the file, and never for this connection's own
        commits. Reading it needs no lock and no I/O: a read transaction
        looks at the WAL index in shared memory. It is read here only when the
        connection is idle (its lock free at once) and with a busy timeout of
        0, so it never waits: anything else (a call in flight, a locked or
        recovering file, an error, a closed adapter) answers ``None`` and the
        caller takes its worker thread as usual.
        """
        conn = self._conn
        if (
            conn is None
            or self._prepared is not conn
            or self._closed
            or not self._conn_lock.acquire(blocking=False)
        ):
            return None
        try:
            if self._conn is not conn or self._closed:
                return None
            if self._busy_ms != 0:
                conn.execute("PRAGMA busy_timeout = 0")
                self._busy_ms = 0
            held = self._peek_cursor
            if held is None or held[0] is not conn:
                held = self._peek_cursor = (conn, conn.cursor())
            # The one row is fetched, then the statement runs to its end and is reset (ending the
            # read transaction), as with a cursor of its own.
            row = held[1].execute("PRAGMA data_version").fetchone()
            return int(row[0])
        except sqlite3.Error:
            return None
        finally:
            self._conn_lock.release()

    async def probe_health(
        self, ctx: OpContext, operation: str, probe: Callable[[sqlite3.Connection], str]
    ) -> str:
        """Run ``probe`` on the database; while its file does not exist, check it could be created instead.

        A health check must not change what it checks: opening the database
        would create the file (and its schema), so ``agentium check --probe``
        would leave a database behind. A missing file is healthy when its
        folder exists and is writable; the first real call creates it.
        """
        checked_ctx(ctx, operation).raise_if_expired(operation)
        self.refuse_if_closed(operation)
        if self._conn is None:
            missing = await anyio.to_thread.run_sync(self._not_created_yet, operation)
            if missing is not None:
                return missing
        return await self.run(ctx, operation, probe)

    def _not_created_yet(self, operation: str) -> str | None:
        """The probe's report while the database file does not exist (``None`` once it does)."""
        if os.path.lexists(self._path):
            return None
        folder = os.path.dirname(self._path)
        if not os.path.isdir(folder):
            raise self.storage_error(
                f"{self.adapter_name}: {operation} failed: the folder {folder} of {self._path} "
                "does not exist; create it or change the path option"
            )
        if not os.access(folder, os.W_OK | os.X_OK):
            raise self.storage_error(
                f"{self.adapter_name}: {operation} failed: {self._path} does not exist and its folder "
                "is not writable, so it cannot be created"
            )
        return (
            f"{self.adapter_name} ok: {os.path.basename(self._path)} does not exist yet; "
            "the first write creates it (its folder is writable)"
        )

    def _health_probe(self, conn: sqlite3.Connection) -> str:
        # Bounded: constant-time statements only (no integrity scan, which
        # would read the whole file).
        conn.execute("SELECT 1").fetchone()
        mode = conn.execute("PRAGMA journal_mode").fetchone()
        # Read as an open reads it (bounded: a value changed behind the store's back is not read),
        # and refused as the next open would refuse it: a damaged file is not reported healthy.
        try:
            version = stored_version(conn, "meta")
        except SchemaError as exc:
            raise self.storage_error(f"{self.adapter_name}: {self._path}: {exc}") from exc
        return (
            f"{self.adapter_name} ok: {os.path.basename(self._path)}, sqlite {sqlite3.sqlite_version}, "
            f"journal_mode={mode[0] if mode else '?'}, schema v{version if version is not None else '?'}"
        )
