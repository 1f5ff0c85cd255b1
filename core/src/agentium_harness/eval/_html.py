"""The HTML report: one self-contained page, one inline SVG chart per grader, a table of failures.

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
_CSS = """
body{font-family:system-ui,sans-serif;margin:2rem;color:#212121;max-width:72rem}
h1{font-size:1.5rem}h2{font-size:1.2rem;margin-top:2rem}
.note{background:#fff8e1;border-left:4px solid #f9a825;padding:.6rem 1rem}
.charts{display:flex;flex-wrap:wrap;gap:1rem}
figure{margin:0;border:1px solid #e0e0e0;padding:.5rem;border-radius:4px;width:34rem}
figcaption{font-weight:600;margin-bottom:.3rem}
table{border-collapse:collapse;width:100%;font-size:.9rem}
td,th{border:1px solid #e0e0e0;padding:.3rem .5rem;text-align:left;vertical-align:top}
pre{white-space:pre-wrap;margin:0;font-size:.85rem}
"""


def _e(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _chart(name: str, description: str, runs: list[dict[str, Any]]) -> str:
    """Stacked bars, one per run: pass, fail and absent counts of one grader."""
    width, bar_h, left = 420, 22, 120
    height = 30 + len(runs) * (bar_h + 14)
    parts = [
        f'<svg class="chart" data-grader="{_e(name)}" xmlns="http://www.w3.org/2000/svg" '
        f'width="{width + left + 10}" height="{height}" role="img" aria-label="{_e(name)} scores">',
        f"<title>{_e(name)}: {_e(description)}</title>",
    ]
    for i, run in enumerate(runs):
        score = run["scores"].get(name)
        y = 10 + i * (bar_h + 14)
        parts.append(f'<text x="0" y="{y + 15}" font-size="12">{_e(run["label"][:18])}</text>')
        if score is None:
            continue
        total = score["pass"] + score["fail"] + score["absent"]
        x = float(left)
        for status in ("pass", "fail", "absent"):
            count = score[status]
            if not count or not total:
                continue
            w = width * count / total
            parts.append(
                f'<rect class="bar {status}" x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar_h}" '
                f'fill="{_COLOURS[status]}"><title>{status}: {count}</title></rect>'
            )
            x += w
        rate = score["pass_rate"]
        shown = (
            "no valid grade"
            if rate is None
            else f"{score['pass']}/{score['valid']} valid pass ({100 * rate:.0f}%)"
        )
        parts.append(
            f'<text x="{left}" y="{y + bar_h + 11}" font-size="10">'
            f"{_e(shown)}, {score['absent']} absent</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _failures(runs: list[dict[str, Any]]) -> str:
    rows = []
    for run in runs:
        for case in run["cases"]:
            for grader, grade in case["grades"].items():
                if grade["status"] == "fail":
                    rows.append(
                        f"<tr><td>{_e(run['label'])}</td><td>{_e(case['id'])}</td><td>{_e(grader)}</td>"
                        f"<td>{_e(grade['reason'])}</td><td><pre>{_e(case['probe'])}</pre></td>"
                        f"<td><pre>{_e(case['output'])}</pre></td></tr>"
                    )
    if not rows:
        return "<p>No grader failed.</p>"
    head = "<tr><th>run</th><th>case</th><th>grader</th><th>reason</th><th>probe</th><th>output</th></tr>"
    return f'<table class="failures">{head}{"".join(rows)}</table>'


def _infra(runs: list[dict[str, Any]]) -> str:
    rows = [
        f"<tr><td>{_e(run['label'])}</td><td>{_e(f['case'])}</td><td>{_e(f['error'])}</td><td><pre>{_e(f['message'])}</pre></td></tr>"
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
    totals = "".join(
        f"<li>{_e(r['label'])}: {r['totals']['cases']} cases, {r['totals']['graded']} graded, "
        f"{r['totals']['infrastructure_failures']} infrastructure failure(s); provider {_e(r['provider'])}, "
        f"recall {'on' if r['recall'] else 'off'}</li>"
        for r in runs
    )
    note = f'<p class="note">{_e(report["statement"])}</p>' if report.get("statement") else ""
    charts = "".join(
        f"<figure><figcaption>{_e(g['name'])}{' (evidence)' if g['evidence'] else ''}</figcaption>"
        f"{_chart(g['name'], g['description'], runs)}<div>{_e(g['description'])}</div></figure>"
        for g in report["graders"]
    )
    legend = " ".join(f'<span style="color:{c}">&#9632; {s}</span>' for s, c in _COLOURS.items())
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        f"<title>agentium eval report</title><style>{_CSS}</style></head><body>"
        f"<h1>agentium eval report</h1><p>Cases: {_e(report['cases_file'])} · "
        f"schema {_e(report['schema'])} · agentium {_e(report['agentium_version'])}</p>"
        f"{note}<ul>{totals}</ul>"
        f"<h2>Scores per grader</h2><p>{legend}. Pass rates are over valid grades (pass + fail); "
        f"absent grades and infrastructure failures are never counted as passes.</p>"
        f'<div class="charts">{charts}</div>'
        f"<h2>Grader failures</h2>{_failures(runs)}<h2>Infrastructure failures</h2>{_infra(runs)}"
        "</body></html>\n"
    )
