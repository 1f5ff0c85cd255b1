"""Helpers for the fs verifier's tests: a root in a temporary directory, records, contexts.

Everything is real: files, directories, symlinks, FIFOs and sparse files on
the local file system. Nothing of the file system is mocked.

There is deliberately no ``conftest.py`` here: pytest keeps every
``conftest.py`` under the one module name ``conftest``, so test modules of
different plugins importing helpers from theirs would see each other's. Each
test module declares the fixture it needs with ``root = root_fixture()``.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import pytest

from agentium_harness.plugin_api import (
    CompletionCandidate,
    OpContext,
    Scope,
    VerificationResult,
    VerifyContext,
)
from agentium_verifier_fs import ExpectedArtifact, FsVerifier, FsVerifierConfig

SCOPE = Scope("tenant", "user", "session")
ARTIFACT_BYTES = b"the expected report\n"
CLAIM = CompletionCandidate(claim="The task is complete: report written and all tests pass.")


def sha256(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def junit(tests: int = 2, failures: int = 0, errors: int = 0, skipped: int = 0) -> bytes:
    """A JUnit XML record as pytest writes it, with the given counts of test cases."""
    cases = []
    for i in range(tests):
        inner = ""
        if i < failures:
            inner = '<failure message="assert 1 == 2">assert 1 == 2</failure>'
        elif i < failures + errors:
            inner = '<error message="boom">RuntimeError</error>'
        elif i < failures + errors + skipped:
            inner = '<skipped message="not here"/>'
        cases.append(f'<testcase classname="tests.test_x" name="test_{i}" time="0.01">{inner}</testcase>')
    return (
        '<?xml version="1.0" encoding="utf-8"?><testsuites>'
        f'<testsuite name="pytest" errors="{errors}" failures="{failures}" skipped="{skipped}" '
        f'tests="{tests}">{"".join(cases)}</testsuite></testsuites>'
    ).encode()


def write(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path``, creating its folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def context(
    *,
    started: float | None = None,
    op: OpContext | None = None,
    max_entries: int = 32,
    max_bytes: int = 8192,
) -> VerifyContext:
    """A verify context; the run started a minute ago unless ``started`` says otherwise."""
    return VerifyContext(
        scope=SCOPE,
        op=op if op is not None else OpContext.with_timeout(30.0),
        max_entries=max_entries,
        max_bytes=max_bytes,
        run_started_at=time.time() - 60 if started is None else started,
    )


def _make_root(tmp_path: Path) -> Path:
    """An empty root directory, with an evil sibling and an outside file holding the expected bytes."""
    base = tmp_path / "root"
    base.mkdir()
    write(tmp_path / "root-evil" / "report.txt", ARTIFACT_BYTES)
    write(tmp_path / "outside.txt", ARTIFACT_BYTES)
    return base


def root_fixture() -> Any:
    """The ``root`` fixture, for a test module to bind: ``root = root_fixture()``."""
    return pytest.fixture(_make_root, name="root")


def verifier_for(root: Path, *paths: str, records: tuple[str, ...] = (), **options: object) -> FsVerifier:
    """A verifier expecting ``ARTIFACT_BYTES`` at each of ``paths`` and the given records under ``root``."""
    artifacts = tuple(ExpectedArtifact(path=p, sha256=sha256(ARTIFACT_BYTES)) for p in paths)
    return FsVerifier(FsVerifierConfig(root=str(root), artifacts=artifacts, test_records=records, **options))  # type: ignore[arg-type]


def details(result: VerificationResult) -> dict[str, str]:
    """``ref -> detail`` of a result's evidence."""
    return {e.ref: e.detail for e in result.evidence}


def refuse_read_leases(monkeypatch: pytest.MonkeyPatch, code: int, message: str) -> None:
    """Make ``F_SETLEASE F_RDLCK`` fail with ``OSError(code, message)``; every other ``fcntl`` call is real.

    ``OSError`` picks its subclass from ``code`` (``PermissionError`` for
    ``EACCES``, ``BlockingIOError`` for ``EAGAIN``), as the real call's does.
    """
    import fcntl

    real = fcntl.fcntl

    def refusing(fd: Any, cmd: int, arg: Any = 0) -> Any:
        if cmd == fcntl.F_SETLEASE and arg == fcntl.F_RDLCK:
            raise OSError(code, message)
        return real(fd, cmd, arg)

    monkeypatch.setattr(fcntl, "fcntl", refusing)


def without_leases(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``F_SETLEASE`` refuse a read lease with ``EACCES``, as for another user's file.

    Such a file (the process has no ``CAP_LEASE``; these tests run as its
    owner, or as root) or a file system without leases (NFS) is read without
    one: the double read and the times are what check it then. Every other
    ``fcntl`` call is the real one.
    """
    import errno

    refuse_read_leases(monkeypatch, errno.EACCES, "Permission denied")
