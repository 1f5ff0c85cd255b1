"""The ``openai`` library is imported in a worker thread on first use, never on the event loop.

Importing ``openai`` (and ``httpx`` under it) takes about half a second of
module loading. The provider built its first client, importing the library,
in the event loop's thread: every other task of the host's loop stood still
meanwhile. It is now imported by a worker thread (once, however many first
calls run at once), under the call's deadline: a call whose deadline passes
while the import runs returns at its deadline, the import going on.

Each case runs in a fresh interpreter (this one has imported ``openai``
long since), where an import hook records the thread that imports
``openai``; the calls go to the real stub server running here. No time is
measured: the hook says which thread imported it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from openai_helpers import KEY_ENV
from openai_stub_server import Reply, StubServer

SCRIPT = textwrap.dedent(
    """
    import importlib.abc, json, sys, threading

    importers = []  # the thread of every import of openai (a finder is asked only while importing it)
    release = threading.Event()  # mode "deadline": the import is held until the call has returned
    imported = threading.Event()

    class Watch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == "openai":
                importers.append(threading.get_ident())
                if sys.argv[1] == "deadline":
                    release.wait(10)  # bounded: the old provider held its loop here
            if name.startswith("openai."):  # one of openai's own modules: openai's code is running
                imported.set()
            return None

    sys.meta_path.insert(0, Watch())

    import anyio
    from agentium_harness import Message, OperationCancelledError, Role
    from agentium_harness.plugin_api import ModelRequest, OpContext
    from agentium_provider_openai import (
        OpenAIEmbedder, OpenAIEmbedderConfig, OpenAIProvider, OpenAIProviderConfig,
    )

    mode, backend, base_url, key_env, key = sys.argv[1:6]
    environ = {key_env: key}
    loaded_with_the_plugin = "openai" in sys.modules
    request = ModelRequest("You help.", turn=(Message(Role.USER, "hello"),))

    async def main():
        loop = threading.get_ident()
        config = OpenAIProviderConfig(model="stub-model", base_url=base_url, api_key_env=key_env)
        answers = []
        if mode == "complete":
            provider = OpenAIProvider(config, environ=environ)

            async def one():
                answers.append((await provider.complete(request, OpContext.with_timeout(20))).message.content)

            async with anyio.create_task_group() as group:  # two first calls at once
                group.start_soon(one)
                group.start_soon(one)
            await provider.aclose()
        elif mode == "deadline":
            provider = OpenAIProvider(config, environ=environ)
            try:
                await provider.complete(request, OpContext.with_timeout(0.2))
            except OperationCancelledError as exc:
                answers.append(f"cancelled ({exc.reason}); import under way: {not imported.is_set()}")
            release.set()  # the abandoned import goes on; the next call finds it done
            answers.append((await provider.complete(request, OpContext.with_timeout(20))).message.content)
            await provider.aclose()
        elif mode == "health":
            provider = OpenAIProvider(config, environ=environ)
            answers.append(await provider.health(OpContext.with_timeout(20)))
            await provider.aclose()
        elif mode == "embed":
            embedder = OpenAIEmbedder(
                OpenAIEmbedderConfig(model="stub-embed", dimension=8, base_url=base_url, api_key_env=key_env),
                environ=environ,
            )
            vectors = await embedder.embed(["hello world"], OpContext.with_timeout(20))
            answers.append(len(vectors[0]))
            await embedder.aclose()
        else:  # lent: the host imports openai itself and lends its client
            from openai import AsyncOpenAI

            client = AsyncOpenAI(base_url=base_url, api_key=key)
            provider = OpenAIProvider(config, client=client)
            answers.append((await provider.complete(request, OpContext.with_timeout(20))).message.content)
            await client.close()
        return loop, answers

    loop, answers = anyio.run(main, backend=backend)
    print(json.dumps({
        "loop": loop, "importers": importers, "answers": answers, "with_plugin": loaded_with_the_plugin,
    }))
    """
)


def _run(stub: StubServer, mode: str, backend: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode, backend, stub.base_url, KEY_ENV, stub.api_key or ""],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.parametrize(
    ("mode", "backend"),
    [("complete", "asyncio"), ("complete", "trio"), ("health", "asyncio"), ("embed", "asyncio")],
)
def test_the_first_call_imports_openai_off_the_event_loop(stub: StubServer, mode: str, backend: str) -> None:
    if mode == "complete":
        stub.add(Reply.recorded("plain_answer"), Reply.recorded("plain_answer"))
    seen = _run(stub, mode, backend)
    assert seen["with_plugin"] is False  # loading the plugin does not import it either
    importers = seen["importers"]
    assert isinstance(importers, list) and len(importers) == 1, seen  # imported once, by one thread
    assert importers[0] != seen["loop"], "openai was imported on the event loop's thread"
    answers = seen["answers"]
    assert isinstance(answers, list) and len(answers) == (2 if mode == "complete" else 1)
    if mode == "complete":
        assert len(set(answers)) == 1 and len(stub.completions) == 2
    if mode == "embed":
        assert answers == [8]


def test_a_lent_client_still_works_in_a_fresh_process(stub: StubServer) -> None:
    """The host imported ``openai`` (to build its client) wherever it chose; the provider just uses it."""
    stub.add(Reply.recorded("plain_answer"))
    seen = _run(stub, "lent", "asyncio")
    answers = seen["answers"]
    assert isinstance(answers, list) and len(answers) == 1 and answers[0]
    assert len(stub.completions) == 1


def test_a_deadline_passing_during_the_import_ends_the_call_not_the_import(stub: StubServer) -> None:
    """The import is held (by the hook) until the first call has returned: it returns cancelled.

    On the loop's thread the import would have held the loop itself, so the
    call could only return once the import was done.
    """
    stub.add(Reply.recorded("plain_answer"))
    seen = _run(stub, "deadline", "asyncio")
    answers = seen["answers"]
    assert isinstance(answers, list) and len(answers) == 2, seen
    assert answers[0] == "cancelled (deadline passed); import under way: True"
    assert answers[1]  # the next call, once the import was let finish, is answered
    importers = seen["importers"]
    assert isinstance(importers, list) and len(importers) == 1 and importers[0] != seen["loop"]
    assert len(stub.completions) == 1
