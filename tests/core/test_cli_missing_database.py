"""An operator command pointed at a SQLite database that does not exist is refused and creates nothing.

The built-in SQLite adapters create their file on first use. ``agentium
retention apply`` with the archive's path mistyped created an empty archive
there, marked the session's archived groups erased in the (real) session
store and recall index, and exited 0 — while the real archive kept every
group. ``agentium erase`` with the archive, recall or memory path mistyped
created an empty database there and recorded "nothing" erased from it, and
``session reconcile`` created an empty archive and compared the session with
it. Each is now refused before anything is built: exit 2, one line naming
the path, no file created, the real databases unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentium_harness._cli import main

STORES = ("archive", "session_store", "recall", "memory")
WHO = ("--tenant", "acme", "--user", "ana")


def _config(folder: Path, name: str, paths: dict[str, str]) -> str:
    body = (
        "[runtime.resident]\nmax_groups = 1\n"
        '[provider]\nplugin = "scripted"\n[provider.options]\nresponses = ["noted"]\ncycle = true\n'
        "[retention]\nmax_archived_groups = 1\n"
    )
    for section in STORES:
        body += f'[{section}]\nplugin = "sqlite"\n[{section}.options]\npath = "{folder / paths[section]}"\n'
    (folder / name).write_text(body, encoding="utf-8")
    return str(folder / name)


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() if p.is_file() else b"<folder>" for p in sorted(folder.iterdir())}


@pytest.fixture
def stored(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """Four turns of acme/ana/s1 (groups 0 to 2 archived, so retention would trim) and one fact."""
    real = _config(tmp_path, "real.toml", {s: f"{s}.db" for s in STORES})
    for i in range(4):
        assert main(["run", real, *WHO, "--session", "s1", f"turn {i}"]) == 0
    assert main(["memory", "remember", real, *WHO, "ana likes tea"]) == 0
    assert {f"{s}.db" for s in STORES} <= {p.name for p in tmp_path.iterdir()}
    capsys.readouterr()
    return tmp_path


def _refused(
    folder: Path, capsys: pytest.CaptureFixture[str], argv: list[str], typo: str, command: str
) -> None:
    before = _files(folder)
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    (line,) = err.splitlines()
    assert line.startswith(f"agentium {command}: no database at {folder / typo} (")
    assert "no database was created" in line
    if "--json" in argv:
        assert json.loads(out)["error_type"] == "InvalidArgumentError"
    else:
        assert out == ""
    assert not any(p.name.startswith(typo) for p in folder.iterdir()), "a file (or -wal, -shm) was created"
    assert _files(folder) == before, "a real database changed"


@pytest.mark.parametrize("missing", ["archive", "session_store", "recall"])
@pytest.mark.parametrize("json_form", [False, True], ids=["text", "json"])
def test_retention_apply_with_a_store_database_missing_is_refused_and_creates_nothing(
    stored: Path, capsys: pytest.CaptureFixture[str], missing: str, json_form: bool
) -> None:
    typo = f"typo-{missing}.db"
    cfg = _config(stored, "typo.toml", {s: typo if s == missing else f"{s}.db" for s in STORES})
    argv = ["retention", "apply", cfg, "--tenant", "acme", *(["--json"] if json_form else [])]
    _refused(stored, capsys, argv, typo, "retention")
    # The same config with the real path trims: the refusal was the missing file, nothing else.
    real = _config(stored, "real.toml", {s: f"{s}.db" for s in STORES})
    assert main(["retention", "apply", real, "--tenant", "acme"]) == 0
    assert "1 trimmed" in capsys.readouterr().out


def test_retention_apply_with_no_database_at_all_is_refused_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _config(tmp_path, "typo.toml", {s: "typo.db" for s in STORES})
    _refused(tmp_path, capsys, ["retention", "apply", cfg, "--tenant", "acme"], "typo.db", "retention")
    # A dry run only reads: it still reads a missing database as empty, and creates none.
    assert main(["retention", "apply", cfg, "--tenant", "acme", "--dry-run"]) == 0
    assert "0 session(s) checked" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["typo.toml"]


@pytest.mark.parametrize("missing", ["archive", "recall", "memory"])
def test_erase_with_a_store_database_missing_is_refused_and_creates_nothing(
    stored: Path, capsys: pytest.CaptureFixture[str], missing: str
) -> None:
    typo = f"typo-{missing}.db"
    cfg = _config(stored, "typo.toml", {s: typo if s == missing else f"{s}.db" for s in STORES})
    _refused(stored, capsys, ["erase", cfg, *WHO, "--reason", "dsr"], typo, "erase")
    _refused(stored, capsys, ["erase", cfg, "--tenant", "acme", "--resume"], typo, "erase")


def test_session_reconcile_with_the_archive_missing_is_refused_and_creates_nothing(
    stored: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    typo = "typo-archive.db"
    cfg = _config(stored, "typo.toml", {s: typo if s == "archive" else f"{s}.db" for s in STORES})
    _refused(stored, capsys, ["session", "reconcile", cfg, *WHO, "--session", "s1"], typo, "session")


def test_demo_still_creates_its_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The demo's purpose is to make its database: the refusals above must not reach it.
    assert main(["demo", "--dir", str(tmp_path / "demo"), "--turns", "2"]) == 0
    capsys.readouterr()
    assert (tmp_path / "demo" / "demo.db").exists()


def _not_a_database(path: Path, what: str) -> None:
    if what == "folder":
        path.mkdir()
    else:
        path.write_bytes(b"id,text\n1,not a database\n" * 8)


@pytest.mark.parametrize("what", ["folder", "text file"])
@pytest.mark.parametrize("missing", ["archive", "recall", "memory"])
def test_erase_with_a_store_path_that_is_no_database_is_refused_and_writes_nothing(
    stored: Path, capsys: pytest.CaptureFixture[str], missing: str, what: str
) -> None:
    # A folder or a text file at a store's path: the erasure started, recorded itself pending in
    # the (real) session store, failed on that store, and left the user's scope refused (exit 7).
    typo = f"typo-{missing}.db"
    _not_a_database(stored / typo, what)
    cfg = _config(stored, "typo.toml", {s: typo if s == missing else f"{s}.db" for s in STORES})
    before = _files(stored)
    code = main(["erase", cfg, *WHO, "--reason", "dsr"])
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    (line,) = err.splitlines()
    assert line.startswith(f"agentium erase: {stored / typo} ([{missing}]) is not a SQLite database (")
    assert "nothing was erased" in line
    assert _files(stored) == before, "a database changed (a pending erasure was recorded)"
    # Nothing is pending: the scope still runs.
    real = _config(stored, "real.toml", {s: f"{s}.db" for s in STORES})
    assert main(["run", real, *WHO, "--session", "s1", "after"]) == 0


@pytest.mark.parametrize("what", ["folder", "text file"])
def test_retention_apply_with_an_archive_that_is_no_database_is_refused_and_writes_nothing(
    stored: Path, capsys: pytest.CaptureFixture[str], what: str
) -> None:
    typo = "typo-archive.db"
    _not_a_database(stored / typo, what)
    cfg = _config(stored, "typo.toml", {s: typo if s == "archive" else f"{s}.db" for s in STORES})
    before = _files(stored)
    code = main(["retention", "apply", cfg, "--tenant", "acme"])
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert err.startswith(f"agentium retention: {stored / typo} ([archive]) is not a SQLite database (")
    assert _files(stored) == before, "a database changed (a pending erasure was recorded)"


# ------------------------------------------------------------- the fenced writes: recall add, memory

#: The writing commands that read the session store for erasures under way (their fence) before
#: they write: ``(argv before CONFIG, argv after it, the command in the error, what it says)``.
#: Each may create the store it writes (a first document, a first fact); the session store it only
#: reads, so that must exist. DOC and FACT stand for a document's path and ana's fact id.
FENCED = {
    "recall add": (["recall", "add"], ["--tenant", "acme", "DOC"], "recall", "nothing was indexed"),
    "memory remember": (["memory", "remember"], [*WHO, "ana drinks milk"], "memory", "nothing was stored"),
    "memory correct": (
        ["memory", "correct"],
        [*WHO, "FACT", "ana drinks milk"],
        "memory",
        "nothing was changed",
    ),
}


def _fenced(folder: Path, capsys: pytest.CaptureFixture[str], command: str, cfg: str) -> list[str]:
    """The argv of ``command`` on ``cfg``, with DOC a new document and FACT ana's fact (if any)."""
    head, tail, _, _ = FENCED[command]
    doc = folder / "doc.txt"
    doc.write_text("the office opens at nine\n", encoding="utf-8")
    fact = ""
    if (folder / "memory.db").exists():
        real = _config(folder, "real.toml", {s: f"{s}.db" for s in STORES})
        assert main(["memory", "list", real, *WHO, "--json"]) == 0
        fact = json.loads(capsys.readouterr().out)[0]["fact_id"]
    return [*head, cfg, *(str(doc) if a == "DOC" else fact if a == "FACT" else a for a in tail)]


@pytest.mark.parametrize("command", list(FENCED))
def test_a_fenced_write_with_the_session_store_missing_is_refused_and_creates_nothing(
    stored: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    # The session store is where erasures are recorded: at a mistyped path it was created empty,
    # and the command's fence read "no erasure under way" from it, so a user being erased got the
    # document or the fact anyway, in the real recall or memory store.
    typo = "typo-session.db"
    cfg = _config(stored, "typo.toml", {s: typo if s == "session_store" else f"{s}.db" for s in STORES})
    argv = _fenced(stored, capsys, command, cfg)
    _, _, name, outcome = FENCED[command]
    before = _files(stored)
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    (line,) = err.splitlines()
    assert line.startswith(f"agentium {name}: no database at {stored / typo} ([session_store]): "), line
    assert f"{outcome}, and no database was created" in line
    assert "create an empty file at that path" in line
    assert out == ""
    assert not any(p.name.startswith(typo) for p in stored.iterdir()), "a file (or -wal, -shm) was created"
    assert _files(stored) == before, "a database changed"
    # The hint holds: an empty file there, and the same command runs (the fence reads it as empty).
    (stored / typo).touch()
    assert main(argv) == 0, capsys.readouterr()


@pytest.mark.parametrize("command", ["recall add", "memory remember"])
def test_a_fenced_write_on_nothing_at_all_is_refused_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    # Every path mistyped (or a config never used): refused on the session store, so neither the
    # store the command writes nor any other is created.
    cfg = _config(tmp_path, "typo.toml", {s: f"typo-{s}.db" for s in STORES})
    argv = _fenced(tmp_path, capsys, command, cfg)
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert "no database at " in err and "([session_store])" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["doc.txt", "typo.toml"]


@pytest.mark.parametrize("what", ["folder", "text file"])
@pytest.mark.parametrize("command", list(FENCED))
def test_a_fenced_write_with_a_session_store_that_is_no_database_is_refused_and_writes_nothing(
    stored: Path, capsys: pytest.CaptureFixture[str], command: str, what: str
) -> None:
    typo = "typo-session.db"
    _not_a_database(stored / typo, what)
    cfg = _config(stored, "typo.toml", {s: typo if s == "session_store" else f"{s}.db" for s in STORES})
    argv = _fenced(stored, capsys, command, cfg)
    _, _, name, _ = FENCED[command]
    before = _files(stored)
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    (line,) = err.splitlines()
    assert line.startswith(
        f"agentium {name}: {stored / typo} ([session_store]) is not a SQLite database ("
    ), line
    assert out == ""
    assert _files(stored) == before, "a database changed"


@pytest.mark.parametrize("command", ["recall add", "memory remember"])
def test_a_fenced_write_creates_the_store_it_writes_and_no_other(
    stored: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    # The store the command writes may not exist yet (a first document, a first fact): created.
    # The stores it does not use (the archive; memory for recall add, recall for memory) are not.
    written = "recall" if command == "recall add" else "memory"
    paths = {s: f"new-{s}.db" for s in STORES}
    paths["session_store"] = "session_store.db"
    cfg = _config(stored, "new.toml", paths)
    argv = _fenced(stored, capsys, command, cfg)
    assert main(argv) == 0, capsys.readouterr()
    created = sorted(p.name for p in stored.iterdir() if p.name.startswith("new-") and p.suffix == ".db")
    assert created == [f"new-{written}.db"]


@pytest.mark.parametrize("command", ["recall add", "memory remember"])
def test_a_fenced_write_creates_one_database_shared_with_the_session_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    # One file for every section, never written to: the command writes that file, so it creates it
    # (no erasure can be on record there for data not there yet), and a run then finds what it wrote.
    cfg = _config(tmp_path, "one.toml", dict.fromkeys(STORES, "one.db"))
    argv = _fenced(tmp_path, capsys, command, cfg)
    assert main(argv) == 0, capsys.readouterr()
    assert (tmp_path / "one.db").is_file()
    if command == "memory remember":
        capsys.readouterr()
        assert main(["memory", "list", cfg, *WHO]) == 0
        assert "ana drinks milk" in capsys.readouterr().out


@pytest.mark.parametrize("linked", ["session_store", "written"])
@pytest.mark.parametrize("command", ["recall add", "memory remember"])
def test_a_fenced_write_creates_one_database_shared_with_the_session_store_through_a_link(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, linked: str
) -> None:
    # One file for both, one of the two paths a link (not there yet) to the other: the same file
    # as one spelling, so created with the first write. Compared as spelled, it was refused as a
    # missing session store, and the hint (create an empty file there) named the link.
    written = "recall" if command == "recall add" else "memory"
    (tmp_path / "link.db").symlink_to(tmp_path / "one.db")
    paths = {s: "other.db" for s in STORES}
    paths["session_store"], paths[written] = (
        ("link.db", "one.db") if linked == "session_store" else ("one.db", "link.db")
    )
    cfg = _config(tmp_path, "one.toml", paths)
    argv = _fenced(tmp_path, capsys, command, cfg)
    assert main(argv) == 0, capsys.readouterr()
    assert (tmp_path / "one.db").is_file()
    assert not (tmp_path / "other.db").exists()


@pytest.mark.parametrize("what", ["folder", "text file"])
@pytest.mark.parametrize("command", ["recall add", "memory remember"])
def test_a_fenced_write_whose_own_store_is_no_database_is_refused_before_anything(
    stored: Path, capsys: pytest.CaptureFixture[str], command: str, what: str
) -> None:
    # It failed only at the first write; recall add then said "whether it was indexed is not known".
    written = "recall" if command == "recall add" else "memory"
    typo = f"typo-{written}.db"
    _not_a_database(stored / typo, what)
    cfg = _config(stored, "typo.toml", {s: typo if s == written else f"{s}.db" for s in STORES})
    argv = _fenced(stored, capsys, command, cfg)
    _, _, name, outcome = FENCED[command]
    before = _files(stored)
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    (line,) = err.splitlines()
    assert line.startswith(f"agentium {name}: {stored / typo} ([{written}]) is not a SQLite database ("), line
    assert f"{outcome}, and nothing was written" in line
    assert out == ""
    assert _files(stored) == before, "a database changed"
