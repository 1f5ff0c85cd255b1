"""One documented codec path for every stored record, memory facts included (issue 29 item 7).

``to_json``/``from_json`` from ``plugin_api`` encode a ``StoredFact`` with its
datetimes as fixed-width UTC text and decode it back equal; a naive time is
refused (``EncodingError``), and text ``iso_utc`` could not have written is a
``RecordDecodeError``. The errors the ports name are exported, and a bad id
is the ``InvalidArgumentError`` the recall port names.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import attrs
import pytest

from agentium_harness.plugin_api import (
    EncodingError,
    FactStatus,
    GroupRef,
    InvalidArgumentError,
    InvalidIdError,
    MemoryFact,
    MemoryScope,
    RecordDecodeError,
    SourceOwner,
    StoredFact,
    document_source_id,
    from_json,
    iso_utc,
    parse_iso_utc,
    to_json,
)

WHEN = datetime(2026, 1, 31, 9, 30, tzinfo=timezone(timedelta(hours=1)))


def _stored() -> StoredFact:
    fact = MemoryFact(
        MemoryScope("acme", "alice", "p1"),
        "Alice prefers green tea",
        valid_from=WHEN,
        valid_until=WHEN + timedelta(days=30),
        provenance=[GroupRef("s1", 3, "sha256:" + "a" * 64)],
    )
    return StoredFact("m-1", 2, FactStatus.SUPERSEDED, fact, WHEN + timedelta(seconds=1))


def test_a_stored_fact_round_trips_through_the_codec_with_its_datetimes() -> None:
    stored = _stored()
    text = to_json(stored)
    assert '"valid_from":"2026-01-31T08:30:00.000000Z"' in text
    assert from_json(text, StoredFact) == stored
    assert to_json(from_json(text, StoredFact)) == text  # one canonical encoding


def test_a_naive_datetime_is_refused_when_encoding() -> None:
    # MemoryFact refuses naive times itself; a record type that allows them is still refused by the codec.
    @attrs.frozen
    class Stamp:
        at: datetime

    with pytest.raises(EncodingError, match="timezone-aware"):
        to_json(Stamp(datetime(2026, 1, 31, 9, 30)))
    assert to_json(Stamp(WHEN)) == '{"at":"2026-01-31T08:30:00.000000Z"}'


@pytest.mark.parametrize(
    "stored_time",
    ["2026-01-31T08:30:00Z", "2026-01-31T08:30:00.000000+00:00", "2026-01-31 08:30:00.000000Z", 1769848200],
)
def test_a_time_iso_utc_could_not_have_written_is_a_decode_error(stored_time: object) -> None:
    data = to_json(_stored()).replace('"2026-01-31T08:30:00.000000Z"', f'"{stored_time}"', 1)
    if isinstance(stored_time, int):
        data = to_json(_stored()).replace('"2026-01-31T08:30:00.000000Z"', str(stored_time), 1)
    with pytest.raises(RecordDecodeError, match="valid_from"):
        from_json(data, StoredFact)


def test_iso_utc_and_parse_iso_utc_are_inverse() -> None:
    assert parse_iso_utc(iso_utc(WHEN)) == WHEN
    assert parse_iso_utc(iso_utc(WHEN)).tzinfo is UTC


def test_a_bad_id_is_the_invalid_argument_error_the_ports_name() -> None:
    assert issubclass(InvalidIdError, InvalidArgumentError)
    with pytest.raises(InvalidArgumentError, match="doc_id"):
        document_source_id(SourceOwner("acme"), "bad\x00id")


def test_every_error_a_port_names_is_exported_from_plugin_api() -> None:
    import re
    from pathlib import Path

    import agentium_harness
    import agentium_harness.plugin_api as plugin_api

    ports = Path(agentium_harness.__file__).parent / "_ports"
    named = set()
    for source in ports.glob("*.py"):
        named |= set(re.findall(r"``([A-Z]\w*Error)``", source.read_text("utf-8")))
    builtins = {"KeyError", "TypeError", "ValueError", "UnicodeEncodeError"}
    missing = sorted(n for n in named - builtins if not hasattr(plugin_api, n))
    assert not missing, f"port docs name errors plugin_api does not export: {missing}"
