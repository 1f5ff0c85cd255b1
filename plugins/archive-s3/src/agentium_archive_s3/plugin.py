"""The plugin module named by the ``agentium`` entry point: registers ``s3`` as archive and session store."""

from __future__ import annotations

from agentium_harness.plugin_api import AdapterSpec, Register, hookimpl

from .archive import S3Archive
from .config import S3Config
from .sessions import S3SessionStore

__all__ = ["agentium_register_archives", "agentium_register_session_stores"]


@hookimpl
def agentium_register_archives(register: Register) -> None:
    """Register the S3 history archive as archive adapter ``s3`` (options: :class:`S3Config`).

    Building it does no I/O; the client is created on the first call.
    """
    register(
        AdapterSpec(
            name="s3",
            adapter_class=S3Archive,
            config_class=S3Config,
            description="S3 / Ceph RGW history archive: create-only objects, checksums, checked reads",
        )
    )


@hookimpl
def agentium_register_session_stores(register: Register) -> None:
    """Register the S3 session store as session store adapter ``s3`` (options: :class:`S3Config`)."""
    register(
        AdapterSpec(
            name="s3",
            adapter_class=S3SessionStore,
            config_class=S3Config,
            description="S3 / Ceph RGW session snapshots: compare-and-set with IfNoneMatch / IfMatch",
        )
    )
