"""Testing support for hosts and adapter authors.

The contract suites (:class:`ArchiveContract`, :class:`SessionStoreContract`)
live in :mod:`agentium_harness.testing.contracts` and are re-exported here.
They need pytest, so they are imported on first access: importing this
package alone does not require pytest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .contracts import ArchiveContract, ContractSuite, SessionStoreContract

__all__ = ["ArchiveContract", "ContractSuite", "SessionStoreContract"]

_LAZY = frozenset(__all__)


def __getattr__(name: str) -> Any:
    """Import the contract suites (and pytest) only when one of them is used."""
    if name in _LAZY:
        from . import contracts

        return getattr(contracts, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
