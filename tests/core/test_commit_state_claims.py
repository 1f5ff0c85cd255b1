"""``mark_commit_state`` (the turn path, maintenance writes) removes a claim only whole, never from a quote.

It removed "; the session was not changed" and "; nothing was committed" as bare
substrings: a maintenance error marked not_committed ("...; the session was not
changed (commit_state not_committed)") and then found unknown kept a stray
"(commit_state not_committed)" right before "(commit_state unknown)"; a claim
inside a cause quoted in parentheses was cut out of the quote; one said as a
sentence stayed, contradicting the state after it. It now shares the erasure
calls' whole-clause rule (:mod:`agentium_harness._engine.said_claims`).
"""

from __future__ import annotations

from agentium_harness import CommitState, SessionStoreError
from agentium_harness._engine.maintenance_state import MAINTENANCE_TOLD
from agentium_harness._engine.settle import mark_commit_state


def test_a_maintenance_error_marked_not_committed_then_unknown_says_unknown_only() -> None:
    error = SessionStoreError("session save failed")
    mark_commit_state(error, CommitState.NOT_COMMITTED, "read back: nothing readable", told=MAINTENANCE_TOLD)
    assert str(error).endswith("; the session was not changed (commit_state not_committed)")
    mark_commit_state(error, CommitState.UNKNOWN, told=MAINTENANCE_TOLD)
    said = str(error)
    assert "not_committed" not in said and "the session was not changed" not in said
    assert said == (
        "session save failed; read back: nothing readable; whether the session was changed is unknown "
        "(commit_state unknown); inspect the session before calling it again"
    )


def test_a_claim_inside_a_quoted_cause_stays_in_the_quote() -> None:
    quoted = "(provider failed: boom; the session was not changed)"
    error = SessionStoreError(f"the turn could not be saved {quoted}")
    mark_commit_state(error, CommitState.UNKNOWN)
    said = str(error)
    assert said.startswith(f"the turn could not be saved {quoted}; whether it was committed is unknown")


def test_a_claim_said_as_a_sentence_leaves_a_committed_error() -> None:
    error = SessionStoreError("the summary could not be stored. The session was not changed")
    mark_commit_state(error, CommitState.COMMITTED)
    assert str(error) == (
        "the summary could not be stored; the turn was committed (commit_state committed); do not retry it"
    )


def test_a_claim_is_removed_only_whole() -> None:
    # "; nothing was committed" heads a longer clause here: cut, it left "to its archive yet; ...".
    error = SessionStoreError("the group was saved; nothing was committed to its archive yet")
    mark_commit_state(error, CommitState.COMMITTED)
    assert str(error).startswith("the group was saved; nothing was committed to its archive yet; the turn")
