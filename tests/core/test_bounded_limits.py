"""One rule for every duration and every count, in config and in Python alike (issue 21, item 5).

A duration is a finite number of seconds in ``(0, MAX_DURATION_S]``; a count
an integer in ``minimum..ceiling`` with ``ceiling <= MAX_COUNT``. The table
test finds the numeric fields by introspection (every config section, every
limits record, every installed adapter's options), so a new field that does
not use the rule fails here.
"""

from __future__ import annotations

import math
import types
import typing
from pathlib import Path
from typing import Any

import attrs
import pytest

from agentium_harness import (
    CompletionPolicy,
    ConfigError,
    EvidenceLimits,
    InvalidArgumentError,
    MemoryLimits,
    RecallLimits,
    ResidentLimits,
    RetentionPolicy,
    RuntimeLimits,
    SummaryLimits,
    create_harness_runtime,
    load_runtime,
)
from agentium_harness._config import HarnessConfig
from agentium_harness._engine.retention import MAX_RETENTION_DAYS
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.adapters.providers import ExtractiveProvider
from agentium_harness.plugin_api import (
    MAX_COUNT,
    MAX_DURATION_S,
    PluginRegistry,
    bounded_count,
    bounded_duration,
    check_count,
    check_duration,
)

RECALL = '[recall]\nplugin = "sqlite"\n[recall.options]\npath = "r.db"\n[recall.budget]\n'
BASE = """\
[provider]
plugin = "extractive"
[archive]
plugin = "memory"
[session_store]
plugin = "memory"
"""

HUGE = 2**63 - 1


# -- the cases the issue names ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "path"),
    [
        ("[runtime]\nop_timeout_s = 1e308\n", "$.runtime.op_timeout_s"),
        ("[runtime]\ntool_timeout_s = inf\n", "$.runtime.tool_timeout_s"),
        ("[runtime]\nsettle_timeout_s = nan\n", "$.runtime.settle_timeout_s"),
        ("[runtime]\nclose_timeout_s = 3601\n", "$.runtime.close_timeout_s"),
        (f"[runtime]\nmax_steps = {HUGE}\n", "$.runtime.max_steps"),
        (f"[runtime.resident]\nmax_bytes = {HUGE}\n", "$.runtime.resident.max_bytes"),
        (
            '[summarizer]\nplugin = "extractive"\n[summarizer.budget]\ntimeout_s = 1e308\n',
            "$.summarizer.budget.timeout_s",
        ),
        (
            RECALL + "max_latency_s = 1e308\n",
            "$.recall.budget.max_latency_s",
        ),
        (
            RECALL + f"max_candidates = {HUGE}\n",
            "$.recall.budget.max_candidates",
        ),
        ("[archive.options]\nbusy_timeout_ms = 600001\n", "$.archive.options.busy_timeout_ms"),
    ],
    ids=lambda v: v if v.startswith("$") else "",
)
def test_an_unbounded_duration_or_count_in_config_is_an_error_at_its_key(
    tmp_path: Path, extra: str, path: str
) -> None:
    text = BASE + extra
    if "[archive.options]" in extra:
        text = text.replace('[archive]\nplugin = "memory"', '[archive]\nplugin = "sqlite"')
        text = text.replace("[archive.options]", '[archive.options]\npath = "a.db"')
    config = tmp_path / "agentium.toml"
    config.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_runtime(config)
    assert path in {issue.path for issue in info.value.issues}, info.value


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda v: RuntimeLimits(op_timeout_s=v), "op_timeout_s"),
        (lambda v: RuntimeLimits(settle_timeout_s=v), "settle_timeout_s"),
        (lambda v: SummaryLimits(timeout_s=v), "timeout_s"),
        (lambda v: RecallLimits(max_latency_s=v), "max_latency_s"),
        (lambda v: MemoryLimits(op_timeout_s=v), "op_timeout_s"),
    ],
)
@pytest.mark.parametrize("value", [1e308, math.inf, math.nan, 0, -1.0, MAX_DURATION_S + 0.001, True, "5"])
def test_python_constructors_refuse_the_same_durations(make: Any, field: str, value: object) -> None:
    with pytest.raises(InvalidArgumentError, match=field):
        make(value)


@pytest.mark.parametrize(
    "make",
    [
        lambda v: RecallLimits(max_candidates=v),
        lambda v: RuntimeLimits(max_steps=v),
        lambda v: ResidentLimits(max_groups=v),
        lambda v: SummaryLimits(max_input_bytes=v),
    ],
)
@pytest.mark.parametrize("value", [HUGE, MAX_COUNT + 1, 0, -1, True, 2.0])
def test_python_constructors_refuse_the_same_counts(make: Any, value: object) -> None:
    with pytest.raises(InvalidArgumentError):
        make(value)


def test_the_ceilings_themselves_are_accepted() -> None:
    limits = RuntimeLimits(op_timeout_s=MAX_DURATION_S, max_steps=MAX_COUNT)
    assert limits.op_timeout_s == MAX_DURATION_S and limits.max_steps == MAX_COUNT
    assert RecallLimits(max_latency_s=MAX_DURATION_S, max_candidates=MAX_COUNT).max_candidates == MAX_COUNT
    assert check_duration(1, "x") == 1.0 and check_count(0, "x", minimum=0) == 0


def test_the_verifier_deadline_argument_follows_the_rule() -> None:
    for bad in (1e308, math.inf, 0):
        with pytest.raises(InvalidArgumentError, match="verify_timeout_s"):
            create_harness_runtime(
                provider=ExtractiveProvider(),
                archive=InMemoryArchive(),
                session_store=InMemorySessionStore(),
                verify_timeout_s=bad,
            )


# -- the table: every numeric field found by introspection --------------------------------------

#: Numeric options that are not a duration or a count (a sampling setting, an RNG seed, a score
#: threshold in a fixed range that its own validator checks).
NOT_LIMITS = {
    ("OpenAIProviderConfig", "temperature"),
    ("OpenAIProviderConfig", "seed"),
    ("SQLiteRecallConfig", "min_relevance"),
    ("SQLiteRecallConfig", "min_similarity"),
    ("SQLiteRecallConfig", "vector_weight"),
    # The same shares and similarities in the PostgreSQL and Redis recall stores.
    ("PostgresConfig", "min_similarity"),
    ("PostgresConfig", "vector_weight"),
    ("RedisRecallConfig", "min_relevance"),
    ("RedisRecallConfig", "min_similarity"),
    ("RedisRecallConfig", "vector_weight"),
    # An age in days, not a duration in seconds: MAX_DURATION_S (an hour) cannot
    # express it. It has its own ceiling, checked below with the same bad values.
    ("RetentionPolicy", "max_age_days"),
}
DURATION = type(bounded_duration())
COUNT = type(bounded_count())


def _numeric(type_: object) -> type | None:
    """``int`` or ``float`` for a field of that type (or ``X | None``); ``None`` otherwise."""
    if type_ in (int, float):
        return typing.cast(type, type_)
    if typing.get_origin(type_) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(type_) if a is not type(None)]
        if len(rest) == 1 and rest[0] in (int, float):
            return typing.cast(type, rest[0])
    return None


def _records() -> list[type]:
    """Every config section record (walked from HarnessConfig), limits record and adapter options class."""
    found: list[type] = []
    todo: list[type] = [
        HarnessConfig,
        RuntimeLimits,
        ResidentLimits,
        RecallLimits,
        SummaryLimits,
        MemoryLimits,
        EvidenceLimits,
        CompletionPolicy,
    ]
    todo += [a.spec.config_class for a in PluginRegistry.load().adapters()]
    while todo:
        cls = todo.pop()
        if cls in found or not attrs.has(cls):
            continue
        found.append(cls)
        hints = typing.get_type_hints(cls)
        for field in attrs.fields(cls):
            type_ = hints.get(field.name, field.type)
            for candidate in (type_, *typing.get_args(type_)):
                if isinstance(candidate, type) and attrs.has(candidate):
                    todo.append(candidate)
    return found


def _fields() -> list[tuple[type, attrs.Attribute[Any], type]]:
    out = []
    for cls in _records():
        hints = typing.get_type_hints(cls)
        for field in attrs.fields(cls):
            kind = _numeric(hints.get(field.name, field.type))
            if kind is not None and (cls.__name__, field.name) not in NOT_LIMITS:
                out.append((cls, field, kind))
    return out


FIELDS = _fields()


def test_the_table_found_the_fields_the_issue_names() -> None:
    names = {(cls.__name__, field.name) for cls, field, _ in FIELDS}
    for expected in [
        ("RuntimeLimits", "op_timeout_s"),
        ("SummaryLimits", "timeout_s"),
        ("RecallLimits", "max_latency_s"),
        ("RecallLimits", "max_candidates"),
        ("VerifierConfig", "timeout_s"),
        ("MemoryLimits", "drain_timeout_s"),
        ("SQLiteConfig", "busy_timeout_ms"),
    ]:
        assert expected in names
    assert len(FIELDS) >= 40, sorted(names)


@pytest.mark.parametrize(
    ("cls", "field", "kind"), FIELDS, ids=[f"{c.__name__}.{f.name}" for c, f, _ in FIELDS]
)
def test_every_duration_and_count_field_uses_the_one_rule(
    cls: type, field: attrs.Attribute[Any], kind: type
) -> None:
    validator = field.validator
    is_duration = kind is float or field.name.endswith("_s")
    expected = DURATION if is_duration else COUNT
    assert isinstance(validator, expected), (
        f"{cls.__name__}.{field.name} must use plugin_api.bounded_{'duration' if is_duration else 'count'}()"
    )
    ceiling = validator.ceiling
    assert ceiling <= (MAX_DURATION_S if is_duration else MAX_COUNT)

    def check(value: object) -> None:
        validator(None, field, value)

    check(ceiling)  # the documented ceiling itself is accepted
    bad: list[object] = [True, "1", ceiling * 2 + 1, -1]
    bad += [math.inf, math.nan, 0, 1e308] if is_duration else [HUGE, 1.0, validator.minimum - 1]
    for value in bad:
        with pytest.raises(InvalidArgumentError, match=field.name):
            check(value)


@pytest.mark.parametrize("value", [True, "1", math.inf, math.nan, 0, -1.0, 1e308, MAX_RETENTION_DAYS * 2])
def test_retention_age_refuses_what_a_duration_refuses(value: object) -> None:
    with pytest.raises(InvalidArgumentError, match="max_age_days"):
        RetentionPolicy(max_age_days=value)  # type: ignore[arg-type]
    assert RetentionPolicy(max_age_days=MAX_RETENTION_DAYS).max_age_days == MAX_RETENTION_DAYS
