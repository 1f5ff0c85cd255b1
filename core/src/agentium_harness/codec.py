"""The one data language: a single cattrs converter and one canonical JSON encoding.

Every record in Agentium is a frozen attrs class. :data:`converter` turns them
into plain data (dicts, lists, strings, numbers) and back; unknown keys are
refused when structuring. :func:`canonical_json` gives the bytes that digests
are computed over: sorted keys, UTF-8, no insignificant whitespace. No pickle
is used anywhere.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from typing import Any, TypeVar

import cattrs

__all__ = [
    "canonical_json",
    "converter",
    "digest_bytes",
    "digest_of",
    "from_json",
    "structure",
    "to_json",
    "unstructure",
]

T = TypeVar("T")


def _canonical_list(items: Iterable[Any]) -> list[Any]:
    # Sets have no order of their own (and string hashing is randomised per
    # process), so they become lists sorted by each item's canonical JSON.
    return sorted(
        items, key=lambda v: json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    )


#: The converter every module uses. ``forbid_extra_keys`` makes stored or
#: configured data with unknown fields an error instead of being ignored.
#: Sets and frozensets unstructure to sorted lists, so they encode as JSON.
converter = cattrs.Converter(
    forbid_extra_keys=True, unstruct_collection_overrides={AbstractSet: _canonical_list}
)
# Enums become their plain values, so the canonical encoding never depends on
# how a JSON library treats enum subclasses. StrEnum and IntEnum are named
# too: their MRO puts str/int before Enum, and cattrs would otherwise pick the
# str/int identity hook and hand back the enum member itself.
for _enum_base in (enum.Enum, enum.StrEnum, enum.IntEnum):
    converter.register_unstructure_hook(_enum_base, lambda member: member.value)


def unstructure(obj: Any) -> Any:
    """Turn a record (or container of records) into plain JSON-compatible data."""
    return converter.unstructure(obj)


def structure(data: Any, cls: type[T]) -> T:
    """Build a record of type ``cls`` from plain data; raises cattrs errors on bad shape."""
    return converter.structure(data, cls)


def canonical_json(data: Any) -> bytes:
    """Canonical JSON bytes of plain data or of a record: sorted keys, UTF-8, compact."""
    plain = (
        data if isinstance(data, dict | list | str | int | float | bool | type(None)) else unstructure(data)
    )
    return json.dumps(
        plain, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def digest_bytes(data: bytes) -> str:
    """``sha256:<hex>`` of raw bytes."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def digest_of(obj: Any) -> str:
    """``sha256:<hex>`` of the canonical JSON of a record or plain value."""
    return digest_bytes(canonical_json(obj))


def to_json(obj: Any) -> str:
    """Canonical JSON text of a record."""
    return canonical_json(obj).decode("utf-8")


def from_json(text: str | bytes, cls: type[T]) -> T:
    """Parse canonical (or any) JSON text into a record of type ``cls``."""
    return structure(json.loads(text), cls)
