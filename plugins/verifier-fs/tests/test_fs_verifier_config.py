"""Options: bad options are clear errors; `agentium check` and `agentium plugins` see `fs`."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fs_verifier_helpers import ARTIFACT_BYTES, CLAIM, root_fixture, sha256, write

from agentium_harness.plugin_api import InvalidArgumentError, OpContext, Scope, VerifyContext
from agentium_verifier_fs import ExpectedArtifact, FsVerifier, FsVerifierConfig, RootNotFoundError

root = root_fixture()

DIGEST = sha256(ARTIFACT_BYTES)


def agentium(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the installed ``agentium`` command (the one beside this interpreter) and capture its output."""
    found = Path(sys.executable).with_name("agentium")
    command = str(found) if found.exists() else shutil.which("agentium")
    assert command, "the agentium command is not installed beside the interpreter or on PATH"
    return subprocess.run([command, *args], capture_output=True, text=True, timeout=120, check=False, cwd=cwd)


def _config(root: str, extra: str = "") -> str:
    return f"""
[provider]
plugin = "scripted"
[provider.options]
responses = ["Done."]
[archive]
plugin = "memory"
[session_store]
plugin = "memory"

[verifier]
plugin = "fs"

[verifier.options]
root = "{root}"
test_records = ["reports/junit.xml"]
{extra}
[[verifier.options.artifacts]]
path = "dist/report.txt"
sha256 = "{DIGEST}"
"""


def test_a_root_that_does_not_exist_is_refused_when_the_options_are_built(tmp_path: Path) -> None:
    with pytest.raises(RootNotFoundError, match="does not exist"):
        FsVerifierConfig(root=str(tmp_path / "nowhere"), test_records=("junit.xml",))


def test_a_relative_root_that_does_not_exist_is_refused_when_the_verifier_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = FsVerifierConfig(root="nowhere", test_records=("junit.xml",))
    with pytest.raises(RootNotFoundError, match="nowhere' does not exist"):
        FsVerifier(config)


def test_a_relative_root_with_the_current_directory_deleted_is_refused_typed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative root resolves against the current directory; once that is deleted it names nothing.

    ``os.getcwd()`` then raises ``FileNotFoundError``, which escaped the
    verifier's build untyped (not an ``AgentiumError``).
    """
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    config = FsVerifierConfig(root="workspace", test_records=("junit.xml",))
    with pytest.raises(RootNotFoundError, match="current directory"):
        FsVerifier(config)


@pytest.mark.parametrize("name", ["ws\ud800", "ws\udc7f", "ws\udfff"])
def test_a_root_no_file_name_can_spell_is_refused_as_invalid_not_missing(tmp_path: Path, name: str) -> None:
    # os.path.isdir is False for a path that cannot be encoded, so the root read as one that
    # "does not exist" (RootNotFoundError), sending the host to create a directory it never can.
    for root in (str(tmp_path / name), name):
        with pytest.raises(InvalidArgumentError, match="lone surrogate") as caught:
            FsVerifierConfig(root=root, test_records=("junit.xml",))
        assert not isinstance(caught.value, RootNotFoundError)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_root_whose_missing_name_is_not_utf8_is_reported_missing(tmp_path: Path) -> None:
    # U+DCFF is Python's spelling of the file name byte 0xFF: such a root can exist (and is read).
    with pytest.raises(RootNotFoundError, match="does not exist"):
        FsVerifierConfig(root=str(tmp_path / "ws\udcff"), test_records=("junit.xml",))


def test_a_root_that_is_a_file_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "file", b"")
    with pytest.raises(RootNotFoundError, match="is not a directory"):
        FsVerifierConfig(root=str(tmp_path / "file"), test_records=("junit.xml",))


@pytest.mark.parametrize(
    ("given", "stored"),
    [(DIGEST, DIGEST), (DIGEST.upper(), DIGEST), (f"sha256:{DIGEST}", DIGEST), (f" {DIGEST} ", DIGEST)],
)
def test_expected_digests_are_normalized(given: str, stored: str) -> None:
    assert ExpectedArtifact(path="a.txt", sha256=given).sha256 == stored


@pytest.mark.parametrize("bad", ["", "abc", "g" * 64, DIGEST + "0", "md5:" + DIGEST, 12])
def test_a_digest_that_is_not_sha256_hex_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="64 hex digits"):
        ExpectedArtifact(path="a.txt", sha256=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "both empty"),
        ({"test_records": ("a.xml", "a.xml")}, r"^path 'a.xml' is listed twice \(in test_records\); list"),
        ({"test_records": "a.xml"}, "list of paths"),
        ({"test_records": ("a.xml",), "max_file_bytes": 0}, "max_file_bytes"),
        ({"test_records": ("a.xml",), "max_record_bytes": True}, "max_record_bytes"),
        ({"test_records": ("a.xml",), "read_timeout_s": 0}, "read_timeout_s"),
        ({"test_records": ("a.xml",), "read_timeout_s": 7200}, "read_timeout_s"),
    ],
)
def test_bad_options_are_refused(root: Path, options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FsVerifierConfig(root=str(root), **options)  # type: ignore[arg-type]


def test_an_artifact_and_a_record_may_not_share_a_path(root: Path) -> None:
    # The message names both lists: the duplicate may be fixed in either.
    with pytest.raises(
        InvalidArgumentError, match=r"^path 'a.xml' is listed twice \(in artifacts and test_records\)"
    ):
        FsVerifierConfig(
            root=str(root),
            artifacts=(ExpectedArtifact(path="a.xml", sha256=DIGEST),),
            test_records=("a.xml",),
        )


def test_agentium_plugins_lists_the_fs_verifier() -> None:
    done = agentium("plugins", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    ours = [p for p in report["plugins"] if p["distribution"] == "agentium-verifier-fs"]
    adapters = [a for p in ours for a in p["adapters"]]
    assert [(a["kind"], a["name"]) for a in adapters] == [("verifier", "fs")]
    assert adapters[0]["capabilities"] == {"artifact_digests": True, "test_records": True}
    options = {o["name"]: o for o in adapters[0]["options"]}
    assert options["root"]["required"] and options["root"]["path"]


def test_a_config_using_fs_passes_agentium_check(tmp_path: Path) -> None:
    (tmp_path / "workspace").mkdir()
    path = write(tmp_path / "agentium.toml", _config("workspace").encode())
    done = agentium("check", str(path))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"{path}: valid" in out
    assert "verifier       fs (agentium-verifier-fs 0.1.0)" in out


def test_a_relative_root_is_resolved_against_the_config_files_folder(tmp_path: Path) -> None:
    (tmp_path / "conf" / "workspace").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    path = write(tmp_path / "conf" / "agentium.toml", _config("workspace").encode())
    # Run from a folder without "workspace": only resolving against the file's folder finds it.
    done = agentium("check", str(path), cwd=tmp_path / "elsewhere")
    assert done.returncode == 0, done.stderr


def test_a_missing_root_is_a_clear_error_at_agentium_check(tmp_path: Path) -> None:
    path = write(tmp_path / "agentium.toml", _config("no-such-dir").encode())
    done = agentium("check", str(path))
    assert done.returncode == 2
    err = done.stderr
    assert "1 error(s)" in err
    assert "$.verifier.options.root:" in err
    assert f"{tmp_path / 'no-such-dir'}' does not exist" in err
    report = json.loads(agentium("check", "--json", str(path)).stdout)
    assert [e["path"] for e in report["errors"]] == ["$.verifier.options.root"]


def test_an_escaping_artifact_path_is_an_error_at_its_config_path(tmp_path: Path) -> None:
    (tmp_path / "workspace").mkdir()
    text = _config("workspace").replace('path = "dist/report.txt"', 'path = "../workspace-evil/report.txt"')
    path = write(tmp_path / "agentium.toml", text.encode())
    done = agentium("check", "--json", str(path))
    assert done.returncode == 2
    report = json.loads(done.stdout)
    assert report["valid"] is False
    [error] = report["errors"]
    assert error["path"].startswith("$.verifier.options.artifacts")
    assert "'..'" in error["message"]


def test_an_unknown_option_is_named_with_a_suggestion(tmp_path: Path) -> None:
    (tmp_path / "workspace").mkdir()
    path = write(tmp_path / "agentium.toml", _config("workspace", "max_file_byte = 10\n").encode())
    report = json.loads(agentium("check", "--json", str(path)).stdout)
    [error] = report["errors"]
    assert error["path"] == "$.verifier.options.max_file_byte"
    assert "did you mean 'max_file_bytes'" in error["message"]


@pytest.mark.parametrize(
    ("artifacts", "records", "declared"),
    [
        (True, True, {"artifact_digests": True, "test_records": True}),
        (True, False, {"artifact_digests": True, "test_records": False}),
        (False, True, {"artifact_digests": False, "test_records": True}),
    ],
)
def test_an_instance_declares_the_evidence_kinds_its_config_lists(
    tmp_path: Path, artifacts: bool, records: bool, declared: dict[str, bool]
) -> None:
    from agentium_harness import create_harness_runtime
    from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
    from agentium_harness.adapters.providers import ScriptedProvider
    from agentium_harness.plugin_api import capabilities_of

    config = FsVerifierConfig(
        root=str(tmp_path),
        artifacts=(ExpectedArtifact(path="out.txt", sha256=sha256(ARTIFACT_BYTES)),) if artifacts else (),
        test_records=("junit.xml",) if records else (),
    )
    verifier = FsVerifier(config)
    caps = capabilities_of(verifier)
    assert caps is not None and caps.declared() == declared
    # The runtime accepts the narrowed declaration (it only turns flags off).
    create_harness_runtime(
        provider=ScriptedProvider(replies=["ok"]),
        archive=InMemoryArchive(),
        session_store=InMemorySessionStore(),
        verifier=verifier,
    )


def _raising(first: object) -> Iterator[object]:
    """An iterable that yields ``first``, then raises."""
    yield first
    raise RuntimeError("hostile")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"artifacts": 5}, "artifacts must be a list"),
        ({"artifacts": [5]}, r"artifacts\[0\] must be a table"),
        ({"artifacts": [{"path": "a.txt", "sha": DIGEST}]}, "unknown key.*'sha'.*missing sha256"),
        ({"artifacts": [{"path": "a.txt"}]}, "missing sha256"),
        ({"test_records": 5}, "test_records must be a list"),
        ({"test_records": [5]}, "test_records must be a non-empty relative path"),
        ({"test_records": ["../x.xml"]}, "paths stay under root"),
        ({"root": 5}, "root must be a non-empty directory path"),
        ({"test_records": ["a.xml"], "artifacts": [{"path": "b", "sha256": "abc"}]}, "64 hex digits"),
        # An iterable whose iteration raised let that error escape, and an endless one never returned.
        ({"test_records": _raising("a.xml")}, "test_records could not be iterated"),
        ({"artifacts": _raising({"path": "a", "sha256": DIGEST})}, "artifacts could not be iterated"),
        ({"test_records": itertools.repeat("a.xml")}, "test_records may list at most 256"),
        ({"artifacts": itertools.repeat({"path": "a", "sha256": DIGEST})}, "artifacts may list at most 256"),
    ],
)
def test_bad_options_are_typed_errors(root: Path, options: dict[str, object], message: str) -> None:
    """A host building the options itself gets InvalidArgumentError, never a bare TypeError/ValueError."""
    options.setdefault("root", str(root))
    with pytest.raises(InvalidArgumentError, match=message):
        FsVerifierConfig(**options)  # type: ignore[arg-type]


def test_the_missing_root_error_is_typed(tmp_path: Path) -> None:
    assert issubclass(RootNotFoundError, InvalidArgumentError)


@pytest.mark.anyio
async def test_bad_verifier_arguments_are_typed_errors(root: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="FsVerifierConfig"):
        FsVerifier("not a config")  # type: ignore[arg-type]
    verifier = FsVerifier(FsVerifierConfig(root=str(root), test_records=("a.xml",)))
    ctx = VerifyContext(scope=Scope("t", "u", "s"), op=OpContext())
    with pytest.raises(InvalidArgumentError, match="ctx must be a VerifyContext"):
        await verifier.verify(CLAIM, None)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="candidate must be a CompletionCandidate"):
        await verifier.verify("done", ctx)  # type: ignore[arg-type]


def test_without_posix_file_calls_building_is_a_capability_error(root: Path) -> None:
    """Windows has no O_NOFOLLOW / O_DIRECTORY: the import works, building refuses with a typed error."""
    script = f"""
import os
for name in ("O_NOFOLLOW", "O_DIRECTORY"):
    delattr(os, name)
from agentium_harness.plugin_api import CapabilityError
from agentium_verifier_fs import FsVerifier, FsVerifierConfig
config = FsVerifierConfig(root={str(root)!r}, test_records=("r.xml",))
try:
    FsVerifier(config)
except CapabilityError as exc:
    print("refused:", exc)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("refused: the fs verifier needs os.open and os.stat with dir_fd="), (
        done.stdout
    )
