"""The ``agentium`` command imports only what the command it runs needs.

Every CI run starts hundreds of ``agentium`` processes, and a user waits for each:
``import agentium_harness`` must not load the engine (its names resolve on first use), and
``agentium --version`` must not load the demo, eval, testing or blocking modules, nor the
installed plugins. Checked in one fresh interpreter through ``sys.modules`` (no timing).
"""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = r"""
import contextlib, io, json, sys

def ours():
    return sorted(m for m in sys.modules if m.startswith("agentium"))

import agentium_harness
bare = ours()
from agentium_harness._cli import console
out = io.StringIO()
with contextlib.redirect_stdout(out):
    status = console(["--version"])
version = ours()
from agentium_harness import BlockingRuntime, load_config  # the public names still import
print(json.dumps({"bare": bare, "version": version, "status": status, "out": out.getvalue(),
                  "names": [BlockingRuntime.__name__, load_config.__name__]}))
"""


def test_version_imports_neither_engine_extras_nor_plugins() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=True
    )
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["bare"] == ["agentium_harness"]
    assert seen["status"] == 0
    assert seen["out"].startswith("agentium-harness ")
    assert seen["names"] == ["BlockingRuntime", "load_config"]
    heavy = ("agentium_harness._demo", "agentium_harness.eval", "agentium_harness.testing",
             "agentium_harness._blocking")  # fmt: skip
    assert [m for m in seen["version"] if m.startswith(heavy)] == []
    # No installed plugin was loaded: only the core's modules.
    assert [m for m in seen["version"] if not m.startswith("agentium_harness")] == []
