"""Contract suites for adapter authors, in one import.

Subclass :class:`ArchiveContract` or :class:`SessionStoreContract` in a test
module, provide the one fixture the suite names (``archive`` or
``session_store``), and every standard test runs against your adapter. See
``docs/contract-suites.md``. Importing this module needs pytest.
"""

from __future__ import annotations

from ._suite import (
    GUARD_TEST_NAME,
    TRICKY_SESSION_KEYS,
    ContractSuite,
    Reopen,
    plain_group,
    rich_group,
    standard_tests,
    unmarked_overrides,
)
from .archive_contract import ArchiveContract
from .session_store_contract import SessionStoreContract, legacy_snapshot, scoped_snapshot

__all__ = [
    "GUARD_TEST_NAME",
    "TRICKY_SESSION_KEYS",
    "ArchiveContract",
    "ContractSuite",
    "Reopen",
    "SessionStoreContract",
    "legacy_snapshot",
    "plain_group",
    "rich_group",
    "scoped_snapshot",
    "standard_tests",
    "unmarked_overrides",
]
