"""The root is the directory it named when the verifier was built, for the verifier's lifetime.

Each verification opens the configured path again. When a symlink on that
path (the root itself or an ancestor) is repointed, or the directory is
replaced, between verifications, the directory there now holds evidence that
would pass; every item must be ``unknown`` (refused), never ``pass``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest
from fs_verifier_helpers import ARTIFACT_BYTES, CLAIM, context, details, junit, verifier_for, write

from agentium_harness.plugin_api import Verdict
from agentium_verifier_fs import RootNotFoundError

pytestmark = pytest.mark.anyio

REFUSED = "unknown: refused: root is no longer the directory the verifier was built on"


def _evidence(directory: Path) -> Path:
    """``directory`` holding an artifact and a fresh record that pass."""
    write(directory / "report.txt", ARTIFACT_BYTES)
    write(directory / "reports" / "junit.xml", junit())
    return directory


def _repoint(link: Path, target: Path) -> None:
    """Point the symlink ``link`` at ``target`` in one step (a new link renamed over it)."""
    fresh = link.with_name(link.name + ".new")
    os.symlink(target, fresh, target_is_directory=True)
    os.replace(fresh, link)


def _assert_refused(result_details: dict[str, str]) -> None:
    assert set(result_details) == {"report.txt", "reports/junit.xml"}
    for detail in result_details.values():
        assert detail.startswith(REFUSED), detail


async def test_a_root_symlink_repointed_between_verifications_is_refused(tmp_path: Path) -> None:
    first, other = _evidence(tmp_path / "run-1"), _evidence(tmp_path / "run-2")
    link = tmp_path / "workspace"
    os.symlink(first, link, target_is_directory=True)
    verifier = verifier_for(link, "report.txt", records=("reports/junit.xml",))

    assert (await verifier.verify(CLAIM, context())).verdict is Verdict.PASS
    _repoint(link, other)  # run-2 would pass just as well: it must not be read at all
    result = await verifier.verify(CLAIM, context())
    assert result.verdict is Verdict.UNKNOWN, result
    _assert_refused(details(result))
    assert result.reason.endswith("report.txt (root), reports/junit.xml (root)"), result.reason

    # Pointed back at the directory it was built on, the same verifier reads it again.
    _repoint(link, first)
    assert (await verifier.verify(CLAIM, context())).verdict is Verdict.PASS


async def test_an_ancestor_symlink_repointed_between_verifications_is_refused(tmp_path: Path) -> None:
    _evidence(tmp_path / "a" / "workspace")
    _evidence(tmp_path / "b" / "workspace")
    link = tmp_path / "current"
    os.symlink(tmp_path / "a", link, target_is_directory=True)
    verifier = verifier_for(link / "workspace", "report.txt", records=("reports/junit.xml",))

    assert (await verifier.verify(CLAIM, context())).verdict is Verdict.PASS
    _repoint(link, tmp_path / "b")
    result = await verifier.verify(CLAIM, context())
    assert result.verdict is Verdict.UNKNOWN, result
    _assert_refused(details(result))


async def test_a_root_repointed_after_the_config_and_before_the_verifier_reads_where_it_was_built(
    tmp_path: Path,
) -> None:
    # The verifier pins the directory when it is built, not when the options were checked:
    # a verifier built after the repoint reads the new directory, and only that one.
    first, other = _evidence(tmp_path / "run-1"), tmp_path / "run-2"
    write(other / "report.txt", b"the other run's report\n")
    link = tmp_path / "workspace"
    os.symlink(first, link, target_is_directory=True)
    verifier = verifier_for(link, "report.txt")
    _repoint(link, other)
    assert (await verifier.verify(CLAIM, context())).verdict is Verdict.UNKNOWN
    rebuilt = verifier_for(link, "report.txt")
    assert (await rebuilt.verify(CLAIM, context())).verdict is Verdict.FAIL  # it reads run-2 now


async def test_a_root_directory_replaced_between_verifications_is_refused(tmp_path: Path) -> None:
    root = _evidence(tmp_path / "workspace")
    verifier = verifier_for(root, "report.txt", records=("reports/junit.xml",))
    assert (await verifier.verify(CLAIM, context())).verdict is Verdict.PASS

    # The original is kept (renamed away), so its inode cannot be reused by the new directory.
    root.rename(tmp_path / "workspace.old")
    _evidence(tmp_path / "workspace")
    result = await verifier.verify(CLAIM, context())
    assert result.verdict is Verdict.UNKNOWN, result
    _assert_refused(details(result))


def _directory_with_inode(parent: Path, inode: int, tries: int = 2000) -> Path | None:
    """A new directory in ``parent`` that got inode number ``inode``, or ``None`` after ``tries``.

    The misses are kept until the search ends, so each new directory takes
    another free inode: ext4 hands out the freed numbers of a group again at
    once, so a freed ``inode`` comes back within a few directories.
    """
    misses: list[Path] = []
    found = None
    try:
        for index in range(tries):
            candidate = parent / f"candidate-{index}"
            candidate.mkdir()
            if candidate.stat().st_ino == inode:
                found = candidate
                break
            misses.append(candidate)
    finally:
        for miss in misses:
            miss.rmdir()
    return found


@pytest.fixture
def disk_path() -> Iterator[Path]:
    """A fresh folder under the system's temporary folder (on disk), removed afterwards.

    The root conftest puts ``tmp_path`` in RAM (``/dev/shm``) where it can, and
    tmpfs never gives a freed inode number to a new directory: the test below
    would only ever skip there. Disk file systems (ext4, xfs) reuse them.
    """
    folder = Path(tempfile.mkdtemp(prefix="vfs-inode-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


async def test_a_root_deleted_and_created_again_with_its_old_inode_number_is_refused(
    disk_path: Path,
) -> None:
    # A directory is named by (device, inode) only while it exists: deleted, its inode number
    # may go to the next directory created. Without the verifier holding the root open, a new
    # workspace that got the old number passed for the pinned directory (forged evidence).
    probe = disk_path / "probe"
    probe.mkdir()
    freed = probe.stat().st_ino
    probe.rmdir()
    reused = _directory_with_inode(disk_path, freed)
    if reused is None:
        pytest.skip("this file system does not give a deleted directory's inode number to a new one")
    reused.rmdir()

    root = _evidence(disk_path / "workspace")
    verifier = verifier_for(root, "report.txt", records=("reports/junit.xml",))
    assert (await verifier.verify(CLAIM, context())).verdict is Verdict.PASS
    pinned = root.stat().st_ino
    shutil.rmtree(root)
    again = _directory_with_inode(disk_path, pinned)
    if again is not None:  # the number came back: put that directory where the root was
        again.rename(root)
    _evidence(root)  # evidence that would pass, in whichever directory is there now

    result = await verifier.verify(CLAIM, context())
    assert result.verdict is Verdict.UNKNOWN, result
    _assert_refused(details(result))
    # The verifier's descriptor keeps the deleted directory's inode allocated, so no directory
    # could get its number while the verifier lives.
    assert again is None
    await verifier.aclose()


def test_a_root_that_is_a_symlink_to_a_file_is_refused_when_built(tmp_path: Path) -> None:
    write(tmp_path / "file.txt", b"not a directory")
    link = tmp_path / "workspace"
    os.symlink(tmp_path / "file.txt", link)
    with pytest.raises(RootNotFoundError):
        verifier_for(link, "report.txt")


async def test_a_root_whose_name_is_not_utf8_is_read(tmp_path: Path) -> None:
    # The README's promise: root may hold such bytes (only evidence paths must be text).
    root = Path(os.fsdecode(os.fsencode(tmp_path) + b"/ws\xff"))
    _evidence(root)
    verifier = verifier_for(root, "report.txt", records=("reports/junit.xml",))
    assert (await verifier.verify(CLAIM, context())).verdict is Verdict.PASS


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS file systems treat NFC and NFD as one name")
def test_names_are_not_unicode_normalized(tmp_path: Path) -> None:
    (tmp_path / unicodedata.normalize("NFD", "café")).mkdir()
    with pytest.raises(RootNotFoundError, match="does not exist"):
        verifier_for(tmp_path / unicodedata.normalize("NFC", "café"), "report.txt")
