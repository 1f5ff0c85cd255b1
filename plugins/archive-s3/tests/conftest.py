"""Fixtures: real S3 servers (moto's standalone server and Ceph RGW), a versioned bucket, fresh configs.

Server fixtures FAIL when moto is missing; RGW fails when ``AGENTIUM_REQUIRE_RGW=1`` (CI) and otherwise
skips with a reason naming the install script (see ``s3_servers``).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import botocore.config
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from s3_servers import FLAVOURS, S3Server, ServerUnavailable, rgw_required, start_server

from agentium_archive_s3 import S3Config

BUCKET = "agentium-tests"
VERSIONED_BUCKET = "agentium-versioned"
_prefixes = itertools.count()


def new_prefix() -> str:
    """A key prefix no other test uses, so each adapter starts empty in the shared bucket."""
    return f"t{next(_prefixes)}"


@pytest.fixture
def anyio_backend() -> str:
    """The adapters are anyio code; the servers are shared per session, so one backend keeps runs short."""
    return "asyncio"


def raw_client(server: S3Server, **config: Any) -> Any:
    """A plain boto3 client on ``server`` (path-style, checksums only where required)."""
    return boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        aws_access_key_id=server.access_key,
        aws_secret_access_key=server.secret_key,
        region_name="us-east-1",
        config=botocore.config.Config(
            s3={"addressing_style": "path"},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            **{"retries": {"total_max_attempts": 2, "mode": "standard"}, **config},
        ),
    )


def _launch(flavour: str, workdir: Path) -> S3Server:
    try:
        return start_server(flavour, workdir)
    except ServerUnavailable as exc:
        if flavour == "rgw" and not rgw_required():
            pytest.skip(f"{exc} (set AGENTIUM_REQUIRE_RGW=1 to make this a failure, as CI does)")
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session", params=FLAVOURS)
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One server of each flavour, shared by the session, with the versioned test bucket."""
    process = _launch(request.param, tmp_path_factory.mktemp(request.param))
    try:
        s3 = raw_client(process)
        s3.create_bucket(Bucket=BUCKET)
        if process.flavour == "moto":
            # Versioning shows every overwrite as a second version: the tests count versions.
            # Ceph RGW 16 ignores IfNoneMatch="*" in a versioned bucket (see the README and
            # test_s3_probe.py), so its bucket stays unversioned.
            s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
        s3.create_bucket(Bucket=VERSIONED_BUCKET)
        s3.put_bucket_versioning(Bucket=VERSIONED_BUCKET, VersioningConfiguration={"Status": "Enabled"})
        s3.close()
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A moto server of its own, for tests that kill it or need it alone."""
    process = _launch("moto", tmp_path_factory.mktemp("moto-own"))
    yield process
    process.stop()


@pytest.fixture
def admin(server: S3Server) -> Iterator[Any]:
    """A plain boto3 client on the shared server, for looking behind the adapters' backs."""
    client = raw_client(server)
    yield client
    client.close()


def make_config(server: S3Server, prefix: str | None = None, **options: Any) -> S3Config:
    """An :class:`S3Config` for ``server``'s test bucket (short timeouts) under a fresh prefix."""
    values: dict[str, Any] = {
        "bucket": BUCKET,
        "prefix": prefix or new_prefix(),
        "endpoint_url": server.endpoint,
        "region": "us-east-1",
        "access_key_id": server.access_key,
        "secret_access_key": server.secret_key,
        "addressing_style": "path",
        "connect_timeout_s": 2.0,
        "read_timeout_s": 10.0,
        "max_attempts": 3,
    }
    values.update(options)
    return S3Config(**values)


@pytest.fixture
def config(server: S3Server) -> S3Config:
    """A config on the shared server under a prefix of its own."""
    return make_config(server)


def versions(admin: Any, prefix: str) -> dict[str, int]:
    """How many versions (delete markers included) each key below ``prefix`` has."""
    counts: dict[str, int] = {}
    paginator = admin.get_paginator("list_object_versions")
    for page in paginator.paginate(Bucket=BUCKET, Prefix=prefix):
        for item in page.get("Versions", []) + page.get("DeleteMarkers", []):
            counts[item["Key"]] = counts.get(item["Key"], 0) + 1
    return counts


def live_keys(admin: Any, prefix: str) -> list[str]:
    """The keys below ``prefix`` that currently hold an object."""
    keys: list[str] = []
    for page in admin.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        keys.extend(item["Key"] for item in page.get("Contents", []))
    return keys
