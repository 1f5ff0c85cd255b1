"""Bad arguments to the built-in recall stores and their sessions are typed errors that change nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from agentium_harness import InvalidArgumentError, OpContext, RecallLimits, Scope, SessionKey
from agentium_harness._cli import main
from agentium_harness._scope import ERASURE_RECORDS_TENANT
from agentium_harness.adapters.memory_recall import InMemoryRecallStore
from agentium_harness.adapters.sqlite_recall import SQLiteRecallConfig, SQLiteRecallStore
from agentium_harness.plugin_api import SourceOwner

pytestmark = pytest.mark.anyio

OWN = SourceOwner("acme")
KEY = SessionKey("acme", "ana", "s1")
Call = Callable[[Any, Any, Any], Awaitable[object]]


def ctx() -> OpContext:
    return OpContext.with_timeout(30.0)


# Each raised TypeError, AttributeError or OverflowError (in one store or both) before the fix.
BAD: list[tuple[str, Call]] = [
    ("discover(None)", lambda st, s, ref: s.discover(None, 8, ctx())),
    ("discover(bytes)", lambda st, s, ref: s.discover(b"rota", 8, ctx())),
    ("discover(count str)", lambda st, s, ref: s.discover("rota", "8", ctx())),
    ("discover(count None)", lambda st, s, ref: s.discover("rota", None, ctx())),
    ("discover(ctx None)", lambda st, s, ref: s.discover("rota", 8, None)),
    ("read([None])", lambda st, s, ref: s.read([None], 100, ctx())),
    ("read(ref)", lambda st, s, ref: s.read(ref, 100, ctx())),
    ("read(cap None)", lambda st, s, ref: s.read([ref], None, ctx())),
    ("read(cap str)", lambda st, s, ref: s.read([ref], "100", ctx())),
    ("validate_current([None])", lambda st, s, ref: s.validate_current([None], ctx())),
    ("validate_current(None)", lambda st, s, ref: s.validate_current(None, ctx())),
    ("delete_document(str owner)", lambda st, s, ref: st.delete_document("acme", "d1", ctx())),
    ("index_groups(None)", lambda st, s, ref: st.index_groups(KEY, None, None, ctx())),
    ("unindexed_groups(None key)", lambda st, s, ref: st.unindexed_groups(None, 5, 16, ctx())),
    ("unindexed_groups(str)", lambda st, s, ref: st.unindexed_groups(KEY, "5", 16, ctx())),
    ("unindexed_groups(None count)", lambda st, s, ref: st.unindexed_groups(KEY, 5, None, ctx())),
    ("seek_groups(None key)", lambda st, s, ref: st.seek_groups(None, 0, 5, ctx())),
]


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "memory":
        return InMemoryRecallStore()
    return SQLiteRecallStore(SQLiteRecallConfig(path=(tmp_path / "r.db").as_posix()))


@pytest.mark.parametrize(("label", "call"), BAD, ids=[label for label, _ in BAD])
async def test_bad_arguments_are_invalid_argument_errors(store: Any, label: str, call: Call) -> None:
    ref = await store.index_document(OWN, "d1", "the rota changes on monday", ctx())
    session = await store.open(Scope("acme", "ana", "s1"), RecallLimits(), ctx())
    try:
        with pytest.raises(InvalidArgumentError):
            await call(store, session, ref)
        # Nothing changed: the document is still found and read.
        (found,) = await session.discover("rota", 8, ctx())
        assert found.ref == ref
    finally:
        await session.close()
        await store.aclose()


async def test_huge_seqs_and_counts_are_clamped_not_overflowing(store: Any) -> None:
    # SQLite raised OverflowError (Python int too large to convert to SQLite INTEGER).
    assert list(await store.unindexed_groups(KEY, 10**30, 3, ctx())) == [0, 1, 2]
    assert list(await store.seek_groups(KEY, 0, 10**30, ctx())) == []
    assert list(await store.seek_groups(KEY, 10**30, 5, ctx())) == []
    await store.aclose()


async def test_index_vectors_of_none_is_refused() -> None:
    store = SQLiteRecallStore()
    with pytest.raises(InvalidArgumentError):
        await store.index_vectors(None, ctx())  # type: ignore[arg-type]
    await store.aclose()


def test_the_erasure_records_tenant_owns_no_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # As VerifiedIdentity refuses it; before the fix a document was indexed under it.
    with pytest.raises(InvalidArgumentError, match="reserved"):
        SourceOwner(ERASURE_RECORDS_TENANT)
    db = (tmp_path / "a.db").as_posix()
    config = tmp_path / "a.toml"
    config.write_text(
        f'[provider]\nplugin = "extractive"\n[recall]\nplugin = "sqlite"\noptions = {{ path = "{db}" }}\n'
    )
    doc = tmp_path / "doc.txt"
    doc.write_text("orphan text")
    assert main(["recall", "add", str(config), "--tenant", ERASURE_RECORDS_TENANT, str(doc)]) == 2
    assert "reserved" in capsys.readouterr().err
