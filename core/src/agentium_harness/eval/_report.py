"""Reports (R34, R35): a JSON document with a stable schema, and a one-screen terminal summary.

Scores count only graded cases; infrastructure failures are listed apart.
Each grader reports ``pass``, ``fail``, ``absent`` and ``valid`` (= pass +
fail, the denominator of ``pass_rate``); an absent grade is never a pass. A
report of a deterministic run (scripted, extractive, recorded) carries the
statement that it establishes contracts and does not prove live-model
quality. The schema is documented in ``docs/eval.md``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import __version__
from ._errors import ReportWriteError
from ._runner import CaseResult, EvalRun

__all__ = ["REPORT_SCHEMA", "build_report", "check_out_dir", "render_summary", "write_reports"]

#: The ``schema`` value of the JSON report; it changes only when the schema does.
REPORT_SCHEMA = "agentium.eval.report/1"
#: The file names :func:`write_reports` writes into the output directory.
JSON_NAME, HTML_NAME = "report.json", "report.html"


def _case(result: CaseResult) -> dict[str, Any]:
    trace = result.trace
    return {
        "id": result.case.id,
        "line": result.case.line,
        "tags": list(result.case.tags),
        "probe": result.case.probe,
        "status": "graded" if result.graded else "infrastructure_failure",
        "output": trace.answer if trace is not None else None,
        "trace": trace.summary() if trace is not None else None,
        "grades": {name: {"status": g.status.value, "reason": g.reason} for name, g in result.grades.items()},
        "failure": (
            {"error": result.failure.error, "message": result.failure.message}
            if result.failure is not None
            else None
        ),
    }


def _run(run: EvalRun) -> dict[str, Any]:
    scores = {}
    for name in run.graders:
        counts = run.counts(name)
        rate = run.pass_rate(name)
        scores[name] = {**counts, "pass_rate": None if rate is None else round(rate, 4)}
    failures = run.infrastructure_failures
    info = run.info
    return {
        "label": info.label,
        "config": info.config,
        "provider": info.provider,
        "deterministic": info.deterministic,
        "recorded_mode": info.recorded_mode,
        "recall": info.recall,
        "statement": info.statement,
        "duration_s": round(run.finished_at - run.started_at, 3),
        "totals": {
            "cases": len(run.results),
            "graded": len(run.results) - len(failures),
            "infrastructure_failures": len(failures),
        },
        "scores": scores,
        "infrastructure_failures": [
            {"case": r.case.id, "error": r.failure.error, "message": r.failure.message}
            for r in failures
            if r.failure is not None
        ],
        "cases": [_case(r) for r in run.results],
    }


def build_report(runs: Sequence[EvalRun], graders: Sequence[Any] = ()) -> dict[str, Any]:
    """The JSON report (plain data) of one run, or of a run and the one it is compared with.

    ``graders`` (the grader objects) adds their descriptions; the first run
    is the primary one, and with two runs ``comparison`` gives each grader's
    pass rates and their difference (primary minus other).
    """
    if not runs:
        raise ValueError("a report needs at least one run")
    described = {getattr(g, "name", ""): g for g in graders}
    names = list(dict.fromkeys(n for run in runs for n in run.graders))
    evidence = set(n for run in runs for n in run.evidence_graders)
    comparison = None
    if len(runs) > 1:
        first, other = runs[0], runs[1]
        table = {}
        for name in names:
            a, b = first.pass_rate(name), other.pass_rate(name)
            table[name] = {
                "rate": None if a is None else round(a, 4),
                "other_rate": None if b is None else round(b, 4),
                "delta": None if a is None or b is None else round(a - b, 4),
            }
        comparison = {"primary": first.info.label, "other": other.info.label, "graders": table}
    statements = [s for s in (run.info.statement for run in runs) if s]
    return {
        "schema": REPORT_SCHEMA,
        "agentium_version": __version__,
        "cases_file": runs[0].cases_file,
        "statement": statements[0] if statements else None,
        "graders": [
            {
                "name": n,
                "description": str(getattr(described.get(n), "description", "")),
                "evidence": n in evidence,
            }
            for n in names
        ],
        "runs": [_run(run) for run in runs],
        "comparison": comparison,
    }


def _rate(score: dict[str, Any]) -> str:
    rate = score["pass_rate"]
    shown = "  n/a" if rate is None else f"{100 * rate:5.1f}%"
    return f"{score['pass']:>3}/{score['valid']:<3} {shown}"


def render_summary(report: dict[str, Any], paths: Sequence[str] = ()) -> str:
    """A one-screen terminal summary: each grader's passes over valid grades per run, absent, infra."""
    runs = report["runs"]
    lines = [f"agentium eval: {report['cases_file']}"]
    for run in runs:
        totals = run["totals"]
        lines.append(
            f"  {run['label']}: {totals['cases']} cases, {totals['graded']} graded, "
            f"{totals['infrastructure_failures']} infrastructure failure(s) "
            f"(provider {run['provider']}, recall {'on' if run['recall'] else 'off'})"
        )
    header = f"  {'grader':<22}" + "".join(f"{run['label'][:24]:>26}" for run in runs)
    lines += ["", header + "   absent"]
    for grader in report["graders"]:
        name = grader["name"]
        cells = "".join(
            f"{_rate(run['scores'][name]):>26}" if name in run["scores"] else f"{'-':>26}" for run in runs
        )
        absent = "/".join(str(run["scores"][name]["absent"]) for run in runs if name in run["scores"])
        mark = "*" if grader["evidence"] else " "
        lines.append(f"{mark} {name:<22}{cells}   {absent}")
    lines.append("  (* evidence grader; pass/valid: absent grades are not in the denominator)")
    for run in runs:
        for failure in run["infrastructure_failures"][:5]:
            lines.append(
                f"  infra [{run['label']}] {failure['case']}: {failure['error']}: {failure['message'][:120]}"
            )
        if len(run["infrastructure_failures"]) > 5:
            lines.append(
                f"  ... {len(run['infrastructure_failures']) - 5} more infrastructure failures in the report"
            )
    if report["statement"]:
        lines += ["", f"  Note: {report['statement']}"]
    if paths:
        lines += ["", *(f"  wrote {p}" for p in paths)]
    return "\n".join(lines) + "\n"


def check_out_dir(out_dir: str | os.PathLike[str]) -> Path:
    """Create ``out_dir`` if needed and prove it writable (a probe file), else :class:`ReportWriteError`.

    Called before any case runs, so an unwritable directory costs nothing.
    """
    path = Path(out_dir)
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".agentium-eval-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ReportWriteError(
            f"cannot write reports to {path}: {exc.strerror or exc}; "
            "choose another --out directory (nothing was run)"
        ) from exc
    return path


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)  # a report is for reading; mkstemp makes files private
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_reports(report: dict[str, Any], out_dir: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Write ``report.json`` and ``report.html`` into ``out_dir`` (each atomically); return their paths."""
    from ._html import render_html

    folder = check_out_dir(out_dir)
    json_path, html_path = folder / JSON_NAME, folder / HTML_NAME
    try:
        _write_atomic(json_path, json.dumps(report, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
        _write_atomic(html_path, render_html(report))
    except OSError as exc:
        raise ReportWriteError(f"cannot write reports to {folder}: {exc.strerror or exc}") from exc
    return json_path, html_path
