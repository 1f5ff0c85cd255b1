"""The fs verifier passes the core's VerifierContract, on asyncio and trio, over a real directory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fs_verifier_helpers import ARTIFACT_BYTES, junit, sha256, write

from agentium_harness.testing import VerifierContract
from agentium_verifier_fs import ExpectedArtifact, FsVerifier, FsVerifierConfig

ARTIFACTS = ("dist/report.txt", "dist/nested/summary.txt")
RECORD = "reports/junit.xml"


def snapshot(root: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every file under ``root``: bytes, modification time and mode, read without following links."""
    found: dict[str, tuple[bytes, int, int]] = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        if path.is_file() and not path.is_symlink():
            found[str(path.relative_to(root))] = (path.read_bytes(), st.st_mtime_ns, st.st_mode)
    return found


class TestFsVerifierContract(VerifierContract):
    @pytest.fixture(params=["asyncio", "trio"])
    def anyio_backend(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    @pytest.fixture
    def workspace(self, tmp_path: Path) -> Path:
        root = tmp_path / "workspace"
        root.mkdir()
        return root

    @pytest.fixture
    def verifier(self, workspace: Path) -> FsVerifier:
        artifacts = tuple(ExpectedArtifact(path=p, sha256=sha256(ARTIFACT_BYTES)) for p in ARTIFACTS)
        return FsVerifier(FsVerifierConfig(root=str(workspace), artifacts=artifacts, test_records=(RECORD,)))

    @pytest.fixture
    def arrange_passing(self, workspace: Path) -> Callable[[], dict[str, str]]:
        def arrange() -> dict[str, str]:
            for path in ARTIFACTS:
                write(workspace / path, ARTIFACT_BYTES)
            write(workspace / RECORD, junit(tests=3))
            return {path: sha256(ARTIFACT_BYTES) for path in ARTIFACTS}

        return arrange

    @pytest.fixture
    def arrange_failing(self, workspace: Path) -> Callable[[], dict[str, str]]:
        def arrange() -> dict[str, str]:
            wrong = b"a report, but not the expected one\n"
            write(workspace / ARTIFACTS[0], wrong)
            write(workspace / ARTIFACTS[1], ARTIFACT_BYTES)
            write(workspace / RECORD, junit(tests=3))
            return {ARTIFACTS[0]: sha256(wrong), ARTIFACTS[1]: sha256(ARTIFACT_BYTES)}

        return arrange

    @pytest.fixture
    def arrange_failing_by_kind(self, workspace: Path) -> dict[str, Callable[[], dict[str, str]]]:
        """Each kind broken alone: a wrong artifact, passing tests; failing tests, the right artifacts."""

        def wrong_artifact() -> dict[str, str]:
            wrong = b"a report, but not the expected one\n"
            write(workspace / ARTIFACTS[0], wrong)
            write(workspace / ARTIFACTS[1], ARTIFACT_BYTES)
            write(workspace / RECORD, junit(tests=3))
            return {ARTIFACTS[0]: sha256(wrong), ARTIFACTS[1]: sha256(ARTIFACT_BYTES)}

        def failing_tests() -> dict[str, str]:
            for path in ARTIFACTS:
                write(workspace / path, ARTIFACT_BYTES)
            write(workspace / RECORD, junit(tests=3, failures=1))
            return {path: sha256(ARTIFACT_BYTES) for path in ARTIFACTS}

        return {"artifact_digests": wrong_artifact, "test_records": failing_tests}

    @pytest.fixture
    def arrange_missing(self, workspace: Path) -> Callable[[], None]:
        def arrange() -> None:
            for path in (*ARTIFACTS, RECORD):
                (workspace / path).unlink(missing_ok=True)

        return arrange

    @pytest.fixture
    def evidence_snapshot(self, workspace: Path) -> Callable[[], Any]:
        return lambda: snapshot(workspace)
