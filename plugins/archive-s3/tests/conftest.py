"""Fixtures: real S3 servers (moto's standalone server and Ceph RGW), a versioned bucket, fresh configs.

Server fixtures FAIL when moto is missing; RGW fails when ``AGENTIUM_REQUIRE_RGW=1`` (CI) and otherwise
skips with a reason naming the install script (see ``s3_servers``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from s3_helpers import BUCKET, VERSIONED_BUCKET, make_config, raw_client
from s3_servers import FLAVOURS, S3Server, ServerUnavailable, rgw_required, start_server

from agentium_archive_s3 import S3Config


@pytest.fixture
def anyio_backend() -> str:
    """The adapters are anyio code; the servers are shared per session, so one backend keeps runs short."""
    return "asyncio"


def _launch(flavour: str, workdir: Path) -> S3Server:
    try:
        return start_server(flavour, workdir)
    except ServerUnavailable as exc:
        if flavour == "rgw" and not rgw_required():
            pytest.skip(f"{exc} (set AGENTIUM_REQUIRE_RGW=1 to make this a failure, as CI does)")
        pytest.fail(str(exc), pytrace=False)


def _serve(flavour: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """Start a server of ``flavour`` with the test buckets; stop it (by its PIDs) afterwards."""
    process = _launch(flavour, tmp_path_factory.mktemp(flavour))
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


# One server per flavour for the whole session, in fixtures without params. A session fixture
# *with* params (this was one) holds one param's value at a time: under xdist's per-file runs each
# file's switch from moto to rgw and back stopped the other server, so Ceph (about 13 s to start)
# started again for every test file, some 25 times per run.
@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """moto's standalone server, shared by the session, with the test buckets."""
    yield from _serve("moto", tmp_path_factory)


@pytest.fixture(scope="session")
def rgw_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """Single-node Ceph RGW, shared by the session, with the test buckets."""
    yield from _serve("rgw", tmp_path_factory)


@pytest.fixture(params=FLAVOURS)
def server(request: pytest.FixtureRequest) -> S3Server:
    """The shared server of each flavour (started at its first use, kept for the session)."""
    flavour: str = request.param
    served: S3Server = request.getfixturevalue(f"{flavour}_server")
    return served


@pytest.fixture
def admin(server: S3Server) -> Iterator[Any]:
    """A plain boto3 client on the shared server, for looking behind the adapters' backs."""
    client = raw_client(server)
    yield client
    client.close()


@pytest.fixture
def config(server: S3Server) -> S3Config:
    """A config on the shared server under a prefix of its own."""
    return make_config(server)
