"""The ``agentium`` command imports only what the command it runs needs.

Every CI run starts hundreds of ``agentium`` processes, and a user waits for each:
``agentium --version`` must not load the eval or testing modules, nor the installed plugins
(the demo is imported at module level: ``_cli/main.py`` hides no import inside a function).
Checked in one fresh interpreter through ``sys.modules`` (no timing). The package itself
still imports its public names at once: resolving them on first use (PEP 562) let threads
importing its public submodules at once meet the private packages' import cycles.
"""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = r"""
import contextlib, io, json, sys

def ours():
    return sorted(m for m in sys.modules if m.startswith("agentium"))

from agentium_harness._cli import console
out = io.StringIO()
with contextlib.redirect_stdout(out):
    status = console(["--version"])
version = ours()
from agentium_harness import BlockingRuntime, load_config  # the public names still import
print(json.dumps({"version": version, "status": status, "out": out.getvalue(),
                  "names": [BlockingRuntime.__name__, load_config.__name__]}))
"""


def test_version_imports_neither_engine_extras_nor_plugins() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=True
    )
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["status"] == 0
    assert seen["out"].startswith("agentium-harness ")
    assert seen["names"] == ["BlockingRuntime", "load_config"]
    heavy = ("agentium_harness.eval", "agentium_harness.testing")
    assert [m for m in seen["version"] if m.startswith(heavy)] == []
    # No installed plugin was loaded: only the core's modules.
    assert [m for m in seen["version"] if not m.startswith("agentium_harness")] == []
