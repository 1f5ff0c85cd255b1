"""A real PostgreSQL server for the tests: Debian's ``initdb`` and ``postgres`` on a free loopback port.

The binaries are looked up in this order:

1. ``AGENTIUM_PG_BINDIR`` (a folder holding ``initdb`` and ``postgres``);
2. the newest ``/usr/lib/postgresql/<version>/bin`` (Debian's ``postgresql`` package);
3. ``initdb`` on ``PATH`` (symlinks resolved, so a wrapper script is not mistaken for it).

When none is found the fixture FAILS (never skips) and says what to install.
PostgreSQL refuses to run as root: as root, the cluster is created in a
temporary folder owned by the ``postgres`` user (or ``nobody``) and both
programs run as that user. The server listens on 127.0.0.1 only, with
``scram-sha-256`` passwords on TCP. Every process is started in its own
session and stopped by its own PID (the whole process group on a kill).
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

ADMIN_USER = "agentium_admin"
ADMIN_PASSWORD = "admin-pass-3141"
APP_USER = "agentium_app"
APP_PASSWORD = "app-pass-2718"
DATABASE = "agentium_test"

_INSTALL = (
    "apt-get install postgresql (Debian), or set AGENTIUM_PG_BINDIR to a folder with initdb and postgres"
)


_SCHEMAS = itertools.count()
#: Ports a first start tries when the one it chose was taken meanwhile (see PostgresServer.start).
PORT_ATTEMPTS = 5


def new_schema_name() -> str:
    """A schema name no other test of this process uses."""
    return f"t{os.getpid()}_{next(_SCHEMAS)}"


class ServerNotFound(RuntimeError):
    """No PostgreSQL binaries were found."""


def find_bindir() -> Path:
    """The folder holding ``initdb`` and ``postgres``; raises :class:`ServerNotFound`."""
    given = os.environ.get("AGENTIUM_PG_BINDIR")
    if given:
        path = Path(given)
        if not (path / "initdb").is_file() or not (path / "postgres").is_file():
            raise ServerNotFound(f"AGENTIUM_PG_BINDIR={path} holds no initdb and postgres")
        return path
    debian = sorted(
        (p for p in Path("/usr/lib/postgresql").glob("*/bin") if (p / "initdb").is_file()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if debian:
        return debian[-1]
    on_path = shutil.which("initdb")
    if on_path:
        real = Path(on_path).resolve()
        if (real.parent / "postgres").is_file():
            return real.parent
    raise ServerNotFound(f"no PostgreSQL server found: {_INSTALL}. Backend tests never skip.")


def pgvector_bindir() -> Path:
    """The bin folder of the PostgreSQL the ``pgserver`` wheel ships (with pgvector); raises ServerNotFound.

    Debian 12 packages no pgvector, so the tests of the pgvector path run on
    that PostgreSQL (a test dependency of this plugin). Found without
    importing the package.
    """
    import importlib.util

    spec = importlib.util.find_spec("pgserver")
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(folder) / "pginstall" / "bin"
        if (path / "initdb").is_file() and (path / "postgres").is_file():
            return path
    raise ServerNotFound(
        "no PostgreSQL with pgvector found: pip install -e './plugins/postgres[test]' (the pgserver wheel). "
        "Backend tests never skip."
    )


def server_readable_bindir(bindir: Path, into: Path) -> Path:
    """``bindir``, or as root a copy of its installation under ``into`` that the server's user can run.

    As root the server runs as another user (see :func:`_run_as`), who may not
    be able to reach a virtual environment under a private folder (``/root``
    is ``0700``). A relocatable installation (``<package>/pginstall/{bin,lib,share}``,
    as the ``pgserver`` wheel ships it) is copied world-readable with the
    wheel's vendored libraries beside its package (``<package>.libs``, which
    the binaries find relative to themselves), and the copy's bin folder
    returned. Debian's binaries under ``/usr/lib`` need no copy.
    """
    if os.geteuid() != 0:
        return bindir
    install, package = bindir.parent, bindir.parent.parent
    target = into / package.name / install.name
    for part in ("bin", "lib", "share"):
        if (install / part).is_dir():
            shutil.copytree(install / part, target / part, symlinks=True)
    vendored = package.parent / f"{package.name}.libs"
    if vendored.is_dir():
        shutil.copytree(vendored, into / vendored.name, symlinks=True)
    for path in (into, *into.rglob("*")):
        mode = path.lstat().st_mode
        if not path.is_symlink():
            path.chmod(mode | 0o444 | (0o111 if path.is_dir() or mode & 0o100 else 0))
    return target / "bin"


def free_port() -> int:
    """A port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_as() -> tuple[int, int] | None:
    """(uid, gid) to run the server as when this process is root, else ``None``."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        return entry.pw_uid, entry.pw_gid
    raise ServerNotFound("running as root and no 'postgres' or 'nobody' user exists to run PostgreSQL as")


class PostgresServer:
    """One PostgreSQL cluster in a temporary folder, started and stopped by PID."""

    def __init__(
        self, workdir: Path | None = None, *, fsync: bool = False, bindir: Path | None = None
    ) -> None:
        self.bindir = find_bindir() if bindir is None else bindir
        self._own_dir = workdir is None
        self.root = Path(tempfile.mkdtemp(prefix="agentium-pg-")) if workdir is None else workdir
        self.data = self.root / "data"
        self.port = free_port()
        #: Whether the server ever accepted a connection (from then on it keeps its port).
        self._served = False
        self.fsync = fsync
        self.process: subprocess.Popen[bytes] | None = None
        self._user = _run_as()

    # -- processes ----------------------------------------------------------------------------

    def _popen(self, argv: list[str], **kw: object) -> subprocess.Popen[bytes]:
        extra: dict[str, object] = {}
        if self._user is not None:
            extra = {"user": self._user[0], "group": self._user[1], "extra_groups": []}
        return subprocess.Popen(argv, cwd=self.root, start_new_session=True, **extra, **kw)  # type: ignore[call-overload]

    def init(self) -> PostgresServer:
        """``initdb`` the cluster (superuser with a password; scram on TCP)."""
        self.root.mkdir(parents=True, exist_ok=True)
        pwfile = self.root / "pw"
        pwfile.write_text(ADMIN_PASSWORD + "\n")
        if self._user is not None:
            os.chown(self.root, *self._user)
            os.chown(pwfile, *self._user)
        with (self.root / "initdb.log").open("wb") as log:  # the child keeps its own descriptor
            proc = self._popen(
                [
                    str(self.bindir / "initdb"),
                    "-D",
                    str(self.data),
                    "-U",
                    ADMIN_USER,
                    f"--pwfile={pwfile}",
                    "--auth-local=scram-sha-256",
                    "--auth-host=scram-sha-256",
                    "-E",
                    "UTF8",
                    "--locale=C.UTF-8",
                    "--no-sync",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        if proc.wait(timeout=120) != 0:
            raise RuntimeError(f"initdb failed:\n{(self.root / 'initdb.log').read_text()}")
        pwfile.unlink()
        return self

    def start(self) -> PostgresServer:
        """Start ``postgres`` on the port and wait until it accepts connections."""
        if not self.data.exists():
            self.init()
        for _ in range(PORT_ATTEMPTS):
            log_start = self._log_size()
            with (self.root / "server.log").open("ab") as log:  # the child keeps its own descriptor
                self.process = self._popen(self._server_argv(), stdout=log, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 60
            while True:
                try:
                    with psycopg.connect(self.admin_dsn("postgres"), connect_timeout=2):
                        self._served = True
                        return self
                except psycopg.OperationalError:
                    if self.process.poll() is not None or time.monotonic() > deadline:
                        break
                    time.sleep(0.05)
            # free_port() only says the port was free when it asked: another process may have bound
            # it since. A server that never served yet moves to a new port; a restarted one keeps
            # its port (the tests' pools and DSNs hold it), so it fails as any other start does.
            if self._served or self.process.poll() is None or not self._port_taken(log_start):
                break
            self.port = free_port()
        raise RuntimeError(f"postgres did not start:\n{self.log_tail()}")

    def _server_argv(self) -> list[str]:
        """The ``postgres`` command line for the current port."""
        argv = [
            str(self.bindir / "postgres"),
            "-D",
            str(self.data),
            "-p",
            str(self.port),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            f"unix_socket_directories={self.root}",
            "-c",
            "max_connections=300",
            "-c",
            "shared_buffers=64MB",
            "-c",
            f"fsync={'on' if self.fsync else 'off'}",
            "-c",
            "log_min_messages=warning",
        ]
        if not self.fsync:
            # A killed server still keeps every commit (the OS page cache survives a process kill);
            # only an OS crash could lose them, which no test causes.
            argv += ["-c", "full_page_writes=off"]
        return argv

    def _log_size(self) -> int:
        path = self.root / "server.log"
        return path.stat().st_size if path.exists() else 0

    def _port_taken(self, since: int) -> bool:
        """Whether the server's log, from byte ``since``, says its port was already in use."""
        with (self.root / "server.log").open("rb") as log:
            log.seek(since)
            return b"Address already in use" in log.read()

    def log_tail(self, lines: int = 40) -> str:
        """The end of the server's log."""
        path = self.root / "server.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def kill(self) -> None:
        """SIGKILL the postmaster and every backend (its process group): a crash, mid-whatever."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=30)
        self.process = None
        # Backends share the group and die with it; wait until the port is free again.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _listening(self.port):
            time.sleep(0.05)

    def stop(self) -> None:
        """Fast shutdown (SIGINT) by PID, then SIGKILL of the group if it lingers."""
        if self.process is None:
            return
        try:
            self.process.send_signal(signal.SIGINT)
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
            return
        except ProcessLookupError:
            pass
        self.process = None

    def cleanup(self) -> None:
        """Stop the server and remove its folder (when this object created it)."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.root, ignore_errors=True)

    # -- connection strings -------------------------------------------------------------------

    def dsn(self, user: str, password: str, dbname: str = DATABASE) -> str:
        """A libpq connection string for ``user`` on this server."""
        return f"host=127.0.0.1 port={self.port} dbname={dbname} user={user} password={password}"

    def admin_dsn(self, dbname: str = DATABASE) -> str:
        """The superuser's connection string."""
        return self.dsn(ADMIN_USER, ADMIN_PASSWORD, dbname)

    def app_dsn(self, dbname: str = DATABASE) -> str:
        """The application role's connection string (no superuser, no BYPASSRLS)."""
        return self.dsn(APP_USER, APP_PASSWORD, dbname)

    def prepare(self) -> PostgresServer:
        """Create the test database and the application role (idempotent)."""
        with psycopg.connect(self.admin_dsn("postgres"), autocommit=True) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone() is None:
                conn.execute(f'CREATE DATABASE "{DATABASE}"')
            if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (APP_USER,)).fetchone() is None:
                conn.execute(
                    f"CREATE ROLE {APP_USER} LOGIN NOSUPERUSER NOBYPASSRLS PASSWORD '{APP_PASSWORD}'"
                )
        return self


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0
