"""``agentium_harness.testing`` loads the suites (and pytest) only when they are used."""

from __future__ import annotations

import subprocess
import sys

import pytest

import agentium_harness.testing as testing
from agentium_harness.testing import contracts


def test_importing_the_package_does_not_import_pytest() -> None:
    code = (
        "import sys, agentium_harness.testing as t\n"
        "assert 'pytest' not in sys.modules, 'pytest was imported'\n"
        "t.ArchiveContract\n"
        "assert 'pytest' in sys.modules\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_the_lazy_names_are_the_suites() -> None:
    assert testing.ArchiveContract is contracts.ArchiveContract
    assert testing.SessionStoreContract is contracts.SessionStoreContract
    assert testing.ContractSuite is contracts.ContractSuite
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = testing.Nope  # type: ignore[attr-defined]
