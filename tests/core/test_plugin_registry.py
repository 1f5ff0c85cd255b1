"""Plugin loading, isolation, load-time validation and lookup, against real installed distributions.

The fixture plugins in ``tests/fixtures/plugins`` are installed into a temporary
site directory (a ``.dist-info`` folder with ``METADATA`` and
``entry_points.txt`` per distribution) which is put on ``sys.path``; the
registry finds them through ``importlib.metadata`` exactly as it finds
pip-installed plugins. Nothing in ``importlib.metadata`` is patched.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _fakedist import fakedist

from agentium_harness._errors import PluginError, PluginLoadError, PluginNotFoundError, RegistrationError
from agentium_harness._plugins.hookspecs import hookimpl
from agentium_harness._plugins.registry import (
    BUILTIN_DISTRIBUTION,
    HookFailure,
    PluginRegistry,
    PluginStatus,
    ProblemStage,
    normalize_distribution_name,
)
from agentium_harness._plugins.spec import AdapterSpec
from agentium_harness._plugins.validation import validate_adapter_spec
from agentium_harness._ports.memory import MemoryEvent, MemoryEventKind
from agentium_harness._scope import Scope, SessionKey

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "plugins"


Installer = Callable[..., Path]


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Installer]:
    """Install fixture distributions by key (see fakedist.DISTRIBUTIONS) into a fresh site dir."""
    fakedist.forget_modules()

    def make(*keys: str) -> Path:
        site = tmp_path / "site"
        site.mkdir()
        fakedist.install(site, *keys)
        monkeypatch.syspath_prepend(str(site))
        return site

    yield make
    fakedist.forget_modules()


NO_ENV: dict[str, str] = {}


def _problems(registry: PluginRegistry, distribution: str, stage: ProblemStage | None = None) -> list[Any]:
    return [
        p
        for p in registry.problems
        if normalize_distribution_name(p.distribution) == normalize_distribution_name(distribution)
        and (stage is None or p.stage is stage)
    ]


def _plugin(registry: PluginRegistry, distribution: str) -> Any:
    matches = [p for p in registry.plugins if p.distribution == distribution]
    assert len(matches) == 1, [p.distribution for p in registry.plugins]
    return matches[0]


# ------------------------------------------------------------------ built-ins


def test_builtin_plugin_is_registered_under_the_core_distribution() -> None:
    registry = PluginRegistry.load(autoload=False)
    core = _plugin(registry, BUILTIN_DISTRIBUTION)
    assert core.version == importlib.metadata.version("agentium-harness")
    assert core.status is PluginStatus.OK
    assert "memory" in core.adapters["archive"]
    assert "memory" in core.adapters["session_store"]
    assert core.modules == ("agentium_harness.adapters.builtin",)
    memory = registry.adapter("archive", "memory")
    assert memory.distribution == BUILTIN_DISTRIBUTION
    assert memory.capabilities.declared()["idempotent_append"] is True
    assert registry.problems == ()


def test_builtin_entry_point_of_the_core_itself_is_not_loaded_twice(install: Installer) -> None:
    install("good")
    registry = PluginRegistry.load(environ=NO_ENV)
    assert [p.distribution for p in registry.plugins].count(BUILTIN_DISTRIBUTION) == 1
    assert not registry.is_conflicted("archive", "memory")


# ------------------------------------------------------- real distributions


@pytest.mark.parametrize(
    ("hook", "kind", "name"),
    [
        ("agentium_register_archives", "archive", "tgood"),
        ("agentium_register_session_stores", "session_store", "tgood"),
        ("agentium_register_recall_stores", "recall", "norecall"),
        ("agentium_register_embedders", "embedder", "tembed"),
        ("agentium_register_summarizers", "summarizer", "tsum"),
        ("agentium_register_verifiers", "verifier", "tverify"),
        ("agentium_register_memory_stores", "memory", "tmemory"),
        ("agentium_register_providers", "provider", "tprovider"),
    ],
)
def test_each_registration_hook_registers_its_kind_from_an_installed_distribution(
    install: Installer, hook: str, kind: str, name: str
) -> None:
    install("good")
    registry = PluginRegistry.load(environ=NO_ENV)
    found = registry.adapter(kind, name)
    assert (found.distribution, found.version) == ("agentium-test-good", "1.2.0")
    assert found.spec.capabilities is not None
    assert name in registry.names(kind)
    good = _plugin(registry, "agentium-test-good")
    assert good.status is PluginStatus.OK
    assert hook in good.hooks
    assert name in good.adapters[kind]


def test_plugin_exiting_at_import_is_a_reported_failure_not_the_end_of_the_command(
    install: Installer,
) -> None:
    # sys.exit() at import raised SystemExit through the registry: `agentium check` of a broken
    # config then ended with exit 0 and no output.
    install("good", "exits")
    registry = PluginRegistry.load(environ=NO_ENV)
    (problem,) = _problems(registry, "agentium-test-exits")
    assert problem.stage is ProblemStage.IMPORT and "SystemExit" in problem.error
    assert _plugin(registry, "agentium-test-exits").status is PluginStatus.FAILED
    assert registry.adapter("archive", "tgood").distribution == "agentium-test-good"


def test_plugin_raising_at_import_is_isolated_and_reported(install: Installer) -> None:
    install("good", "importfail")
    registry = PluginRegistry.load(environ=NO_ENV)
    (problem,) = _problems(registry, "agentium-test-importfail")
    assert problem.stage is ProblemStage.IMPORT
    assert problem.version == "0.3.1"
    assert "RuntimeError" in problem.error and "backend library is missing" in problem.error
    assert isinstance(problem.to_error(), PluginLoadError)
    assert "agentium-test-importfail 0.3.1" in str(problem.to_error())
    assert _plugin(registry, "agentium-test-importfail").status is PluginStatus.FAILED
    # The other plugin loaded regardless.
    assert registry.adapter("archive", "tgood").distribution == "agentium-test-good"
    assert _plugin(registry, "agentium-test-good").status is PluginStatus.OK


def test_unknown_name_mentions_plugins_that_failed_to_load(install: Installer) -> None:
    install("importfail")
    registry = PluginRegistry.load(environ=NO_ENV)
    with pytest.raises(PluginNotFoundError) as info:
        registry.get("archive", "whatever")
    assert "agentium-test-importfail 0.3.1" in str(info.value)
    assert "failed to load" in str(info.value)


def test_two_plugins_registering_one_name_conflict_and_both_are_named(install: Installer) -> None:
    install("good", "dup")
    registry = PluginRegistry.load(environ=NO_ENV)
    # Distributions load in name order, so agentium-test-dup registered first
    # and the conflict is found when agentium-test-good registers.
    (problem,) = [p for p in registry.problems if p.stage is ProblemStage.CONFLICT]
    assert problem.distribution == "agentium-test-good"
    assert "agentium-test-good" in problem.error and "agentium-test-dup" in problem.error
    assert (problem.kind, problem.name) == ("archive", "tgood")
    assert isinstance(problem.to_error(), RegistrationError)
    assert registry.is_conflicted("archive", "tgood")
    assert registry.conflict_owners("archive", "tgood") == ("agentium-test-dup", "agentium-test-good")
    assert "tgood" not in registry.names("archive")
    with pytest.raises(PluginNotFoundError, match="ambiguous") as info:
        registry.get("archive", "tgood")
    assert "agentium-test-good" in str(info.value) and "agentium-test-dup" in str(info.value)
    # The rest of both plugins is unaffected.
    assert registry.adapter("archive", "tdup-only").distribution == "agentium-test-dup"
    assert registry.adapter("session_store", "tgood").distribution == "agentium-test-good"
    assert _plugin(registry, "agentium-test-good").status is PluginStatus.DEGRADED


def test_plugin_raising_inside_register_hook_loses_only_that_calls_registrations(install: Installer) -> None:
    install("raising")
    registry = PluginRegistry.load(environ=NO_ENV)
    (problem,) = _problems(registry, "agentium-test-raising")
    assert problem.stage is ProblemStage.REGISTER_HOOK
    assert problem.version == "0.1.0"
    assert problem.hook == "agentium_register_archives"
    assert problem.error == "ValueError: boom while registering archives"
    # Registered before the raise, in the same call: discarded.
    assert "tpartial" not in registry.names("archive")
    with pytest.raises(PluginNotFoundError):
        registry.get("archive", "tpartial")
    # Its other hook ran normally.
    assert registry.adapter("session_store", "tsurvivor").distribution == "agentium-test-raising"
    assert _plugin(registry, "agentium-test-raising").status is PluginStatus.DEGRADED


def test_misspelt_hook_name_is_caught_by_check_pending_and_the_plugin_unregistered(
    install: Installer,
) -> None:
    install("misspelt", "good")
    registry = PluginRegistry.load(environ=NO_ENV)
    (problem,) = _problems(registry, "agentium-test-misspelt")
    assert problem.stage is ProblemStage.HOOK_VALIDATION
    assert problem.hook == "agentium_register_archivez"
    assert "unknown hook 'agentium_register_archivez'" in problem.error
    assert "did you mean 'agentium_register_archives'" in problem.error
    # Unregistered as a whole: its correctly spelt hook did not register anything.
    assert "tmisspelt" not in registry.names("session_store")
    assert _plugin(registry, "agentium-test-misspelt").status is PluginStatus.FAILED
    assert "agtest_misspelt" not in {
        getattr(p, "__name__", "") for p in registry.plugin_manager.get_plugins()
    }
    registry.plugin_manager.check_pending()  # nothing pending is left behind
    assert registry.adapter("archive", "tgood").distribution == "agentium-test-good"


def test_hook_with_bad_signature_is_refused_at_register(install: Installer) -> None:
    install("badsig")
    registry = PluginRegistry.load(environ=NO_ENV)
    (problem,) = _problems(registry, "agentium-test-badsig")
    assert problem.stage is ProblemStage.HOOK_VALIDATION
    assert "colour" in problem.error
    assert _plugin(registry, "agentium-test-badsig").status is PluginStatus.FAILED
    assert not registry.plugin_manager.has_plugin("agentium-test-badsig:badsig")


@pytest.mark.parametrize(
    ("kind", "name", "expected"),
    [
        (
            "archive",
            "nobounded",
            "declared capability 'bounded_reads' needs ClaimsBoundedReads.read_groups()",
        ),
        ("archive", "baseonly", "capabilities declared only on a base class"),
        ("archive", "wrongcaps", "capabilities must be a ArchiveCapabilities, got RecallCapabilities"),
        ("archive", "noreq", "missing required capability flag 'idempotent_append'"),
        ("archive", "notattrs", "config_class must be an attrs class, got PlainConfig"),
        ("archive", "badfactory", "factory must be callable, got int"),
        ("archive", "Bad Name!", "invalid adapter name 'Bad Name!'"),
        ("archive", "?", "register() takes an AdapterSpec, got str"),
        ("recall", "nosession", "needs a session_class whose discover() is implemented"),
    ],
)
def test_each_load_time_rule_rejects_the_registration(
    install: Installer, kind: str, name: str, expected: str
) -> None:
    install("invalid")
    registry = PluginRegistry.load(environ=NO_ENV)
    rejected = [
        p for p in _problems(registry, "agentium_Test.Invalid", ProblemStage.REGISTRATION) if p.name == name
    ]
    assert len(rejected) == 1, registry.problems
    (problem,) = rejected
    assert problem.kind == kind
    assert expected in problem.error
    assert problem.version == "0.9.0"
    error = problem.to_error()
    assert isinstance(error, RegistrationError)
    assert (error.kind, error.name, error.distribution) == (kind, name, "agentium_Test.Invalid")
    assert name not in registry.names(kind)
    # Selecting it says why it is missing.
    with pytest.raises(PluginNotFoundError, match="rejected at load time"):
        registry.get(kind, name)


def test_rejections_do_not_stop_the_valid_registration_beside_them(install: Installer) -> None:
    install("invalid")
    registry = PluginRegistry.load(environ=NO_ENV)
    assert registry.adapter("archive", "tvalid").distribution == "agentium_Test.Invalid"
    assert _plugin(registry, "agentium_Test.Invalid").status is PluginStatus.DEGRADED
    assert len(_problems(registry, "agentium-test-invalid", ProblemStage.REGISTRATION)) == 9


# ------------------------------------------------------------ allow / block


def test_env_allow_list_loads_only_the_named_distributions(install: Installer) -> None:
    install("good", "dup", "importfail")
    registry = PluginRegistry.load(environ={"AGENTIUM_PLUGINS": "agentium-test-good"})
    assert "agtest_good" in sys.modules
    assert "agtest_dup" not in sys.modules
    assert "agtest_importfail" not in sys.modules
    # Only the fixture distributions: real plugins installed beside the core (recall-redis) are skipped too.
    skipped = {
        s.distribution: s.reason for s in registry.skipped if s.distribution.startswith("agentium-test-")
    }
    assert skipped == {
        "agentium-test-dup": "not in AGENTIUM_PLUGINS",
        "agentium-test-importfail": "not in AGENTIUM_PLUGINS",
    }
    assert registry.problems == ()
    assert not registry.is_conflicted("archive", "tgood")


def test_env_block_list_never_imports_the_blocked_module(install: Installer) -> None:
    install("good", "dup", "importfail")
    registry = PluginRegistry.load(
        environ={"AGENTIUM_DISABLE_PLUGINS": " AGENTIUM_TEST_IMPORTFAIL , agentium.test.dup"}
    )
    assert "agtest_importfail" not in sys.modules
    assert "agtest_dup" not in sys.modules
    assert "agtest_good" in sys.modules
    reasons = {s.distribution: s.reason for s in registry.skipped}
    assert reasons["agentium-test-importfail"] == "blocked by AGENTIUM_DISABLE_PLUGINS"
    assert reasons["agentium-test-dup"] == "blocked by AGENTIUM_DISABLE_PLUGINS"
    assert _problems(registry, "agentium-test-importfail") == []


def test_empty_env_allow_list_loads_no_external_plugin(install: Installer) -> None:
    install("good", "dup")
    registry = PluginRegistry.load(environ={"AGENTIUM_PLUGINS": ""})
    assert fakedist.imported() == set()
    assert [p.distribution for p in registry.plugins] == [BUILTIN_DISTRIBUTION]
    fixtures = {s.distribution for s in registry.skipped if s.distribution.startswith("agentium-test-")}
    assert fixtures == {"agentium-test-good", "agentium-test-dup"}
    assert "memory" in registry.names("archive")


def test_allow_list_matches_pep503_normalized_names(install: Installer) -> None:
    install("invalid", "good")
    registry = PluginRegistry.load(environ={"AGENTIUM_PLUGINS": "Agentium-Test-Invalid"})
    assert "agtest_invalid" in sys.modules
    assert "agtest_good" not in sys.modules
    assert "tvalid" in registry.names("archive")


def test_explicit_allow_replaces_env_and_block_combines_with_env(install: Installer) -> None:
    install("good", "dup", "raising")
    registry = PluginRegistry.load(
        allow=["agentium-test-good", "agentium-test-dup", "agentium-test-raising"],
        block=["agentium-test-dup"],
        environ={
            "AGENTIUM_PLUGINS": "agentium-test-raising",
            "AGENTIUM_DISABLE_PLUGINS": "agentium-test-raising",
        },
    )
    assert fakedist.imported() == {"agtest_good"}
    reasons = {
        s.distribution: s.reason for s in registry.skipped if s.distribution.startswith("agentium-test-")
    }
    assert reasons == {
        "agentium-test-dup": "blocked by the block list",
        "agentium-test-raising": "blocked by AGENTIUM_DISABLE_PLUGINS",
    }


def test_allow_list_naming_an_uninstalled_distribution_is_reported(install: Installer) -> None:
    install("good")
    registry = PluginRegistry.load(environ={"AGENTIUM_PLUGINS": "agentium-test-good,agentium-test-typo"})
    (problem,) = registry.problems
    assert problem.stage is ProblemStage.ALLOW_LIST
    assert problem.distribution == "agentium-test-typo"
    assert "AGENTIUM_PLUGINS" in problem.error


def test_autoload_off_reads_no_entry_points(install: Installer) -> None:
    install("good", "importfail")
    registry = PluginRegistry.load(autoload=False, environ=NO_ENV)
    assert fakedist.imported() == set()
    assert registry.skipped == ()
    assert registry.problems == ()
    assert registry.autoload is False


# ------------------------------------------------------------------ lookups


def test_unknown_name_lists_installed_suggests_and_gives_the_pip_command() -> None:
    registry = PluginRegistry.load(autoload=False)
    with pytest.raises(PluginNotFoundError) as info:
        registry.get("archive", "s3")
    message = str(info.value)
    assert "no archive adapter named 's3'" in message
    assert "installed archive adapters: " in message and "memory" in message
    # Nothing is on PyPI yet: the hint names the distribution and installs it from a checkout.
    assert "provided by agentium-archive-s3, which is not published on PyPI yet" in message
    assert "pip install ./plugins/archive-s3" in message
    assert "pip install agentium-" not in message
    assert "autoload is off" in message
    with pytest.raises(PluginNotFoundError, match="did you mean 'memory'"):
        registry.get("archive", "memroy")
    for kind, name, folder in (("recall", "redis", "recall-redis"), ("verifier", "fs", "verifier-fs")):
        with pytest.raises(PluginNotFoundError, match=rf"agentium-{folder}.*pip install \./plugins/{folder}"):
            registry.get(kind, name)
    with pytest.raises(PluginNotFoundError, match="unknown adapter kind 'archives'"):
        registry.get("archives", "memory")


def test_names_are_sorted_and_per_kind(install: Installer) -> None:
    install("good")
    registry = PluginRegistry.load(environ=NO_ENV)
    recall = registry.names("recall")
    assert list(recall) == sorted(recall)
    assert {"norecall", "seekrecall"} <= set(recall)
    assert "tgood" in registry.names("session_store")
    assert "tsum" not in registry.names("archive")


# ---------------------------------------------------------------- lifecycle


def _key() -> SessionKey:
    return SessionKey(tenant="t1", user="u1", session="s1")


def test_lifecycle_broadcast_isolates_a_raising_hook(install: Installer) -> None:
    install("good", "raising")
    registry = PluginRegistry.load(environ=NO_ENV)
    good = sys.modules["agtest_good"]
    failures = registry.broadcast("agentium_groups_archived", key=_key(), receipts=[], groups=[])
    assert failures == [
        HookFailure(
            "agentium-test-raising", "agentium_groups_archived", "RuntimeError: lifecycle hook exploded"
        )
    ]
    assert good.EVENTS == [("groups_archived", (_key(), ()))]


def test_lifecycle_broadcast_reaches_memory_and_session_hooks(install: Installer) -> None:
    install("good")
    registry = PluginRegistry.load(environ=NO_ENV)
    good = sys.modules["agtest_good"]
    event = MemoryEvent(MemoryEventKind.REMEMBERED, Scope(tenant="t1", user="u1", session="s1"), "f1")
    assert registry.broadcast("agentium_memory_event", event=event) == []
    assert registry.broadcast("agentium_session_closed", key=_key(), report="report") == []
    assert good.EVENTS == [("memory_event", event), ("session_closed", (_key(), "report"))]


def test_broadcast_refuses_unknown_hooks_and_wrong_arguments() -> None:
    registry = PluginRegistry.load(autoload=False)
    with pytest.raises(ValueError, match="not a lifecycle hook"):
        registry.broadcast("agentium_register_archives", register=print)
    with pytest.raises(TypeError, match="agentium_session_closed takes"):
        registry.broadcast("agentium_session_closed", key=_key())


def test_async_lifecycle_hook_is_reported_not_silently_skipped() -> None:
    @hookimpl
    async def agentium_session_closed(key: SessionKey, report: Any) -> None:
        raise AssertionError("never awaited")

    plugin = types.SimpleNamespace(agentium_session_closed=agentium_session_closed)
    registry = PluginRegistry.load(autoload=False, extra_plugins=[("embedded-async", plugin)])
    (failure,) = registry.broadcast("agentium_session_closed", key=_key(), report=None)
    assert failure.distribution == "embedded-async"
    assert "plain functions" in failure.error


def test_a_distribution_whose_metadata_cannot_be_read_is_a_problem_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A METADATA file that is not UTF-8 (a damaged install) raised UnicodeDecodeError out of
    # PluginRegistry.load(): agentium run, check and plugins all ended in a traceback.
    site = tmp_path / "site"
    info = site / "agtest_damaged-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_bytes(b"Metadata-Version: 2.1\nName: damaged\xff\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[agentium]\ndamaged = agtest_damaged_plugin\n", encoding="utf-8")
    (site / "agtest_damaged_plugin.py").write_text("raise AssertionError('must not be imported')\n")
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    registry = PluginRegistry.load(environ=NO_ENV)
    (problem,) = [p for p in registry.problems if p.distribution == "agtest_damaged_plugin"]
    assert problem.stage is ProblemStage.IMPORT
    assert "metadata cannot be read, so it was not loaded: UnicodeDecodeError" in problem.error
    assert "agtest_damaged_plugin" not in sys.modules
    assert "memory" in registry.names("archive")


def test_a_distribution_whose_entry_points_cannot_be_read_leaves_the_others_loading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An entry_points.txt that is not UTF-8 made importlib.metadata.entry_points() raise inside
    # PluginRegistry.load(): every command ended in a traceback, whatever else was installed.
    site = tmp_path / "site"
    info = site / "agtest_badeps-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: agtest-badeps\nVersion: 1.0\n")
    (info / "entry_points.txt").write_bytes(b"[agentium]\nbad = \xff\n")
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    registry = PluginRegistry.load(environ=NO_ENV)
    (problem,) = [p for p in registry.problems if p.distribution == "agtest-badeps"]
    assert problem.stage is ProblemStage.IMPORT
    assert "entry points cannot be read, so none was loaded: UnicodeDecodeError" in problem.error
    assert "memory" in registry.names("archive")
    assert _plugin(registry, "agtest-badeps").status is PluginStatus.FAILED


class _UnreadableError(Exception):
    """A plugin's exception whose message cannot be read."""

    def __str__(self) -> str:
        raise RuntimeError("__str__ exploded")


def test_a_plugin_exception_whose_text_cannot_be_read_or_encoded_is_still_a_problem() -> None:
    # Such an exception used to escape from PluginRegistry.load() and broadcast(): one broken
    # plugin failed every command (run, check, plugins) with a traceback. A lone surrogate in the
    # message made the printed problem fail to encode.
    def agentium_register_archives(register: Any) -> None:
        raise _UnreadableError()

    def agentium_register_providers(register: Any) -> None:
        raise ValueError("bad \udcff byte")

    def agentium_session_closed(key: SessionKey, report: Any) -> None:
        raise _UnreadableError()

    plugin = _namespace(
        agentium_register_archives=agentium_register_archives,
        agentium_register_providers=agentium_register_providers,
        agentium_session_closed=agentium_session_closed,
    )
    registry = PluginRegistry.load(autoload=False, extra_plugins=[("unreadable-dist", plugin)])
    errors = sorted(p.error for p in registry.problems)
    assert errors == ["ValueError: bad \ufffd byte", "_UnreadableError (its message could not be read)"]
    assert all(p.stage is ProblemStage.REGISTER_HOOK for p in registry.problems)
    assert "memory" in registry.names("archive")  # the other plugins are untouched
    (failure,) = registry.broadcast("agentium_session_closed", key=_key(), report=None)
    assert failure == HookFailure(
        "unreadable-dist", "agentium_session_closed", "_UnreadableError (its message could not be read)"
    )


# ------------------------------------------------- embedding and atomicity


def _namespace(**hooks: Any) -> types.SimpleNamespace:
    return types.SimpleNamespace(**{name: hookimpl(fn) for name, fn in hooks.items()})


def test_failed_plugin_registration_later_leaves_existing_adapters_intact(install: Installer) -> None:
    install("good")
    registry = PluginRegistry.load(environ=NO_ENV)
    before = registry.adapters()

    def agentium_register_archives(register: Any) -> None:
        good = sys.modules["agtest_good"]
        register(AdapterSpec("late", good.GoodArchive, good.GoodArchiveConfig))
        raise RuntimeError("late plugin fails")

    def agentium_register_archivex(register: Any) -> None:
        raise AssertionError("never called")

    problems = registry.register_plugin(
        "late-dist", _namespace(agentium_register_archives=agentium_register_archives)
    )
    assert [p.stage for p in problems] == [ProblemStage.REGISTER_HOOK]
    problems = registry.register_plugin(
        "typo-dist", _namespace(agentium_register_archivex=agentium_register_archivex)
    )
    assert [p.stage for p in problems] == [ProblemStage.HOOK_VALIDATION]
    assert registry.adapters() == before
    assert "late" not in registry.names("archive")


def test_extra_plugins_register_like_installed_ones() -> None:
    good_like = _load_fixture_package("agtest_good")
    try:
        registry = PluginRegistry.load(autoload=False, extra_plugins=[("embedded-good", good_like)])
        assert registry.adapter("provider", "tprovider").distribution == "embedded-good"
        assert _plugin(registry, "embedded-good").version == "unknown"
    finally:
        fakedist.forget_modules()


def test_register_after_the_hook_returned_is_refused() -> None:
    stash: list[Any] = []

    def agentium_register_archives(register: Any) -> None:
        stash.append(register)

    registry = PluginRegistry.load(
        autoload=False,
        extra_plugins=[("stasher", _namespace(agentium_register_archives=agentium_register_archives))],
    )
    spec = registry.get("archive", "memory")
    with pytest.raises(PluginError, match="after the hook returned"):
        stash[0](spec)


def test_async_registration_hook_is_reported() -> None:
    async def agentium_register_providers(register: Any) -> None:
        raise AssertionError("never awaited")

    registry = PluginRegistry.load(
        autoload=False,
        extra_plugins=[("async-reg", _namespace(agentium_register_providers=agentium_register_providers))],
    )
    (problem,) = registry.problems
    assert problem.stage is ProblemStage.REGISTER_HOOK
    assert "not async" in problem.error


def test_wrapper_hooks_are_refused() -> None:
    def agentium_register_archives(register: Any) -> Any:
        return (yield)

    plugin = types.SimpleNamespace(
        agentium_register_archives=hookimpl(wrapper=True)(agentium_register_archives)
    )
    registry = PluginRegistry.load(autoload=False, extra_plugins=[("wrapper-dist", plugin)])
    (problem,) = registry.problems
    assert problem.stage is ProblemStage.HOOK_VALIDATION
    assert "wrapper" in problem.error
    assert _plugin(registry, "wrapper-dist").status is PluginStatus.FAILED


def test_validate_adapter_spec_raises_registration_error() -> None:
    spec = PluginRegistry.load(autoload=False).get("archive", "memory")
    validate_adapter_spec("archive", spec)  # valid: no error
    with pytest.raises(RegistrationError) as info:
        validate_adapter_spec("recall", spec, distribution="somewhere")
    assert info.value.distribution == "somewhere"
    assert "capabilities must be a RecallCapabilities" in info.value.reason


def test_normalize_distribution_name() -> None:
    assert normalize_distribution_name("Agentium_Archive.S3") == "agentium-archive-s3"
    assert normalize_distribution_name("a--b__c") == "a-b-c"


def _load_fixture_package(package: str) -> types.ModuleType:
    """Import a fixture package from its source folder (no distribution) for the embedding test."""
    spec = importlib.util.spec_from_file_location(
        package, FIXTURES / package / "__init__.py", submodule_search_locations=[str(FIXTURES / package)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[package] = module
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------- calls go through pluggy


def _monitored(registry: PluginRegistry) -> list[tuple[str, list[str]]]:
    calls: list[tuple[str, list[str]]] = []

    def before(hook_name: str, impls: Any, kwargs: Any) -> None:
        calls.append((hook_name, [impl.plugin_name for impl in impls]))

    def after(outcome: Any, hook_name: str, impls: Any, kwargs: Any) -> None:
        pass

    registry.plugin_manager.add_hookcall_monitoring(before, after)
    return calls


def test_broadcast_calls_each_implementation_through_pluggys_hook_caller() -> None:
    seen: list[str] = []

    def first(key: SessionKey, report: Any) -> None:
        seen.append("first")
        raise RuntimeError("first fails")

    def second(key: SessionKey, report: Any) -> None:
        seen.append("second")

    registry = PluginRegistry.load(
        autoload=False,
        extra_plugins=[
            ("dist-one", _namespace(agentium_session_closed=first)),
            ("dist-two", _namespace(agentium_session_closed=second)),
        ],
    )
    calls = _monitored(registry)
    failures = registry.broadcast("agentium_session_closed", key=_key(), report="r")
    # pluggy's monitoring sees one call per implementation, each holding only that one.
    assert calls == [("agentium_session_closed", ["dist-one"]), ("agentium_session_closed", ["dist-two"])]
    assert seen == ["first", "second"]  # registration order; a failure stops nothing
    assert failures == [HookFailure("dist-one", "agentium_session_closed", "RuntimeError: first fails")]


def test_registration_hooks_are_called_through_pluggy_too() -> None:
    registry = PluginRegistry(autoload=False)
    calls = _monitored(registry)
    spec = PluginRegistry.load(autoload=False).get("archive", "memory")

    def agentium_register_archives(register: Any) -> None:
        register(AdapterSpec("seen", spec.adapter_class, spec.config_class))

    registry.register_plugin("reg-dist", _namespace(agentium_register_archives=agentium_register_archives))
    assert calls == [("agentium_register_archives", ["reg-dist"])]
    assert registry.names("archive") == ("seen",)


def test_renamed_hook_implementations_are_refused() -> None:
    def on_close(key: SessionKey, report: Any) -> None:
        raise AssertionError("never called")

    plugin = types.SimpleNamespace(on_close=hookimpl(specname="agentium_session_closed")(on_close))
    registry = PluginRegistry.load(autoload=False, extra_plugins=[("renamed-dist", plugin)])
    (problem,) = registry.problems
    assert problem.stage is ProblemStage.HOOK_VALIDATION
    assert "specname" in problem.error and "name the function agentium_session_closed" in problem.error
    assert registry.broadcast("agentium_session_closed", key=_key(), report=None) == []


def test_the_same_namespace_registered_twice_is_refused() -> None:
    def agentium_session_closed(key: SessionKey, report: Any) -> None:
        pass

    plugin = _namespace(agentium_session_closed=agentium_session_closed)
    registry = PluginRegistry.load(autoload=False, extra_plugins=[("ns-dist", plugin)])
    problems = registry.register_plugin("ns-dist", plugin)
    assert [p.stage for p in problems] == [ProblemStage.HOOK_VALIDATION]
    calls = _monitored(registry)
    assert registry.broadcast("agentium_session_closed", key=_key(), report=None) == []
    assert len(calls) == 1  # still one implementation


def test_the_recorded_provider_wraps_a_provider_from_the_hosts_registry_with_paths_next_to_the_config(
    install: Installer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It loaded every installed plugin itself, whatever registry= or environ= the host chose, and
    # resolved the wrapped provider's relative paths against the working directory.
    from agentium_harness import ConfigError, load_runtime

    install("good")
    folder = tmp_path / "conf"
    folder.mkdir()
    (folder / "replies.jsonl").write_text('"from the config folder"\n', encoding="utf-8")
    config = folder / "agentium.toml"

    def wrapping(inner: str, options: str) -> str:
        return (
            f'[provider]\nplugin = "recorded"\noptions.mode = "record"\noptions.path = "rec.jsonl"\n'
            f'options.provider = "{inner}"\noptions.provider_options = {options}\n'
            '[archive]\nplugin = "memory"\n[session_store]\nplugin = "memory"\n'
        )

    config.write_text(wrapping("tprovider", "{}"), encoding="utf-8")
    load_runtime(config, environ=NO_ENV)  # the installed plugin, when the host allows it
    with pytest.raises(ConfigError, match="tprovider"):
        # The host allowed only the core's plugins: so does the wrapper.
        load_runtime(config, environ={"AGENTIUM_PLUGINS": "agentium-harness"})
    config.write_text(wrapping("scripted", '{path = "replies.jsonl"}'), encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    load_runtime(config, environ=NO_ENV)  # replies.jsonl next to the config, not here
