"""The fast turn path keeps the encodings exact (issue 7).

Groups are encoded once per object and a snapshot's bytes are joined from its
groups' bytes; both must equal the plain canonical encoding, byte for byte,
whatever the content (including text that looks like the splice marker).
"""

from __future__ import annotations

import gc

from hypothesis import given, settings
from hypothesis import strategies as st

from agentium_harness import Message, MessageGroup, RetainedRecord, Role, Scope, ToolCall
from agentium_harness.codec import canonical_json, digest_bytes, unstructure
from agentium_harness.history import _ENCODED
from agentium_harness.ports.sessions import (
    ArchiveDivergence,
    SessionSnapshot,
    seal_snapshot,
    snapshot_bytes,
    snapshot_digest,
)

SCOPE = Scope("t", "u", "s")
TEXT = st.one_of(st.text(max_size=40), st.sampled_from(['"resident":[]', '{"resident":[]}', "\\", '"']))


def _group(seq: int, text: str, arg: str) -> MessageGroup:
    return MessageGroup(
        seq,
        (
            Message(Role.USER, text),
            Message(Role.ASSISTANT, "", tool_calls=(ToolCall("c1", "tool", {"resident": [arg], arg: 1}),)),
            Message(Role.TOOL, text, tool_call_id="c1"),
        ),
        RetainedRecord(SCOPE, uncertainty=(text,)),
    )


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(TEXT, TEXT), max_size=5), st.one_of(st.none(), TEXT), st.booleans())
def test_snapshot_bytes_equal_the_plain_canonical_encoding(
    items: list[tuple[str, str]], detail: str | None, seal: bool
) -> None:
    groups = tuple(_group(i, t, a) for i, (t, a) in enumerate(items))
    divergence = None if detail is None else ArchiveDivergence((0,), detail)
    snap = SessionSnapshot(SCOPE, 0, len(groups), groups, divergence=divergence)
    if seal:
        snap = seal_snapshot(snap)
    assert snapshot_bytes(snap) == canonical_json(unstructure(snap))
    for group in groups:
        assert group.canonical_bytes() == canonical_json(unstructure(group))
        assert group.digest == digest_bytes(canonical_json(unstructure(group)))


def test_sealed_digest_matches_a_full_reencoding() -> None:
    snap = seal_snapshot(SessionSnapshot(SCOPE, 0, 2, (_group(0, "a", "b"), _group(1, "c", "d"))))
    plain = SessionSnapshot(SCOPE, 0, 2, snap.resident, format_version=snap.format_version)
    assert snap.digest == digest_bytes(canonical_json(unstructure(plain))) == snapshot_digest(snap)


def test_the_group_encoding_cache_forgets_dead_groups() -> None:
    before = len(_ENCODED)
    groups = [_group(i, "x", "y") for i in range(50)]
    for g in groups:
        g.canonical_bytes()
    assert len(_ENCODED) >= before + 50
    del groups, g
    gc.collect()
    assert len(_ENCODED) <= before
