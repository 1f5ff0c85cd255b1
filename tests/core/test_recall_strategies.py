"""Named recall strategies: the ``agentium_register_recall_strategies`` hook and config selection."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from agentium_harness import ConfigError, QueryInput, load_runtime
from agentium_harness._plugins.registry import PluginRegistry
from agentium_harness.plugin_api import RecallStrategy, hookimpl


def _shout(turn: QueryInput) -> str:
    return turn.user_input.upper()


def _plugin(*strategies: object) -> types.SimpleNamespace:
    @hookimpl
    def agentium_register_recall_strategies(register):  # type: ignore[no-untyped-def]
        for s in strategies:
            register(s)

    return types.SimpleNamespace(agentium_register_recall_strategies=agentium_register_recall_strategies)


def test_builtins_are_registered() -> None:
    registry = PluginRegistry.load()
    assert registry.recall_strategy_names("query") == ("latest_user_text", "previous_and_latest_user_text")
    assert registry.recall_strategy_names("ranking") == ("score", "store_order")


def test_a_plugin_strategy_is_selectable_and_bad_ones_are_problems() -> None:
    registry = PluginRegistry.load()
    problems = registry.register_plugin(
        "agentium-strategies-test",
        _plugin(
            RecallStrategy("query", "shout", _shout),
            RecallStrategy("query", "latest_user_text", _shout),  # taken by the built-in
            RecallStrategy("query", "not an id", _shout),
            RecallStrategy("ranking", "nothing", "not callable"),  # type: ignore[arg-type]
            "not a strategy",
        ),
        version="1.0",
    )
    assert registry.recall_strategy("query", "shout").function is _shout
    messages = " | ".join(p.error for p in problems)
    assert "already registered by agentium-harness" in messages
    assert "must be an identifier" in messages
    assert "not callable" in messages
    assert "takes a RecallStrategy" in messages
    # the first registration of a taken name is kept
    assert registry.recall_strategy("query", "latest_user_text").function is not _shout
    assert "nothing" not in registry.recall_strategy_names("ranking")


def test_a_raising_strategy_hook_is_isolated() -> None:
    @hookimpl
    def agentium_register_recall_strategies(register):  # type: ignore[no-untyped-def]
        register(RecallStrategy("query", "half", _shout))
        raise RuntimeError("boom")

    registry = PluginRegistry.load()
    problems = registry.register_plugin(
        "agentium-broken-test",
        types.SimpleNamespace(agentium_register_recall_strategies=agentium_register_recall_strategies),
        version="1.0",
    )
    assert any("boom" in p.error for p in problems)
    assert "half" not in registry.recall_strategy_names("query")  # discarded with the failed call


CONFIG = """
[provider]
plugin = "extractive"
[archive]
plugin = "memory"
[session_store]
plugin = "memory"
[recall]
plugin = "sqlite"
options = {{ path = "r.db" }}
{extra}
"""


def test_config_selects_strategies_by_name(tmp_path: Path) -> None:
    path = tmp_path / "a.toml"
    path.write_text(CONFIG.format(extra='query = "previous_and_latest_user_text"\nranking = "score"'))
    runtime = load_runtime(path)
    policy = runtime.recall_policy
    assert policy.query.__name__ == "previous_and_latest_user_text"
    assert policy.rank.__name__ == "score_order"
    assert policy.name == "current_session"


@pytest.mark.parametrize(
    ("extra", "where", "says"),
    [
        ('query = "latest_usr_text"', "$.recall.query", "did you mean 'latest_user_text'"),
        ('ranking = "best"', "$.recall.ranking", "no ranking strategy named 'best'"),
        ('on_partial = "maybe"', "$.recall.on_partial", "must be one of stop, continue, clarify"),
        ('policy = "lenient"', "$.recall.policy", "must be one of current_session"),
        (
            'policy = "current_session_strict"\non_no_evidence = "proceed"',
            "$.recall.on_no_evidence",
            "contradicts",
        ),
    ],
)
def test_bad_recall_policy_config_is_refused_and_builds_nothing(
    tmp_path: Path, extra: str, where: str, says: str
) -> None:
    path = tmp_path / "a.toml"
    path.write_text(CONFIG.format(extra=extra))
    with pytest.raises(ConfigError) as caught:
        load_runtime(path)
    assert any(i.path == where and says in i.message for i in caught.value.issues), caught.value.issues
    assert not (tmp_path / "r.db").exists()  # nothing was created


def test_unknown_strategy_names_are_reported_with_every_other_phase_a_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A phase (a) problem elsewhere (a bad [runtime] value) skipped the [recall] checks: the report
    # listed that problem alone, and the unknown strategy names and the contradicting policy came
    # only in a second report, once it was fixed.
    from agentium_harness._cli import main

    path = tmp_path / "a.toml"
    path.write_text(
        CONFIG.format(
            extra='query = "latest_usr_text"\nranking = "best"\n'
            'policy = "current_session_strict"\non_no_evidence = "proceed"'
        )
        + '[runtime.resident]\nmax_groups = "eight"\n'
    )
    with pytest.raises(ConfigError) as caught:
        load_runtime(path)
    issues = {i.path: i.message for i in caught.value.issues}
    assert len(issues) == len(caught.value.issues) == 4, caught.value.issues
    assert issues["$.runtime.resident.max_groups"] == "expected an integer, got string"
    assert "did you mean 'latest_user_text'" in issues["$.recall.query"]
    assert "no ranking strategy named 'best'" in issues["$.recall.ranking"]
    assert "contradicts" in issues["$.recall.on_no_evidence"]
    assert not (tmp_path / "r.db").exists()  # nothing was created
    # `agentium check` prints the one report, every problem in it.
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: 4 error(s)" in err
    assert all(f"  {where}: " in err for where in issues)


def test_a_strategy_name_from_an_unset_variable_is_reported_once(tmp_path: Path) -> None:
    # The unset variable's text stayed in place and was also reported as an unknown strategy:
    # two issues at one key for one problem.
    path = tmp_path / "a.toml"
    path.write_text(CONFIG.format(extra='query = "${AGENTIUM_TEST_UNSET_QUERY}"'))
    with pytest.raises(ConfigError) as caught:
        load_runtime(path, environ={})
    (issue,) = caught.value.issues
    assert issue.path == "$.recall.query" and "AGENTIUM_TEST_UNSET_QUERY is not set" in issue.message
