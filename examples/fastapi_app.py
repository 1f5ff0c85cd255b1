"""A FastAPI app over one Agentium runtime: built in the lifespan, closed on shutdown (docs/sync.md).

Serve it with uvicorn (``pip install fastapi uvicorn``)::

    AGENTIUM_DB=/tmp/agentium.db uvicorn examples.fastapi_app:app

Run as a script (``python examples/fastapi_app.py``) it drives itself with
FastAPI's ``TestClient`` against a temporary database and exits 0.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

import anyio.from_thread
from fastapi import Depends, FastAPI, Header, HTTPException, Request
from pydantic import BaseModel

from agentium_harness import HarnessRuntime, InvalidIdError, SessionBusyError, VerifiedIdentity, load_runtime

CONFIG = Path(__file__).with_name("agentium.toml")


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    # One runtime for the whole server, built on its event loop when it starts. Leaving the
    # block closes it (bounded): admitted runs settle or are cancelled, owned adapters close.
    async with load_runtime(CONFIG) as runtime:
        app.state.runtime = runtime
        yield


app = FastAPI(lifespan=lifespan)


def runtime_of(request: Request) -> HarnessRuntime:
    runtime: HarnessRuntime = request.app.state.runtime
    return runtime


def verified_user(x_user: Annotated[str, Header()]) -> VerifiedIdentity:
    # Stand-in for your authentication: Agentium trusts only an identity the host verified.
    try:
        return VerifiedIdentity(tenant="acme", user=x_user, verified_by="example-header")
    except InvalidIdError as exc:  # empty, too long, control characters
        raise HTTPException(401, str(exc)) from exc


Runtime = Annotated[HarnessRuntime, Depends(runtime_of)]
User = Annotated[VerifiedIdentity, Depends(verified_user)]


class Turn(BaseModel):
    text: str


@app.post("/sessions/{session_id}/turns")
async def post_turn(session_id: str, turn: Turn, runtime: Runtime, user: User) -> dict[str, Any]:
    # An async endpoint runs on the server's loop: await the runtime directly.
    try:
        result = await runtime.run(user, session_id, turn.text)
    except SessionBusyError as exc:
        # One operation per session at a time: the client retries later.
        raise HTTPException(409, str(exc)) from exc
    return {"output": result.output, "status": result.status.value, "committed": result.commit_state.value}


@app.get("/sessions/{session_id}")
def get_session(session_id: str, runtime: Runtime, user: User) -> dict[str, Any]:
    # A plain `def` endpoint runs in a worker thread: hand the call back to the server's loop.
    view = anyio.from_thread.run(runtime.inspect_session, user, session_id)
    return {"exists": view.exists, "next_seq": view.next_seq, "state": view.state.value}


def main() -> None:
    from fastapi.testclient import TestClient

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["AGENTIUM_DB"] = str(Path(tmp) / "fastapi.db")
        ana = {"X-User": "ana"}
        with TestClient(app) as client:  # runs the lifespan: startup here, shutdown on leaving
            for text in ["Plan the release.", "Tag it."]:
                reply = client.post("/sessions/release-42/turns", json={"text": text}, headers=ana)
                assert reply.status_code == 200, reply.text
                print(text, "->", reply.json())
            view = client.get("/sessions/release-42", headers=ana).json()
            assert view == {"exists": True, "next_seq": 2, "state": "ok"}, view
            runtime = app.state.runtime
        assert runtime.state.value == "closed"  # closed by the lifespan on shutdown
        print("runtime", runtime.state.value)


if __name__ == "__main__":
    main()
