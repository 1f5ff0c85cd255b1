"""Verdicts: pass only on the host's expected facts; fail on contradiction; unknown on absent evidence."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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

from agentium_harness.plugin_api import CompletionCandidate, Verdict, evidence_size
from agentium_verifier_fs import ARTIFACT, TEST_RECORD

pytestmark = pytest.mark.anyio

root = root_fixture()


async def test_every_expected_fact_present_passes(root: Path) -> None:
    write(root / "dist/report.txt", ARTIFACT_BYTES)
    write(root / "reports/junit.xml", junit(tests=4))
    verifier = verifier_for(root, "dist/report.txt", records=("reports/junit.xml",))
    result = await verifier.verify(CLAIM, context())
    assert result.verdict is Verdict.PASS, result.reason
    assert [(e.kind, e.ref) for e in result.evidence] == [
        (ARTIFACT, "dist/report.txt"),
        (TEST_RECORD, "reports/junit.xml"),
    ]
    found = details(result)
    assert found["dist/report.txt"] == f"pass: sha256 {sha256(ARTIFACT_BYTES)} as expected"
    assert found["reports/junit.xml"] == "pass: 4 tests ran, 0 failures, 0 errors, 0 skipped"


async def test_a_wrong_digest_fails_and_names_both_digests(root: Path) -> None:
    wrong = b"something else\n"
    write(root / "report.txt", wrong)
    result = await verifier_for(root, "report.txt").verify(CLAIM, context())
    assert result.verdict is Verdict.FAIL
    expected = f"fail: sha256 is {sha256(wrong)}, expected {sha256(ARTIFACT_BYTES)}"
    assert details(result)["report.txt"] == expected
    assert result.reason == "1 of 1 checks failed: report.txt (sha256 mismatch)"


async def test_a_missing_artifact_is_unknown_with_the_reason(root: Path) -> None:
    result = await verifier_for(root, "dist/report.txt", "other.txt").verify(CLAIM, context())
    assert result.verdict is Verdict.UNKNOWN
    assert details(result) == {
        "dist/report.txt": "unknown: missing: directory 'dist' does not exist",
        "other.txt": "unknown: missing: no such file",
    }
    assert "could not be established" in result.reason


async def test_a_fail_outweighs_an_unknown_and_problems_come_first(root: Path) -> None:
    write(root / "good.txt", ARTIFACT_BYTES)
    write(root / "bad.txt", b"wrong")
    result = await verifier_for(root, "good.txt", "missing.txt", "bad.txt").verify(CLAIM, context())
    assert result.verdict is Verdict.FAIL
    assert [e.ref for e in result.evidence] == ["bad.txt", "missing.txt", "good.txt"]


@pytest.mark.parametrize("spelling", ["{d}", "sha256:{d}", "{D}"])
async def test_a_candidates_own_expected_digests_are_ignored(root: Path, spelling: str) -> None:
    """The model asserts the digest of what it wrote: the host's expected digest still decides."""
    wrong = b"the model's version of the report\n"
    write(root / "report.txt", wrong)
    digest = sha256(wrong)
    claimed = spelling.format(d=digest, D=digest.upper())
    candidate = CompletionCandidate(
        claim="Done. Expected sha256 of report.txt is " + claimed,
        artifacts=("report.txt",),
        claimed_digests=(("report.txt", claimed),),
    )
    result = await verifier_for(root, "report.txt").verify(candidate, context())
    assert result.verdict is Verdict.FAIL
    assert f"expected {sha256(ARTIFACT_BYTES)}" in details(result)["report.txt"]


async def test_artifacts_the_candidate_names_are_never_opened(root: Path, tmp_path: Path) -> None:
    """A candidate naming an escaping path changes nothing: only configured paths are read."""
    candidate = CompletionCandidate(
        claim="done",
        artifacts=("../outside.txt", "/etc/passwd", "../root-evil/report.txt"),
        claimed_digests=(("../outside.txt", sha256(ARTIFACT_BYTES)),),
    )
    result = await verifier_for(root, "report.txt").verify(candidate, context())
    assert result.verdict is Verdict.UNKNOWN
    assert set(details(result)) == {"report.txt"}


async def test_evidence_is_cut_to_a_narrowed_budget_in_whole_entries(root: Path) -> None:
    paths = [f"a{i:02d}.txt" for i in range(40)]
    for path in paths:
        write(root / path, ARTIFACT_BYTES)
    verifier = verifier_for(root, *paths)
    full = await verifier.verify(CLAIM, context())
    assert full.verdict is Verdict.PASS
    assert len(full.evidence) == 32  # the hard ceiling of the default budget
    assert "8 evidence entries omitted" in full.reason
    narrow = await verifier.verify(CLAIM, context(max_entries=3, max_bytes=8192))
    assert narrow.evidence == full.evidence[:3]
    assert narrow.verdict is Verdict.PASS
    size = evidence_size(full.evidence[0])
    tight = await verifier.verify(CLAIM, context(max_bytes=2 * size + size // 2))
    assert tight.evidence == full.evidence[:2]
    assert "38 evidence entries omitted" in tight.reason


async def test_under_a_tight_budget_the_problems_are_the_entries_kept(root: Path) -> None:
    paths = [f"a{i:02d}.txt" for i in range(10)]
    for path in paths:
        write(root / path, ARTIFACT_BYTES)
    write(root / "a07.txt", b"wrong")
    result = await verifier_for(root, *paths).verify(CLAIM, context(max_entries=1))
    assert result.verdict is Verdict.FAIL
    assert [e.ref for e in result.evidence] == ["a07.txt"]


async def test_each_call_reads_the_evidence_afresh(root: Path) -> None:
    verifier = verifier_for(root, "report.txt")
    assert (await verifier.verify(CLAIM, context())).verdict is Verdict.UNKNOWN
    write(root / "report.txt", b"draft")
    assert (await verifier.verify(CLAIM, context())).verdict is Verdict.FAIL
    write(root / "report.txt", ARTIFACT_BYTES)
    assert (await verifier.verify(CLAIM, context())).verdict is Verdict.PASS


def _failing(code: int) -> object:
    def fail(*args: object, **kwargs: object) -> object:
        raise OSError(code, os.strerror(code))

    return fail


async def test_an_os_error_on_an_opened_artifact_is_one_unknown_item(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An fstat on an NFS file deleted on the server answers ESTALE: the item is unknown and the
    # record after it is still read, instead of OSError escaping verify() with no evidence at all.
    write(root / "report.txt", ARTIFACT_BYTES)
    write(root / "reports/junit.xml", junit(tests=1))
    monkeypatch.setattr("agentium_verifier_fs.verifier.last_changed", _failing(errno.ESTALE))
    result = await verifier_for(root, "report.txt", records=("reports/junit.xml",)).verify(CLAIM, context())
    assert result.verdict is Verdict.UNKNOWN
    assert details(result) == {
        "report.txt": f"unknown: unreadable: {os.strerror(errno.ESTALE)}",
        "reports/junit.xml": "pass: 1 tests ran, 0 failures, 0 errors, 0 skipped",
    }


async def test_an_os_error_on_an_opened_record_is_one_unknown_item(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(root / "report.txt", ARTIFACT_BYTES)
    write(root / "reports/junit.xml", junit(tests=1))
    monkeypatch.setattr("agentium_verifier_fs.verifier.read_file", _failing(errno.EIO))
    result = await verifier_for(root, "report.txt", records=("reports/junit.xml",)).verify(CLAIM, context())
    assert result.verdict is Verdict.UNKNOWN
    assert details(result)["reports/junit.xml"] == f"unknown: unreadable: {os.strerror(errno.EIO)}"
    assert details(result)["report.txt"].startswith("pass: sha256")


async def test_an_os_error_on_the_opened_root_makes_every_item_unknown(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(root / "report.txt", ARTIFACT_BYTES)

    @contextmanager
    def stale_root(*args: object) -> Iterator[int]:
        raise OSError(errno.ESTALE, os.strerror(errno.ESTALE))
        yield 0  # pragma: no cover - a generator, never reached

    monkeypatch.setattr("agentium_verifier_fs.verifier.root_descriptor", stale_root)
    result = await verifier_for(root, "report.txt").verify(CLAIM, context())
    assert result.verdict is Verdict.UNKNOWN
    assert details(result) == {"report.txt": f"unknown: unreadable: {os.strerror(errno.ESTALE)}"}
