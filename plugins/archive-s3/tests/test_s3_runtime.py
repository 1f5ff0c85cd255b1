"""The adapters in a harness runtime: installed as a plugin, built from config, probed, and a server
killed in the middle of an eviction (R3, R8, D2, D4).

Invariants checked after every run: every group below the committed boundary
is in the archive with its digest, the resident groups run from the boundary
to ``next_seq``, and each archived key holds exactly one object.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from s3_helpers import BUCKET, VERSIONED_BUCKET, live_keys, make_config, new_prefix, versions
from s3_servers import S3Server

from agentium_archive_s3 import S3Archive, S3Config, S3SessionStore
from agentium_harness import (
    EraseTarget,
    ErasureState,
    OperatorAttestation,
    ResidentLimits,
    RetentionPolicy,
    RuntimeLimits,
    SessionKey,
    VerifiedIdentity,
    create_harness_runtime,
    load_runtime,
)
from agentium_harness.adapters.providers import ExtractiveProvider
from agentium_harness.plugin_api import OpContext, PhysicalErasure, PluginRegistry

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s1")
SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"


def _runtime(archive: S3Archive, store: S3SessionStore) -> Any:
    return create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=archive,
        session_store=store,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
    )


async def _check_invariants(archive: S3Archive, store: S3SessionStore, admin: Any, server: S3Server) -> int:
    """Boundary never past the archive; nothing lost; one object per archived group. Returns the boundary."""
    stored = await store.load(KEY, OpContext.with_timeout(20))
    assert stored is not None
    snapshot = stored.snapshot
    archived = list(await archive.read_groups(KEY, 0, 1000, OpContext.with_timeout(20)))
    by_seq = {g.seq: g for g in archived}
    assert set(range(snapshot.boundary)) <= set(by_seq), (snapshot.boundary, sorted(by_seq))
    assert [g.seq for g in snapshot.resident] == list(range(snapshot.boundary, snapshot.next_seq))
    for group in snapshot.resident:  # archived early (a deferred eviction's leftovers) means equal bytes
        if group.seq in by_seq:
            assert by_seq[group.seq].digest == group.digest
    prefix = f"{archive.config.prefix}/archive/"
    assert len(live_keys(admin, prefix)) == len(archived)
    if server.flavour == "moto":
        assert set(versions(admin, prefix).values()) <= {1}
    return snapshot.boundary


async def test_runs_archive_old_groups_and_every_message_stays_recoverable(
    server: S3Server, config: S3Config, admin: Any
) -> None:
    archive, store = S3Archive(config), S3SessionStore(config)
    runtime = _runtime(archive, store)
    try:
        for i in range(6):
            await runtime.run(ANA, "s1", f"Message number {i}.")
        boundary = await _check_invariants(archive, store, admin, server)
        assert boundary >= 3
    finally:
        await runtime.aclose()


async def test_the_server_killed_mid_eviction_defers_it_and_the_next_run_after_a_restart_catches_up(
    server: S3Server, config: S3Config, admin: Any, tmp_path: Path
) -> None:
    if server.flavour == "moto":
        # moto keeps its objects only in its process: killing it would lose them all. Its
        # front end is simulated by a proxy whose death is the same to the adapters.
        from s3_fault_proxy import FaultProxy

        proxy = FaultProxy(server.port)
        import attrs

        config = attrs.evolve(config, endpoint_url=proxy.endpoint, max_attempts=2, connect_timeout_s=1.0)
        kill, restart = proxy.close, lambda: None
    else:
        config = S3Config(**{**_options(config), "max_attempts": 2, "connect_timeout_s": 1.0})
        kill, restart = server.kill_frontend, server.restart_frontend
    archive, store = S3Archive(config), S3SessionStore(config)
    runtime = _runtime(archive, store)
    try:
        for i in range(3):
            await runtime.run(ANA, "s1", f"Before the kill {i}.")
        before = await _check_invariants(archive, store, admin, server)

        puts = 0

        def kill_on_second_upload(**kwargs: Any) -> None:
            nonlocal puts
            puts += 1
            if puts == 2:
                kill()

        await archive.append(KEY, [], OpContext())  # the client exists now: hook its uploads
        client = archive.link._get_client()
        client.meta.events.register("before-send.s3.PutObject", kill_on_second_upload, unique_id="kill")
        with pytest.raises(Exception):  # noqa: B017  # the store's save fails too: the server is gone
            for i in range(3):
                await runtime.run(ANA, "s1", f"During the outage {i}.")
        client.meta.events.unregister("before-send.s3.PutObject", unique_id="kill")
        if server.flavour == "moto":
            proxy = FaultProxy(server.port)
            config = attrs.evolve(config, endpoint_url=proxy.endpoint)
            await runtime.aclose()
            archive, store = S3Archive(config), S3SessionStore(config)
            runtime = _runtime(archive, store)
        else:
            restart()
        middle = await _check_invariants(archive, store, admin, server)
        assert middle >= before
        for i in range(3):
            await runtime.run(ANA, "s1", f"After the restart {i}.")
        after = await _check_invariants(archive, store, admin, server)
        assert after > middle
    finally:
        await runtime.aclose()


def _options(config: S3Config) -> dict[str, Any]:
    return {a.name: getattr(config, a.name) for a in S3Config.__attrs_attrs__}


# -- installed as a plugin, built from config, probed ------------------------------------------------


def test_the_installed_distribution_registers_s3_for_both_kinds() -> None:
    registry = PluginRegistry.load()
    archive = registry.adapter("archive", "s3")
    store = registry.adapter("session_store", "s3")
    assert archive.distribution == store.distribution == "agentium-archive-s3"
    assert archive.spec.adapter_class is S3Archive and store.spec.adapter_class is S3SessionStore
    assert not [p for p in registry.problems if p.distribution == "agentium-archive-s3"]


def _agentium() -> str:
    exe = shutil.which("agentium", path=str(Path(sys.executable).parent))
    assert exe, "the agentium command is installed with agentium-harness"
    return exe


def _config_file(tmp_path: Path, server: S3Server, bucket: str = BUCKET, secret: str | None = None) -> Path:
    # The connection is written once, in [plugins.s3], for both sections (as the README shows).
    options = (
        f'bucket = "{bucket}"\nprefix = "{new_prefix()}"\nendpoint_url = "{server.endpoint}"\n'
        f'region = "us-east-1"\naddressing_style = "path"\naccess_key_id = "{server.access_key}"\n'
        f'secret_access_key = "{secret or server.secret_key}"\nmax_attempts = "${{S3_TEST_ATTEMPTS:-2}}"\n'
    )
    path = tmp_path / "agentium.toml"
    path.write_text(
        f'[provider]\nplugin = "scripted"\n[provider.options]\nresponses = ["ok"]\ncycle = true\n'
        f'[plugins.s3]\n{options}[archive]\nplugin = "s3"\n[session_store]\nplugin = "s3"\n'
    )
    return path


def test_agentium_plugins_lists_s3(tmp_path: Path) -> None:
    out = subprocess.run(
        [_agentium(), "plugins", "--json"], capture_output=True, text=True, check=True
    ).stdout
    plugin = next(p for p in json.loads(out)["plugins"] if p["distribution"] == "agentium-archive-s3")
    assert {(a["kind"], a["name"]) for a in plugin["adapters"]} == {
        ("archive", "s3"),
        ("session_store", "s3"),
    }


def test_agentium_check_probe_reports_bucket_conditional_writes_and_versioning(
    server: S3Server, tmp_path: Path
) -> None:
    path = _config_file(tmp_path, server)
    result = subprocess.run(
        [_agentium(), "check", "--probe", str(path)], capture_output=True, text=True, check=False, timeout=120
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "probe archive" in out and "probe session_store" in out, out
    assert "conditional writes honoured" in out and "versioning:" in out, out


def test_agentium_check_probe_on_a_missing_bucket_fails_clearly(server: S3Server, tmp_path: Path) -> None:
    path = _config_file(tmp_path, server, bucket="no-such-bucket-here")
    result = subprocess.run(
        [_agentium(), "check", "--probe", str(path)], capture_output=True, text=True, check=False, timeout=120
    )
    out = result.stdout + result.stderr
    assert result.returncode == 2, out  # the README's exit status for a failed probe
    assert "no-such-bucket-here" in out and "does not exist" in out, out


def test_agentium_check_never_prints_the_secret(server: S3Server, tmp_path: Path) -> None:
    path = _config_file(tmp_path, server, secret=SECRET)
    result = subprocess.run(
        [_agentium(), "check", "--probe", "--json", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    out = result.stdout + result.stderr
    assert SECRET not in out and SECRET[:12] not in out, out


async def test_the_probe_shows_that_rgw_ignores_create_only_writes_in_a_versioned_bucket(
    server: S3Server,
) -> None:
    """A behaviour that differs between the servers, and why the probe writes a create-only object."""
    archive = S3Archive(make_config(server, bucket=VERSIONED_BUCKET))
    try:
        if server.flavour == "rgw":
            with pytest.raises(Exception, match="does not honour conditional writes"):
                await archive.health(OpContext.with_timeout(30))
        else:
            answer = await archive.health(OpContext.with_timeout(30))
            assert "versioning: Enabled" in answer and "conditional writes honoured" in answer
    finally:
        await archive.aclose()


async def test_a_config_file_builds_both_adapters_and_the_runtime_closes_their_clients(
    server: S3Server, tmp_path: Path
) -> None:
    runtime = load_runtime(_config_file(tmp_path, server))
    archive, store = runtime.archive, runtime.session_store
    assert isinstance(archive, S3Archive) and isinstance(store, S3SessionStore)
    assert archive.link.owns_client and store.link.owns_client
    await runtime.run(ANA, "s1", "hello")
    await runtime.aclose()
    assert archive.link.closed and store.link.closed


# -- erasure and retention through a runtime -------------------------------------------------------


def _every_version(admin: Any, bucket: str, prefix: str) -> dict[tuple[str, str], bytes]:
    out: dict[tuple[str, str], bytes] = {}
    for page in admin.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Versions", []):
            body = admin.get_object(Bucket=bucket, Key=item["Key"], VersionId=item["VersionId"])["Body"]
            out[item["Key"], item["VersionId"]] = body.read()
        for item in page.get("DeleteMarkers", []):
            out[item["Key"], item["VersionId"]] = b"<delete marker>"
    return out


async def test_an_erasure_through_the_runtime_leaves_no_version_and_a_tombstone(
    config: S3Config, admin: Any
) -> None:
    """The session's groups and every snapshot revision go (on moto the test bucket keeps versions);
    the neighbour's stay byte for byte."""
    bucket = config.bucket
    archive, store = S3Archive(config), S3SessionStore(config)
    runtime = _runtime(archive, store)
    operator = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"), "ticket 7")
    secret, kept = "qzebraerased7741", "qkeptneighbour3318"
    try:
        for i in range(4):
            await runtime.run(ANA, "s1", f"Message {i} mentions {secret}.")
            await runtime.run(ANA, "s2", f"Message {i} mentions {kept}.")
        everything = _every_version(admin, bucket, config.prefix + "/")
        assert any(secret.encode() in data for data in everything.values())
        neighbour = {k: v for k, v in everything.items() if "/s2" in k[0]}

        result = await runtime.erase(
            EraseTarget.session("acme", "ana", "s1"), reason="data subject request", attestation=operator
        )
        tombstone = result.tombstone
        assert tombstone is not None and tombstone.state is ErasureState.COMPLETE
        roles = {s.role: s for s in tombstone.stores}
        assert roles["archive"].physical is PhysicalErasure.REMOVED
        assert roles["session_store"].physical is PhysicalErasure.REMOVED

        after = _every_version(admin, bucket, config.prefix + "/")
        assert not any(secret.encode() in data for data in after.values())
        assert {k: v for k, v in after.items() if "/s2" in k[0]} == neighbour
        assert not [k for k, _ in after if "/s1" in k]
        status = await runtime.erasure_status(operator)
        assert [r.erasure_id for r in status] == [tombstone.erasure_id]
        assert (await runtime.run(ANA, "s2", "still here")).committed
    finally:
        await runtime.aclose()


async def test_retention_on_s3_erases_old_groups_and_the_session_reads_and_runs_on(
    config: S3Config, admin: Any
) -> None:
    archive, store = S3Archive(config), S3SessionStore(config)
    runtime = create_harness_runtime(
        provider=ExtractiveProvider(),
        archive=archive,
        session_store=store,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        retention=RetentionPolicy(max_archived_groups=2),
    )
    operator = OperatorAttestation(VerifiedIdentity("acme", "ops", "sso"))
    try:
        for i in range(6):
            await runtime.run(ANA, "s1", f"Old message {i} about qharbour{i}x.")
        result = await runtime.apply_retention(operator)
        (erasure,) = result.erasures
        assert erasure.tombstone is not None
        erased = erasure.tombstone.target.groups
        assert erased and erased[0].start == 0
        raw = b"".join(_every_version(admin, config.bucket, f"{config.prefix}/archive/").values())
        for seq in range(erased[-1].stop):
            assert f"qharbour{seq}x".encode() not in raw
        # A fresh adapter (no memory of links) reads from 0 across the erased groups' markers.
        fresh = S3Archive(config)
        try:
            left = [g.seq for g in await fresh.read_groups(KEY, 0, 100, OpContext.with_timeout(20))]
        finally:
            await fresh.aclose()
        assert left and min(left) == erased[-1].stop
        assert (await runtime.run(ANA, "s1", "and one more")).committed
        page = await runtime.read_history(ANA, "s1", max_groups=50, view=False)
        assert page.groups and page.groups[0].seq == erased[-1].stop
    finally:
        await runtime.aclose()
