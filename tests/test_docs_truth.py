"""The user docs keep to what users can rely on: public modules only, and no requirement ids.

- Every ``python`` block in ``docs/`` and the READMEs, and every file under
  ``examples/``, imports only public modules: a module path with a part that
  starts with ``_`` (``agentium_harness._config``, ``agentium_archive_s3._x``)
  is private and may change without notice, so a document must not send a
  reader there.
- Requirement ids (``R9``, ``R25``) are the project's own bookkeeping: they
  stay in code comments, docstrings and tests, and leave the user docs
  (``docs/``, generated pages included, and every README). The API reference
  generator drops them from the docstrings it copies.

- The bounds and defaults the docs state in numbers (history-api, config,
  runtime, cli, erasure and memory) are the code's own: a table below reads each
  sentence and compares its numbers with the constants or the behaviour.

``CONTRIBUTING.md`` is for contributors and is not scanned.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agentium_harness.testing._api_docs import adapter_modules, without_requirement_ids
from test_docs_examples import parse_python_blocks

ROOT = Path(__file__).resolve().parents[1]

#: A requirement id as the project writes them: R1 to R99.
REQUIREMENT_ID = re.compile(r"\bR[1-9][0-9]?\b")
#: Top-level packages of this repository (the core, plugins and integrations).
OUR_PACKAGES = re.compile(r"agentium_[a-z0-9_]+|agentium_harness")


def user_docs() -> list[Path]:
    """``docs/**/*.md`` and every README of the repository (the root's, plugins', integrations')."""
    found = sorted((ROOT / "docs").rglob("*.md"))
    found += [ROOT / "README.md", *sorted(ROOT.glob("plugins/**/README.md"))]
    found += sorted(ROOT.glob("integrations/**/README.md"))
    return [p for p in found if p.is_file() and ".venv" not in p.parts and "node_modules" not in p.parts]


def _code_units() -> Iterator[tuple[str, str]]:
    """(where, source) of every python block in the user docs and every example file."""
    for doc in user_docs():
        rel = doc.relative_to(ROOT).as_posix()
        for block in parse_python_blocks(doc.read_text("utf-8"), rel):
            yield block.id, block.source
    for example in sorted((ROOT / "examples").rglob("*.py")):
        yield example.relative_to(ROOT).as_posix(), example.read_text("utf-8")


def private_imports(source: str) -> list[str]:
    """Modules of this repository that ``source`` imports (or names to ``import_module``) and are private."""
    found: list[str] = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if re.fullmatch(r"agentium_[a-z0-9_.]+", node.value):  # importlib.import_module("...")
                names = [node.value]
        for name in names:
            parts = name.split(".")
            if OUR_PACKAGES.fullmatch(parts[0]) and any(p.startswith("_") for p in parts[1:]):
                found.append(name)
    return sorted(set(found))


def test_the_import_scan_catches_private_modules() -> None:
    assert private_imports("from agentium_harness._config import load_config\n") == [
        "agentium_harness._config",
        "agentium_harness._config.load_config",
    ]
    assert private_imports("import agentium_harness._cli as cli\n") == ["agentium_harness._cli"]
    assert private_imports("from agentium_harness import _codec\n") == ["agentium_harness._codec"]
    assert private_imports("importlib.import_module('agentium_archive_s3._keys')\n") == [
        "agentium_archive_s3._keys"
    ]
    assert private_imports("from agentium_harness import load_config\nfrom os import _exit\n") == []
    assert private_imports("from agentium_harness.adapters.sqlite import SQLiteArchive\n") == []


UNITS = list(_code_units())


@pytest.mark.parametrize(("where", "source"), UNITS, ids=[w for w, _ in UNITS])
def test_docs_and_examples_import_only_public_modules(where: str, source: str) -> None:
    assert private_imports(source) == [], (
        f"{where} imports a private module; use agentium_harness, agentium_harness.plugin_api, "
        "agentium_harness.testing, agentium_harness.eval or a module of agentium_harness.adapters"
    )


def test_the_public_adapter_modules_are_the_ones_named_without_underscore() -> None:
    modules = adapter_modules()
    assert "agentium_harness.adapters.sqlite" in modules and "agentium_harness.adapters.memory" in modules
    assert not any(m.rsplit(".", 1)[1].startswith("_") for m in modules)


@pytest.mark.parametrize("doc", user_docs(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_user_docs_cite_no_requirement_ids(doc: Path) -> None:
    hits = [
        f"{n}: {line.strip()}"
        for n, line in enumerate(doc.read_text("utf-8").splitlines(), 1)
        if REQUIREMENT_ID.search(line)
    ]
    assert hits == [], "requirement ids belong in code and tests, not the user docs:\n" + "\n".join(hits)


@pytest.mark.parametrize(
    ("written", "shown"),
    [
        ("What a write did (R39).", "What a write did."),
        ("declared capabilities (R9, R10) and refuses", "declared capabilities and refuses"),
        ("What recall achieved (R20–R22).", "What recall achieved."),
        ("(it proves nothing, R29); since", "(it proves nothing); since"),
        ("(R16: only verified identity is accepted)", "(only verified identity is accepted)"),
        ("## Acknowledgments (R39)", "## Acknowledgments"),
        ("no ids here (see R&D)", "no ids here (see R&D)"),
    ],
)
def test_the_reference_generator_drops_requirement_ids(written: str, shown: str) -> None:
    assert without_requirement_ids(written) == shown


def test_the_engine_layout_in_runtime_md_names_every_engine_module() -> None:
    text = (ROOT / "docs" / "runtime.md").read_text("utf-8")
    listed = set(re.findall(r"`_engine/([a-z_/]+\.py)`", text))
    engine = ROOT / "core/src/agentium_harness/_engine"
    present = {p.relative_to(engine).as_posix() for p in engine.rglob("*.py") if p.name != "__init__.py"}
    assert sorted(present - listed) == [], "docs/runtime.md's engine table leaves these out"
    assert sorted(listed - present) == [], "docs/runtime.md's engine table names modules that do not exist"


def test_the_case_sample_in_eval_md_is_a_valid_case() -> None:
    from agentium_harness.eval import parse_cases

    text = (ROOT / "docs" / "eval.md").read_text("utf-8")
    [sample] = re.findall(r"^```json\n(.*?)^```$", text, re.M | re.S)
    [case] = parse_cases(" ".join(sample.split("\n")) + "\n", file="docs/eval.md")
    assert case.id == "stated-evicted-01" and case.probe == "What is my locker number?"


# ------------------------------------------------------------------ numbers the docs state
#
# Each row: a doc, a pattern of a sentence in it with the number(s) it states as groups, and the
# code's own value(s). A changed bound (in code or doc) fails here instead of leaving the doc
# wrong; a reworded sentence fails too (fix the pattern). Whitespace in the doc is collapsed,
# so a pattern may span a line break. Bounds that a constant does not hold are checked by
# behaviour: the stated ceiling is accepted and one more is refused.

MiB = 1024 * 1024


def _ceiling(make: Callable[[int], object], n: int) -> int:
    """``n`` when ``make(n)`` is accepted and ``make(n + 1)`` refused with the library's error, else -1."""
    from agentium_harness import AgentiumError

    make(n)
    try:
        make(n + 1)
    except AgentiumError:
        return n
    return -1


def _stated_numbers() -> list[tuple[str, str, Callable[[], tuple[int, ...]]]]:
    import inspect

    import agentium_harness as ah
    from agentium_harness import plugin_api as pa
    from agentium_harness._cli.interrupt import EXIT_INTERRUPTED, SHUTDOWN_GRACE_S
    from agentium_harness._cli.output import MAX_STDIN_BYTES
    from agentium_harness._cli.recall import MAX_DOCUMENT_BYTES
    from agentium_harness._config.source import MAX_CONFIG_BYTES, MAX_NESTING
    from agentium_harness._engine import history_checks as hc
    from agentium_harness._engine.erasure import MAX_ERASURE_REASON_BYTES
    from agentium_harness._engine.erasure_index import INDEX_PAGE_RECORDS
    from agentium_harness._engine.memory.selection import CANDIDATES_PER_FACT, candidate_bound
    from agentium_harness._engine.retention import MAX_RETENTION_DAYS, MAX_RETENTION_SESSIONS
    from agentium_harness._engine.turn import MAX_REPLY_BYTES, MAX_TOOL_CALLS, MAX_TOOL_OUTPUT_BYTES
    from agentium_harness._engine.turn_commit import MAX_INTERRUPTION_BYTES
    from agentium_harness._history_messages import MAX_PAYLOAD_FORMAT_LENGTH
    from agentium_harness._json import MAX_JSON_DEPTH
    from agentium_harness._ports.archive_marks import MAX_ARCHIVE_MARKS
    from agentium_harness._ports.erasure import DEFAULT_ERASE_BATCH, MAX_RECORD_DIGESTS, MAX_RECORD_SESSIONS
    from agentium_harness.adapters._sqlite_sql import scrub_log
    from agentium_harness.adapters.sqlite import SQLiteConfig

    limits, embed = ah.RuntimeLimits(), ah.EmbeddingLimits()
    scrub = inspect.signature(scrub_log).parameters
    return [
        # docs/history-api.md
        ("history-api.md", r"`MAX_APPEND_MESSAGES` \(([\d,]+)\)", lambda: (ah.MAX_APPEND_MESSAGES,)),
        ("history-api.md", r"`MAX_APPEND_BYTES` \((\d+) MiB", lambda: (ah.MAX_APPEND_BYTES // MiB,)),
        ("history-api.md", r"integers of more than ([\d,]+) digits", lambda: (hc._MAX_INT_DIGITS,)),
        ("history-api.md", r"at most (\d+) levels of nesting", lambda: (pa.MAX_ARGUMENT_DEPTH,)),
        ("history-api.md", r"`MAX_PAYLOAD_BYTES` \((\d+) MiB\)", lambda: (ah.MAX_PAYLOAD_BYTES // MiB,)),
        (
            "history-api.md",
            r"`\. _ : / \+ -`, at most (\d+) characters",
            lambda: (MAX_PAYLOAD_FORMAT_LENGTH,),
        ),
        ("history-api.md", r"at most `max_groups` \(1 to ([\d,]+)\)", lambda: (hc.MAX_PAGE_GROUPS,)),
        ("history-api.md", r"\(1 byte to (\d+) MiB;", lambda: (hc.MAX_PAGE_BYTES // MiB,)),
        ("history-api.md", r"up to `limit` \(1 to ([\d,]+)\)", lambda: (hc.MAX_LIST_LIMIT,)),
        ("history-api.md", r"`MAX_RETRACT_COUNT` \(([\d,]+)\)", lambda: (ah.MAX_RETRACT_COUNT,)),
        ("history-api.md", r"`MAX_RETRACTION_SPANS` \(([\d,]+),", lambda: (ah.MAX_RETRACTION_SPANS,)),
        ("history-api.md", r"The `reason` \(cut to ([\d,]+) bytes\)", lambda: (hc.MAX_REASON_BYTES,)),
        # docs/config.md
        ("config.md", r"`max_steps` \(model calls per run, default (\d+)\)", lambda: (limits.max_steps,)),
        ("config.md", r"`source_tokens` \([^)]*default (\d+)\)", lambda: (limits.source_tokens,)),
        (
            "config.md",
            r"`settle_timeout_s`, `op_timeout_s` and `tool_timeout_s` \(durations, default (\d+)\)",
            lambda: tuple(
                {int(limits.settle_timeout_s), int(limits.op_timeout_s), int(limits.tool_timeout_s)}
            ),
        ),
        ("config.md", r"`close_timeout_s` \(default (\d+)\)", lambda: (int(limits.close_timeout_s),)),
        (
            "config.md",
            r"resident history bounds, default (\d+), (\d+) and (\d+)\)",
            lambda: (limits.resident.max_groups, limits.resident.max_tokens, limits.resident.max_bytes),
        ),
        (
            "config.md",
            r"`max_summary_bytes` \(counts, default (\d+), (\d+) and (\d+)\), "
            r"`timeout_s` \(a duration, default (\d+):",
            lambda: (
                ah.SummaryLimits().max_groups,
                ah.SummaryLimits().max_input_bytes,
                ah.SummaryLimits().max_summary_bytes,
                int(ah.SummaryLimits().timeout_s),
            ),
        ),
        (
            "config.md",
            r"`max_query_bytes`, `max_readback_bytes` \(counts, default (\d+), (\d+), (\d+), (\d+), (\d+), "
            r"(\d+), (\d+),\s+(\d+) and (\d+); `max_validations` at least 2\) and `max_latency_s` "
            r"\(a duration,\s+default (\d+)\)",
            lambda: (
                ah.RecallLimits().max_queries,
                ah.RecallLimits().max_candidates,
                ah.RecallLimits().max_discovery_bytes,
                ah.RecallLimits().max_source_bytes,
                ah.RecallLimits().max_excerpt_bytes,
                ah.RecallLimits().max_evidence_tokens,
                ah.RecallLimits().max_validations,
                ah.RecallLimits().max_query_bytes,
                ah.RecallLimits().max_readback_bytes,
                int(ah.RecallLimits().max_latency_s),
            ),
        ),
        ("config.md", r"`max_age_days` \(days, at most (\d+)\)", lambda: (int(MAX_RETENTION_DAYS),)),
        (
            "config.md",
            r"`max_revisions` \(0–(\d+), default (\d+)",
            lambda: (
                _ceiling(lambda n: ah.CompletionPolicy(max_revisions=n), 8),
                ah.CompletionPolicy().max_revisions,
            ),
        ),
        (
            "config.md",
            r"`max_entries` \(1–(\d+)\) and `max_bytes` \(1–(\d+)\)",
            lambda: (
                _ceiling(lambda n: ah.EvidenceLimits(max_entries=n), 32),
                _ceiling(lambda n: ah.EvidenceLimits(max_bytes=n), 8192),
            ),
        ),
        (
            "config.md",
            r"`max_batch` \(texts per call, default (\d+)\), `max_input_bytes` \([^)]*default (\d+)\), "
            r"`timeout_s` \(one call's deadline, default (\d+)\) and "
            r"`warmup_timeout_s` \([^)]*default (\d+);",
            lambda: (
                embed.max_batch,
                embed.max_input_bytes,
                int(embed.timeout_s),
                int(embed.warmup_timeout_s),
            ),
        ),
        ("config.md", r"\| (\d+) \(one hour\) \|", lambda: (int(pa.MAX_DURATION_S),)),
        ("config.md", r"\| ([\d,]+) \(10\*\*12\) \|", lambda: (pa.MAX_COUNT,)),
        (
            "config.md",
            r"memory's `max_fact_bytes` is at most (\d+) and its fact counts at most (\d+)",
            lambda: (
                _ceiling(lambda n: ah.MemoryLimits(max_fact_bytes=n), 4096),
                min(
                    _ceiling(lambda n: ah.MemoryLimits(max_injected_facts=n), 200),
                    _ceiling(lambda n: ah.MemoryLimits(max_extracted_facts=n), 200),
                ),
            ),
        ),
        (
            "config.md",
            r"the SQLite `busy_timeout_ms` is 0–(\d+)",
            lambda: (_ceiling(lambda n: SQLiteConfig(busy_timeout_ms=n), 600000),),
        ),
        ("config.md", r"larger than (\d+) MiB \(`MAX_CONFIG_BYTES`\)", lambda: (MAX_CONFIG_BYTES // MiB,)),
        ("config.md", r"more than (\d+) levels deep \(`MAX_NESTING`", lambda: (MAX_NESTING,)),
        # docs/runtime.md
        ("runtime.md", r"carries more than (\d+) tool calls", lambda: (MAX_TOOL_CALLS,)),
        (
            "runtime.md",
            r"`MAX_APPEND_MESSAGES` \(([\d,]+) messages\): the model is called again only while its "
            r"reply, with a result for each of the most tool calls a reply may carry \((\d+)\)",
            lambda: (ah.MAX_APPEND_MESSAGES, MAX_TOOL_CALLS),
        ),
        ("cli.md", r"reached its ([\d,]+)-message bound", lambda: (ah.MAX_APPEND_MESSAGES,)),
        ("runtime.md", r"more than (\d+) MiB of content", lambda: (MAX_REPLY_BYTES // MiB,)),
        (
            "runtime.md",
            r"deeper than (\d+) levels \(`MAX_ARGUMENT_DEPTH`\)",
            lambda: (pa.MAX_ARGUMENT_DEPTH,),
        ),
        (
            "runtime.md",
            r"Tool output over (\d+) MiB is cut to (\d+) MiB",
            lambda: (MAX_TOOL_OUTPUT_BYTES // MiB, MAX_TOOL_OUTPUT_BYTES // MiB),
        ),
        (
            "runtime.md",
            r"nested deeper than (\d+) levels or larger than (\d+) MiB",
            lambda: (MAX_JSON_DEPTH, pa.MAX_JSON_BYTES // MiB),
        ),
        ("runtime.md", r"larger than (\d+) MiB \(`MAX_JSON_BYTES`\)", lambda: (pa.MAX_JSON_BYTES // MiB,)),
        ("runtime.md", r"as `detail`, cut to (\d+) KiB\)", lambda: (MAX_INTERRUPTION_BYTES // 1024,)),
        # docs/cli.md
        ("cli.md", r"At most (\d+) MiB is read", lambda: (MAX_STDIN_BYTES // MiB,)),
        (
            "cli.md",
            r"reads it from standard input instead \(at most (\d+) MiB\)",
            lambda: (MAX_STDIN_BYTES // MiB,),
        ),
        ("cli.md", r"files over (\d+) MiB", lambda: (MAX_DOCUMENT_BYTES // MiB,)),
        (
            "cli.md",
            r"the process exits at most (\d+) seconds after the first one, status `(\d+)`",
            lambda: (int(SHUTDOWN_GRACE_S), EXIT_INTERRUPTED),
        ),
        # docs/recall.md: the host's document methods (HarnessRuntime.index_document)
        ("recall.md", r"Unicode of at most (\d+) MiB of UTF-8", lambda: (ah.MAX_DOCUMENT_BYTES // MiB,)),
        ("recall.md", r"`title` at most ([\d,]+) bytes", lambda: (ah.MAX_DOCUMENT_TITLE_BYTES,)),
        # docs/erasure.md
        (
            "erasure.md",
            r"`reason` is required \(at most ([\d,]+) bytes\)",
            lambda: (MAX_ERASURE_REASON_BYTES,),
        ),
        ("erasure.md", r"\(up to ([\d,]+) per record;", lambda: (MAX_RECORD_DIGESTS,)),
        ("erasure.md", r"The record lists at most ([\d,]+) sessions", lambda: (MAX_RECORD_SESSIONS,)),
        (
            "erasure.md",
            r"the session the erasure targeted; [^)]*\), at most (\d+) each",
            lambda: (INDEX_PAGE_RECORDS,),
        ),
        # docs/memory.md
        (
            "memory.md",
            r"for up to (\d+) candidates per place \(`CANDIDATES_PER_FACT` in `[^`]*`\), at most (\d+) "
            r"\(one lookup's `MAX_LOOKUP_LIMIT`\): (\d+) for the default limit\.",
            lambda: (
                CANDIDATES_PER_FACT,
                candidate_bound(200),  # the largest limit: the cap
                candidate_bound(ah.MemoryLimits().max_injected_facts),
            ),
        ),
        (
            "memory.md",
            r"one request examines at most (\d+) per place",
            lambda: (candidate_bound(1),),
        ),
        ("erasure.md", r"archive mark in its snapshot \(at most (\d+);", lambda: (MAX_ARCHIVE_MARKS,)),
        ("erasure.md", r"at most ([\d,]+) per application", lambda: (MAX_RETENTION_SESSIONS,)),
        ("erasure.md", r"dry_run=False, max_items=(\d+)\)", lambda: (DEFAULT_ERASE_BATCH,)),
        (
            "erasure.md",
            r"retried for up to (\d+) seconds \(less if the call's deadline comes first\), "
            r"each attempt waiting at most (\d+) ms",
            lambda: (int(scrub["budget_s"].default), scrub["attempt_wait_ms"].default),
        ),
    ]


STATED = _stated_numbers()


@pytest.mark.parametrize(("doc", "pattern", "actual"), STATED, ids=[f"{d}:{p[:40]}" for d, p, _ in STATED])
def test_the_numbers_the_docs_state_are_the_codes(
    doc: str, pattern: str, actual: Callable[[], tuple[int, ...]]
) -> None:
    text = " ".join((ROOT / "docs" / doc).read_text("utf-8").split())
    found = re.search(pattern, text)
    assert found is not None, f"docs/{doc} no longer says {pattern!r}: update this test with the doc"
    stated = tuple(int(g.replace(",", "")) for g in found.groups())
    assert stated == actual(), f"docs/{doc} states {found.group(0)!r}; the code's value is {actual()}"
