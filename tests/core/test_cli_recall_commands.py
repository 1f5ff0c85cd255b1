"""``agentium recall add|search|rebuild`` and the recall line of ``agentium run``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentium_harness import VerifiedIdentity
from agentium_harness._cli import main
from agentium_harness._config.runtime import load_runtime

CONFIG = """
[provider]
plugin = "extractive"
[archive]
plugin = "sqlite"
options = {{ path = "{db}" }}
[session_store]
plugin = "sqlite"
options = {{ path = "{db}" }}
[runtime.resident]
max_groups = 2
{recall}
"""
RECALL = '[recall]\nplugin = "sqlite"\noptions = {{ path = "{db}" }}\n'
ANA = ["--tenant", "acme", "--user", "ana", "--session", "s1"]


@pytest.fixture
def config(tmp_path: Path) -> Path:
    db = (tmp_path / "a.db").as_posix()
    path = tmp_path / "a.toml"
    path.write_text(CONFIG.format(db=db, recall=RECALL.format(db=db)))
    docs = tmp_path / "docs"
    (docs / "ops").mkdir(parents=True)
    (docs / "vpn.md").write_text("The VPN certificate expires on March 3rd. Renew it a week before.")
    (docs / "ops" / "lunch.txt").write_text("Lunch is at noon.")
    (docs / "blob.bin").write_bytes(b"\x00\x01\x02")
    return path


def test_add_then_search_shows_what_a_run_would_include(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = config.parent / "docs"
    assert main(["recall", "add", str(config), "--tenant", "acme", str(docs)]) == 0
    out, err = capsys.readouterr()
    assert "2 indexed, 1 skipped" in out and "blob.bin" in err
    assert main(["recall", "search", str(config), *ANA, "When does the VPN certificate expire?"]) == 0
    out, _ = capsys.readouterr()
    assert "status complete" in out
    assert "vpn%2Emd" in out and "completeness complete" in out and "March 3rd" in out
    assert "budget: queries 1/1, candidates 1/8" in out
    # Another tenant sees nothing of acme's documents.
    assert (
        main(["recall", "search", str(config), "--tenant", "globex", "--user", "x", "--session", "s", "VPN"])
        == 0
    )
    out, _ = capsys.readouterr()
    assert "status no_accessible_evidence" in out and "March" not in out


def test_run_prints_the_recall_outcome(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["recall", "add", str(config), "--tenant", "acme", str(config.parent / "docs" / "vpn.md")])
    capsys.readouterr()
    assert main(["run", str(config), *ANA, "When does the VPN certificate expire?"]) == 0
    out, err = capsys.readouterr()
    assert "March 3rd" in out
    assert "[recall complete, decision proceed, 1 source(s) included" in err


def test_rebuild_reindexes_archived_groups(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for i in range(4):
        assert main(["run", str(config), *ANA, f"note {i}: the zebra{i} code"]) == 0
    capsys.readouterr()
    # The engine indexed the evicted groups already, so a rebuild finds nothing new: it is idempotent.
    assert main(["recall", "rebuild", str(config), *ANA]) == 0
    out, _ = capsys.readouterr()
    assert "0 group(s) newly indexed" in out
    assert main(["recall", "search", str(config), *ANA, "zebra0"]) == 0
    out, _ = capsys.readouterr()
    assert "group/acme/ana/s1/0" in out


def test_search_leaves_out_what_the_session_view_cleared_as_a_run_does(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for i in range(4):
        assert main(["run", str(config), *ANA, f"note {i}: the zebra{i} code"]) == 0
    capsys.readouterr()
    assert main(["recall", "search", str(config), *ANA, "--json", "zebra0"]) == 0
    before = json.loads(capsys.readouterr().out)
    assert "group/acme/ana/s1/0" in [s["source_id"] for s in before["sources"]]

    async def reset() -> None:
        async with load_runtime(str(config)) as runtime:
            await runtime.reset_view(VerifiedIdentity("acme", "ana", "sso"), "s1", reason="clear")

    anyio.run(reset)
    # Before the fix the search ignored the view and still showed the cleared group.
    assert main(["recall", "search", str(config), *ANA, "--json", "zebra0"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["sources"] == [] and found["status"] == "no_accessible_evidence"
    assert main(["run", str(config), *ANA, "zebra0"]) == 0
    _, err = capsys.readouterr()
    assert "0 source(s) included" in err


def test_search_and_rebuild_print_json_with_the_flag(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Both took --json and printed their text form.
    main(["recall", "add", str(config), "--tenant", "acme", str(config.parent / "docs" / "vpn.md")])
    capsys.readouterr()
    assert (
        main(["recall", "search", str(config), *ANA, "--json", "When does the VPN certificate expire?"]) == 0
    )
    found = json.loads(capsys.readouterr().out)
    assert found["status"] == "complete" and found["budget"]["queries"] == [1, 1]
    (source,) = found["sources"]
    assert "vpn%2Emd" in source["source_id"] and "March 3rd" in source["content"]
    assert source["attributes"]["completeness"] == "complete"
    assert main(["recall", "rebuild", str(config), *ANA, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "tenant": "acme",
        "user": "ana",
        "session": "s1",
        "newly_indexed": 0,
    }


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["search", "{cfg}", *ANA, "   "], "the query is empty"),
        (["add", "{cfg}", "--tenant", "acme", "{missing}"], "no such file or folder"),
        # Path.exists() raised ENAMETOOLONG: a traceback, exit 1.
        (["add", "{cfg}", "--tenant", "acme", "{long}"], "cannot be read (File name too long); nothing"),
        (["add", "{cfg}", "--tenant", "", "{docs}"], "tenant"),
    ],
    ids=["empty-query", "missing-path", "path-too-long", "bad-tenant"],
)
def test_bad_input_exits_2_and_writes_nothing(
    config: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    long = config.parent / ("x" * 5000)
    args = [
        a.format(cfg=config, missing=config.parent / "nope", docs=config.parent / "docs", long=long)
        for a in argv
    ]
    assert main(["recall", *args]) == 2
    _, err = capsys.readouterr()
    assert says in err
    assert main(["recall", "search", str(config), *ANA, "VPN certificate"]) == 0
    out, _ = capsys.readouterr()
    assert "status no_accessible_evidence" in out  # nothing was indexed


def test_without_recall_configured_the_commands_say_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = (tmp_path / "a.db").as_posix()
    path = tmp_path / "a.toml"
    path.write_text(CONFIG.format(db=db, recall=""))
    assert main(["recall", "search", str(path), *ANA, "anything"]) == 2
    assert "no [recall] section" in capsys.readouterr().err


def test_a_file_over_the_bound_is_skipped_without_being_read_whole(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A 200 MB file was read into memory whole before the 4 MiB bound was applied.
    import tracemalloc

    big = config.parent / "big"
    big.mkdir()
    with (big / "huge.txt").open("wb") as handle:
        handle.truncate(200 * 1024 * 1024)  # sparse: no disk, but 200 MB to read
    tracemalloc.start()
    try:
        assert main(["recall", "add", str(config), "--tenant", "acme", str(big)]) == 0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "1 skipped" in capsys.readouterr().out
    assert peak < 64 * 1024 * 1024, peak


def test_an_unreadable_file_is_skipped_with_a_note_and_a_device_is_refused(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A file that could not be opened (permissions, removed after the walk) ended the command with
    # a PermissionError traceback, the files before it already indexed; a device named as PATH was
    # walked as a folder and "0 indexed" printed as if it had been looked at.
    docs = config.parent / "docs"
    opened = os.open

    def refusing(path: Any, *args: Any, **kwargs: Any) -> int:
        if os.fspath(path).endswith("lunch.txt"):  # as a file the tests' root can read would not
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return opened(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing)
    assert main(["recall", "add", str(config), "--tenant", "acme", str(docs)]) == 0
    out, err = capsys.readouterr()
    assert "1 indexed, 2 skipped" in out
    assert "lunch.txt: cannot be read: Permission denied" in err and "Traceback" not in err
    monkeypatch.undo()
    assert main(["recall", "add", str(config), "--tenant", "acme", "/dev/null"]) == 2
    assert "/dev/null: not a file or a folder; nothing was indexed" in capsys.readouterr().err


def test_search_shows_a_sources_control_characters_as_escapes(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A source's lines were printed as stored: a document (or an archived turn) could send
    # escape sequences to the operator's terminal.
    docs = config.parent / "hostile"
    docs.mkdir()
    (docs / "vpn.md").write_text("The VPN certificate \x1b[8mexpires\x1b[0m in March \u202e.")
    assert main(["recall", "add", str(config), "--tenant", "acme", str(docs)]) == 0
    capsys.readouterr()
    assert main(["recall", "search", str(config), *ANA, "VPN certificate"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u202e" not in out
    assert "The VPN certificate \\x1b[8mexpires\\x1b[0m in March \\u202e." in out


def test_search_shows_a_problems_control_characters_as_escapes(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A problem quotes the store's error (a contract violation, an invalidated source): printed
    # raw, a store could send escape sequences to the terminal or forge a line of the output.
    import attrs

    from agentium_harness._cli import recall

    real = recall.gather_evidence

    async def hostile(*args: object, **kwargs: object) -> object:
        evidence = await real(*args, **kwargs)  # type: ignore[arg-type]
        return attrs.evolve(evidence, problems=("store said \x1b[31mno\x1b[0m\nbudget: forged",))

    monkeypatch.setattr(recall, "gather_evidence", hostile)
    assert main(["recall", "search", str(config), *ANA, "VPN certificate"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\nbudget: forged" not in out
    assert "  problem: store said \\x1b[31mno\\x1b[0m\\nbudget: forged\n" in out


def test_a_skipped_files_name_is_shown_with_its_controls_escaped(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A file's name is the folder's text: a bidi override or a line separator in it (an id
    # accepts both) reached the terminal raw in the "skipped" note.
    docs = config.parent / "named"
    docs.mkdir()
    (docs / "report\u202egpj.bin").write_bytes(b"\x00binary")
    (docs / "a\u2028b.txt").write_bytes(b"\xff not utf-8")
    assert main(["recall", "add", str(config), "--tenant", "acme", str(docs)]) == 0
    err = capsys.readouterr().err
    assert "\u202e" not in err and "\u2028" not in err
    assert "report\\u202egpj.bin: binary" in err and "a\\u2028b.txt: not UTF-8 text" in err


def test_rebuild_never_indexes_another_sessions_group_stripped_of_its_record(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The store lets a group with no retained record through: a rebuild over an archive that answered
    # ana's read with bob's group stripped of its record indexed it into ana's recall scope.
    import sqlite3

    import attrs

    from agentium_harness import SessionKey
    from agentium_harness.adapters.sqlite import SQLiteArchive

    for i in range(4):
        assert (
            main(["run", str(config), "--tenant", "acme", "--user", "bob", "--session", "p", f"vault 90{i}1"])
            == 0
        )
        assert main(["run", str(config), *ANA, f"note {i}: the zebra{i} code"]) == 0
    conn = sqlite3.connect(config.parent / "a.db")  # the index loses every group 1
    with conn:
        conn.execute("DELETE FROM recall_sources WHERE kind = 'group' AND seq = 1")
    conn.close()
    honest = SQLiteArchive.read_groups
    ana, bob = SessionKey("acme", "ana", "s1"), SessionKey("acme", "bob", "p")

    async def hostile(self: SQLiteArchive, key: SessionKey, start: int, count: int, ctx: object) -> object:
        groups = list(await honest(self, key, start, count, ctx))  # type: ignore[arg-type]
        if key != ana:
            return groups
        (theirs,) = await honest(self, bob, 1, 1, ctx)  # type: ignore[arg-type]
        return [attrs.evolve(theirs, retained=None) if g.seq == 1 else g for g in groups]

    monkeypatch.setattr(SQLiteArchive, "read_groups", hostile)
    capsys.readouterr()
    assert main(["recall", "rebuild", str(config), *ANA]) == 0
    out, err = capsys.readouterr()
    assert "0 group(s) newly indexed" in out
    assert "warning: 1 group(s)" in err and "seqs 1)" in err and "vault" not in err
    assert main(["recall", "search", str(config), *ANA, "--json", "vault"]) == 0
    assert json.loads(capsys.readouterr().out)["sources"] == []


class _Endless(list):  # type: ignore[type-arg]
    """Says it is empty; its iterator repeats one group (nearly) without end, counting what was read."""

    def __init__(self, item: object) -> None:
        super().__init__()
        self.item, self.read = item, 0

    def __len__(self) -> int:
        return 0

    def __iter__(self) -> Any:
        while self.read < 100_000:  # endless in spirit; bounded so a regression fails, not hangs
            self.read += 1
            yield self.item


@pytest.mark.parametrize("kind", ["endless", "not a sequence", "stuck", "wrong type"])
def test_rebuild_refuses_a_hostile_archive_answer_typed_bounded_and_indexes_nothing(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    # Before the fix: list() of the answer read it whole (an endless one without end), a page that did
    # not move past its start was read again and again, and whatever it held was indexed.
    import sqlite3

    from agentium_harness.adapters.sqlite import SQLiteArchive

    for i in range(4):
        assert main(["run", str(config), *ANA, f"note {i}: the zebra{i} code"]) == 0
    conn = sqlite3.connect(config.parent / "a.db")  # the index loses every group: a rebuild is needed
    with conn:
        conn.execute("DELETE FROM recall_sources WHERE kind = 'group'")
    conn.close()
    honest = SQLiteArchive.read_groups
    answers: list[_Endless] = []
    stuck_reads = 0

    async def hostile(self: SQLiteArchive, key: Any, start: int, count: int, ctx: Any) -> object:
        groups = list(await honest(self, key, start, count, ctx))
        if kind == "endless":
            answers.append(_Endless(groups[0]))
            return answers[-1]
        if kind == "not a sequence":
            return iter(groups)
        if kind == "stuck":  # always the first page, whatever start was asked: it never moves on
            nonlocal stuck_reads
            stuck_reads += 1
            if stuck_reads > 50:  # endless in spirit; bounded so a regression fails, not hangs
                return []
            return list(await honest(self, key, 0, count, ctx))[:1]
        return [*groups[:-1], "not a group"]

    monkeypatch.setattr(SQLiteArchive, "read_groups", hostile)
    capsys.readouterr()
    code = main(["recall", "rebuild", str(config), *ANA])
    _, err = capsys.readouterr()
    assert code != 0 and "SQLiteArchive.read_groups" in err, err
    assert all(a.read <= 201 for a in answers)  # one past the page of 200 at most
    assert stuck_reads <= 2
    conn = sqlite3.connect(config.parent / "a.db")
    with conn:
        (count,) = conn.execute("SELECT COUNT(*) FROM recall_sources WHERE kind = 'group'").fetchone()
    conn.close()
    assert count == 0 or kind == "stuck"  # a stuck archive's first page is indexed before it stops


def test_two_files_that_would_share_a_document_id_are_refused_before_anything_is_indexed(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A document's id is its path relative to the PATH given, so docsA/readme.md and
    # docsB/readme.md were both "readme.md": the second replaced the first in the store, and the
    # command said "2 indexed" with one document kept.
    for name, text in (("alpha", "The alpha door code is 1111."), ("bravo", "The bravo door code is 2222.")):
        (config.parent / name).mkdir()
        (config.parent / name / "readme.md").write_text(text)
    alpha, bravo = config.parent / "alpha", config.parent / "bravo"
    for given in ([alpha, bravo], [alpha / "readme.md", bravo / "readme.md"]):
        assert main(["recall", "add", str(config), "--tenant", "acme", *map(str, given)]) == 2
        out, err = capsys.readouterr()
        assert out == ""
        assert "would both be document id 'readme.md'" in err and "Nothing was indexed" in err
        assert str(alpha / "readme.md") in err and str(bravo / "readme.md") in err
        for query in ("alpha door code", "bravo door code"):
            assert main(["recall", "search", str(config), *ANA, query]) == 0
            assert "status no_accessible_evidence" in capsys.readouterr().out  # nothing was indexed
    # Files whose ids differ are all indexed.
    docs = config.parent / "docs"
    assert main(["recall", "add", str(config), "--tenant", "acme", str(alpha), str(docs)]) == 0
    assert "3 indexed, 1 skipped" in capsys.readouterr().out
    # The same file reached twice under the same id is one document, indexed once.
    assert main(["recall", "add", str(config), "--tenant", "acme", str(alpha), str(alpha / "readme.md")]) == 0
    assert "1 indexed, 0 skipped" in capsys.readouterr().out


def test_a_failure_part_way_says_what_stays_indexed(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The store failing on the third file ended the command with its error alone: nothing on
    # stdout, and no word that the documents before it stay indexed (they do, and a run finds them).
    from agentium_harness._cli import recall
    from agentium_harness._errors import ContractViolationError

    real = recall.index_document_fenced

    async def failing_on_vpn(*args: Any, **kwargs: Any) -> Any:
        if args[4] == "vpn.md":
            raise ContractViolationError("recall store said no")
        return await real(*args, **kwargs)

    monkeypatch.setattr(recall, "index_document_fenced", failing_on_vpn)
    docs = config.parent / "docs"
    assert main(["recall", "add", str(config), "--tenant", "acme", str(docs)]) == 2
    out, err = capsys.readouterr()
    assert out == "1 indexed, 1 skipped\n"
    assert (
        f"stopped at {docs / 'vpn.md'} (document id 'vpn.md', file 3 of 3): the 1 document(s) indexed "
        "before it stay indexed; it and the 0 file(s) after it were not indexed" in err
    )
    assert err.endswith("agentium recall: recall store said no\n")
    monkeypatch.undo()
    assert main(["recall", "search", str(config), *ANA, "When is lunch?"]) == 0
    assert "Lunch is at noon." in capsys.readouterr().out


def test_a_vector_failure_part_way_says_the_document_was_indexed_without_it(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentium_harness._cli import recall
    from agentium_harness._errors import ContractViolationError

    config.write_text(config.read_text() + '[embedder]\nplugin = "hashing"\n')
    real = recall.index_sources

    async def failing_on_vpn(ticket: Any, hybrid: Any, store: Any, sources: Any) -> Any:
        if "vpn" in sources[0][0].source_id:
            raise ContractViolationError("embedder said no")
        return await real(ticket, hybrid, store, sources)

    monkeypatch.setattr(recall, "index_sources", failing_on_vpn)
    docs = config.parent / "docs"
    assert main(["recall", "add", str(config), "--tenant", "acme", str(docs)]) == 2
    out, err = capsys.readouterr()
    assert out == "2 indexed, 1 skipped\n"  # vpn.md is in the store, without its vector
    assert (
        "the 1 document(s) indexed before it stay indexed; it was indexed, without its vector; "
        "the 0 file(s) after it were not indexed" in err
    )


def test_a_symbolic_link_in_a_walked_folder_is_skipped_with_a_note(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A link inside the folder given was read through: a file anywhere the command can read (a
    # key file, another tenant's folder) was indexed into this tenant's recall, where its runs
    # quote it. A linked folder was passed over in silence.
    outside = config.parent / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("The zulu root password is hunter2.")
    docs = config.parent / "docs"
    (docs / "creds.txt").symlink_to(outside / "secret.txt")
    (docs / "elsewhere").symlink_to(outside, target_is_directory=True)
    assert main(["recall", "add", str(config), "--tenant", "acme", str(docs)]) == 0
    out, err = capsys.readouterr()
    assert out == "2 indexed, 3 skipped\n"
    assert f"skipped {docs / 'creds.txt'}: a symbolic link" in err
    assert f"skipped {docs / 'elsewhere'}: a symbolic link" in err
    assert main(["recall", "search", str(config), *ANA, "zulu root password"]) == 0
    assert "hunter2" not in capsys.readouterr().out
    # Named as a PATH itself, the file a link points at is what the operator chose: it is read.
    assert main(["recall", "add", str(config), "--tenant", "acme", str(docs / "creds.txt")]) == 0
    assert "1 indexed, 0 skipped" in capsys.readouterr().out


def _add_within_deadline(argv: list[str], fifo: Path) -> int:
    """``main(argv)`` in a worker thread, failing the test if it has not returned within 20 s.

    A read blocked on a FIFO cannot be cancelled: on the deadline the FIFO's write end is opened
    and closed, so the blocked open returns (at end of file) and the thread ends with the test.
    """
    result: dict[str, int] = {}

    async def go() -> bool:
        done = anyio.Event()

        async def worker() -> None:
            result["code"] = await anyio.to_thread.run_sync(main, argv)
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(worker)
            with anyio.move_on_after(20):
                await done.wait()
            if done.is_set():
                return False
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # release the blocked reader
        return True

    if anyio.run(go):
        pytest.fail(f"recall add waited on the FIFO {fifo} for a writer")
    return result["code"]


def _swapped_after_the_walk(
    monkeypatch: pytest.MonkeyPatch, swap: Any, extra: list[tuple[str, Path]] | None = None
) -> None:
    """Make ``recall add`` find its files, then ``swap()`` before it reads them: the race, made certain."""
    from agentium_harness._cli import recall

    walk = recall._files

    def walk_then_swap(paths: list[str]) -> Any:
        files, links = walk(paths)
        swap()
        return files + (extra or []), links

    monkeypatch.setattr(recall, "_files", walk_then_swap)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_file_swapped_for_a_fifo_after_the_walk_is_skipped_not_waited_on(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The walk saw a regular file; by the time it was read it was a FIFO with no writer, and
    # opening it waited for one for good: the command never ended.
    docs = config.parent / "docs"
    lunch = docs / "ops" / "lunch.txt"

    def to_fifo() -> None:
        lunch.unlink()
        os.mkfifo(lunch)

    _swapped_after_the_walk(monkeypatch, to_fifo)
    code = _add_within_deadline(["recall", "add", str(config), "--tenant", "acme", str(docs)], lunch)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out == "1 indexed, 2 skipped\n"  # vpn.md indexed; blob.bin (binary) and the FIFO skipped
    assert f"  skipped {lunch}: not a regular file (a FIFO); not read\n" in err
    monkeypatch.undo()
    assert main(["recall", "search", str(config), *ANA, "When is lunch?"]) == 0
    assert "status no_accessible_evidence" in capsys.readouterr().out  # nothing indexed for it
    assert main(["recall", "search", str(config), *ANA, "VPN certificate"]) == 0
    assert "March 3rd" in capsys.readouterr().out


def test_a_device_reached_at_read_time_is_skipped_unread(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A device in place of a walked file was read like one: /dev/zero up to the 4 MiB bound, a
    # terminal or a tape until it answered.
    docs = config.parent / "docs"
    _swapped_after_the_walk(monkeypatch, lambda: None, [("zero", Path("/dev/zero"))])
    assert main(["recall", "add", str(config), "--tenant", "acme", str(docs)]) == 0
    out, err = capsys.readouterr()
    assert out == "2 indexed, 2 skipped\n"
    assert "  skipped /dev/zero: not a regular file (a character device); not read\n" in err


def test_a_walked_file_swapped_for_a_link_after_the_walk_is_not_followed(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A link inside a folder is skipped (it may point anywhere); one swapped in after the walk was
    # followed, and what it pointed at indexed into the tenant's recall.
    secret = config.parent / "secret.txt"
    secret.write_text("The zulu root password is hunter2.")
    docs = config.parent / "docs"
    lunch = docs / "ops" / "lunch.txt"

    def to_link() -> None:
        lunch.unlink()
        lunch.symlink_to(secret)

    _swapped_after_the_walk(monkeypatch, to_link)
    assert main(["recall", "add", str(config), "--tenant", "acme", str(docs)]) == 0
    out, err = capsys.readouterr()
    assert out == "1 indexed, 2 skipped\n"
    assert f"  skipped {lunch}: a symbolic link now (found as a file); not followed\n" in err
    monkeypatch.undo()
    assert main(["recall", "search", str(config), *ANA, "zulu root password"]) == 0
    assert "hunter2" not in capsys.readouterr().out


@pytest.mark.skipif(os.open not in os.supports_dir_fd, reason="no openat on this platform")
def test_a_walked_folder_swapped_for_a_link_after_the_walk_is_not_followed(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # O_NOFOLLOW guards only a path's last part: with the folder holding a walked file swapped for a
    # link after the walk, the file was opened through the link, outside the folder, and indexed.
    outside = config.parent / "outside"
    outside.mkdir()
    (outside / "lunch.txt").write_text("The zulu root password is hunter2.")
    docs = config.parent / "docs"
    ops = docs / "ops"

    def to_link() -> None:
        (ops / "lunch.txt").unlink()
        ops.rmdir()
        ops.symlink_to(outside, target_is_directory=True)

    _swapped_after_the_walk(monkeypatch, to_link)
    assert main(["recall", "add", str(config), "--tenant", "acme", str(docs)]) == 0
    out, err = capsys.readouterr()
    assert out == "1 indexed, 2 skipped\n"
    assert (
        f"  skipped {ops / 'lunch.txt'}: a folder on its path is a symbolic link now; not followed\n" in err
    )
    monkeypatch.undo()
    assert main(["recall", "search", str(config), *ANA, "zulu root password"]) == 0
    assert "hunter2" not in capsys.readouterr().out
