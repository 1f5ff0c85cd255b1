"""Public helpers handed the wrong type raise InvalidArgumentError, never a bare AttributeError.

Each helper reads attributes of a record argument (``key.tenant``, ``turn.clarification``,
``request.store``); given a ``str``, ``None`` or a ``dict`` instead, it raised
``AttributeError`` from inside. ``InvalidArgumentError`` is both a ``ValueError`` and a
``TypeError``, what the helpers' sibling validation (``EraseTarget.groups_of``) raises.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import anyio
import attrs
import pytest

from agentium_harness import (
    EraseTarget,
    GroupRef,
    InvalidArgumentError,
    MemoryScope,
    OpContext,
    QueryInput,
    RecallPolicy,
    RecallScope,
    ResidentLimits,
    RuntimeLimits,
    Scope,
    SelectionRequest,
    SessionKey,
    SourceBlock,
    SourceKind,
    SourceOwner,
    SourceRef,
    VerifiedIdentity,
    current_session_recall_policy,
    latest_user_text,
    parse_config,
    recent_and_relevant,
    score_order,
    source_view_revision,
)
from agentium_harness.adapters.builtin import InMemoryMemoryStore
from agentium_harness.plugin_api import (
    Candidate,
    EmbeddingModel,
    EvidenceEntry,
    MemoryFact,
    Vector,
    check_archived_group,
    cosine_scores,
    document_source_id,
    estimate_tokens,
    evidence_size,
    group_source_id,
    indexed_group_text,
    iso_utc,
    make_excerpt,
    redact_url,
    rejection_reason,
    seal_snapshot,
    snapshot_erasure,
    verify_snapshot,
)
from agentium_harness.testing import plain_group

WRONG: tuple[object, ...] = ("t/u/s", None, {"tenant": "t", "user": "u", "session": "s"}, 5)

KEY = SessionKey("t", "u", "s")
SCOPE = Scope("t", "u", "s")
MSCOPE = MemoryScope("t", "u")
REF = GroupRef("s", 1, "sha256:" + "0" * 64)
TARGET = EraseTarget.session("t", "u", "s")
OWNER = SourceOwner("t", "u", "s")
CANDIDATE = Candidate(SourceRef("a", "r1"), OWNER, 1.0, 10)
MODEL = EmbeddingModel("m", 2)
VECTOR = Vector.normalized(MODEL, [3.0, 4.0])
GROUP = plain_group(1, "hello")


CALLS: dict[str, Callable[[Any], object]] = {
    "EraseTarget.covers_session": lambda bad: TARGET.covers_session(bad),
    "EraseTarget.covers_group key": lambda bad: TARGET.covers_group(bad, 1),
    "EraseTarget.covers_owner": lambda bad: TARGET.covers_owner(bad),
    "EraseTarget.covers_fact scope": lambda bad: TARGET.covers_fact(bad, [REF]),
    "EraseTarget.covers_fact provenance": lambda bad: TARGET.covers_fact(MSCOPE, bad),
    "EraseTarget.covers_fact provenance item": lambda bad: TARGET.covers_fact(MSCOPE, [bad]),
    "MemoryScope.of_session": lambda bad: MemoryScope.of_session(bad),
    "MemoryScope.owns": lambda bad: MSCOPE.owns(bad),
    "MemoryScope.sees": lambda bad: MSCOPE.sees(bad),
    "SourceOwner.of_session": lambda bad: SourceOwner.of_session(bad),
    "SourceOwner.visible_to": lambda bad: OWNER.visible_to(bad),
    "latest_user_text": lambda bad: latest_user_text(bad),
    "score_order": lambda bad: score_order(bad),
    "score_order item": lambda bad: score_order([CANDIDATE, bad]),
    "source_view_revision": lambda bad: source_view_revision(bad),
    "source_view_revision item": lambda bad: source_view_revision([bad]),
    "document_source_id": lambda bad: document_source_id(bad, "doc"),
    "group_source_id": lambda bad: group_source_id(bad, 1),
    "indexed_group_text": lambda bad: indexed_group_text(bad),
    "rejection_reason": lambda bad: rejection_reason(bad),
    # plugin_api, for adapter authors
    "Vector model": lambda bad: Vector(bad, (0.6, 0.8)),
    "Vector.normalized": lambda bad: Vector.normalized(bad, [3.0, 4.0]),
    "Vector.from_bytes": lambda bad: Vector.from_bytes(bad, VECTOR.to_bytes()),
    "cosine_scores": lambda bad: cosine_scores(bad, [VECTOR.to_bytes()]),
    "evidence_size": lambda bad: evidence_size(bad),
    "check_archived_group key": lambda bad: check_archived_group(bad, GROUP),
    "check_archived_group group": lambda bad: check_archived_group(KEY, bad),
    "seal_snapshot": lambda bad: seal_snapshot(bad),
    "verify_snapshot": lambda bad: verify_snapshot(KEY, bad),
    "snapshot_erasure": lambda bad: snapshot_erasure(bad, b"{}"),
}


@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize("bad", WRONG, ids=lambda v: type(v).__name__)
def test_a_helper_given_the_wrong_type_raises_the_typed_error(name: str, bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="must be a"):
        CALLS[name](bad)


def test_scope_of_refuses_a_recall_scope_of_the_wrong_type() -> None:
    identity = VerifiedIdentity("t", "u", "host")
    # A falsy value ("" or {}) was read as "no recall scope"; a truthy one raised AttributeError.
    for bad in ("proj", {"project": "p"}, 5, "", {}):
        with pytest.raises(InvalidArgumentError, match="recall_scope must be a RecallScope"):
            Scope.of(identity, "s", bad)  # type: ignore[arg-type]
    assert Scope.of(identity, "s", None) == Scope("t", "u", "s")
    assert Scope.of(identity, "s", RecallScope(project="p")).project == "p"


@pytest.mark.parametrize("seq", [True, "1", "1/x", -1, 1.0, None])
def test_a_group_seq_that_is_not_a_non_negative_int_is_refused(seq: object) -> None:
    # str(seq) made "group/t/u/s/True" or ".../1/x": ids no group has, or aliases of another's.
    with pytest.raises(InvalidArgumentError, match="seq must be"):
        group_source_id(KEY, seq)  # type: ignore[arg-type]
    if seq != -1:  # a negative seq is still an int: covers_group answers (a session target: True)
        with pytest.raises(InvalidArgumentError, match="seq must be an int"):
            TARGET.covers_group(KEY, seq)  # type: ignore[arg-type]
    assert group_source_id(KEY, 0) == "group/t/u/s/0"
    assert TARGET.covers_group(KEY, 7)


@pytest.mark.parametrize("sep", ["", "_", "-", "a", "7", "%", "~", "/a", 5, None, b"/"])
def test_a_key_separator_that_could_join_two_keys_alike_is_refused(sep: object) -> None:
    # ("a_b", "c") and ("a", "b_c") joined by "_" were one key; an int raised AttributeError.
    for record in (KEY, SCOPE, MSCOPE):
        with pytest.raises(InvalidArgumentError, match="sep must be"):
            record.key(sep)  # type: ignore[arg-type]
    assert SessionKey("a_b", "c", "s").key() != SessionKey("a", "b_c", "s").key()
    assert KEY.key(":") == "t:u:s" and MSCOPE.key(" | ") == "t | u | ~ | ~"


def test_a_selection_given_a_request_of_the_wrong_type_raises_and_changes_nothing() -> None:
    async def main() -> None:
        store = InMemoryMemoryStore()
        ctx = OpContext.with_timeout(30)
        await store.remember(MemoryFact(MSCOPE, "likes tea"), ctx)
        before = await store.list_facts(MSCOPE, 50, ctx)
        for bad in WRONG:
            with pytest.raises(InvalidArgumentError, match="request must be a SelectionRequest"):
                await recent_and_relevant(bad)  # type: ignore[arg-type]
        assert await store.list_facts(MSCOPE, 50, ctx) == before
        request = SelectionRequest(store, MSCOPE, "tea", 5, before[0].recorded_at, ctx)
        assert [f.fact.text for f in await recent_and_relevant(request)] == ["likes tea"]

    anyio.run(main)


def test_valid_calls_still_answer_as_before() -> None:
    assert TARGET.covers_session(KEY) and not TARGET.covers_session(SessionKey("t", "u", "other"))
    assert (
        TARGET.covers_owner(OWNER)
        and TARGET.covers_fact(MSCOPE, [REF])
        and TARGET.covers_fact(MSCOPE, (REF,))
    )
    assert MemoryScope.of_session(SCOPE) == MSCOPE and MSCOPE.owns(MSCOPE) and MSCOPE.sees(MSCOPE)
    assert SourceOwner.of_session(KEY) == OWNER and OWNER.visible_to(SCOPE)
    assert latest_user_text(QueryInput("hi", clarification="yes")) == "hi\nyes"
    assert score_order(iter([CANDIDATE])) == [CANDIDATE]
    assert source_view_revision([SourceRef("a", "1")]) == source_view_revision((SourceRef("a", "1"),))
    assert document_source_id(OWNER, "d").startswith("doc/t/u/s/")
    assert rejection_reason(MemoryFact(MSCOPE, "x")) is None
    assert Vector.from_bytes(MODEL, VECTOR.to_bytes()).dot(VECTOR) == pytest.approx(1.0)
    assert cosine_scores(VECTOR, [b"x"]) == [-math.inf]
    assert evidence_size(EvidenceEntry("artifact", "a.txt", "ok")) > 0
    check_archived_group(KEY, GROUP, 1, GROUP.digest)
    assert snapshot_erasure(KEY, b"not json").session == KEY


@pytest.mark.parametrize("bad", [{"max_groups": 4}, None, "8", 8])
def test_runtime_limits_refuse_resident_bounds_that_are_not_resident_limits(bad: object) -> None:
    # A dict was taken, and every run then failed as "a bug in the engine" (AttributeError).
    with pytest.raises(InvalidArgumentError, match="resident must be a ResidentLimits"):
        RuntimeLimits(resident=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="resident must be a ResidentLimits"):
        attrs.evolve(RuntimeLimits(), resident=bad)
    assert RuntimeLimits(resident=ResidentLimits(max_groups=4)).resident.max_groups == 4
    text = '[provider]\nplugin = "extractive"\n[archive]\nplugin = "memory"\n'
    text += '[session_store]\nplugin = "memory"\n'
    config = parse_config(text + "[runtime.resident]\nmax_groups = 4\n")
    assert config.runtime.limits.resident == ResidentLimits(max_groups=4)


@pytest.mark.parametrize("seconds", [float("nan"), True, "5", None, 2**2000])
def test_an_op_context_deadline_that_is_not_a_number_of_seconds_is_refused(seconds: object) -> None:
    # A nan deadline never expired (every comparison with nan is false); True was one second;
    # "5" and 2**2000 raised a bare TypeError / OverflowError from the addition.
    with pytest.raises(InvalidArgumentError, match="seconds must be a number"):
        OpContext.with_timeout(seconds)  # type: ignore[arg-type]


def test_op_context_deadlines_that_are_numbers_keep_their_meaning() -> None:
    assert OpContext.with_timeout(-1).expired and OpContext.with_timeout(0).expired
    assert not OpContext.with_timeout(30).expired and not OpContext.with_timeout(30.5).expired
    assert not OpContext.with_timeout(float("inf")).expired  # no deadline, as before


@pytest.mark.parametrize("bad", [None, 5, b"text", ["a"]])
def test_text_helpers_given_a_non_string_raise_the_typed_error(bad: object) -> None:
    # estimate_tokens and iso_utc raised AttributeError; redact_url, documented "never raises",
    # raised AttributeError or TypeError.
    with pytest.raises(InvalidArgumentError, match="text must be a str"):
        estimate_tokens(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="when must be a datetime"):
        iso_utc(bad)  # type: ignore[arg-type]
    assert redact_url(bad) == "<unparsable url>"  # type: ignore[arg-type]
    assert estimate_tokens("abcde") == 2 and estimate_tokens("é" * 2) == 1
    assert iso_utc(datetime(2026, 1, 2, tzinfo=UTC)) == "2026-01-02T00:00:00.000000Z"
    assert redact_url("redis://u:p@h:1/0") == "redis://***@h:1/0"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ((None, ("tea",), 10), "text must be a str"),
        ((b"tea time", ("tea",), 10), "text must be a str"),
        (("tea time", "tea", 10), "query_terms must be a sequence of str"),
        (("tea time", (5,), 10), "query_terms must be a sequence of str"),
        (("tea time", ("tea",), "10"), "max_bytes must be an integer"),
        (("tea time", ("tea",), -1), "max_bytes must be an integer"),
        (("tea time", ("tea",), True), "max_bytes must be an integer"),
    ],
)
def test_make_excerpt_refuses_bad_arguments_with_the_typed_error(args: tuple[Any, ...], said: str) -> None:
    # A non-str text raised AttributeError or TypeError, a str max_bytes TypeError.
    with pytest.raises(InvalidArgumentError, match=said):
        make_excerpt(SourceRef("a", "r1"), OWNER, *args)
    assert make_excerpt(SourceRef("a", "r1"), OWNER, "tea time", ["tea"], 100).text == "tea time"


@pytest.mark.parametrize("kind", [5, None, "document", ["recall"]])
def test_a_source_block_of_no_source_kind_is_refused_when_built(kind: object) -> None:
    # It was taken, and the run then failed as "a bug in the engine" (AttributeError: no .value).
    with pytest.raises(InvalidArgumentError, match="source block kind must be a SourceKind"):
        SourceBlock(kind, "s1", "text")  # type: ignore[arg-type]


@pytest.mark.parametrize("attributes", [[1], [("a", "b", "c")], [None]])
def test_source_block_attributes_that_are_not_pairs_are_refused(attributes: object) -> None:
    with pytest.raises(InvalidArgumentError):
        SourceBlock(SourceKind.RECALL, "s1", "text", attributes)  # type: ignore[arg-type]


def test_a_source_block_kind_given_by_its_value_is_that_kind() -> None:
    assert SourceBlock("recall", "s1", "text") == SourceBlock(SourceKind.RECALL, "s1", "text")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"decide": None}, "decide must be a callable"),
        ({"rank": "score"}, r"rank must be a callable, got str \(a name such as 'score'"),
        ({"query": 5}, "query must be a callable"),
        ({"name": 5}, "name must be a non-empty str"),
        ({"name": " "}, "name must be a non-empty str"),
    ],
)
def test_a_recall_policy_with_a_bad_part_is_refused_when_built(kwargs: dict[str, Any], said: str) -> None:
    # decide=None stopped every run with recall_stopped, rank="score" failed every recall: at run time.
    good = current_session_recall_policy()
    fields = {"name": "mine", "decide": good.decide, **kwargs}
    with pytest.raises(InvalidArgumentError, match=said):
        RecallPolicy(**fields)
    assert RecallPolicy("mine", good.decide, rank=score_order).rank is score_order


@pytest.mark.parametrize(
    ("old", "new"), [("abc", b"x"), (b"abc", "x"), (None, b"x"), (b"abc", None), (b"", b"x")]
)
def test_replace_once_refuses_what_is_not_bytes_when_built(old: object, new: object) -> None:
    # A str raised a bare TypeError only when the transform ran ('a bytes-like object is required').
    from agentium_harness.testing import replace_once

    with pytest.raises(InvalidArgumentError, match=r"old|new"):
        replace_once(old, new)(b"abcabc")  # type: ignore[arg-type]
    assert replace_once(b"abc", b"x")(b"abcabc") == b"xabc"
