"""The checks every store makes, written once in ``plugin_api`` (issue 27, item 6).

``checked_index_batch`` (a recall store's ``index_groups`` batch),
``decode_archived_group`` (a stored group's bytes read back) and
``redact_url`` (a server address in messages) are what the built-in
adapters and the plugins call instead of keeping copies.
"""

from __future__ import annotations

import pytest

from agentium_harness.plugin_api import (
    ArchiveCorruptError,
    ArchiveReceipt,
    InvalidArgumentError,
    Message,
    MessageGroup,
    RetainedRecord,
    Role,
    Scope,
    SessionKey,
    checked_index_batch,
    decode_archived_group,
    digest_bytes,
    redact_url,
)

KEY = SessionKey("acme", "ana", "s1")
OTHER = SessionKey("acme", "ana", "s2")


def group(seq: int, text: str = "hello", key: SessionKey | None = None) -> MessageGroup:
    retained = RetainedRecord(Scope(key.tenant, key.user, key.session)) if key is not None else None
    return MessageGroup(seq, (Message(Role.USER, text), Message(Role.ASSISTANT, f"re: {text}")), retained)


def receipt(g: MessageGroup) -> ArchiveReceipt:
    return ArchiveReceipt(g.seq, g.digest, f"test:{g.seq}")


# -------------------------------------------------------------- index batches


def test_a_good_batch_comes_back_in_order_with_an_identical_repeat_once() -> None:
    a, b = group(0, "a", KEY), group(1, "b")
    batch = checked_index_batch(KEY, [a, b, a], [receipt(a), receipt(b), receipt(a)])
    assert batch == [(a, receipt(a)), (b, receipt(b))]


@pytest.mark.parametrize(
    ("groups", "receipts", "says"),
    [
        ([group(0)], [], "1 groups but 0 receipts"),
        ([group(0)], [ArchiveReceipt(1, group(0).digest, "test:1")], "does not match the group"),
        ([group(0)], [ArchiveReceipt(0, group(0, "other").digest, "test:0")], "does not match the group"),
        ([group(0, key=OTHER)], [receipt(group(0, key=OTHER))], "belongs to session"),
        ([group(0, "a"), group(0, "b")], [receipt(group(0, "a")), receipt(group(0, "b"))], "appears twice"),
        (["not a group"], [receipt(group(0))], "MessageGroup and ArchiveReceipt"),
    ],
)
def test_a_bad_batch_is_refused_whole(
    groups: list[MessageGroup], receipts: list[ArchiveReceipt], says: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=says):
        checked_index_batch(KEY, groups, receipts)


def test_a_key_that_is_not_a_session_key_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="SessionKey"):
        checked_index_batch("acme/ana/s1", [], [])  # type: ignore[arg-type]


# -------------------------------------------------------------- stored groups


def test_stored_bytes_decode_to_the_group_and_the_name_is_built_only_for_an_error() -> None:
    g = group(3, "kept", KEY)
    data = g.canonical_bytes()

    def where() -> str:
        raise AssertionError("the row's name is only built for an error")

    assert decode_archived_group(KEY, 3, digest_bytes(data), data, where) == g


def _damaged() -> list[tuple[object, object, object, str]]:
    g = group(3, "kept", KEY)
    data = g.canonical_bytes()
    spaced = data.replace(b'","', b'", "', 1)  # same content, not canonical
    return [
        ("3", digest_bytes(data), data, "non-integer seq"),
        (True, digest_bytes(data), data, "non-integer seq"),
        (3, digest_bytes(data), data.replace(b"kept", b"kEpt"), "does not match its stored digest"),
        (3, None, data, "does not match its stored digest"),
        (3, "", data, "does not match its stored digest"),
        (3, digest_bytes(data), data.decode(), "does not match its stored digest"),
        (3, digest_bytes(b"{"), b"{", "cannot be decoded"),
        (3, digest_bytes(spaced), spaced, "not in canonical form"),
        (4, digest_bytes(data), data, "stored at seq 4"),
    ]


@pytest.mark.parametrize(("seq", "digest", "data", "says"), _damaged())
def test_a_damaged_row_is_archive_corruption(seq: object, digest: object, data: object, says: str) -> None:
    with pytest.raises(ArchiveCorruptError, match=says) as info:
        decode_archived_group(KEY, seq, digest, data, "group 3 of s1 in test.db")
    named = "group 3 of s1 in test.db" in str(info.value)
    assert named or says == "stored at seq 4"  # the seq check names the group by its key


def test_a_group_of_another_session_is_not_returned() -> None:
    g = group(0, "theirs", OTHER)
    data = g.canonical_bytes()
    with pytest.raises(ArchiveCorruptError, match="belongs to session"):
        decode_archived_group(KEY, 0, digest_bytes(data), data, "row")


# -------------------------------------------------------------- addresses


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://:s3cret@cache:6379/0", "redis://***@cache:6379/0"),
        ("https://user:pw@api.example.com/v1", "https://***@api.example.com/v1"),
        ("redis://cache/0?password=s3cret", "redis://cache/0?***"),
        ("http://[::1]:9000/bucket", "http://[::1]:9000/bucket"),
        ("http://host:notaport/", "<unparsable url>"),
    ],
)
def test_redact_url_keeps_the_server_and_drops_every_secret(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert "s3cret" not in redact_url(url) and "pw" not in redact_url(url)
