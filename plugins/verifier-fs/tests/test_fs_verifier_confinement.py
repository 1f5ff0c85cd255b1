"""Confinement: only regular, single-link files reached under the root without any symlink are read.

Every case puts the *expected* bytes where the refused path leads, so a
verifier that followed the path would pass; each must be ``unknown`` (or
refused as config) instead.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
from pathlib import Path

import anyio
import pytest
from fs_verifier_helpers import (
    ARTIFACT_BYTES,
    CLAIM,
    context,
    details,
    junit,
    root_fixture,
    sha256,
    verifier_for,
    write,
)

from agentium_harness.plugin_api import InvalidArgumentError, Verdict
from agentium_verifier_fs import ExpectedArtifact, FsVerifierConfig

pytestmark = pytest.mark.anyio

root = root_fixture()

BAD_PATHS = [
    "../root-evil/report.txt",
    "../outside.txt",
    "a/../../outside.txt",
    "/etc/passwd",
    "//etc/passwd",
    "./report.txt",
    "a/./report.txt",
    "a//report.txt",
    "dist/",
    "..",
    "",
    "a\\..\\outside.txt",
    "report\x00.txt",
    "report\ud800.txt",  # lone surrogates name no file: os.open would raise UnicodeEncodeError
    "dist/\udcff",
]


@pytest.mark.parametrize("path", BAD_PATHS)
def test_escaping_or_ambiguous_artifact_paths_are_refused_as_config(root: Path, path: str) -> None:
    with pytest.raises(InvalidArgumentError, match=r"path|relative|NUL|backslash"):
        FsVerifierConfig(root=str(root), artifacts=(ExpectedArtifact(path=path, sha256=sha256(b"")),))


@pytest.mark.parametrize("path", BAD_PATHS)
def test_escaping_or_ambiguous_record_paths_are_refused_as_config(root: Path, path: str) -> None:
    with pytest.raises(InvalidArgumentError, match="test_records"):
        FsVerifierConfig(root=str(root), test_records=(path,))


async def _one(root: Path, path: str = "report.txt") -> tuple[Verdict, str]:
    result = await verifier_for(root, path).verify(CLAIM, context())
    return result.verdict, details(result)[path]


async def test_a_symlink_to_a_file_outside_is_refused(root: Path, tmp_path: Path) -> None:
    (root / "report.txt").symlink_to(tmp_path / "outside.txt")
    assert await _one(root) == (Verdict.UNKNOWN, "unknown: refused: 'report.txt' is a symbolic link")


async def test_a_symlink_to_the_evil_sibling_is_refused(root: Path, tmp_path: Path) -> None:
    (root / "report.txt").symlink_to(tmp_path / "root-evil" / "report.txt")
    assert (await _one(root))[0] is Verdict.UNKNOWN


async def test_a_symlink_to_a_file_inside_the_root_is_refused_too(root: Path) -> None:
    write(root / "real.txt", ARTIFACT_BYTES)
    (root / "report.txt").symlink_to("real.txt")
    assert await _one(root) == (Verdict.UNKNOWN, "unknown: refused: 'report.txt' is a symbolic link")


async def test_a_dangling_symlink_is_refused(root: Path) -> None:
    (root / "report.txt").symlink_to("nowhere.txt")
    assert (await _one(root))[0] is Verdict.UNKNOWN


async def test_a_symlinked_directory_leading_outside_is_refused(root: Path, tmp_path: Path) -> None:
    (root / "dist").symlink_to(tmp_path / "root-evil", target_is_directory=True)
    verdict, detail = await _one(root, "dist/report.txt")
    assert (verdict, detail) == (Verdict.UNKNOWN, "unknown: refused: 'dist' is a symbolic link")


async def test_a_symlinked_directory_inside_the_root_is_refused(root: Path) -> None:
    write(root / "real" / "report.txt", ARTIFACT_BYTES)
    (root / "dist").symlink_to("real", target_is_directory=True)
    assert (await _one(root, "dist/report.txt"))[0] is Verdict.UNKNOWN


async def test_a_deep_symlinked_component_is_refused(root: Path, tmp_path: Path) -> None:
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "c").symlink_to(tmp_path / "root-evil", target_is_directory=True)
    verdict, detail = await _one(root, "a/b/c/report.txt")
    assert (verdict, detail) == (Verdict.UNKNOWN, "unknown: refused: 'a/b/c' is a symbolic link")


async def test_a_file_where_a_directory_is_expected_is_refused(root: Path) -> None:
    write(root / "dist", ARTIFACT_BYTES)
    expected = (Verdict.UNKNOWN, "unknown: refused: 'dist' is not a directory")
    assert await _one(root, "dist/report.txt") == expected


async def test_a_fifo_is_refused_without_blocking(root: Path) -> None:
    os.mkfifo(root / "report.txt")
    with anyio.fail_after(20):  # an open without O_NONBLOCK would wait for a writer forever
        assert await _one(root) == (Verdict.UNKNOWN, "unknown: refused: 'report.txt' is a FIFO")


async def test_a_device_file_is_refused(root: Path) -> None:
    try:
        os.mknod(root / "report.txt", stat.S_IFCHR | 0o600, os.makedev(1, 3))  # what /dev/null is
    except PermissionError:
        pytest.skip("creating a device node needs CAP_MKNOD (CI runs as root and runs this test)")
    assert await _one(root) == (Verdict.UNKNOWN, "unknown: refused: 'report.txt' is a device file")


async def test_a_socket_is_refused(tmp_path: Path) -> None:
    # AF_UNIX paths are short: make the root close to /.
    short = Path(os.environ.get("TMPDIR", "/tmp")) / f"vfs{os.getpid()}"
    short.mkdir()
    try:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(short / "report.txt"))
        try:
            assert await _one(short) == (Verdict.UNKNOWN, "unknown: refused: 'report.txt' is a socket")
        finally:
            server.close()
    finally:
        (short / "report.txt").unlink(missing_ok=True)
        short.rmdir()


async def test_a_directory_is_refused(root: Path) -> None:
    (root / "report.txt").mkdir()
    assert await _one(root) == (Verdict.UNKNOWN, "unknown: refused: 'report.txt' is a directory")


async def test_a_hardlink_to_a_file_outside_is_refused(root: Path, tmp_path: Path) -> None:
    os.link(tmp_path / "outside.txt", root / "report.txt")
    verdict, detail = await _one(root)
    assert verdict is Verdict.UNKNOWN
    assert detail == "unknown: refused: 'report.txt' has 2 hard links (files with other names are not read)"


async def test_a_file_with_a_second_name_inside_the_root_is_refused(root: Path) -> None:
    write(root / "report.txt", ARTIFACT_BYTES)
    os.link(root / "report.txt", root / "copy.txt")
    assert (await _one(root))[0] is Verdict.UNKNOWN
    os.unlink(root / "copy.txt")  # the policy is about links, not content: one name again reads fine
    assert (await _one(root))[0] is Verdict.PASS


async def test_test_records_are_confined_the_same_way(root: Path, tmp_path: Path) -> None:
    write(tmp_path / "good.xml", junit())
    (root / "junit.xml").symlink_to(tmp_path / "good.xml")
    result = await verifier_for(root, records=("junit.xml",)).verify(CLAIM, context())
    assert result.verdict is Verdict.UNKNOWN
    assert details(result)["junit.xml"] == "unknown: refused: 'junit.xml' is a symbolic link"


async def test_a_root_reached_through_a_symlink_is_the_hosts_choice(root: Path, tmp_path: Path) -> None:
    """The root path itself is the host's configuration, so it may be a link; nothing below it may."""
    write(root / "report.txt", ARTIFACT_BYTES)
    (tmp_path / "root-link").symlink_to(root, target_is_directory=True)
    result = await verifier_for(tmp_path / "root-link", "report.txt").verify(CLAIM, context())
    assert result.verdict is Verdict.PASS


async def test_a_root_removed_after_build_makes_every_item_unknown(root: Path) -> None:
    verifier = verifier_for(root, "report.txt", records=("junit.xml",))
    root.rmdir()  # noqa: ASYNC240  (arranging the test, not the code under test)
    result = await verifier.verify(CLAIM, context())
    assert result.verdict is Verdict.UNKNOWN
    assert all(e.detail.startswith("unknown: root cannot be opened") for e in result.evidence)
    assert len(result.evidence) == 2


def _verify_as_nobody(root: Path) -> str:
    """The detail of ``report.txt`` when verified by a forked child that dropped root's privileges.

    Root reads any file whatever its mode, so the child switches to uid/gid
    65534 (nobody) after the parent has imported and warmed everything up;
    it reports through a pipe and exits without running any cleanup.
    """
    verifier = verifier_for(root, "report.txt")
    anyio.run(verifier.verify, CLAIM, context())  # warm: every module is imported before the fork
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            result = anyio.run(verifier.verify, CLAIM, context())
            os.write(write_end, details(result)["report.txt"].encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        detail = pipe.read().decode()
    os.waitpid(pid, 0)
    return detail


def test_an_unreadable_file_is_unknown() -> None:
    # A world-traversable root: pytest's own temporary folders are private to their owner.
    root = Path(tempfile.mkdtemp(prefix="vfs-unreadable-"))
    try:
        root.chmod(0o755)
        write(root / "report.txt", ARTIFACT_BYTES)
        (root / "report.txt").chmod(0)
        if os.geteuid() == 0:
            detail = _verify_as_nobody(root)
        else:
            result = anyio.run(verifier_for(root, "report.txt").verify, CLAIM, context())
            detail = details(result)["report.txt"]
        assert detail == "unknown: unreadable: Permission denied"
    finally:
        shutil.rmtree(root)
