"""The store in a harness runtime: installed as a plugin, built from config, and a server killed mid-run.

A run whose recall store dies ends with recall ``failed``, commits nothing,
and the next run after a restart succeeds without help (R9, R11, R24, D2).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from redis_servers import ServerProcess, new_prefix

from agentium_harness import (
    ConfigError,
    OpContext,
    RecallLimits,
    RecallStatus,
    ResidentLimits,
    RunStatus,
    RuntimeLimits,
    Scope,
    SessionKey,
    SourceOwner,
    VerifiedIdentity,
    create_harness_runtime,
    load_runtime,
)
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ExtractiveProvider
from agentium_harness.plugin_api import ModelRequest, ModelResponse, PluginRegistry
from agentium_recall_redis import RedisRecallConfig, RedisRecallError, RedisRecallStore

pytestmark = pytest.mark.anyio

ANA = VerifiedIdentity("acme", "ana", "test-auth")
KEY = SessionKey("acme", "ana", "s1")
FACT = "Remember: the staging database password rotates every 45 days."
QUESTION = "How often does the staging database password rotate?"


class KillingProvider(ExtractiveProvider):
    """A real provider that, once armed, kills the recall server while the model 'thinks'."""

    def __init__(self) -> None:
        super().__init__()
        self.kill_during_next: ServerProcess | None = None

    async def complete(self, request: ModelRequest, ctx: OpContext) -> ModelResponse:
        victim, self.kill_during_next = self.kill_during_next, None
        if victim is not None:
            victim.kill()
        return await super().complete(request, ctx)


def _runtime(store: RedisRecallStore, provider: ExtractiveProvider, sessions: InMemorySessionStore) -> Any:
    return create_harness_runtime(
        provider=provider,
        archive=InMemoryArchive(),
        session_store=sessions,
        recall=store,
        limits=RuntimeLimits(resident=ResidentLimits(max_groups=2)),
        # The seeding runs and the recovered one must recall completely: not raced against the 2 s
        # default budget. The killed server's calls fail at once (refused, reset), not at a deadline.
        recall_limits=RecallLimits(max_latency_s=30.0),
    )


@pytest.mark.parametrize("when", ["before the run", "during the model call"])
async def test_killing_the_server_fails_recall_commits_nothing_and_the_next_run_recovers(
    aof_server: ServerProcess, when: str
) -> None:
    # Reconnecting after the restart must succeed; connecting to the killed server is refused at once.
    config = RedisRecallConfig(url=aof_server.url, key_prefix=new_prefix(), connect_timeout_s=30)
    store = RedisRecallStore(config)
    provider, sessions = KillingProvider(), InMemorySessionStore()
    runtime = _runtime(store, provider, sessions)
    try:
        await runtime.run(ANA, "s1", FACT)
        for i in range(3):
            await runtime.run(ANA, "s1", f"Unrelated chatter number {i}.")
        assert list(await store.seek_groups(KEY, 0, 1, OpContext.with_timeout(30)))  # evicted and indexed
        before = await sessions.load(KEY, OpContext())
        assert before is not None

        if when == "before the run":
            aof_server.kill()
        else:
            provider.kill_during_next = aof_server
        failed = await runtime.run(ANA, "s1", QUESTION)
        assert failed.recall is not None and failed.recall.status is RecallStatus.FAILED, failed.recall
        assert failed.committed is False and failed.group_seq is None
        after = await sessions.load(KEY, OpContext())
        assert after is not None and after.revision == before.revision  # nothing was committed

        aof_server.restart()
        result = await runtime.run(ANA, "s1", QUESTION)
        assert result.status is RunStatus.COMPLETED
        assert result.recall is not None and result.recall.status is RecallStatus.COMPLETE
        assert "45 days" in result.output
    finally:
        await runtime.aclose()
        await store.aclose()  # the host built it, so the host closes it


# -- installed as a plugin, built from config ---------------------------------------------------------


def test_the_installed_distribution_registers_recall_adapter_redis() -> None:
    registry = PluginRegistry.load()
    found = registry.adapter("recall", "redis")
    assert found.distribution == "agentium-recall-redis"
    assert found.spec.adapter_class is RedisRecallStore and found.spec.config_class is RedisRecallConfig
    assert all(found.capabilities.declared().values())
    assert not [p for p in registry.problems if p.distribution == "agentium-recall-redis"]


def test_agentium_plugins_lists_it() -> None:
    exe = shutil.which("agentium", path=str(Path(sys.executable).parent))
    assert exe, "the agentium command is installed with agentium-harness"
    out = subprocess.run([exe, "plugins", "--json"], capture_output=True, text=True, check=True).stdout
    plugin = next(p for p in json.loads(out)["plugins"] if p["distribution"] == "agentium-recall-redis")
    [adapter] = plugin["adapters"]
    assert (adapter["kind"], adapter["name"]) == ("recall", "redis")
    options = {o["name"]: o for o in adapter["options"]}
    assert options["url"]["default"] == "redis://127.0.0.1:6379/0" and options["password"]["default"] is None


def _config_file(tmp_path: Path, options: str) -> Path:
    path = tmp_path / "agentium.toml"
    path.write_text(
        f"""
[provider]
plugin = "extractive"
[archive]
plugin = "memory"
[session_store]
plugin = "memory"
[recall]
plugin = "redis"
[recall.budget]
max_latency_s = 30.0
[recall.options]
{options}
"""
    )
    return path


async def test_a_config_file_builds_the_store_and_the_runtime_closes_it(
    server: ServerProcess, tmp_path: Path
) -> None:
    prefix = new_prefix()
    options = f'url = "{server.url}"\nkey_prefix = "{prefix}"\nmax_read_bytes = 4096'
    path = _config_file(tmp_path, options + '\npassword = "${REDIS_PASSWORD:-}"')
    with pytest.raises(ConfigError) as caught:  # an empty password is refused, by its path
        load_runtime(path, environ={})
    assert caught.value.issues[0].path == "$.recall.options.password"
    path = _config_file(tmp_path, options)
    runtime = load_runtime(path)
    store = runtime.recall
    assert isinstance(store, RedisRecallStore) and store.owns_client
    assert (store.config.key_prefix, store.config.max_read_bytes) == (prefix, 4096)
    await store.index_document(
        SourceOwner("acme"), "rota", "The rota changes on Mondays.", OpContext.with_timeout(30)
    )
    result = await runtime.run(ANA, "s1", "When does the rota change?")
    assert result.recall is not None and result.recall.status is RecallStatus.COMPLETE
    await runtime.aclose()  # owned by the runtime: closed with it
    with pytest.raises(RedisRecallError, match="closed"):
        await store.open(Scope("acme", "ana", "s1"), RecallLimits(), OpContext())


def test_unknown_and_mistyped_options_are_config_errors_at_their_paths(tmp_path: Path) -> None:
    path = _config_file(tmp_path, 'urll = "redis://x"\nmax_read_bytes = "big"')
    with pytest.raises(ConfigError) as caught:
        load_runtime(path)
    paths = {issue.path for issue in caught.value.issues}
    assert {"$.recall.options.urll", "$.recall.options.max_read_bytes"} <= paths


def test_agentium_check_probe_shows_the_recall_stores_durability(
    server: ServerProcess, tmp_path: Path
) -> None:
    path = _config_file(tmp_path, f'url = "{server.url}"')
    exe = shutil.which("agentium", path=str(Path(sys.executable).parent))
    assert exe
    out = subprocess.run(
        [exe, "check", "--probe", str(path)], capture_output=True, text=True, check=False
    ).stdout
    assert "probe recall" in out and "appendonly" in out, out
