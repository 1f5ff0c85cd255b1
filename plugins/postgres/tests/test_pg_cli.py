"""``agentium postgres migrate CONFIG`` and the plugin as installed: entry point, listing, config, probe.

These go through the installed distribution's ``agentium`` entry point, as a
user's ``agentium`` command would.
"""

from __future__ import annotations

import json
from contextlib import redirect_stderr, redirect_stdout
from io import StringIO
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
from pg_server import APP_USER, PostgresServer, new_schema_name

from agentium_harness import VerifiedIdentity, load_runtime
from agentium_harness._cli import main

KINDS = ("archive", "session_store")


def _config(tmp_path: Path, dsn: str, schema: str) -> Path:
    # The connection is written once, in [plugins.postgres], for every section (as the README shows).
    shared = f'\n[plugins.postgres]\ndsn = "${{TEST_PG_DSN}}"\nschema = "{schema}"\n'
    sections = "".join(f'\n[{kind}]\nplugin = "postgres"\n' for kind in KINDS)
    path = tmp_path / "agentium.toml"
    path.write_text(
        '[provider]\nplugin = "scripted"\n\n[provider.options]\nresponses = ["Noted."]\ncycle = true\n'
        + shared
        + sections
    )
    return path


def _main(argv: list[str]) -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        status = main(argv)
    return status, out.getvalue(), err.getvalue()


def test_agentium_plugins_lists_the_postgres_adapters_with_their_capabilities() -> None:
    status, out, err = _main(["plugins", "--json"])
    assert status == 0, err
    report = json.loads(out)
    [plugin] = [p for p in report["plugins"] if p["distribution"] == "agentium-postgres"]
    adapters = {(a["kind"], a["name"]): a for a in plugin["adapters"]}
    for kind in (*KINDS, "recall", "memory"):
        assert (kind, "postgres") in adapters, adapters.keys()
    recall = adapters[("recall", "postgres")]["capabilities"]
    declared = {
        "bounded_discovery",
        "bounded_reads",
        "revision_validation",
        "bounded_current_validation",
        "canonical_archive_reads",
        "document_indexing",
        "archive_indexing",
        "health_check",
        "erasure",
        "vector_indexing",
        "hybrid_discovery",
    }
    assert {flag for flag, on in recall.items() if on} == declared
    assert all(adapters[("memory", "postgres")]["capabilities"].values())
    assert adapters[("session_store", "postgres")]["capabilities"]["joint_archive_commit"] is True
    assert adapters[("archive", "postgres")]["capabilities"]["idempotent_append"] is True
    for kind in KINDS:
        assert adapters[(kind, "postgres")]["capabilities"]["erasure"] is True, kind


def test_migrate_applies_the_schema_grants_the_role_and_a_runtime_from_config_runs(
    pg_server: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, admin: psycopg.Connection[Any]
) -> None:
    schema = new_schema_name()
    monkeypatch.setenv("TEST_PG_DSN", pg_server.app_dsn())
    monkeypatch.setenv("TEST_PG_OWNER", pg_server.admin_dsn())
    path = _config(tmp_path, pg_server.app_dsn(), schema)
    # As the application role it cannot create the schema: a clear refusal, nothing created.
    status, _, err = _main(["postgres", "migrate", str(path)])
    assert status == 2 and "permission denied" in err.lower(), err
    status, out, err = _main(
        ["postgres", "migrate", str(path), "--dsn-env", "TEST_PG_OWNER", "--grant", APP_USER, "--json"]
    )
    assert status == 0, err
    [report] = json.loads(out)
    assert (report["schema"], report["from_version"], report["to_version"]) == (schema, None, 4)
    assert report["granted"] == [APP_USER]
    assert "admin-pass" not in out and "app-pass" not in out
    status, out, err = _main(["postgres", "migrate", str(path), "--dsn-env", "TEST_PG_OWNER"])
    assert status == 0 and "already at v4, unchanged" in out, (out, err)

    async def use() -> dict[str, str]:
        runtime = load_runtime(path)
        try:
            result = await runtime.run(VerifiedIdentity("acme", "ana", "test"), "s1", "hello from config")
            assert result.committed
            return dict(await runtime.probe())
        finally:
            await runtime.aclose()

    probes = anyio.run(use)
    assert any("row-level security enforced" in v for v in probes.values()), probes
    row = admin.execute(f'SELECT count(*) FROM "{schema}".session_snapshots').fetchone()
    assert row == (1,)


def test_migrate_without_postgres_adapters_or_with_an_unset_variable_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "sqlite.toml"
    path.write_text(
        '[provider]\nplugin = "scripted"\n\n[provider.options]\nresponses = ["x"]\n\n'
        '[archive]\nplugin = "sqlite"\n\n[session_store]\nplugin = "sqlite"\n'
    )
    status, _, err = _main(["postgres", "migrate", str(path)])
    assert status == 2 and "selects no postgres adapter" in err
    monkeypatch.setenv("TEST_PG_DSN", "host=127.0.0.1 dbname=x")
    pg = _config(tmp_path, "", "s")
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    status, _, err = _main(["postgres", "migrate", str(pg), "--dsn-env", "NOT_SET_ANYWHERE"])
    assert status == 2 and "not set" in err
