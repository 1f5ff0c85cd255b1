"""The core's ArchiveContract and SessionStoreContract, unchanged, on moto's server and on Ceph RGW."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from s3_helpers import BUCKET
from s3_servers import S3Server

from agentium_archive_s3 import S3Archive, S3Config, S3SessionStore
from agentium_archive_s3.keys import archive_key, session_object_key
from agentium_harness.plugin_api import SessionKey
from agentium_harness.testing import ArchiveContract, CorruptStored, RawStorage, SessionStoreContract

Transform = Callable[[bytes], bytes]


def _rewrite(admin: Any, object_key: str, transform: Transform) -> None:
    """Replace an object's bytes out of band, keeping its metadata (the stored digest) as it was."""
    try:
        reply = admin.get_object(Bucket=BUCKET, Key=object_key)
    except admin.exceptions.NoSuchKey:
        raise LookupError(f"no object {object_key!r}") from None
    data = reply["Body"].read()
    admin.put_object(Bucket=BUCKET, Key=object_key, Body=transform(data), Metadata=reply.get("Metadata", {}))


def every_version(admin: Any, prefix: str, bucket: str = BUCKET) -> bytes:
    """Every key below ``prefix`` and the bytes of every version of it the server keeps."""
    out: list[bytes] = []
    for page in admin.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Versions", []):
            out.append(item["Key"].encode())
            body = admin.get_object(Bucket=bucket, Key=item["Key"], VersionId=item["VersionId"])["Body"]
            out.append(body.read())
    return b"\n".join(out)


class TestS3Archive(ArchiveContract):
    """Runs once per server flavour (the ``server`` fixture is parametrized: moto, rgw)."""

    @pytest.fixture
    async def archive(self, config: S3Config) -> AsyncIterator[S3Archive]:
        adapter = S3Archive(config)
        yield adapter
        await adapter.aclose()

    @pytest.fixture
    def reopen_archive(self, config: S3Config) -> Callable[[], S3Archive]:
        return lambda: S3Archive(config)

    @pytest.fixture
    def corrupt_archived_group(self, config: S3Config, admin: Any) -> CorruptStored:
        def corrupt(key: SessionKey, seq: int, transform: Transform) -> None:
            _rewrite(admin, archive_key(config.prefix, key, seq), transform)

        return corrupt

    @pytest.fixture
    def raw_storage(self, config: S3Config, admin: Any) -> RawStorage:
        return lambda: every_version(admin, config.prefix + "/")


_ONE_WINNER = "test_concurrent_saves_on_one_revision_have_one_winner"


class TestS3SessionStore(SessionStoreContract):
    """Runs once per server flavour."""

    @pytest.fixture
    async def session_store(self, config: S3Config) -> AsyncIterator[S3SessionStore]:
        adapter = S3SessionStore(config)
        yield adapter
        await adapter.aclose()

    @pytest.fixture
    def reopen_session_store(self, config: S3Config) -> Callable[[], S3SessionStore]:
        return lambda: S3SessionStore(config)

    @pytest.fixture
    def corrupt_snapshot(self, config: S3Config, admin: Any) -> CorruptStored:
        def corrupt(key: SessionKey, transform: Transform) -> None:
            _rewrite(admin, session_object_key(config.prefix, key), transform)

        return corrupt

    @pytest.fixture
    def raw_storage(self, config: S3Config, admin: Any) -> RawStorage:
        return lambda: every_version(admin, config.prefix + "/")

    @pytest.fixture(autouse=True)
    def _moto_conditional_writes_are_not_atomic(
        self, request: pytest.FixtureRequest, server: S3Server
    ) -> None:
        """The contract's one-winner race runs on Ceph RGW only: moto's conditional write is not atomic.

        moto checks a PUT's ``IfMatch`` and then writes, with no lock between
        (README's server table): two saves holding one ETag can both succeed
        there (seen in CI: two winners of six). AWS and RGW make the
        conditional write atomic, and the store relies on exactly that. A skip,
        not an override: the suite's guard refuses a replaced standard test.
        """
        if server.flavour == "moto" and request.node.originalname == _ONE_WINNER:
            pytest.skip("moto's conditional PUT is not atomic (README's server table); tested on Ceph RGW")


def test_server_flavours_are_real(server: S3Server) -> None:
    """The fixture gives a live HTTP endpoint on loopback."""
    assert server.endpoint.startswith("http://127.0.0.1:")
