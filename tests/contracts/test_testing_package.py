"""``agentium_harness.testing`` loads the suites (and pytest) only when used, rewritten for pytest."""

from __future__ import annotations

import subprocess
import sys

import pytest

import agentium_harness.testing as testing
from agentium_harness.testing import contracts

pytest_plugins = ["pytester"]


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


def test_suite_modules_are_assert_rewritten_in_a_pytest_run() -> None:
    # pytest's rewriter gives each rewritten module this global; importing the
    # suites through agentium_harness.testing inside pytest must have done it.
    for name in testing.SUITE_MODULES:
        if name.endswith(".contracts"):
            continue  # it only re-exports; its own import is what registers the others
        module = sys.modules[name]
        assert "@py_builtins" in vars(module), f"{name} was imported without assertion rewriting"


_MISREPORTING = """
import pytest

from agentium_harness.adapters.memory import InMemorySessionStore
from agentium_harness.testing import SessionStoreContract


class MisreportingStore(InMemorySessionStore):
    capabilities = InMemorySessionStore.capabilities

    async def save(self, key, snapshot, expected_revision, ctx):
        return await super().save(key, snapshot, expected_revision, ctx) * 10


class TestMisreporting(SessionStoreContract):
    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    @pytest.fixture
    def session_store(self) -> MisreportingStore:
        return MisreportingStore()
"""


def test_a_failing_standard_test_shows_the_values_it_compared(pytester: pytest.Pytester) -> None:
    # A fresh interpreter: the suites must register themselves for rewriting.
    pytester.makepyfile(test_misreporting=_MISREPORTING)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-k", "test_first_save_creates_a_revision"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*assert 1 == 10*", "*where 1 = StoredSnapshot(*).revision*"])
