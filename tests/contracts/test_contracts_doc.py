"""docs/contracts.md is rendered from the contract suites' own definitions (R43)."""

from __future__ import annotations

from pathlib import Path

from agentium_harness.testing.contract_docs import render_contracts_markdown
from agentium_harness.testing.contracts import ArchiveContract, SessionStoreContract, standard_tests

DOC = Path(__file__).resolve().parents[2] / "docs" / "contracts.md"


def test_contracts_doc_is_current() -> None:
    """If this fails, regenerate: python -m agentium_harness.testing.contract_docs > docs/contracts.md"""
    assert DOC.read_text("utf-8") == render_contracts_markdown()


def test_every_standard_test_has_a_documented_rule() -> None:
    text = render_contracts_markdown()
    for suite in (ArchiveContract, SessionStoreContract):
        for name in standard_tests(suite):
            line = next(ln for ln in text.splitlines() if ln.startswith(f"| `{name}` |"))
            rule = line.split("|")[2].strip()
            assert len(rule) > 20, (name, rule)
