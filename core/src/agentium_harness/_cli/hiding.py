"""What the commands print of adapters' text, with the values ``${VAR}`` references supplied hidden.

A command that read a config gets a ``hide`` function from
:func:`~agentium_harness._cli.output.load_hiding` (``args.hide_env``): it
replaces, in one piece of text, every value the environment put in the
adapters' options (docs/config.md, "Values from the environment in
messages"). The error a command ends with goes through it in
:func:`~agentium_harness._cli.main.main`; what a command prints when it
succeeds goes through it here: each function returns its argument with the
parts an adapter, a plugin or a store wrote (a reason, a note, a detail, a
piece of evidence) hidden, the rest as it was, so the text form and the
``--json`` form print the same hidden values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import attrs

from .._engine.recall import Evidence
from .._engine.recall_turn import RecallOutcome
from .._engine.results import RunResult
from .._history_messages import RetainedRecord
from .._ports.erasure import ErasureRecord
from .._ports.summary import SummaryState
from .._verdicts import VerificationRecord

__all__ = [
    "hidden_data",
    "hidden_erasure",
    "hidden_evidence",
    "hidden_recall",
    "hidden_run",
    "hidden_summary",
    "hidden_verification",
]

Hide = Callable[[str], str]
T = TypeVar("T")


def _changed(value: T, changes: dict[str, Any]) -> T:
    """``value`` with ``changes``, or ``value`` itself when none differs (no copy for nothing)."""
    if all(getattr(value, name) == new for name, new in changes.items()):
        return value
    return attrs.evolve(value, **changes)  # type: ignore[misc]


def hidden_verification(record: VerificationRecord, hide: Hide) -> VerificationRecord:
    """``record`` with each attempt's reason and each piece of evidence's reference and detail hidden.

    The verifier wrote them (or its error did): an artifact's path, a test record naming a DSN.
    """
    attempts = tuple(
        _changed(
            attempt,
            {
                "reason": hide(attempt.reason),
                "evidence": tuple(
                    _changed(entry, {"ref": hide(entry.ref), "detail": hide(entry.detail)})
                    for entry in attempt.evidence
                ),
            },
        )
        for attempt in record.attempts
    )
    return _changed(record, {"attempts": attempts})


def hidden_recall(outcome: RecallOutcome, hide: Hide) -> RecallOutcome:
    """``outcome`` with its reason, contract violations and uncertainty hidden: the store's, the policy's."""
    return _changed(
        outcome,
        {
            "reason": hide(outcome.reason),
            "violations": tuple(hide(v) for v in outcome.violations),
            "uncertainty": tuple(hide(u) for u in outcome.uncertainty),
        },
    )


def hidden_evidence(evidence: Evidence, hide: Hide) -> Evidence:
    """``evidence`` (``recall search``'s) with its problems, violations and notes hidden: the store's text.

    The excerpts stay as they are: they are what a run would include, the documents' own words.
    """
    return _changed(
        evidence,
        {
            name: tuple(hide(text) for text in getattr(evidence, name))
            for name in ("problems", "violations", "notes")
        },
    )


def hidden_summary(state: SummaryState, hide: Hide) -> SummaryState:
    """``state`` with each coverage gap's detail hidden: the error of the reader that stopped it."""
    gaps = tuple(_changed(gap, {"detail": hide(gap.detail)}) for gap in state.gaps)
    return _changed(state, {"gaps": gaps})


def _hidden_retained(retained: RetainedRecord, hide: Hide) -> RetainedRecord:
    changes: dict[str, Any] = {"uncertainty": tuple(hide(u) for u in retained.uncertainty)}
    if retained.verification is not None:
        changes["verification"] = hidden_verification(retained.verification, hide)
    return _changed(retained, changes)


def hidden_run(result: RunResult, hide: Hide) -> RunResult:
    """``result`` with the values from the environment hidden where adapters' text stands.

    The diagnostics, the recall outcome (:func:`hidden_recall`), the verification
    (:func:`hidden_verification`), the retained record's copies of the uncertainty and the
    verification, and the summary's coverage gaps: the lines stderr shows and ``--json`` print them.
    """
    changes: dict[str, Any] = {
        "diagnostics": tuple(_changed(d, {"message": hide(d.message)}) for d in result.diagnostics),
        "retained": _hidden_retained(result.retained, hide),
    }
    if result.recall is not None:
        changes["recall"] = hidden_recall(result.recall, hide)
    if result.verification is not None:
        changes["verification"] = hidden_verification(result.verification, hide)
    if result.summary is not None:
        changes["summary"] = hidden_summary(result.summary, hide)
    return _changed(result, changes)


def hidden_erasure(record: ErasureRecord, hide: Hide) -> ErasureRecord:
    """``record`` with each store's detail and the notes hidden: what the stores said of the erasure.

    The reason and the statement are the operator's words, and the rest ids, counts and states.
    """
    stores = tuple(_changed(store, {"detail": hide(store.detail)}) for store in record.stores)
    return _changed(record, {"stores": stores, "notes": tuple(hide(note) for note in record.notes)})


def hidden_data(data: Any, hide: Hide) -> Any:
    """Plain data (a JSON document's dicts, lists and strings) with every string value hidden.

    For a report built of text the runtime and its adapters wrote throughout (``agentium eval``'s:
    answers, excerpts, errors, graders' reasons). Keys are the report's own names and stay.
    """
    if isinstance(data, str):
        return hide(data)
    if isinstance(data, dict):
        return {key: hidden_data(value, hide) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [hidden_data(value, hide) for value in data]
    return data
