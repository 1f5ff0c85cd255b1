"""Key columns from the scope's injective key segments, and statement text for one schema.

Every key column holds :func:`~agentium_harness.plugin_api.encode_segment` of
an id (ASCII letters, digits, ``_``, ``-`` and ``%XX``), so two different ids
never share a key and no id can act as a pattern, a quote or an escape.
Values always travel as bound parameters; the schema name is the only text
spliced into statements, as a double-quoted identifier.
"""

from __future__ import annotations

from functools import cache
from typing import LiteralString

from psycopg import sql

from agentium_harness.plugin_api import SessionKey

__all__ = ["q", "session_keys"]


def session_keys(key: SessionKey) -> tuple[str, str, str]:
    """(tenant_key, user_key, session_key) of a session."""
    return key.key_segments()


@cache
def _q(template: LiteralString, schema: str) -> sql.Composed:
    return sql.SQL(template).format(s=sql.Identifier(schema))


def q(template: LiteralString, schema: str) -> sql.Composed:
    """``template`` with ``{s}`` replaced by the quoted schema identifier (cached per schema)."""
    return _q(template, schema)
