"""examples/fastapi_app.py: the runtime is built in the FastAPI lifespan and closed on shutdown (issue 22)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fastapi_app.py"


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
