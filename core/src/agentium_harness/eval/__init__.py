"""Evaluate the actual runtime: cases, graders, a runner and truthful reports (R32–R35).

- :func:`load_cases` reads a JSONL case file (see ``docs/eval.md``), the
  bundled set included (``bundled``), with every problem reported by file,
  line and path.
- Graders (:data:`BUILTIN_GRADERS`, and any a plugin registers through the
  ``agentium_register_graders`` hook) each return pass, fail or absent with
  a reason; :func:`installed_graders` lists them.
- :func:`run_eval` runs the cases on a target
  (:func:`agentium_harness.testing.create_harness_eval_target`) concurrently
  within a bound; a case whose infrastructure failed is counted apart.
- :func:`build_report`, :func:`render_html`, :func:`render_summary` and
  :func:`write_reports` produce the JSON report (schema
  :data:`REPORT_SCHEMA`), a self-contained HTML page and a one-screen
  terminal summary.
"""

from __future__ import annotations

from ._cases import (
    BUNDLED_CASES,
    MAX_CASE_FILE_BYTES,
    EvalCase,
    Expectations,
    OwnerSpec,
    SetupStep,
    bundled_cases_path,
    load_cases,
    parse_cases,
)
from ._errors import CaseIssue, EvalCaseError, EvalError, ReportWriteError, UnknownGraderError
from ._graders import (
    ABSTAIN_MARKERS,
    BUILTIN_GRADERS,
    CITATION,
    AbstentionGrader,
    DiscoveredEvidenceGrader,
    Grade,
    Grader,
    GradeStatus,
    PromptInclusionGrader,
    ReadEvidenceGrader,
    ScopeGrader,
    StaleFactsGrader,
    SupportedAnswerGrader,
    abstained,
    cited_sources,
)
from ._html import render_html
from ._report import REPORT_SCHEMA, build_report, check_out_dir, render_summary, write_reports
from ._runner import (
    CONTRACTS_STATEMENT,
    CaseResult,
    EvalRun,
    EvalTarget,
    InfraFailure,
    Progress,
    TargetInfo,
    installed_graders,
    run_eval,
)
from ._trace import BlockSeen, CandidateSeen, CaseTrace, ExcerptSeen, LabelInfo, RequestSeen, StepOutcome

__all__ = [
    "ABSTAIN_MARKERS",
    "BUILTIN_GRADERS",
    "BUNDLED_CASES",
    "CITATION",
    "CONTRACTS_STATEMENT",
    "MAX_CASE_FILE_BYTES",
    "REPORT_SCHEMA",
    "AbstentionGrader",
    "BlockSeen",
    "CandidateSeen",
    "CaseIssue",
    "CaseResult",
    "CaseTrace",
    "DiscoveredEvidenceGrader",
    "EvalCase",
    "EvalCaseError",
    "EvalError",
    "EvalRun",
    "EvalTarget",
    "ExcerptSeen",
    "Expectations",
    "Grade",
    "GradeStatus",
    "Grader",
    "InfraFailure",
    "LabelInfo",
    "OwnerSpec",
    "Progress",
    "PromptInclusionGrader",
    "ReadEvidenceGrader",
    "ReportWriteError",
    "RequestSeen",
    "ScopeGrader",
    "SetupStep",
    "StaleFactsGrader",
    "StepOutcome",
    "SupportedAnswerGrader",
    "TargetInfo",
    "UnknownGraderError",
    "abstained",
    "build_report",
    "bundled_cases_path",
    "check_out_dir",
    "cited_sources",
    "installed_graders",
    "load_cases",
    "parse_cases",
    "render_html",
    "render_summary",
    "run_eval",
    "write_reports",
]
