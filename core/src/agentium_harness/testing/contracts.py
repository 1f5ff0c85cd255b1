"""Contract suites for adapter authors, in one import.

Subclass :class:`ArchiveContract` or :class:`SessionStoreContract` in a test
module, provide the one fixture the suite names (``archive`` or
``session_store``), and every standard test runs against your adapter. See
``docs/contract-suites.md``. Importing this module needs pytest.
"""

from __future__ import annotations

import pytest  # noqa: F401  (loaded before the registration below, which needs it)

from . import register_assert_rewrite

# Before the suite modules are imported: their asserts then show the values
# they compared when a standard test fails.
register_assert_rewrite()

from ._suite import (  # noqa: E402  (after the rewrite registration on purpose)
    GUARD_TEST_NAME,
    TRICKY_SESSION_KEYS,
    ContractSuite,
    Reopen,
    UndeclaredCapabilityWarning,
    plain_group,
    rich_group,
    standard_tests,
    unmarked_overrides,
)
from .archive_contract import ArchiveContract  # noqa: E402
from .embedder_contract import EmbedderContract  # noqa: E402
from .helpers import CorruptStored, replace_once  # noqa: E402
from .memory_contract import MemoryStoreContract  # noqa: E402
from .recall_contract import HOSTILE_IDS, RecallStoreContract  # noqa: E402
from .session_store_contract import SessionStoreContract, legacy_snapshot, scoped_snapshot  # noqa: E402
from .summarizer_contract import SummarizerContract  # noqa: E402
from .verifier_contract import VerifierContract  # noqa: E402

__all__ = [
    "GUARD_TEST_NAME",
    "TRICKY_SESSION_KEYS",
    "HOSTILE_IDS",
    "ArchiveContract",
    "ContractSuite",
    "CorruptStored",
    "EmbedderContract",
    "MemoryStoreContract",
    "RecallStoreContract",
    "Reopen",
    "SessionStoreContract",
    "SummarizerContract",
    "UndeclaredCapabilityWarning",
    "VerifierContract",
    "legacy_snapshot",
    "plain_group",
    "replace_once",
    "rich_group",
    "scoped_snapshot",
    "standard_tests",
    "unmarked_overrides",
]
