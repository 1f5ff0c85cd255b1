"""Real S3 servers for the tests, on free loopback ports: moto's standalone server and Ceph RGW.

- **moto**: ``python -m moto.server`` as a subprocess (from the ``test`` extra).
  Missing moto is a test FAILURE, never a skip.
- **rgw**: a throwaway single-node Ceph (monitor, memstore OSD, radosgw)
  started by ``ci/rgw-single-node.sh``. When its Debian packages are missing
  the RGW tests FAIL if ``AGENTIUM_REQUIRE_RGW=1`` (CI sets it) and otherwise
  skip with a reason that says how to install them.

Every process is stopped by its own PID.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

FLAVOURS = ("moto", "rgw")

RGW_SCRIPT = Path(__file__).resolve().parents[1] / "ci" / "rgw-single-node.sh"
INSTALL_SCRIPT = Path(__file__).resolve().parents[1] / "ci" / "install-servers.sh"
RGW_TOOLS = ("ceph-mon", "ceph-osd", "radosgw", "ceph", "monmaptool", "ceph-authtool", "radosgw-admin")


class ServerUnavailable(RuntimeError):
    """A server's software is not installed here."""


def free_port() -> int:
    """A port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1):  # loopback test server
            return True
    except urllib.error.HTTPError:
        return True  # any HTTP answer means the server is up
    except OSError:
        return False


def _stop(pid: int) -> None:
    """SIGTERM, then SIGKILL, one PID that this module started."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(100):
        try:
            done, _status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid if not _alive(pid) else 0
        if done:
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting to be reaped by another parent counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


class S3Server:
    """One running S3 server: its endpoint and the credentials it accepts."""

    flavour: str = ""
    access_key = "test"
    secret_key = "test"

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = 0
        workdir.mkdir(parents=True, exist_ok=True)

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    def kill_frontend(self) -> None:
        """Kill the process that answers HTTP (SIGKILL), keeping the stored data where the server can."""
        raise NotImplementedError

    def restart_frontend(self) -> None:
        """Start the HTTP front end again on the same port."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop every process of this server; idempotent."""
        raise NotImplementedError


class MotoServer(S3Server):
    """``python -m moto.server`` on a free loopback port (in-memory; killing it loses its data)."""

    flavour = "moto"

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        if importlib.util.find_spec("moto") is None or importlib.util.find_spec("flask") is None:
            raise ServerUnavailable(
                "moto's server is not installed: pip install -e './plugins/archive-s3[test]' (moto[server])"
            )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> MotoServer:
        """Start the server and wait until it answers HTTP."""
        for _ in range(5):
            port = self.port or free_port()
            log = open(self.workdir / "moto.log", "ab")  # the child keeps it
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                stdout=log,
                stderr=log,
            )
            log.close()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and self.proc.poll() is None:
                if _answers(f"http://127.0.0.1:{port}/moto-api/"):
                    self.port = port
                    return self
                time.sleep(0.05)
            self.stop()
        raise RuntimeError(f"moto.server did not start: see {self.workdir / 'moto.log'}")

    def kill_frontend(self) -> None:
        """SIGKILL the moto process (its in-memory data goes with it)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def restart_frontend(self) -> None:
        """Start moto again on the same port (empty)."""
        self.start()

    def stop(self) -> None:
        """Stop the moto process by its PID."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


def rgw_missing() -> list[str]:
    """The Ceph tools this machine lacks for the RGW server."""
    return [tool for tool in RGW_TOOLS if shutil.which(tool) is None]


def rgw_required() -> bool:
    """True when the RGW tests must run (CI sets ``AGENTIUM_REQUIRE_RGW=1``)."""
    return os.environ.get("AGENTIUM_REQUIRE_RGW", "") == "1"


class RgwServer(S3Server):
    """Single-node Ceph RGW from ``ci/rgw-single-node.sh`` (memstore OSD: data lives while the OSD runs)."""

    flavour = "rgw"

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        missing = rgw_missing()
        if missing:
            raise ServerUnavailable(
                f"Ceph RGW is not installed (missing {', '.join(missing)}): run {INSTALL_SCRIPT} "
                "(Debian's ceph-mon ceph-osd radosgw ceph-common)"
            )

    def _pid(self, role: str) -> int | None:
        path = self.workdir / f"{role}.pid"
        return int(path.read_text().strip()) if path.is_file() else None

    def start(self) -> RgwServer:
        """Run the start script (about 13 s on 2 cores) and read the port it chose."""
        result = subprocess.run(
            ["bash", str(RGW_SCRIPT), str(self.workdir)],
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        if result.returncode != 0:
            self.stop()
            raise RuntimeError(f"the RGW start script failed: {result.stderr[-2000:]}")
        self.port = int((self.workdir / "rgw_port").read_text().strip())
        return self

    def kill_frontend(self) -> None:
        """SIGKILL radosgw alone; the monitor and the OSD (which holds the data) keep running."""
        pid = self._pid("rgw")
        if pid is not None and _alive(pid):
            os.kill(pid, signal.SIGKILL)
            while _alive(pid):
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
                time.sleep(0.05)

    def restart_frontend(self) -> None:
        """Start radosgw again on the same port."""
        result = subprocess.run(
            ["bash", str(RGW_SCRIPT), str(self.workdir), "rgw"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"radosgw did not restart: {result.stderr[-2000:]}")

    def stop(self) -> None:
        """Stop radosgw, the OSD and the monitor, each by its own PID."""
        for role in ("rgw", "osd", "mon"):
            pid = self._pid(role)
            if pid is not None:
                _stop(pid)


def start_server(flavour: str, workdir: Path) -> S3Server:
    """Start a server of ``flavour``; raises :class:`ServerUnavailable` when it is not installed."""
    if flavour == "moto":
        return MotoServer(workdir).start()
    return RgwServer(workdir).start()
