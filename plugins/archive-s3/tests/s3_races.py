"""Deterministic races: another "process" runs from a botocore hook, just before a request is sent.

A hook registered on ``before-parameter-build.s3.<Operation>`` of one store's lent client runs in that
store's worker thread, before the request is built and sent; :func:`elsewhere` runs another store's
operation to the end there, on an event loop of its own (a second store stands for another process:
its own adapter and client, no ETag cached).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import attrs
from s3_helpers import BUCKET

from agentium_archive_s3 import S3Config, S3SessionStore
from agentium_archive_s3.link import S3Client, make_client
from agentium_archive_s3.revision_floor import floor_key, parse_floor
from agentium_harness.plugin_api import OpContext

Hook = Callable[[dict[str, Any]], None]


def ctx() -> OpContext:
    """A generous deadline: these operations are meant to succeed."""
    return OpContext.with_timeout(30)


def client(config: S3Config) -> S3Client:
    """A client retrying like the store's, with more attempts (a one-OSD Ceph RGW may answer a 5xx)."""
    return make_client(attrs.evolve(config, max_attempts=6))


def store(config: S3Config) -> S3SessionStore:
    """Another "process": a store of its own with its own client and no ETag cached."""
    return S3SessionStore(config, client=client(config))


def hooked_client(config: S3Config, *operations: str) -> tuple[S3Client, list[Hook]]:
    """A client whose every request of ``operations`` first runs the hooks (its thread, before sending)."""
    made = client(config)
    hooks: list[Hook] = []

    def before(params: dict[str, Any], **_: Any) -> None:
        for hook in list(hooks):
            hook(params)

    for operation in operations:
        made.meta.events.register(f"before-parameter-build.s3.{operation}", before)
    return made, hooks


def elsewhere(work: Callable[[], Awaitable[Any]]) -> Any:
    """Run ``work`` to the end on an event loop of its own, in a thread of its own, and return its result."""
    out: list[Any] = []
    failed: list[BaseException] = []

    def main() -> None:
        try:
            out.append(anyio.run(work))
        except BaseException as exc:  # re-raised in the calling thread
            failed.append(exc)

    thread = threading.Thread(target=main)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return out[0]


def once(wanted: Callable[[dict[str, Any]], bool], action: Callable[[], None]) -> Hook:
    """A hook that runs ``action`` the first time a request ``wanted`` accepts is about to be sent."""
    fired: list[bool] = []

    def hook(params: dict[str, Any]) -> None:
        if not fired and wanted(params):
            fired.append(True)
            action()

    return hook


def floor(admin: S3Client, config: S3Config) -> int:
    """The revision floor as stored (0 when there is none)."""
    try:
        data = admin.get_object(Bucket=BUCKET, Key=floor_key(config.prefix))["Body"].read()
    except admin.exceptions.NoSuchKey:
        return 0
    return parse_floor(data)
