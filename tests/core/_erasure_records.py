"""Erasures as an earlier version ran them: no record of where they joined the ledger (tests only)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from agentium_harness import SessionKey
from agentium_harness._engine import erasure
from agentium_harness.plugin_api import ERASURE_RECORDS_TENANT, OpContext

__all__ = ["as_earlier_versions", "joined_record"]


@contextmanager
def as_earlier_versions(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Erasures started inside keep no join record (``j-<id>``), as an earlier version's did.

    Every record they keep otherwise is as before, byte for byte: only the
    key an earlier version never wrote is missing (callers check it is,
    with :func:`joined_record`: a renamed hook would leave it there).
    """

    async def not_kept(*args: Any) -> None:
        return None

    with monkeypatch.context() as patched:
        patched.setattr(erasure, "save_joined", not_kept, raising=False)
        yield


async def joined_record(store: Any, tenant: str, erasure_id: str) -> Any:
    """What ``store`` holds at the erasure's join record key (``None``: nothing)."""
    return await store.load(SessionKey(ERASURE_RECORDS_TENANT, tenant, f"j-{erasure_id}"), OpContext())
