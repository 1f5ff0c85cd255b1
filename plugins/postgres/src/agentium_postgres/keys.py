"""Key columns from the scope's injective key segments, and statement text for one schema.

Every key column holds :func:`~agentium_harness.plugin_api.encode_segment` of
an id (ASCII letters, digits, ``_``, ``-`` and ``%XX``), so two different ids
never share a key and no id can act as a pattern, a quote or an escape.
Values always travel as bound parameters; the schema name is the only text
spliced into statements, as a double-quoted identifier.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, LiteralString

from agentium_harness.plugin_api import SessionKey

if TYPE_CHECKING:
    from psycopg import sql

__all__ = ["q", "session_keys"]


def session_keys(key: SessionKey) -> tuple[str, str, str]:
    """(tenant_key, user_key, session_key) of a session."""
    return key.key_segments()


@cache
def _q(template: LiteralString, schema: str) -> sql.Composed:
    # Imported here, not at module level: listing the plugin must not load the client library.
    from psycopg import sql

    return sql.SQL(template).format(s=sql.Identifier(schema))


def q(template: LiteralString, schema: str) -> sql.Composed:
    """``template`` with ``{s}`` replaced by the quoted schema identifier (cached per schema)."""
    return _q(template, schema)
