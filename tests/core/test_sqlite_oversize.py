"""SQLite session store and archive rows holding a value far over what they write are refused unread.

A column replaced outside the stores by a huge value (SQLite takes up to
1 GB) was fetched whole into Python, then refused by its decode. Every read
now selects the column bounded by ``length()`` and its bytes (``length()``
of a text stops at its first NUL; ``_sqlite_bounds``) and refuses the row
(its value never transferred) with the store's typed error,
changing nothing. The values are built by SQLite itself (``zeroblob``,
``printf``), so the only Python memory they could take is what a store
reads: tracemalloc's peak tells whether it did. Stored JSON (a snapshot, a
group's bytes) may be as long as the strict decoder reads back
(``MAX_JSON_BYTES``, 256 MiB: a turn alone may take 128 MiB), so those values
are just past that; a digest, an id or a version is far shorter.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest
from _oversize_support import HUGE, NUL_TEXT, OVER_JSON, PEAK
from _oversize_support import ctx as _ctx
from _oversize_support import group_ids as _group_ids
from _oversize_support import raw_sql as _sql
from _oversize_support import refused_unread as _refused_unread
from _oversize_support import sqlite_runtime as _runtime

from agentium_harness import (
    ArchiveCorruptError,
    Message,
    Role,
    Scope,
    SessionKey,
    SnapshotCorruptError,
    VerifiedIdentity,
)
from agentium_harness._errors import InvalidArgumentError
from agentium_harness._json import MAX_JSON_BYTES
from agentium_harness._ports.erasure import EraseTarget
from agentium_harness.adapters import _sqlite_snapshot_read
from agentium_harness.adapters.sqlite import (
    SQLiteArchive,
    SQLiteConfig,
    SQLiteRevisionFloorError,
    SQLiteSessionStore,
    SQLiteStorageError,
)
from agentium_harness.plugin_api import SessionSnapshot, seal_snapshot
from agentium_harness.testing import plain_group

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s1")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _fingerprint(path: Path) -> list[object]:
    """Every row's small columns and the size of each large one (never a huge value itself)."""
    return [
        _sql(
            path,
            "SELECT sid, tenant_id, user_id, length(session_id), adopted, revision, boundary, next_seq, "
            "inline, length(snapshot), length(CAST(session_id AS BLOB)), length(CAST(snapshot AS BLOB)), "
            "typeof(snapshot) FROM sessions ORDER BY sid",
        ),
        _sql(
            path,
            "SELECT id, length(digest), length(data), length(CAST(digest AS BLOB)), "
            "length(CAST(data AS BLOB)), typeof(data) FROM groups ORDER BY id",
        ),
        _sql(path, "SELECT key, length(value), length(CAST(value AS BLOB)) FROM meta ORDER BY key"),
        _sql(path, "SELECT id, length(floor) FROM revision_floor"),
    ]


def _damage_group(path: Path, seq: int, column: str, value_sql: str, size: int) -> None:
    """Set ``column`` of group ``seq``'s row to ``value_sql`` (SQLite builds it, ``size`` long)."""
    _sql(path, f"UPDATE groups SET {column} = {value_sql} WHERE id IN (?, ?)", (size, *_group_ids(path, seq)))


def _snapshot(session: str) -> SessionSnapshot:
    return seal_snapshot(SessionSnapshot(Scope("acme", "ana", session), 0, 1, (plain_group(0),)))


def _pair(n: int) -> list[Message]:
    return [Message(Role.USER, f"question {n}"), Message(Role.ASSISTANT, f"answer {n}")]


async def _seeded(path: Path) -> None:
    """Session s1: groups 0-2 archived (adopted), 3 and 4 resident; session s2: one group."""
    async with _runtime(path) as rt:
        for n in range(5):
            await rt.append(ANA, "s1", _pair(n))
        await rt.append(ANA, "s2", _pair(0))


async def test_a_huge_archived_group_is_refused_by_every_read_before_it_is_fetched(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    await _seeded(path)
    _damage_group(path, 1, "data", "zeroblob(?)", OVER_JSON)
    before = _fingerprint(path)
    message = rf"data of length {OVER_JSON} bytes \(at most {MAX_JSON_BYTES}\)"
    archive = SQLiteArchive(SQLiteConfig(path=str(path)))
    async with _runtime(path) as rt:
        await _refused_unread(
            lambda: rt.read_history(ANA, "s1", max_groups=5), ArchiveCorruptError, message, "read_history"
        )
        await _refused_unread(
            lambda: archive.read_groups(KEY, 0, 10, _ctx()), ArchiveCorruptError, message, "read_groups"
        )
        # The groups above the damage still read: nothing else was touched.
        newest = await rt.read_history(ANA, "s1", max_groups=2)
        assert [g.seq for g in newest.groups] == [3, 4]
    await archive.aclose()
    assert _fingerprint(path) == before


async def test_a_huge_resident_group_is_refused_by_the_load_before_it_is_fetched(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    await _seeded(path)
    _damage_group(path, 4, "data", "zeroblob(?)", OVER_JSON)
    before = _fingerprint(path)
    message = rf"group 4 of length {OVER_JSON}"
    store = SQLiteSessionStore(SQLiteConfig(path=str(path)))
    async with _runtime(path) as rt:
        for name, call in {
            "load": lambda: store.load(KEY, _ctx()),
            "read_history": lambda: rt.read_history(ANA, "s1", max_groups=2),
            "append": lambda: rt.append(ANA, "s1", _pair(5)),
        }.items():
            await _refused_unread(call, SnapshotCorruptError, message, name)
    await store.aclose()
    assert _fingerprint(path) == before


def _group_ids_all(path: Path) -> list[int]:
    return [int(i) for (i,) in _sql(path, "SELECT id FROM groups ORDER BY id")]  # type: ignore[call-overload]


@pytest.mark.parametrize("form", ["deflated", "as is"])
async def test_resident_groups_joining_past_the_bound_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    # Each row within the bound, their join over it: the rows after the bound are not fetched, and a
    # deflated one is not inflated past what is left of the bound. "as is": rows of schema version 3.
    path = tmp_path / "a.db"
    store = SQLiteSessionStore(SQLiteConfig(path=str(path)))
    groups = tuple(plain_group(seq, "x" * 4000) for seq in range(3))
    snapshot = seal_snapshot(SessionSnapshot(Scope("acme", "ana", "s1"), 0, 3, groups))
    await store.save(KEY, snapshot, None, _ctx())
    await store.aclose()
    lengths = [n for (n,) in _sql(path, "SELECT length(data) FROM groups ORDER BY id")]
    assert all(n < 1000 for n in lengths), lengths  # 4,000 x's deflate to a few dozen bytes
    if form == "as is":
        for i, group in zip(_group_ids_all(path), groups, strict=True):
            _sql(path, "UPDATE groups SET data = ? WHERE id = ?", (group.canonical_bytes(), i))
    size = len(_sql(path, "SELECT snapshot FROM sessions")[0][0])  # type: ignore[arg-type]
    bound = size + 2 * (len(groups[0].canonical_bytes()) + 1)
    monkeypatch.setattr(_sqlite_snapshot_read, "JSON_BYTES", bound)
    store = SQLiteSessionStore(SQLiteConfig(path=str(path)))
    over = r"over \d+ inflated" if form == "deflated" else r"\d+"
    with pytest.raises(SnapshotCorruptError, match=rf"group 2 of length {over} bytes \(the whole at most"):
        await store.load(KEY, _ctx())
    monkeypatch.undo()
    loaded = await store.load(KEY, _ctx())
    assert loaded is not None and loaded.snapshot.resident == groups
    await store.aclose()


async def test_a_huge_snapshot_is_refused_before_it_is_fetched(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    await _seeded(path)
    _sql(path, "UPDATE sessions SET snapshot = zeroblob(?) WHERE session_id = 's1'", (OVER_JSON,))
    before = _fingerprint(path)
    message = rf"snapshot of length {OVER_JSON} bytes \(at most {MAX_JSON_BYTES}\)"
    store = SQLiteSessionStore(SQLiteConfig(path=str(path)))
    archive = SQLiteArchive(SQLiteConfig(path=str(path)))
    async with _runtime(path) as rt:
        for name, call, error in [
            ("load", lambda: store.load(KEY, _ctx()), SnapshotCorruptError),
            ("read_history", lambda: rt.read_history(ANA, "s1", max_groups=2), SnapshotCorruptError),
            ("save", lambda: store.save(KEY, _snapshot("s1"), 1, _ctx()), SnapshotCorruptError),
            ("read_groups", lambda: archive.read_groups(KEY, 0, 10, _ctx()), ArchiveCorruptError),
            ("append", lambda: archive.append(KEY, [plain_group(0)], _ctx()), ArchiveCorruptError),
        ]:
            await _refused_unread(call, error, message, name)
    await store.aclose()
    await archive.aclose()
    assert _fingerprint(path) == before


async def test_a_huge_archived_digest_is_refused_before_it_is_fetched(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    await _seeded(path)
    _damage_group(path, 1, "digest", "printf('%.*c', ?, 'x')", HUGE)
    before = _fingerprint(path)
    message = rf"digest of length {HUGE}"
    archive = SQLiteArchive(SQLiteConfig(path=str(path)))
    target = EraseTarget.session("acme", "ana", "s1")
    async with _runtime(path) as rt:
        for name, call in {
            "read_history": lambda: rt.read_history(ANA, "s1", max_groups=5),
            "read_groups": lambda: archive.read_groups(KEY, 0, 10, _ctx()),
            "append": lambda: archive.append(KEY, [plain_group(1)], _ctx()),
        }.items():
            await _refused_unread(call, ArchiveCorruptError, message, name)
    assert _fingerprint(path) == before
    # An erasure is not stopped by it (it stopped every session, user and tenant erasure): the group
    # is reported with digest "" (unread, nothing vouches for it) and removed with the others.
    tracemalloc.start()
    try:
        reports = [await archive.erase(target, _ctx(), dry_run=True), await archive.erase(target, _ctx())]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        await archive.aclose()
    assert peak < PEAK, f"{peak} bytes traced: the huge digest was read into Python"
    for report in reports:
        digests = dict(report.sessions[0].groups)
        assert sorted(digests) == [0, 1, 2] and digests[1] == ""
        assert digests[0].startswith("sha256:") and digests[2].startswith("sha256:")
    assert _sql(path, "SELECT count(*) FROM groups WHERE length(CAST(digest AS BLOB)) > 71") == [(0,)]


async def test_a_huge_resident_digest_is_refused_by_the_commit_before_it_is_fetched(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    await _seeded(path)
    _damage_group(path, 4, "digest", "printf('%.*c', ?, 'x')", HUGE)
    before = _fingerprint(path)
    # The load does not read digests; the save compares the rows it holds by theirs.
    config = SQLiteConfig(path=str(path))
    store, archive = SQLiteSessionStore(config), SQLiteArchive(config)
    loaded = await store.load(KEY, _ctx())
    assert loaded is not None
    snapshot, revision = loaded.snapshot, loaded.revision
    for name, call in {
        "save": lambda: store.save(KEY, snapshot, revision, _ctx()),
        "commit": lambda: store.commit_with_archive(archive, KEY, [], snapshot, revision, _ctx()),
    }.items():
        await _refused_unread(call, SnapshotCorruptError, rf"digest of length {HUGE}", name)
    await store.aclose()
    await archive.aclose()
    assert _fingerprint(path) == before


async def test_a_huge_session_id_is_refused_by_listings_and_erased_unread_as_damaged(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    await _seeded(path)
    _sql(path, "UPDATE sessions SET session_id = printf('%.*c', ?, 'x') WHERE session_id = 's1'", (HUGE,))
    before = _fingerprint(path)
    store = SQLiteSessionStore(SQLiteConfig(path=str(path)))
    archive = SQLiteArchive(SQLiteConfig(path=str(path)))
    user = EraseTarget.user("acme", "ana")
    list_sessions = lambda: store.list_sessions("acme", "ana", 10, _ctx())  # noqa: E731
    await _refused_unread(list_sessions, SnapshotCorruptError, rf"session_id of length {HUGE}", "list")
    assert _fingerprint(path) == before
    # The erasures stopped on it for good (no user or tenant erasure could complete). No key can
    # name the session, but the user's ids matched it: its snapshot and its three archived groups
    # are erased unread and counted as damaged; the other session's as usual.
    tracemalloc.start()
    try:
        plans = [
            await store.erase(user, _ctx(), dry_run=True),
            await archive.erase(user, _ctx(), dry_run=True),
        ]
        done = [await store.erase(user, _ctx()), await archive.erase(user, _ctx())]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        await store.aclose()
        await archive.aclose()
    assert peak < PEAK, f"{peak} bytes traced: the huge id was read into Python"
    for stored, archived in (plans, done):
        assert (stored.count("snapshot"), stored.count("damaged")) == (1, 1)
        assert [s.session.session for s in stored.sessions] == ["s2"]
        assert (archived.count("group"), archived.count("damaged"), archived.sessions) == (0, 3, ())
    assert _sql(path, "SELECT count(*) FROM sessions") == [(0,)]
    assert _sql(path, "SELECT count(*) FROM groups") == [(0,)]


async def test_a_huge_schema_version_is_refused_when_the_file_opens(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    await _seeded(path)
    _sql(path, "UPDATE meta SET value = printf('%.*c', ?, '3') WHERE key = 'schema_version'", (HUGE,))
    before = _fingerprint(path)
    store = SQLiteSessionStore(SQLiteConfig(path=str(path)))
    await _refused_unread(
        lambda: store.load(KEY, _ctx()), SQLiteStorageError, rf"schema version of {HUGE} characters", "open"
    )
    await store.aclose()
    assert _fingerprint(path) == before


async def test_a_huge_revision_floor_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    await _seeded(path)
    # The guards refuse such a value: dropped first, as a tampering would (an open makes them again).
    for name in ("revision_floor_update_only_rises", "revision_floor_insert_only_rises"):
        _sql(path, f"DROP TRIGGER {name}")
    _sql(path, "UPDATE revision_floor SET floor = printf('%.*c', ?, 'x') WHERE id = 0", (HUGE,))
    before = _fingerprint(path)
    store = SQLiteSessionStore(SQLiteConfig(path=str(path)))
    await _refused_unread(
        lambda: store.save(SessionKey("acme", "ana", "s9"), _snapshot("s9"), None, _ctx()),
        SQLiteRevisionFloorError,
        rf"revision floor is damaged \(floor of length {HUGE} characters",
        "create",
    )
    await store.aclose()
    assert _fingerprint(path) == before


# -- a value whose length() stops at a NUL: its bytes are bounded too --------------------------------


@pytest.mark.parametrize("where", ["archived group", "resident group", "snapshot"])
async def test_stored_json_hiding_its_size_behind_a_nul_is_refused_unread(tmp_path: Path, where: str) -> None:
    # length() was 1, within every bound: the 256 MiB text was read whole into Python.
    path = tmp_path / "a.db"
    await _seeded(path)
    size = rf"of length {OVER_JSON + 2} bytes"
    if where == "snapshot":
        _sql(path, f"UPDATE sessions SET snapshot = {NUL_TEXT} WHERE session_id = 's1'", (OVER_JSON,))
    else:
        _damage_group(path, 1 if where == "archived group" else 4, "data", NUL_TEXT, OVER_JSON)
    assert _sql(path, "SELECT count(*) FROM groups WHERE typeof(data) = 'text'") == [
        (0 if where == "snapshot" else 1,)
    ]
    before = _fingerprint(path)
    store = SQLiteSessionStore(SQLiteConfig(path=str(path)))
    async with _runtime(path) as rt:
        if where == "archived group":
            message = rf"data {size} \(at most {MAX_JSON_BYTES}\)"
            call = lambda: rt.read_history(ANA, "s1", max_groups=5)  # noqa: E731
            await _refused_unread(call, ArchiveCorruptError, message, "read_history")
        else:
            message = rf"group 4 {size}" if where == "resident group" else rf"snapshot {size}"
            await _refused_unread(lambda: store.load(KEY, _ctx()), SnapshotCorruptError, message, "load")
            await _refused_unread(
                lambda: rt.append(ANA, "s1", _pair(5)), SnapshotCorruptError, message, "append"
            )
    await store.aclose()
    assert _fingerprint(path) == before


async def test_a_digest_hiding_its_size_behind_a_nul_is_refused_unread_and_erased(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    await _seeded(path)
    _damage_group(path, 1, "digest", NUL_TEXT, HUGE)
    before = _fingerprint(path)
    archive = SQLiteArchive(SQLiteConfig(path=str(path)))
    message = rf"digest of length {HUGE + 2} bytes \(at most {4 * 71}\)"
    async with _runtime(path) as rt:
        for name, call in {
            "read_history": lambda: rt.read_history(ANA, "s1", max_groups=5),
            "read_groups": lambda: archive.read_groups(KEY, 0, 10, _ctx()),
        }.items():
            await _refused_unread(call, ArchiveCorruptError, message, name)
    assert _fingerprint(path) == before
    tracemalloc.start()
    try:
        report = await archive.erase(EraseTarget.session("acme", "ana", "s1"), _ctx())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        await archive.aclose()
    assert peak < PEAK, f"{peak} bytes traced: the huge digest was read into Python"
    assert dict(report.sessions[0].groups)[1] == ""
    assert _sql(path, "SELECT count(*) FROM groups WHERE length(CAST(digest AS BLOB)) > 71") == [(0,)]


async def test_a_session_id_hiding_its_size_behind_a_nul_is_refused_by_listings_and_erased(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.db"
    await _seeded(path)
    _sql(path, f"UPDATE sessions SET session_id = {NUL_TEXT} WHERE session_id = 's1'", (HUGE,))
    before = _fingerprint(path)
    store = SQLiteSessionStore(SQLiteConfig(path=str(path)))
    archive = SQLiteArchive(SQLiteConfig(path=str(path)))
    user = EraseTarget.user("acme", "ana")
    list_sessions = lambda: store.list_sessions("acme", "ana", 10, _ctx())  # noqa: E731
    message = rf"session_id of length {HUGE + 2} bytes \(at most {4 * 256}\)"
    await _refused_unread(list_sessions, SnapshotCorruptError, message, "list")
    assert _fingerprint(path) == before
    tracemalloc.start()
    try:
        done = [await store.erase(user, _ctx()), await archive.erase(user, _ctx())]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        await store.aclose()
        await archive.aclose()
    assert peak < PEAK, f"{peak} bytes traced: the huge id was read into Python"
    stored, archived = done
    assert (stored.count("snapshot"), stored.count("damaged")) == (1, 1)
    assert (archived.count("group"), archived.count("damaged")) == (0, 3)
    assert _sql(path, "SELECT count(*) FROM sessions") == [(0,)]


async def test_a_schema_version_hiding_its_size_behind_a_nul_is_refused_when_the_file_opens(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.db"
    await _seeded(path)
    _sql(path, f"UPDATE meta SET value = {NUL_TEXT} WHERE key = 'schema_version'", (HUGE,))
    before = _fingerprint(path)
    store = SQLiteSessionStore(SQLiteConfig(path=str(path)))
    message = rf"schema version of 1 characters \({HUGE + 2} bytes\)"
    await _refused_unread(lambda: store.load(KEY, _ctx()), SQLiteStorageError, message, "open")
    await store.aclose()
    assert _fingerprint(path) == before


# -- erasure: damage never stops the erasure of what holds it ---------------------------------------


@pytest.mark.parametrize("damage", ["snapshot", "resident group"])
async def test_a_user_erasure_removes_a_session_whose_snapshot_is_huge_unread(
    tmp_path: Path, damage: str
) -> None:
    # The oversized snapshot (or resident row) stopped the session store's erasure and the archive's
    # (which never reads the snapshot) with a *CorruptError: no user or tenant erasure could ever
    # remove that session. A damaged snapshot is erased all the same, reported with no groups.
    path = tmp_path / "a.db"
    await _seeded(path)
    if damage == "snapshot":
        _sql(path, "UPDATE sessions SET snapshot = zeroblob(?) WHERE session_id = 's1'", (OVER_JSON,))
    else:
        _damage_group(path, 4, "data", "zeroblob(?)", OVER_JSON)
    config = SQLiteConfig(path=str(path))
    store, archive = SQLiteSessionStore(config), SQLiteArchive(config)
    user = EraseTarget.user("acme", "ana")
    tracemalloc.start()
    try:
        plans = [
            await store.erase(user, _ctx(), dry_run=True),
            await archive.erase(user, _ctx(), dry_run=True),
        ]
        done = [await store.erase(user, _ctx()), await archive.erase(user, _ctx())]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        await store.aclose()
        await archive.aclose()
    assert peak < PEAK, f"{peak} bytes traced: the huge value was read into Python"
    for stored, archived in (plans, done):
        assert stored.count("snapshot") == 2
        # The damaged snapshot's groups cannot be vouched for: none named; s2's one group is.
        assert {s.session.session: [seq for seq, _ in s.groups] for s in stored.sessions} == {
            "s1": [],
            "s2": [0],
        }
        assert archived.count("group") == 3
        assert [seq for seq, _ in archived.sessions[0].groups] == [0, 1, 2]
    assert _sql(path, "SELECT count(*) FROM sessions") == [(0,)]
    assert _sql(path, "SELECT count(*) FROM groups") == [(0,)]


async def test_an_append_refuses_a_group_longer_than_reads_accept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A host's direct append stored a group over MAX_JSON_BYTES, which every read then refused as
    # damage: the group lost for good. The bound is lowered here, as building a 256 MiB group would
    # take a gigabyte; the append checks the same constant the reads are built from.
    from agentium_harness.adapters import _sqlite_archive

    path = tmp_path / "a.db"
    small, large = plain_group(0), plain_group(1, "x" * 4000)
    monkeypatch.setattr(_sqlite_archive, "JSON_BYTES", large.size_bytes - 1, raising=False)
    archive = SQLiteArchive(SQLiteConfig(path=str(path)))
    try:
        with pytest.raises(
            InvalidArgumentError, match=rf"group 1 is {large.size_bytes} bytes.*nothing was written"
        ):
            await archive.append(KEY, [small, large], _ctx())
        assert await archive.read_groups(KEY, 0, 10, _ctx()) == []
        assert [r.seq for r in await archive.append(KEY, [small], _ctx())] == [0]  # within the bound
    finally:
        await archive.aclose()


@pytest.mark.parametrize("column", ["revision", "boundary", "next_seq", "inline"])
async def test_a_user_erasure_removes_a_session_whose_snapshot_columns_are_huge_unread(
    tmp_path: Path, column: str
) -> None:
    # A snapshot column over its bound stopped the store's erasure and the archive's (which reads
    # none of them) for good. Only the watermark decides whose rows are whose; the rest of the
    # row is erased unread (a revision that is not an integer is left out of the floor, as before).
    path = tmp_path / "a.db"
    await _seeded(path)
    _sql(path, f"UPDATE sessions SET {column} = printf('%.*c', ?, 'x') WHERE session_id = 's1'", (HUGE,))
    config = SQLiteConfig(path=str(path))
    store, archive = SQLiteSessionStore(config), SQLiteArchive(config)
    user = EraseTarget.user("acme", "ana")
    tracemalloc.start()
    try:
        stored = await store.erase(user, _ctx())
        archived = await archive.erase(user, _ctx())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        await store.aclose()
        await archive.aclose()
    assert peak < PEAK, f"{peak} bytes traced: the huge value was read into Python"
    assert stored.count("snapshot") == 2 and archived.count("group") == 3
    assert _sql(path, "SELECT count(*) FROM sessions") == [(0,)]
    assert _sql(path, "SELECT count(*) FROM groups") == [(0,)]
    # s1 was at revision 5, s2 at 1: a damaged revision is left out of the floor, no load returning it.
    assert _sql(path, "SELECT floor FROM revision_floor") == [(1 if column == "revision" else 5,)]


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("session_id", "'s' || char(0) || '1'"),
        ("session_id", "CAST('s1' AS BLOB)"),
        ("session_id", "''"),
        ("user_id", "'a' || char(127)"),
    ],
)
async def test_an_id_no_key_holds_within_its_bound_is_refused_by_listings_and_erased_as_damaged(
    tmp_path: Path, column: str, value: str
) -> None:
    # A stored id no SessionKey takes, within the column's bound (a NUL, a BLOB, empty, a DEL) makes
    # the user's listing fail closed (SnapshotCorruptError), whose only remedy is the user's (or the
    # tenant's) erasure. Both erasures raised InvalidIdError on that row instead, for good: one
    # damaged row stopped the listing and every erasure of its user. It is erased unread, counted
    # as damaged, as an id over its bound is.
    path = tmp_path / "a.db"
    await _seeded(path)
    _sql(path, f"UPDATE sessions SET {column} = {value} WHERE session_id = 's1'")
    store = SQLiteSessionStore(SQLiteConfig(path=str(path)))
    archive = SQLiteArchive(SQLiteConfig(path=str(path)))
    target = EraseTarget.user("acme", "ana") if column == "session_id" else EraseTarget.tenant("acme")
    try:
        if column == "session_id" and value != "''":  # an empty id is below every listing's cursor
            with pytest.raises(SnapshotCorruptError, match="no key holds"):
                await store.list_sessions("acme", "ana", 10, _ctx())
        done = [await store.erase(target, _ctx()), await archive.erase(target, _ctx())]
        stored, archived = done
        assert (stored.count("snapshot"), stored.count("damaged")) == (1, 1)
        assert [s.session.session for s in stored.sessions] == ["s2"]
        assert (archived.count("group"), archived.count("damaged")) == (0, 3)
        assert _sql(path, "SELECT count(*) FROM sessions") == [(0,)]
        assert _sql(path, "SELECT count(*) FROM groups") == [(0,)]
        assert await store.list_sessions("acme", "ana", 10, _ctx()) == []
    finally:
        await store.aclose()
        await archive.aclose()
