"""run_scope's cache of built scopes: it never hands back another caller's scope, nor skips a check."""

from __future__ import annotations

import threading
from typing import Any

import attrs
import pytest

from agentium_harness import _scope as _scope_module
from agentium_harness._engine import arguments
from agentium_harness._engine.arguments import run_scope
from agentium_harness._errors import InvalidIdError
from agentium_harness._scope import RecallScope, Scope, SessionKey, VerifiedIdentity


class _Collider(str):
    """A str subclass equal to, and hashing as, any other id: a lying key for the cache."""

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return 0


def test_a_colliding_str_subclass_id_never_gets_another_sessions_scope() -> None:
    # A guard: the cache is keyed by exact str ids, so an id of the host's own class that claims
    # to equal everything is checked and kept as the text it holds, never matched to a kept scope.
    mine = VerifiedIdentity("tenant-a", "user-a", "idp")
    kept = run_scope(mine, "session-a", RecallScope(project="p-a", repository="r-a"))
    assert run_scope(mine, "session-a", RecallScope(project="p-a", repository="r-a")) is kept
    other = run_scope(mine, _Collider("session-b"), RecallScope(project="p-a", repository="r-a"))
    assert other.session == "session-b" and type(other.session) is str
    for field in ("tenant", "user"):
        liar = VerifiedIdentity(
            **{"tenant": "tenant-a", "user": "user-a", "verified_by": "idp", field: _Collider(f"{field}-b")}
        )
        scope = run_scope(liar, "session-a", RecallScope(project="p-a", repository="r-a"))
        assert getattr(scope, field) == f"{field}-b" and scope != kept
    for field in ("project", "repository"):
        recall = RecallScope(**{"project": "p-a", "repository": "r-a", field: _Collider(f"{field}-b")})
        scope = run_scope(mine, "session-a", recall)
        assert getattr(scope, field) == f"{field}-b" and scope != kept


def test_a_recall_scope_subclass_or_none_is_its_own_scope() -> None:
    # A guard: "no recall scope" and an empty RecallScope are one scope; a subclass builds its own.
    mine = VerifiedIdentity("tenant-a", "user-a", "idp")

    @attrs.frozen(slots=True)
    class Narrow(RecallScope):
        pass

    plain = run_scope(mine, "s", None)
    assert run_scope(mine, "s", RecallScope()) == plain == Scope("tenant-a", "user-a", "s")
    narrowed = run_scope(mine, "s", Narrow(project="p"))
    assert narrowed == Scope("tenant-a", "user-a", "s", "p") and narrowed != plain


def test_a_scope_built_while_validators_were_switched_off_elsewhere_is_not_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # attrs' switch is global: another thread may turn validators off while this one builds a scope
    # (simulated here by switching them off around the build alone). A scope of an identity whose ids
    # were never checked (made while validators were off) must not be kept and then handed back
    # after they are on again: before the cache, that call is refused, and so it must stay.
    with attrs.validators.disabled():
        unchecked = VerifiedIdentity("", "user\x00", "idp")
    built = Scope.of

    def racing(identity: VerifiedIdentity, session_id: str, recall_scope: Any = None) -> Scope:
        attrs.validators.set_disabled(True)
        try:
            return built(identity, session_id, recall_scope)
        finally:
            attrs.validators.set_disabled(False)

    monkeypatch.setattr(Scope, "of", racing)
    run_scope(unchecked, "s", None)  # built unchecked, as any call is while validators are off
    monkeypatch.undo()
    assert not attrs.validators.get_disabled()
    with pytest.raises(InvalidIdError):
        run_scope(unchecked, "s", None)


def test_scopes_built_on_many_threads_while_the_cache_is_cleared_are_each_their_own() -> None:
    # A guard: the bounded dict is cleared when full while other threads read and fill it; every
    # call still gets the scope of exactly its own ids.
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(arguments, "_MAX_SCOPES", 8)
    errors: list[str] = []

    def work(worker: int) -> None:
        for i in range(2000):
            ident = VerifiedIdentity(f"t{worker}", f"u{i % 5}", "idp")
            recall = None if i % 3 == 0 else RecallScope(project=f"p{i % 7}")
            scope = run_scope(ident, f"s{i % 11}", recall)
            want = Scope(f"t{worker}", f"u{i % 5}", f"s{i % 11}", None if recall is None else f"p{i % 7}")
            if scope != want:
                errors.append(f"{scope} != {want}")

    try:
        threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    finally:
        monkeypatch.undo()
    assert errors == []
    assert len(arguments._SCOPES) <= 4096


def test_a_session_key_built_while_validators_were_switched_off_elsewhere_is_not_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As above, for Scope.session_key's keys: a scope made while validators were off holds ids no
    # check passed, and its key is refused once they are on again, however it was asked for before.
    with attrs.validators.disabled():
        unchecked = Scope("tenant", "", "s\x01")
    built = _scope_module.SessionKey

    def racing(*ids: str) -> SessionKey:
        attrs.validators.set_disabled(True)
        try:
            return built(*ids)
        finally:
            attrs.validators.set_disabled(False)

    monkeypatch.setattr(_scope_module, "SessionKey", racing)
    unchecked.session_key  # noqa: B018 - built unchecked, as any key is while validators are off
    monkeypatch.undo()
    with pytest.raises(InvalidIdError):
        unchecked.session_key  # noqa: B018
