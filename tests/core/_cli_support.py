"""A deployment config for CLI tests: every store in one SQLite database, the extractive model.

``SQLITE_RECALL_CONFIG`` is a ``str.format`` template: ``{db}`` is the
database's path (as posix); its literal braces are doubled. A test adds
its own sections after it.
"""

from __future__ import annotations

SQLITE_RECALL_CONFIG = """
[provider]
plugin = "extractive"
[archive]
plugin = "sqlite"
options = {{ path = "{db}" }}
[session_store]
plugin = "sqlite"
options = {{ path = "{db}" }}
[recall]
plugin = "sqlite"
options = {{ path = "{db}" }}
"""
