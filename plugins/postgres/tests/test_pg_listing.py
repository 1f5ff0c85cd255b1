"""Listing plugins does not import the client library: ``agentium plugins`` stays quick.

The client (psycopg, psycopg_pool) is imported when an adapter is built, a
statement composed or a connection opened, never when the plugin module is
loaded to register its adapters and its ``agentium postgres`` command.
"""

from __future__ import annotations

import json
import subprocess
import sys

#: Modules that only a client needs.
CLIENT_MODULES = ("psycopg", "psycopg_pool")

#: Runs the installed ``agentium`` console script on argv in a fresh interpreter; reports what it imported.
_PROBE = """
import contextlib, importlib.metadata, io, json, sys
[script] = importlib.metadata.entry_points(group="console_scripts", name="agentium")
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        status = script.load()(json.loads(sys.argv[1]))
    except SystemExit as exc:  # argparse's --help exits
        status = exc.code
print(json.dumps({"status": status, "output": out.getvalue(), "modules": sorted(sys.modules)}))
"""


def _run(*argv: str) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(list(argv))],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    report: dict[str, object] = json.loads(proc.stdout)
    return report


def _client_modules(report: dict[str, object]) -> tuple[list[str], list[str]]:
    modules = report["modules"]
    assert isinstance(modules, list)
    roots = {c.split(".")[0] for c in CLIENT_MODULES}
    imported = [m for m in modules if m.split(".")[0] in roots]
    return [m for m in CLIENT_MODULES if m in modules], imported


def test_agentium_plugins_lists_the_plugin_without_importing_its_client() -> None:
    report = _run("plugins", "--json")
    assert report["status"] == 0
    output = report["output"]
    assert isinstance(output, str)
    [plugin] = [p for p in json.loads(output)["plugins"] if p["distribution"] == "agentium-postgres"]
    assert plugin["status"] == "ok"
    assert plugin["kinds"] == ["archive", "memory", "recall", "session_store"]
    loaded, imported = _client_modules(report)
    assert loaded == [], f"agentium plugins imported {loaded} (all: {imported[:20]})"


def test_the_postgres_command_is_offered_without_importing_the_client() -> None:
    report = _run("postgres", "migrate", "--help")
    assert report["status"] == 0
    output = report["output"]
    assert isinstance(output, str)
    assert "--dsn-env" in output
    loaded, imported = _client_modules(report)
    assert loaded == [], f"agentium postgres migrate --help imported {loaded} (all: {imported[:20]})"
