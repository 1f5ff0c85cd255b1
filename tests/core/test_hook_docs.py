"""Meta-tests that keep the plugin API honest (after datasette's hook documentation tests).

Every hook specification must be documented in ``docs/plugins.md`` with its
exact signature, must be exercised by at least one test, and must be listed
in ``REGISTRATION_HOOKS`` or ``LIFECYCLE_HOOKS``.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentium_harness._plugins import hookspecs
from agentium_harness._plugins.commands import COMMAND_HOOK
from agentium_harness._plugins.graders import GRADER_HOOK
from agentium_harness._plugins.strategies import STRATEGY_HOOK
from agentium_harness._ports import PORT_KINDS

ROOT = Path(__file__).resolve().parents[2]
PLUGINS_DOC = ROOT / "docs" / "plugins.md"


def _hookspecs() -> dict[str, Callable[..., Any]]:
    marker = f"{hookspecs.PROJECT_NAME}_spec"
    return {
        name: fn
        for name, fn in vars(hookspecs).items()
        if callable(fn) and hasattr(fn, marker) and not name.startswith("_")
    }


SPECS = _hookspecs()


def _signature(fn: Callable[..., Any]) -> str:
    return f"{fn.__name__}({', '.join(inspect.signature(fn).parameters)})"


def test_there_are_hookspecs_to_check() -> None:
    # Guards the discovery above: an empty dict would make the tests below vacuous.
    assert "agentium_register_archives" in SPECS
    assert len(SPECS) == 14


@pytest.mark.parametrize("name", sorted(SPECS))
def test_hook_is_documented_with_its_exact_signature(name: str) -> None:
    doc = PLUGINS_DOC.read_text(encoding="utf-8")
    signature = _signature(SPECS[name])
    headings = re.findall(r"^#{2,4} (\S+\(.*\))\s*$", doc, flags=re.MULTILINE)
    assert signature in headings, f"docs/plugins.md needs a heading '### {signature}'"


@pytest.mark.parametrize("name", sorted(SPECS))
def test_hook_has_a_docstring(name: str) -> None:
    assert (SPECS[name].__doc__ or "").strip(), f"{name} needs a docstring saying when it is called"


@pytest.mark.parametrize("name", sorted(SPECS))
def test_hook_is_used_by_a_test(name: str) -> None:
    this = Path(__file__).resolve()
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if path.resolve() != this and name in path.read_text(encoding="utf-8"):
            return
    pytest.fail(f"no test under tests/ mentions {name}")


def test_every_hook_is_classified_and_every_kind_has_a_registration_hook() -> None:
    registration = set(hookspecs.REGISTRATION_HOOKS.values())
    lifecycle = set(hookspecs.LIFECYCLE_HOOKS)
    assert registration | lifecycle | {STRATEGY_HOOK, GRADER_HOOK, COMMAND_HOOK} == set(SPECS)
    assert not registration & lifecycle
    assert set(hookspecs.REGISTRATION_HOOKS) == set(PORT_KINDS)
    for name in registration:
        assert list(inspect.signature(SPECS[name]).parameters) == ["register"]


def test_documented_hook_headings_are_all_real_hooks() -> None:
    doc = PLUGINS_DOC.read_text(encoding="utf-8")
    documented = {h.split("(")[0] for h in re.findall(r"^#{2,4} (agentium_\w+\(.*\))\s*$", doc, re.MULTILINE)}
    assert documented == set(SPECS), documented ^ set(SPECS)
