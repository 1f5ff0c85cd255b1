"""Shared pieces of the tests that damage a SQLite file by hand and check nothing huge is read.

A value is built by SQLite itself (``printf``, ``zeroblob``) so the test
never holds it: tracemalloc's peak then tells whether a store read it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Final

#: For a digest, an id, a text or a version: far over anything a store writes.
HUGE: Final = 64 * 1024 * 1024
#: Far below HUGE: a read that fetched the value would pass it.
PEAK: Final = 8 * 1024 * 1024
#: A text of one character, a NUL, then ``?`` more: ``length()`` counts one character of it.
NUL_TEXT: Final = "'x' || char(0) || printf('%.*c', ?, 'x')"


def raw_sql(path: Path, statement: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """Run ``statement`` on its own connection to ``path``, committed, and return its rows."""
    conn = sqlite3.connect(path)
    try:
        with conn:
            return conn.execute(statement, params).fetchall()
    finally:
        conn.close()
