"""The HTML report: one self-contained page with a chart per grader, the difference, and failures per case.

- Each grader's chart has one bar per run over its *valid* grades (pass and
  fail), and the absent grades in a lane of their own below it, so a grader
  that could not judge most cases does not drown the bar in grey.
- With two runs (``--compare``), a table gives each grader's pass rates and
  their difference in percentage points (primary minus the other), and each
  chart repeats its own.
- Grader failures are grouped per case: the probe once, then each run's
  failing graders with their reasons and the output they judged.

Nothing is fetched: styles are inline, charts are inline SVG, there is no
script, and a Content-Security-Policy of ``default-src 'none'`` forbids the
browser to load anything. Every value from a case or an answer is escaped.
"""

from __future__ import annotations

import html
from typing import Any

__all__ = ["render_html"]

#: Nothing may load: no script, no fetch, no remote image or font.
_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
_COLOURS = {"pass": "#2e7d32", "fail": "#c62828", "absent": "#9e9e9e"}
#: A difference's colour: better, worse, unchanged or not comparable.
_DELTA_COLOURS = {"up": "#2e7d32", "down": "#c62828", "same": "#616161", "none": "#9e9e9e"}
_CSS = """
body{font-family:system-ui,sans-serif;margin:2rem;color:#212121;max-width:72rem}
h1{font-size:1.5rem}h2{font-size:1.2rem;margin-top:2rem}h3{font-size:1rem;margin:1.2rem 0 .3rem}
.note{background:#fff8e1;border-left:4px solid #f9a825;padding:.6rem 1rem}
.charts{display:flex;flex-wrap:wrap;gap:1rem}
figure{margin:0;border:1px solid #e0e0e0;padding:.5rem;border-radius:4px;width:34rem}
figcaption{font-weight:600;margin-bottom:.3rem}
table{border-collapse:collapse;width:100%;font-size:.9rem}
td,th{border:1px solid #e0e0e0;padding:.3rem .5rem;text-align:left;vertical-align:top}
td.num{text-align:right;font-variant-numeric:tabular-nums}
pre{white-space:pre-wrap;margin:0;font-size:.85rem}
.delta{font-weight:600}
.case-failures{border-top:1px solid #e0e0e0;margin-top:1rem}
ul.grades{margin:0;padding-left:1.1rem}
"""


def _e(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _points(delta: float | None) -> tuple[str, str]:
    """A difference of pass rates as signed percentage points, and its colour key."""
    if delta is None:
        return "n/a", "none"
    points = 100 * delta
    if abs(points) < 0.05:
        return "±0 pts", "same"
    # One decimal at most, and none when it is .0 (+100 pts, +66.7 pts).
    return f"{round(points, 1):+g} pts", "up" if points > 0 else "down"


def _rate(rate: float | None) -> str:
    return "n/a" if rate is None else f"{100 * rate:.0f}%"


def _chart(name: str, description: str, runs: list[dict[str, Any]], delta: dict[str, Any] | None) -> str:
    """One bar per run over valid grades (pass, fail); absent grades in their own lane beneath."""
    width, bar_h, lane_h, left = 420, 22, 6, 120
    row_h = bar_h + lane_h + 24
    height = 14 + len(runs) * row_h + (18 if delta is not None else 0)
    parts = [
        f'<svg class="chart" data-grader="{_e(name)}" xmlns="http://www.w3.org/2000/svg" '
        f'width="{width + left + 10}" height="{height}" role="img" aria-label="{_e(name)} scores">',
        f"<title>{_e(name)}: {_e(description)}</title>",
    ]
    for i, run in enumerate(runs):
        score = run["scores"].get(name)
        y = 10 + i * row_h
        parts.append(f'<text x="0" y="{y + 15}" font-size="12">{_e(run["label"][:18])}</text>')
        if score is None:
            continue
        valid = score["pass"] + score["fail"]
        x = float(left)
        for status in ("pass", "fail"):
            count = score[status]
            if not count:
                continue
            w = width * count / valid
            parts.append(
                f'<rect class="bar {status}" x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar_h}" '
                f'fill="{_COLOURS[status]}"><title>{status}: {count}</title></rect>'
            )
            x += w
        if not valid:
            parts.append(
                f'<rect class="bar none" x="{left}" y="{y}" width="{width}" height="{bar_h}" fill="none" '
                f'stroke="{_COLOURS["absent"]}" stroke-dasharray="4 3"><title>no valid grade</title></rect>'
            )
        # Absent grades: a thin lane of their own, scaled to the graded cases, never part of the bar.
        graded = valid + score["absent"]
        lane_y = y + bar_h + 3
        if score["absent"] and graded:
            parts.append(
                f'<rect class="lane absent" x="{left}" y="{lane_y}" '
                f'width="{width * score["absent"] / graded:.1f}" height="{lane_h}" '
                f'fill="{_COLOURS["absent"]}"><title>absent: {score["absent"]}</title></rect>'
            )
        shown = (
            "no valid grade"
            if not valid
            else f"{score['pass']}/{valid} valid pass ({_rate(score['pass_rate'])})"
        )
        parts.append(
            f'<text x="{left}" y="{lane_y + lane_h + 11}" font-size="10">'
            f"{_e(shown)}; {score['absent']} absent (not in the bar)</text>"
        )
    if delta is not None:
        text, key = _points(delta["delta"])
        parts.append(
            f'<text class="delta" x="{left}" y="{height - 6}" font-size="12" font-weight="600" '
            f'fill="{_DELTA_COLOURS[key]}">difference: {_e(text)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _comparison(report: dict[str, Any]) -> str:
    """Each grader's pass rates in both runs and their difference, as a table."""
    comparison = report.get("comparison")
    if not comparison:
        return ""
    primary, other = comparison["primary"], comparison["other"]
    rows = []
    for name, row in comparison["graders"].items():
        text, key = _points(row["delta"])
        delta = "" if row["delta"] is None else f' data-delta="{row["delta"]}"'
        rows.append(
            f'<tr data-grader="{_e(name)}"><td>{_e(name)}</td><td class="num">{_rate(row["rate"])}</td>'
            f'<td class="num">{_rate(row["other_rate"])}</td>'
            f'<td class="num delta {key}"{delta} style="color:{_DELTA_COLOURS[key]}">{_e(text)}</td></tr>'
        )
    head = (
        f"<tr><th>grader</th><th>{_e(primary)}</th><th>{_e(other)}</th>"
        f"<th>difference ({_e(primary)} − {_e(other)})</th></tr>"
    )
    return (
        f"<h2>Difference</h2><p>Pass rates over valid grades; the difference is in percentage points, "
        f"{_e(primary)} minus {_e(other)} (n/a when either run has no valid grade).</p>"
        f'<table class="comparison">{head}{"".join(rows)}</table>'
    )


def _failures(runs: list[dict[str, Any]]) -> str:
    """Grader failures grouped per case: the probe once, then each run's failing graders and output."""
    order: list[str] = []
    by_case: dict[str, tuple[str, list[str]]] = {}
    for run in runs:
        for case in run["cases"]:
            failed = [
                (g, grade["reason"]) for g, grade in case["grades"].items() if grade["status"] == "fail"
            ]
            if not failed:
                continue
            if case["id"] not in by_case:
                order.append(case["id"])
                by_case[case["id"]] = (case["probe"], [])
            grades = "".join(f"<li><b>{_e(g)}</b>: {_e(reason)}</li>" for g, reason in failed)
            by_case[case["id"]][1].append(
                f'<tr><td>{_e(run["label"])}</td><td class="num">{len(failed)}</td>'
                f'<td><ul class="grades">{grades}</ul></td><td><pre>{_e(case["output"])}</pre></td></tr>'
            )
    if not order:
        return "<p>No grader failed.</p>"
    head = "<tr><th>run</th><th>failed</th><th>graders and reasons</th><th>output</th></tr>"
    sections = [
        f'<section class="case-failures" data-case="{_e(case_id)}"><h3>{_e(case_id)}</h3>'
        f'<pre class="probe">{_e(by_case[case_id][0])}</pre>'
        f'<table class="failures">{head}{"".join(by_case[case_id][1])}</table></section>'
        for case_id in order
    ]
    return f"<p>{len(order)} case(s) with a failed grade.</p>" + "".join(sections)


def _infra(runs: list[dict[str, Any]]) -> str:
    rows = [
        f"<tr><td>{_e(run['label'])}</td><td>{_e(f['case'])}</td><td>{_e(f['error'])}</td>"
        f"<td><pre>{_e(f['message'])}</pre></td></tr>"
        for run in runs
        for f in run["infrastructure_failures"]
    ]
    if not rows:
        return "<p>No infrastructure failure.</p>"
    head = "<tr><th>run</th><th>case</th><th>error</th><th>message</th></tr>"
    return f'<table class="infra">{head}{"".join(rows)}</table>'


def render_html(report: dict[str, Any]) -> str:
    """The report as one HTML page that needs nothing else: no script, no fetch."""
    runs: list[dict[str, Any]] = report["runs"]
    deltas: dict[str, Any] = (report.get("comparison") or {}).get("graders", {})
    totals = "".join(
        f"<li>{_e(r['label'])}: {r['totals']['cases']} cases, {r['totals']['graded']} graded, "
        f"{r['totals']['infrastructure_failures']} infrastructure failure(s); provider {_e(r['provider'])}, "
        f"recall {'on' if r['recall'] else 'off'}</li>"
        for r in runs
    )
    note = f'<p class="note">{_e(report["statement"])}</p>' if report.get("statement") else ""
    charts = "".join(
        f"<figure><figcaption>{_e(g['name'])}{' (evidence)' if g['evidence'] else ''}</figcaption>"
        f"{_chart(g['name'], g['description'], runs, deltas.get(g['name']))}"
        f"<div>{_e(g['description'])}</div></figure>"
        for g in report["graders"]
    )
    legend = " ".join(f'<span style="color:{c}">&#9632; {s}</span>' for s, c in _COLOURS.items())
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        f"<title>agentium eval report</title><style>{_CSS}</style></head><body>"
        f"<h1>agentium eval report</h1><p>Cases: {_e(report['cases_file'])} · "
        f"schema {_e(report['schema'])} · agentium {_e(report['agentium_version'])}</p>"
        f"{note}<ul>{totals}</ul>{_comparison(report)}"
        f"<h2>Scores per grader</h2><p>{legend}. Each bar is the valid grades (pass + fail); the grey "
        f"lane beneath it is the absent grades, apart. Pass rates are over valid grades: absent grades "
        f"and infrastructure failures are never counted as passes.</p>"
        f'<div class="charts">{charts}</div>'
        f"<h2>Grader failures, by case</h2>{_failures(runs)}<h2>Infrastructure failures</h2>{_infra(runs)}"
        "</body></html>\n"
    )
