"""The HTML report opened in real headless Chromium: charts, the difference, failures per case.

With ``--compare`` the page the browser builds shows each grader's difference
(the JSON's ``comparison``), keeps absent grades out of the bars, and groups
grader failures per case.

Needs Debian's ``chromium`` (``core/ci/install-chromium.sh``). With
``AGENTIUM_REQUIRE_CHROMIUM=1`` (set in CI) a missing browser fails the test;
elsewhere it is skipped with that reason.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from _eval_support import FACT_CASE, RECALL_OFF, RECALL_ON, write_cases

from agentium_harness._cli import main

CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser")
PASS_GREEN = (0x2E, 0x7D, 0x32)
FAIL_RED = (0xC6, 0x28, 0x28)


def _chromium() -> str:
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    reason = "Debian's chromium is not installed (run core/ci/install-chromium.sh)"
    if os.environ.get("AGENTIUM_REQUIRE_CHROMIUM") == "1":
        pytest.fail(f"{reason}, and AGENTIUM_REQUIRE_CHROMIUM=1 requires it")
    pytest.skip(reason)


def _run_chromium(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [
        binary,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def _pixels(png: bytes) -> tuple[int, int, list[tuple[int, int, int]]]:
    """Decode an 8-bit, non-interlaced RGB or RGBA PNG (what Chromium writes) into RGB pixels."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, data, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind, body = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and interlace == 0 and colour in (2, 6), (depth, colour, interlace)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            data += body
    raw = zlib.decompress(data)
    stride = width * channels
    rows: list[bytearray] = []
    prior = bytearray(stride)
    for y in range(height):
        line = raw[y * (stride + 1) : (y + 1) * (stride + 1)]
        kind, row = line[0], bytearray(line[1:])
        for i in range(stride):
            left = row[i - channels] if i >= channels else 0
            up = prior[i]
            corner = prior[i - channels] if i >= channels else 0
            if kind == 1:
                row[i] = (row[i] + left) & 0xFF
            elif kind == 2:
                row[i] = (row[i] + up) & 0xFF
            elif kind == 3:
                row[i] = (row[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                pred = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                row[i] = (row[i] + pred) & 0xFF
        rows.append(row)
        prior = row
    pixels = [tuple(r[i : i + 3]) for r in rows for i in range(0, stride, channels)]
    return width, height, pixels  # type: ignore[return-value]


def _near(pixel: tuple[int, int, int], colour: tuple[int, int, int]) -> bool:
    return all(abs(a - b) <= 12 for a, b in zip(pixel, colour, strict=True))


def test_the_report_renders_its_charts_in_headless_chromium(tmp_path: Path) -> None:
    binary = _chromium()
    abstains = {"id": "asks", "probe": "Who won the chess tournament?", "expect": {"abstain": True}}
    cases = write_cases(tmp_path / "cases.jsonl", [FACT_CASE, {**FACT_CASE, "id": "fact-2"}, abstains])
    out = tmp_path / "report"
    assert main(["eval", str(RECALL_ON), str(cases), "--compare", str(RECALL_OFF), "--out", str(out)]) == 0
    page = (out / "report.html").resolve()
    graders = page.read_text(encoding="utf-8").count('<svg class="chart"')
    assert graders == 7

    dom = _run_chromium(binary, tmp_path / "profile-dom", "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    # The DOM the browser built (not the file's text): every chart is an SVG element with its bars.
    assert dom.stdout.count("<svg") == graders, dom.stdout[:2000]
    assert dom.stdout.count('class="bar pass"') >= 1 and dom.stdout.count('class="bar fail"') >= 1
    assert "does not prove live-model quality" in dom.stdout
    _check_the_difference_absent_lanes_and_case_groups(
        dom.stdout, json.loads((out / "report.json").read_text())
    )

    shot = tmp_path / "shot.png"
    done = _run_chromium(
        binary, tmp_path / "profile-shot", f"--screenshot={shot}", "--window-size=1280,1600", page.as_uri()
    )
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    width, height, pixels = _pixels(shot.read_bytes())
    assert (width, height) == (1280, 1600)
    # Bars were painted: pass green and fail red pixels exist on the white page.
    assert sum(_near(p, PASS_GREEN) for p in pixels) > 500
    assert sum(_near(p, FAIL_RED) for p in pixels) > 500


def _check_the_difference_absent_lanes_and_case_groups(dom: str, report: dict[str, object]) -> None:
    comparison = report["comparison"]
    assert isinstance(comparison, dict)
    graders: dict[str, dict[str, float | None]] = comparison["graders"]
    # The difference table: one row per grader, its delta the JSON's, shown in percentage points.
    table = re.search(r'<table class="comparison">(.*?)</table>', dom, re.S)
    assert table, dom[:2000]
    rows = dict(re.findall(r'<tr data-grader="([^"]+)">(.*?)</tr>', table.group(1), re.S))
    assert set(rows) == set(graders)
    changed = 0
    for name, row in graders.items():
        delta = row["delta"]
        if delta is None:
            assert "n/a" in rows[name] and "data-delta" not in rows[name]
            continue
        assert f'data-delta="{delta}"' in rows[name]
        points = 100 * delta
        if abs(points) >= 0.05:
            changed += 1
            assert f"{round(points, 1):+g} pts" in rows[name], (name, rows[name])
    assert changed >= 1  # recall on against recall off: the evidence graders differ
    # Each chart repeats its grader's difference.
    charts = dict(re.findall(r'<svg class="chart" data-grader="([^"]+)"(.*?)</svg>', dom, re.S))
    for name in graders:
        assert "difference:" in charts[name]
    # Absent grades sit in their own lane, never inside a bar.
    assert 'class="bar absent"' not in dom
    for run in report["runs"]:  # type: ignore[attr-defined]
        for name, score in run["scores"].items():
            lanes = re.findall(r'<rect class="lane absent"[^>]*><title>absent: (\d+)</title>', charts[name])
            if score["absent"]:
                assert str(score["absent"]) in lanes, (name, run["label"], lanes)
    # Grader failures, grouped per case: one section per case with a failed grade, its probe once.
    failing = {
        case["id"]: case["probe"]
        for run in report["runs"]  # type: ignore[attr-defined]
        for case in run["cases"]
        if any(g["status"] == "fail" for g in case["grades"].values())
    }
    sections = re.findall(r'<section class="case-failures" data-case="([^"]+)">(.*?)</section>', dom, re.S)
    assert sorted(case for case, _ in sections) == sorted(failing) and len(failing) >= 2
    for case, body in sections:
        assert body.count('<pre class="probe">') == 1 and html.escape(failing[case], quote=False) in body
