"""examples/fastapi_app.py: the runtime is built in the FastAPI lifespan and closed on shutdown (issue 22)."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

# FastAPI and httpx are test dependencies (the core's [test] extra, requirements-dev.txt):
# a missing one fails here rather than skipping the example silently.
from fastapi.testclient import TestClient

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "fastapi_app.py"
SYNC_DOC = ROOT / "docs" / "sync.md"


@pytest.fixture
def example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("AGENTIUM_DB", str(tmp_path / "app.db"))
    spec = importlib.util.spec_from_file_location("fastapi_app_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the models' annotations through it
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def test_the_lifespan_builds_the_runtime_and_shutdown_closes_it(example: ModuleType) -> None:
    ana = {"X-User": "ana"}
    with TestClient(example.app) as client:
        runtime = example.app.state.runtime
        assert runtime.state.value == "open"
        first = client.post("/sessions/s1/turns", json={"text": "hello"}, headers=ana)
        second = client.post("/sessions/s1/turns", json={"text": "again"}, headers=ana)
        assert [r.json()["committed"] for r in (first, second)] == ["committed", "committed"]
        # The sync endpoint reaches the same runtime from its worker thread.
        view = client.get("/sessions/s1", headers=ana).json()
        assert view == {"exists": True, "next_seq": 2, "state": "ok"}
        # Another user's view of the same session id is another session.
        assert client.get("/sessions/s1", headers={"X-User": "bob"}).json()["exists"] is False
        # An identity the host could not verify is refused before the runtime sees it.
        refused = client.post("/sessions/s1/turns", json={"text": "x"}, headers={"X-User": "a" * 300})
        assert refused.status_code == 401
    assert runtime.state.value == "closed"


def test_the_example_runs_as_a_script(example: ModuleType) -> None:
    example.main()


def test_the_docs_excerpt_is_the_examples_code() -> None:
    """docs/sync.md shows part of the example (not run there): each definition it shows is the example's own.

    Compared as syntax trees, so comments may differ but code may not: a change
    to the example that the docs do not follow (or the reverse) fails here.
    """
    text = SYNC_DOC.read_text("utf-8")
    section = text[text.index("## FastAPI: build the runtime in the lifespan") :]
    [excerpt] = re.findall(r"```python\n(.*?)```", section.split("\n## ", 1)[0], flags=re.S)
    shown = {_name(node): ast.dump(node) for node in ast.parse(excerpt).body}
    example = {_name(node): ast.dump(node) for node in ast.parse(EXAMPLE.read_text("utf-8")).body}
    assert set(shown) == {"lifespan", "app", "post_turn", "get_session"}
    for name, tree in shown.items():
        assert tree == example.get(name), f"docs/sync.md shows {name} unlike examples/fastapi_app.py"


def _name(node: ast.stmt) -> str:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return node.name
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    return ast.dump(node)
