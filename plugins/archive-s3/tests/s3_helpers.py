"""Helpers shared by the archive-s3 tests: the test buckets, configs, raw clients and object counts.

Kept apart from ``conftest.py`` under a unique name: several plugins' test folders run in one pytest
session, and each has its own ``conftest``.
"""

from __future__ import annotations

import itertools
from typing import Any

import boto3
import botocore.config
from s3_servers import S3Server

from agentium_archive_s3 import S3Config

BUCKET = "agentium-tests"
VERSIONED_BUCKET = "agentium-versioned"
_prefixes = itertools.count()


def new_prefix() -> str:
    """A key prefix no other test uses, so each adapter starts empty in the shared bucket."""
    return f"t{next(_prefixes)}"


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
