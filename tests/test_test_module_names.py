"""Every test module's file name is unique across the suite's testpaths.

pytest's default import mode imports a test file by its base name when its
folder has no ``__init__.py``; two files of one name in different plugins stop
the whole run at collection ("import file mismatch"), which a plugin's own
run does not show.
"""

from __future__ import annotations

import importlib.util
import tomllib
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_test_module_names_are_unique_across_testpaths() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    testpaths = config["tool"]["pytest"]["ini_options"]["testpaths"]
    seen: dict[str, list[str]] = defaultdict(list)
    for testpath in testpaths:
        for path in (ROOT / testpath).rglob("test_*.py"):
            if "fixtures" in path.relative_to(ROOT).parts:
                continue
            seen[path.name].append(str(path.relative_to(ROOT)))
    duplicates = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not duplicates, f"rename one of each (e.g. with the plugin's name as a prefix): {duplicates}"


def test_every_file_the_suite_runs_first_exists() -> None:
    # The root conftest moves these files to the front of the run; a renamed one would silently
    # go back to its collection place (and perhaps the end of a parallel run).
    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("root_conftest", root / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    missing = [name for name in module.RUN_FIRST if not (root / name).is_file()]
    assert not missing
    assert len(set(module.RUN_FIRST)) == len(module.RUN_FIRST)
