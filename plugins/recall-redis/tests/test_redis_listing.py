"""Listing plugins does not import the client library: ``agentium plugins`` stays quick.

The client (redis) is imported when an adapter makes its client or tells
its errors apart, never when the plugin module is loaded to register its adapters.
"""

from __future__ import annotations

import json
import subprocess
import sys

#: Modules that only a client needs.
CLIENT_MODULES = ("redis",)

#: Runs the installed ``agentium`` console script in a fresh interpreter, then reports what it imported.
_PROBE = """
import contextlib, importlib.metadata, io, json, sys
[script] = importlib.metadata.entry_points(group="console_scripts", name="agentium")
out = io.StringIO()
with contextlib.redirect_stdout(out):
    status = script.load()(["plugins", "--json"])
print(json.dumps({"status": status, "listing": out.getvalue(), "modules": sorted(sys.modules)}))
"""


def test_agentium_plugins_lists_the_plugin_without_importing_its_client() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=300, check=True
    )
    report = json.loads(proc.stdout)
    assert report["status"] == 0
    listed = {p["distribution"] for p in json.loads(report["listing"])["plugins"]}
    assert "agentium-recall-redis" in listed
    imported = [m for m in report["modules"] if m.split(".")[0] in {c.split(".")[0] for c in CLIENT_MODULES}]
    loaded = [m for m in CLIENT_MODULES if m in report["modules"]]
    assert loaded == [], f"agentium plugins imported {loaded} (all: {imported[:20]})"
