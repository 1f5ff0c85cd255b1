"""``agentium postgres migrate CONFIG``: apply the schema the config's PostgreSQL adapters use.

Registered through the core's ``agentium_register_commands`` hook. The
command reads the config file as the core does
(:func:`~agentium_harness.plugin_api.load_config`), collects every distinct
(database, schema) its ``postgres`` adapters name, and runs :func:`migrate`
on each, optionally granting an application role what the adapters need.
It connects with the config's ``dsn`` unless ``--dsn-env`` names a variable
holding the owner's connection string (kept out of the command line, where
other users could read it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import anyio
import attrs

from agentium_harness import InvalidArgumentError
from agentium_harness.plugin_api import CliCommand, load_config

from .config import PostgresConfig, migration_target
from .migrate import migrate
from .recall_vectors import vector_scoring
from .schema import MigrationReport, VectorFacts

__all__ = ["COMMAND", "configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare ``agentium postgres migrate CONFIG [--grant ROLE]... [--dsn-env VAR] [--json]``."""
    actions = parser.add_subparsers(dest="postgres_action", metavar="ACTION", required=True)
    migrate_parser = actions.add_parser(
        "migrate",
        help="create or upgrade the schema of the config's postgres adapters",
        description=(
            "Create or upgrade, in one transaction, the schema every postgres adapter of CONFIG names. "
            "Run it as the schema's owner; the adapters never create or change tables and refuse a "
            "schema of another version. Where the database has pgvector, it also lets hybrid recall "
            "score vectors there; each line says where vectors are scored."
        ),
    )
    migrate_parser.add_argument("config", help="path of the TOML config file")
    migrate_parser.add_argument(
        "--grant",
        action="append",
        default=[],
        metavar="ROLE",
        help="grant ROLE what the adapters need (repeatable)",
    )
    migrate_parser.add_argument(
        "--dsn-env",
        default=None,
        metavar="VAR",
        help="connect with the connection string in environment variable VAR (the owner's) instead of "
        "the config's dsn",
    )
    migrate_parser.add_argument("--json", action="store_true", help="print the reports as JSON")


def _targets(path: str, dsn_env: str | None) -> list[PostgresConfig]:
    """One config per distinct (server, database, schema) the file's postgres adapters use."""
    resolved = load_config(path)
    found: dict[tuple[str, ...], PostgresConfig] = {}
    for component in resolved.components().values():
        options = component.options
        if isinstance(options, PostgresConfig):
            found.setdefault(migration_target(options), options)
    if not found:
        raise InvalidArgumentError(f"{path} selects no postgres adapter; there is nothing to migrate")
    targets = list(found.values())
    if dsn_env is not None:
        dsn = os.environ.get(dsn_env)
        if not dsn:
            raise InvalidArgumentError(f"--dsn-env {dsn_env}: the variable is not set or empty")
        try:
            targets = [attrs.evolve(t, dsn=dsn, password=None) for t in targets]
        except ValueError as exc:
            raise InvalidArgumentError(f"--dsn-env {dsn_env}: {exc}") from None
        unique: dict[tuple[str, ...], PostgresConfig] = {}
        for target in targets:
            unique.setdefault(migration_target(target), target)
        targets = list(unique.values())
    return targets


def _scoring(report: MigrationReport) -> str:
    """Where hybrid discovery scores vectors on the migrated schema (and whether this run changed it)."""
    facts = VectorFacts(report.pgvector, None, report.scored_in_database)
    added = "; added recall_vectors.embedding_pgv" if report.added_pgvector_column else ""
    return vector_scoring(facts) + added


def run(args: argparse.Namespace) -> int:
    """Migrate every target; print one line (or one JSON object) per schema."""
    targets = _targets(args.config, args.dsn_env)
    grants = list(args.grant)

    async def work() -> list[tuple[PostgresConfig, MigrationReport]]:
        return [(t, await migrate(t, grant_to=grants)) for t in targets]

    reports = anyio.run(work)
    if args.json:
        out: list[dict[str, Any]] = [
            {
                "server": config.server(),
                "schema": report.schema,
                "from_version": report.from_version,
                "to_version": report.to_version,
                "applied": list(report.applied),
                "granted": list(report.granted),
                "pgvector": report.pgvector,
                "vectors": _scoring(report),
            }
            for config, report in reports
        ]
        sys.stdout.write(json.dumps(out, indent=2, sort_keys=True) + "\n")
        return 0
    for config, report in reports:
        found = "none" if report.from_version is None else f"v{report.from_version}"
        if report.applied:
            what = f"{found} -> v{report.to_version} (applied {', '.join(map(str, report.applied))})"
        else:
            what = f"already at v{report.to_version}, unchanged"
        granted = f"; granted to {', '.join(report.granted)}" if report.granted else ""
        vectors = _scoring(report)
        sys.stdout.write(f"{config.server()} schema {report.schema!r}: {what}{granted}; {vectors}\n")
    return 0


#: The ``agentium postgres`` command.
COMMAND = CliCommand(
    name="postgres",
    help="PostgreSQL adapters: apply their schema (migrate)",
    configure=configure,
    run=run,
    description="Commands of agentium-postgres. `agentium postgres migrate CONFIG` applies the schema.",
    # Each schema's migration allows itself 120 s (lock waits included) and a config may name
    # several schemas: the 600 s default could cut a long but healthy run off. An abandoned run
    # changes nothing half-way: each migration is one transaction, rolled back when the process
    # exits and its connection closes.
    timeout_s=3600.0,
)
