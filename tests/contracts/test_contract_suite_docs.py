"""The example test classes in docs/contract-suites.md run with pytest and behave as the page says.

Every ``python`` block preceded by ``<!-- contract-suite-example -->`` becomes a
test module in a pytester session. The page promises: every standard test
passes or skips with a reason, except the one documented gap, which xfails.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

DOC = Path(__file__).resolve().parents[2] / "docs" / "contract-suites.md"
MARKER = "<!-- contract-suite-example -->"
_BLOCK = re.compile(re.escape(MARKER) + r"\s*\n```python\n(?P<code>.*?)\n```", re.DOTALL)


def example_blocks() -> list[str]:
    return [m["code"] for m in _BLOCK.finditer(DOC.read_text("utf-8"))]


def test_every_marked_block_was_found() -> None:
    text = DOC.read_text("utf-8")
    assert text.count(MARKER) == len(example_blocks()) == 3


def test_the_documented_examples_pass(pytester: pytest.Pytester) -> None:
    for i, code in enumerate(example_blocks()):
        pytester.makepyfile(**{f"test_doc_example_{i}": code})
    reprec = pytester.inline_run("-p", "no:cacheprovider", "-rs")
    reports = [r for r in reprec.getreports("pytest_runtest_logreport") if r.when == "call" or r.skipped]
    by_class: dict[str, dict[str, list[str]]] = {}
    for report in reports:
        cls = report.nodeid.split("::")[1]
        outcome = "xfailed" if hasattr(report, "wasxfail") else report.outcome
        by_class.setdefault(cls, {}).setdefault(outcome, []).append(report.nodeid.split("::")[2])
    assert set(by_class) == {
        "TestMyArchive",
        "TestMySessionStore",
        "TestEarlyArchive",
        "TestAsyncioOnlyStore",
    }
    failed = [r.nodeid for r in reprec.getreports("pytest_runtest_logreport") if r.failed]
    assert failed == []
    # The SQLite example declares everything, so only "refused when undeclared" tests skip.
    for cls in ("TestMyArchive", "TestMySessionStore"):
        assert all("refused_when_undeclared" in name for name in by_class[cls].get("skipped", [])), cls
        assert any(name.startswith("test_durable_across_reopen") for name in by_class[cls]["passed"])
    assert sorted(by_class["TestEarlyArchive"]["xfailed"]) == [
        "test_cancelled_signal_refuses_append[asyncio]",
        "test_cancelled_signal_refuses_append[trio]",
    ]
    asyncio_only = by_class["TestAsyncioOnlyStore"]["passed"]
    # The overridden anyio_backend fixture is not parametrized: each test runs once.
    assert len(asyncio_only) >= 10
    assert not any("[" in name for name in asyncio_only), asyncio_only
