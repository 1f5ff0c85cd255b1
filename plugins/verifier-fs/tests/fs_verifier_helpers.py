"""Fixtures and helpers for the fs verifier's tests: a root in a temporary directory, records, contexts.

Everything is real: files, directories, symlinks, FIFOs and sparse files on
the local file system. Nothing of the file system is mocked.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path

import pytest

from agentium_harness.plugin_api import CompletionCandidate, OpContext, Scope, VerifyContext
from agentium_verifier_fs import ExpectedArtifact, FsVerifier, FsVerifierConfig

sys.path.insert(0, str(Path(__file__).parent))

SCOPE = Scope("tenant", "user", "session")
ARTIFACT_BYTES = b"the expected report\n"
CLAIM = CompletionCandidate(claim="The task is complete: report written and all tests pass.")


@pytest.fixture
def anyio_backend() -> str:
    """The verifier runs its reads through anyio's worker threads; asyncio is enough here.

    The contract suite's own test class runs on trio as well.
    """
    return "asyncio"


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


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An empty root directory with an evil sibling beside it holding the expected bytes."""
    base = tmp_path / "root"
    base.mkdir()
    write(tmp_path / "root-evil" / "report.txt", ARTIFACT_BYTES)
    write(tmp_path / "outside.txt", ARTIFACT_BYTES)
    return base


def verifier_for(root: Path, *paths: str, records: tuple[str, ...] = (), **options: object) -> FsVerifier:
    """A verifier expecting ``ARTIFACT_BYTES`` at each of ``paths`` and the given records under ``root``."""
    artifacts = tuple(ExpectedArtifact(path=p, sha256=sha256(ARTIFACT_BYTES)) for p in paths)
    return FsVerifier(FsVerifierConfig(root=str(root), artifacts=artifacts, test_records=records, **options))  # type: ignore[arg-type]


def details(result: object) -> dict[str, str]:
    """``ref -> detail`` of a result's evidence."""
    return {e.ref: e.detail for e in result.evidence}  # type: ignore[attr-defined]


def fifo_supported() -> bool:
    """True where ``os.mkfifo`` exists (every POSIX system this plugin supports)."""
    return hasattr(os, "mkfifo")
