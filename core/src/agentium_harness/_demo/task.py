"""The demo's last part: a task the model claims is done, checked by the filesystem verifier.

The model (scripted) runs the task's tests, which write a JUnit record, and
claims completion while the report artifact is still a draft. The ``fs``
verifier — from the separately installed ``agentium-verifier-fs``
distribution, found through the plugin registry like any plugin — compares
the artifact with the digest the *host's* task names, so the claim is
refused (``fail``) and a revision is requested with the verifier's reasons;
the model rewrites the report, runs the tests again on it, and the second
verdict is ``pass``. Without
the plugin installed, the part is skipped with a note. The plugin's config
class and factory are bounded like every adapter's (the registry's
``hook_timeout_s``, ``AGENTIUM_HOOK_TIMEOUT``): one that hangs is abandoned and
the demo fails with :class:`~agentium_harness._plugins.deadline.HookTimeoutError`
naming it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any, TextIO

import anyio.to_thread

from .._codec import structure
from .._engine.build import create_harness_runtime
from .._engine.tools import EffectLevel, Tool, ToolRegistry
from .._engine.verification import verified_completion_policy
from .._errors import PluginNotFoundError
from .._observe.spans import unattributed
from .._plugins.deadline import call_with_deadline
from .._plugins.registry import PluginRegistry
from .._ports.archive import HistoryArchive
from .._ports.sessions import SessionStore
from .._scope import VerifiedIdentity
from ..adapters.providers import ScriptedProvider

__all__ = ["FINAL_REPORT", "TASK_DIR", "run_task"]

#: Folder under the demo directory holding the task's artifact and test record.
TASK_DIR = "task"
#: What the host's task specification says the report must hold (its sha256 is the expectation).
FINAL_REPORT = "Inventory report: every item noted, nothing lost.\n"
_RESULTS = "results.xml"
_REPORT = "report.txt"


def _junit(tests: int) -> str:
    cases = "".join(f'<testcase classname="inventory" name="test_{i}" time="0.01"/>' for i in range(tests))
    return (
        '<?xml version="1.0" encoding="utf-8"?>'
        f'<testsuites><testsuite name="inventory" tests="{tests}" failures="0" errors="0" skipped="0">'
        f"{cases}</testsuite></testsuites>\n"
    )


def _tools(task: Path) -> ToolRegistry:
    async def run_tests(args: Mapping[str, Any]) -> str:
        await anyio.to_thread.run_sync((task / _RESULTS).write_text, _junit(3))
        return f"3 tests passed; record written to {TASK_DIR}/{_RESULTS}"

    async def write_report(args: Mapping[str, Any]) -> str:
        await anyio.to_thread.run_sync((task / _REPORT).write_text, str(args.get("text", "")))
        return f"wrote {TASK_DIR}/{_REPORT}"

    return ToolRegistry(
        [
            Tool("run_tests", run_tests, EffectLevel.WRITE, "run the task's tests (writes a JUnit record)"),
            Tool("write_report", write_report, EffectLevel.WRITE, "write the report artifact"),
        ]
    )


def _script() -> list[object]:
    return [
        {"content": "", "tool_calls": [{"id": "t-1", "name": "run_tests", "arguments": {}}]},
        "Task complete: the report is written and all tests pass.",
        {
            # The tests run again after the rewrite: a record written before the report changed
            # did not test it, and the verifier would not count it.
            "content": "",
            "tool_calls": [
                {"id": "t-2", "name": "write_report", "arguments": {"text": FINAL_REPORT}},
                {"id": "t-3", "name": "run_tests", "arguments": {}},
            ],
        },
        "Revised: the report now holds the final text, and the tests pass on it.",
    ]


async def _verifier(registry: PluginRegistry, task: Path) -> Any:
    """The ``fs`` verifier for ``task``, its config class and factory bounded as ``load_runtime`` bounds them.

    Both are plugin code (the config class's validators run as it is
    structured) and used to be called right here, on the event loop: one that
    never returned hung ``agentium demo`` for good. Each runs in a daemon
    thread, abandoned past the registry's ``hook_timeout_s``
    (:class:`~agentium_harness._plugins.deadline.HookTimeoutError`), waited for
    from a worker thread so the event loop is not held meanwhile.
    """
    found = registry.adapter("verifier", "fs")
    expected = hashlib.sha256(FINAL_REPORT.encode()).hexdigest()
    data = {
        "root": str(task),
        "artifacts": [{"path": _REPORT, "sha256": expected}],
        "test_records": [_RESULTS],
    }
    adapter = f"verifier adapter 'fs' (plugin {found.distribution})"
    options: Any = await _bounded(
        registry, partial(structure, data, found.spec.config_class), f"the config class of {adapter}"
    )
    return await _bounded(registry, partial(found.spec.build, options), f"the factory of {adapter}")


async def _bounded(registry: PluginRegistry, call: Callable[[], Any], what: str) -> Any:
    """``call()`` (plugin code) in a daemon thread, abandoned past ``hook_timeout_s``; off the event loop.

    Nobody's telemetry, as ``load_runtime``'s factory calls are: building an adapter is no
    runtime's operation, also when the demo is run inside runtime A's block (never A's spans).
    """

    def bounded() -> Any:
        with unattributed():  # entered in the worker thread's copy of the context
            return call_with_deadline(call, registry.hook_timeout_s, what)

    return await anyio.to_thread.run_sync(bounded, abandon_on_cancel=True)


async def run_task(
    archive: HistoryArchive,
    store: SessionStore,
    identity: VerifiedIdentity,
    session_id: str,
    directory: Path,
    out: TextIO,
    registry: PluginRegistry | None = None,
) -> bool:
    """Run the task turn on ``session_id``; return whether its verdicts came out as shown."""
    registry = registry if registry is not None else await anyio.to_thread.run_sync(PluginRegistry.load)
    try:
        registry.adapter("verifier", "fs")
    except PluginNotFoundError:
        print(
            "verification: not shown; it needs the filesystem verifier, agentium-verifier-fs (not on PyPI "
            "yet: from a checkout of the Agentium repository, pip install ./plugins/verifier-fs)",
            file=out,
        )
        return True
    task = directory / TASK_DIR
    await anyio.to_thread.run_sync(lambda: task.mkdir(exist_ok=True))
    await anyio.to_thread.run_sync((task / _REPORT).write_text, "Inventory report: DRAFT\n")
    verifier = await _verifier(registry, task)
    runtime = create_harness_runtime(
        provider=ScriptedProvider(replies=_script()),
        archive=archive,
        session_store=store,
        verifier=verifier,
        tools=_tools(task),
        owned=[verifier],
        # The demo lets the revision rewrite the report; by default a revision may not write.
        completion_policy=verified_completion_policy(
            on_fail="revise", max_revisions=1, allow_revision_effects=True
        ),
    )
    async with runtime:
        result = await runtime.run(
            identity,
            session_id,
            f"Finish the task: write {TASK_DIR}/{_REPORT} and make the tests pass.",
            grants=["run_tests", "write_report"],
            completion=True,
        )
    record = result.verification
    print(
        f"task: the model ran the tests and claimed completion; the fs verifier checked {TASK_DIR}/ "
        "against the host's expected digest and test record",
        file=out,
    )
    if record is None:
        print("FAILED: the task turn was not verified", file=out)
        return False
    for attempt in record.attempts:
        print(f"  verdict {attempt.verdict.value} (revision {attempt.revision}): {attempt.reason}", file=out)
        for entry in attempt.evidence:
            print(f"    evidence {entry.kind} {entry.ref}: {entry.detail}", file=out)
    print(
        f"  completion {'accepted' if record.accepted else 'not accepted'} after {record.revisions} "
        f"revision(s); final answer: {result.output}",
        file=out,
    )
    return [a.verdict.value for a in record.attempts] == ["fail", "pass"]
