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

from .._engine.maintenance import SessionView
from .._engine.recall import Evidence
from .._engine.recall_turn import RecallOutcome
from .._engine.results import RunResult
from .._history_controls import TurnInterruption
from .._history_messages import RetainedRecord
from .._ports.erasure import ErasureRecord
from .._ports.summary import SummaryState
from .._verdicts import VerificationRecord

__all__ = [
    "hidden_erasure",
    "hidden_evidence",
    "hidden_interruption",
    "hidden_recall",
    "hidden_report",
    "hidden_run",
    "hidden_summary",
    "hidden_verification",
    "hidden_view",
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


def hidden_interruption(why: TurnInterruption, hide: Hide) -> TurnInterruption:
    """``why`` with its detail hidden: the provider's or a store's error, or the recall policy's reason."""
    return _changed(why, {"detail": hide(why.detail)})


def hidden_view(view: SessionView, hide: Hide) -> SessionView:
    """``session inspect``'s ``view`` with its tombstones' texts and its interruptions' details hidden.

    The divergence's and the coverage gaps' details are hidden as they are printed: their records
    bound the detail's length, and the marker may be longer than the value it replaces.
    """
    return _changed(
        view,
        {
            "erasures": tuple(hidden_erasure(record, hide) for record in view.erasures),
            "interrupted": tuple((seq, hidden_interruption(why, hide)) for seq, why in view.interrupted),
        },
    )


def _hidden_retained(retained: RetainedRecord, hide: Hide) -> RetainedRecord:
    changes: dict[str, Any] = {"uncertainty": tuple(hide(u) for u in retained.uncertainty)}
    if retained.verification is not None:
        changes["verification"] = hidden_verification(retained.verification, hide)
    if retained.interruption is not None:  # a turn stopped after its tools ran: the error that stopped it
        changes["interruption"] = hidden_interruption(retained.interruption, hide)
    return _changed(retained, changes)


def hidden_run(result: RunResult, hide: Hide) -> RunResult:
    """``result`` with the values from the environment hidden where adapters' text stands.

    The diagnostics, the recall outcome (:func:`hidden_recall`), the verification
    (:func:`hidden_verification`), the retained record's copies of the uncertainty and the
    verification, the summary's coverage gaps, and the archive's receipts' locations (its own
    text: ``s3://<bucket>/...``, a file's name): the lines stderr shows and ``--json`` print them.
    """
    changes: dict[str, Any] = {
        "diagnostics": tuple(_changed(d, {"message": hide(d.message)}) for d in result.diagnostics),
        "retained": _hidden_retained(result.retained, hide),
        "archived": tuple(_changed(r, {"location": hide(r.location)}) for r in result.archived),
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


def hidden_report(report: dict[str, Any], hide: Hide) -> dict[str, Any]:
    """``agentium eval``'s report (:func:`~agentium_harness.eval.build_report`) with adapters' text hidden.

    Hidden: each case's output (the model's answer, which may quote an excerpt or a tool's result),
    each grade's reason, each infrastructure failure's message (the adapter's error) and a recorded
    provider's mode. The rest stays as built: the schema, the version, the labels, the case ids and
    tags, the statuses, the grader names and the source ids are the report's own words or the case
    file's and the engine's ids. Hiding them too (every string) rewrote ``"agentium.eval.report/1"``,
    a case id or a grader name that merely held a value's word, and a summary looking a grader up by
    its name found no score. Each distinct text is hidden once: a reason repeats over many cases.
    """
    seen: dict[str, str] = {}

    def once(text: Any) -> Any:
        if not isinstance(text, str):
            return text
        if text not in seen:
            seen[text] = hide(text)
        return seen[text]

    def case(data: dict[str, Any]) -> dict[str, Any]:
        grades = {
            name: {**grade, "reason": once(grade.get("reason"))} for name, grade in data["grades"].items()
        }
        failure = data["failure"]
        if failure is not None:
            failure = {**failure, "message": once(failure["message"])}
        return {**data, "output": once(data["output"]), "grades": grades, "failure": failure}

    def run(data: dict[str, Any]) -> dict[str, Any]:
        failures = [{**f, "message": once(f["message"])} for f in data["infrastructure_failures"]]
        return {
            **data,
            "recorded_mode": once(data["recorded_mode"]),
            "infrastructure_failures": failures,
            "cases": [case(c) for c in data["cases"]],
        }

    return {**report, "runs": [run(r) for r in report["runs"]]}
