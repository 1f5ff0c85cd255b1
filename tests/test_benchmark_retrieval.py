"""The retrieval benchmark still runs end to end, on a tiny conversation this test writes itself.

No LoCoMo data is used here (research licence): the conversation below is
made up and has LoCoMo's shape. Figures asserted are the ones a store must
get right on text this small and distinctive; timings are never asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agentium_harness.adapters.sqlite_recall", reason="the benchmark needs the SQLite store")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "retrieval.py"

CONVERSATION: dict[str, Any] = {
    "speaker_a": "Ana",
    "speaker_b": "Bo",
    "session_1_date_time": "1:00 pm on 8 May, 2023",
    "session_1": [
        {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a greyhound named Pixel last week."},
        {"speaker": "Bo", "dia_id": "D1:2", "text": "Congratulations! I am learning to play the cello."},
        {"speaker": "Ana", "dia_id": "D1:3", "text": "My sister lives in Lisbon and paints murals."},
        {
            "speaker": "Bo",
            "dia_id": "D1:4",
            "text": "Here is what I baked this morning.",
            "blip_caption": "a photo of a sourdough loaf on a wooden board",
        },
    ],
    "session_2_date_time": "9:00 am on 20 May, 2023",
    "session_2": [
        {"speaker": "Ana", "dia_id": "D2:1", "text": "Pixel chewed my hiking boots yesterday."},
        {"speaker": "Bo", "dia_id": "D2:2", "text": "My cello teacher moved to Vienna."},
        {"speaker": "Ana", "dia_id": "D2:3", "text": "I am training for a marathon in October."},
    ],
    "qa": [
        {
            "question": "What breed is the dog Ana adopted?",
            "answer": "greyhound",
            "evidence": ["D1:1"],
            "category": 4,
        },
        {"question": "Where does the sister live?", "answer": "Lisbon", "evidence": ["D1:3"], "category": 4},
        {"question": "What bread was baked?", "answer": "sourdough", "evidence": ["D1:4"], "category": 4},
        {
            "question": "Which instrument does Bo learn, and where did the teacher move?",
            "answer": "cello; Vienna",
            "evidence": ["D1:2", "D2:2"],
            "category": 1,
        },
        {"question": "When is the marathon?", "answer": "October", "evidence": ["D2:3"], "category": 2},
        {"question": "What did Pixel chew?", "answer": "boots", "evidence": ["D9:99"], "category": 3},
        {
            "question": "What colour is the submarine Bo repaired?",
            "adversarial_answer": "yellow",
            "evidence": [],
            "category": 5,
        },
    ],
}


def _run(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), str(folder), *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "conv-1.json").write_text(json.dumps(CONVERSATION), encoding="utf-8")
    # A second conversation, so --conversations has something to leave out.
    (tmp_path / "conv-2.json").write_text(json.dumps(CONVERSATION), encoding="utf-8")
    return tmp_path


def test_json_figures_on_a_tiny_conversation(folder: Path) -> None:
    result = _run(folder, "--conversations", "1", "--json", "-", "--configurations", "default", "no-floor")
    report = json.loads(result.stdout)["reports"][0]
    assert (report["store"], report["conversations"], report["turns"]) == ("sqlite", 1, 7)
    # The category 3 question names a turn that does not exist: left out and counted.
    assert report["skipped_questions_no_evidence_id"] == 1
    assert report["unmapped_evidence_ids"] == 1
    rows = report["rows"]
    assert rows["4 single-hop"]["questions"] == 3
    assert rows["1-4"]["questions"] == 5
    assert rows["5 adversarial"]["questions"] == 1
    # Four groups: every single-hop question finds its turn's group (the image
    # caption included) among five candidates and in the request under the default budgets.
    assert rows["4 single-hop"]["recall_any@5"] == 1.0
    assert rows["4 single-hop"]["evidence_any@budget"] == 1.0
    # The two-turn question needs both groups: all of them within five candidates.
    assert rows["1 multi-hop"]["recall_all@5"] == 1.0
    assert rows["1 multi-hop"]["recall_all@1"] == 0.0  # two groups cannot both be first
    for row in rows.values():
        for k in (1, 5, 10, 20):
            assert 0.0 <= row[f"recall_all@{k}"] <= row[f"recall_any@{k}"] <= 1.0
        assert row["discovery_ms_median"] is None or row["discovery_ms_median"] >= 0
    assert rows["1-4"]["evidence_tokens_per_question"] > 0
    # The adversarial question shares only a speaker's name with the conversation: under the
    # relevance floor the run has no evidence (it abstains); without the floor it gets some.
    assert rows["5 adversarial"]["no_evidence"] == 1.0
    assert rows["5 adversarial"]["extractive_abstained"] == 1.0
    no_floor = json.loads(result.stdout)["reports"][1]
    assert no_floor["configuration"] == "no-floor"
    assert no_floor["rows"]["5 adversarial"]["no_evidence"] == 0.0


def test_table_per_store_and_limit(folder: Path) -> None:
    result = _run(
        folder, "--stores", "sqlite", "memory", "--limit", "2", "--configurations", "default", "no-floor"
    )
    out = result.stdout
    assert "## store sqlite, configuration default: 2 conversations, 14 turns, 1 per group" in out
    assert "## store memory, configuration default: 2 conversations, 14 turns, 1 per group" in out
    # --limit 2: the first two questions of each conversation, both single-hop,
    # in the discovery and the run tables of both stores.
    assert "## store sqlite, configuration no-floor: 2 conversations, 14 turns, 1 per group" in out
    assert out.count("| 4 single-hop | 4 |") == 6
    assert out.count("| 5 adversarial | 0 |") == 6
    assert out.count("| 1-4 | 4 |") == 6


def test_hybrid_configuration_and_an_empty_conversation(folder: Path) -> None:
    """Hybrid recall (issue 25) runs through the benchmark, and a conversation with no turns is no error."""
    empty = {"speaker_a": "A", "speaker_b": "B", "session_1": [], "qa": [
        {"question": "What did anyone say?", "adversarial_answer": "x", "evidence": [], "category": 5},
    ]}  # fmt: skip
    (folder / "conv-0-empty.json").write_text(json.dumps(empty), encoding="utf-8")
    result = _run(
        folder, "--names", "conv-0-empty", "conv-1", "--configurations", "hybrid-hashing", "--json", "-"
    )
    (report,) = json.loads(result.stdout)["reports"]
    assert (report["configuration"], report["conversations"], report["turns"]) == ("hybrid-hashing", 2, 7)
    rows = report["rows"]
    assert rows["4 single-hop"]["recall_any@5"] == 1.0
    assert rows["4 single-hop"]["query_embedding_ms_median"] is not None
    # The empty conversation's question found nothing: there was nothing to find.
    assert rows["5 adversarial"]["questions"] == 2
