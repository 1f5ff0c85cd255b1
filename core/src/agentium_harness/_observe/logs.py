"""The loggers: one per stage of a turn, and what each record carries.

Every logger is under ``agentium`` (which has a :class:`logging.NullHandler`,
so nothing is printed unless the host configures logging). Records carry
structured fields through ``extra=`` (``agentium_code``, ``agentium_session``
…); the free text of a diagnostic, which may quote content (an adapter's
error message, a verifier's reason), is added only when the host opts in to
content capture (:class:`~.settings.Telemetry`). Levels: WARNING or ERROR for
every degraded outcome (each diagnostic of that severity), INFO for
lifecycle events, DEBUG for decisions.
"""

from __future__ import annotations

import enum
import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["LOGGERS", "diagnostic_stage", "log_diagnostics", "one_line", "stage_logger", "would_log"]

#: Every logger of the core, with what it reports (docs/observability.md lists the same).
LOGGERS: dict[str, str] = {
    "agentium": "the root: holds a NullHandler; configure it to see everything below",
    "agentium.engine": (
        "runs: each run's end (INFO), each error leaving run(), an Agent run's model call or a turn it "
        "could not extract from, a history write or read, a session listing, an inspection, a migration, "
        "a reconciliation or an erasure's dry run, a damaged erasure join record a fence read, "
        "a late result's release that failed, per-loop values (plugin_api.PerLoop) whose close had "
        "problems after its caller stopped waiting (their count, each value's and error's class: the "
        "texts go to the caller), or that it released unclosed, their event loop having finished "
        "under their close (their count and classes; also the event agentium.per_loop.released), "
        "or whose discard raised (the value's and the error's class) (WARNING)"
    ),
    "agentium.engine.admission": "refused admissions: session busy, runtime closing (DEBUG)",
    "agentium.engine.load": "the loaded snapshot: a legacy scope attested (DEBUG)",
    "agentium.engine.recall": (
        "recall partial or failed, omitted sources, contract violations, policy stops, "
        "host documents not confirmed against erasures or taken back (also when an index lands past its "
        "deadline, or its late answer is refused), recall sessions not closed, on time (a close that failed "
        "or ran past 0.1 s) or opened late (WARNING)"
    ),
    "agentium.engine.request": "host sources omitted from the request (over the source budget)",
    "agentium.engine.turn": "model calls and tools: failed, timed out or refused tools, step limit",
    "agentium.engine.verification": "verifier unknown, failed or timed out, revisions, verdicts not accepted",
    "agentium.engine.commit": "eviction deferred or blocked, archive diverged, save settled, commit state",
    "agentium.engine.summary": "summary updates: gaps, conflicts, failures, contract violations",
    "agentium.engine.memory": (
        "facts omitted or refused, selection failures, forgets refused, forged sources, forgets whose "
        "sources are unknown or left unerased, facts a listing may not hold, memory writes not confirmed "
        "against erasures or taken back (WARNING)"
    ),
    "agentium.engine.lifecycle": (
        "abandoned adapter calls, drains (incomplete: WARNING), shutdown, "
        "adapter calls still running at interpreter exit (WARNING)"
    ),
    "agentium.engine.hooks": "lifecycle hooks that failed or timed out, the memory manager's included",
    "agentium.engine.maintenance": "session close, flush and reconciliation problems",
    "agentium.engine.erasure": (
        "erasures stopped part way (pending), steps that failed once another call completed the erasure "
        "(the call goes on from its tombstone), files an erasure's clean-up could not fully rebuild, "
        "groups with a damaged digest a store erased unread, sessions retention passed by (WARNING)"
    ),
    "agentium.registry": (
        "plugin imports, registration hooks, config classes, adapter factories and command configures "
        "abandoned at AGENTIUM_HOOK_TIMEOUT (WARNING)"
    ),
    "agentium.adapters": (
        "adapters' closes (plugin_api.CloseOnce, unless the adapter passes its own logger, as the "
        "plugins below do): a close that failed, or was cut off (its task cancelled), after the "
        "aclose() caller that started it stopped waiting (natively cancelled, or a caller running a "
        "cut-off close again out of its wait_s) (the adapter's name and the error type only; the next "
        'aclose() raises it, or, when none of the close had run, runs it: "cut off before it began", '
        "also said by the later caller that finds the close's event loop closed, or stopped, before it "
        'began, its event loop was closed or its event loop stopped in place of the type; "cannot be '
        'run again" when what close() returned is a future; logged once, whichever caller or thread '
        "finds it; also the event agentium.close.unheard with error.type (that same text then) on the "
        "span current when the close began, or where that later caller found it, if it still "
        "records), a later caller that stopped waiting (its wait_s spent, or the close's event loop "
        "stopped with it pending) for a close still running, or for the event loop that cut a close "
        "off to finish (WARNING)"
    ),
    "agentium.telemetry": "the instrumentation itself: a span processor or metric reader that failed",
}

for _name in LOGGERS:
    logging.getLogger(_name)
logging.getLogger("agentium").addHandler(logging.NullHandler())

#: Diagnostic codes whose stage is not their prefix (the prefixes are matched below).
_CODES: dict[str, str] = {
    "call_abandoned": "lifecycle",
    "step_limit": "turn",
    "usage_estimated": "turn",
    "revision_effect_refused": "verification",
    "source_omitted": "request",
    "legacy_scope_attested": "load",
    "needs_clarification": "recall",
    "clarification_failed": "recall",
    "evidence_budget_exhausted": "verification",
    "evidence_omitted": "verification",
    "not_verified": "verification",
    "completion_not_accepted": "verification",
    "step_budget_exhausted": "verification",
    "turn_interrupted_committed": "commit",
    "effects_commit_failed": "commit",
    "save_settled": "commit",
    "oversized_group": "commit",
    "joint_commit_failed": "commit",
    "recall_index_failed": "commit",
    "run_unsettled": "maintenance",
    "run_admitted": "maintenance",
    "legacy_not_flushed": "maintenance",
    "flush_failed": "maintenance",
    "no_session": "maintenance",
    "summarizer_contract_violation": "summary",
}
_PREFIXES: tuple[tuple[str, str], ...] = (
    ("recall_", "recall"),
    ("tool_", "turn"),
    ("verif", "verification"),
    ("revision", "verification"),
    ("eviction_", "commit"),
    ("archive_", "commit"),
    ("summary_", "summary"),
    ("memory_", "memory"),
    ("hook_", "hooks"),
)

# An informational diagnostic (a note, an estimate) is a decision's detail, not a lifecycle event.
_LEVELS = {"info": logging.DEBUG, "warning": logging.WARNING, "error": logging.ERROR}


#: What could end a log line or disguise one: C0/C1 controls and DEL (newlines, ANSI escapes), the
#: Unicode line and paragraph separators, and the bidirectional overrides and isolates; and a lone
#: surrogate (any surrogate in a ``str``), which a handler encoding to UTF-8 strictly cannot write:
#: the whole record was lost, with a traceback on stderr in its place.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def one_line(text: object) -> str:
    r"""``text`` safe inside one log line: every character that could forge or hide a line escaped.

    For free text or ids from outside the engine put in a log message (an
    adapter's error quoted with content capture, a fact id; in a plugin,
    anything its backend server chose, such as an error code): a newline in
    it would start what reads as a record of its own, an ANSI escape could
    rewrite the terminal. A newline becomes the four characters ``\x0a``, a
    lone surrogate six (``\udc80``), so a handler that encodes strictly writes the record.
    A ``str`` subclass (a class's name may be one) is read with ``str.__str__``:
    its own ``isprintable`` or ``__str__`` would vouch for itself.
    """
    plain = text if type(text) is str else str.__str__(text if isinstance(text, str) else str(text))
    return plain if plain.isprintable() else _UNSAFE.sub(_escape, plain)


def stage_logger(stage: str) -> logging.Logger:
    """The logger of ``stage`` (``agentium.engine.<stage>``); must be one listed in :data:`LOGGERS`."""
    name = f"agentium.engine.{stage}"
    if name not in LOGGERS:
        raise KeyError(f"no logger {name!r}; add it to LOGGERS and docs/observability.md")
    return logging.getLogger(name)


def diagnostic_stage(code: str) -> str:
    """The stage a diagnostic ``code`` belongs to (its logger); ``engine`` when none matches."""
    stage = _CODES.get(code)
    if stage is not None:
        return stage
    for prefix, named in _PREFIXES:
        if code.startswith(prefix):
            return named
    return ""


_BY_STAGE: dict[str, logging.Logger] = {}


def _logger(stage: str) -> logging.Logger:
    # Cached: getLogger takes the logging module's lock on every call.
    log = _BY_STAGE.get(stage)
    if log is None:
        log = _BY_STAGE[stage] = logging.getLogger(f"agentium.engine.{stage}" if stage else "agentium.engine")
    return log


def would_log(diagnostics: Iterable[Any]) -> bool:
    """True when :func:`log_diagnostics` would emit a record for any of ``diagnostics``."""
    for diagnostic in diagnostics:
        severity = diagnostic.severity
        # A str enum's text is its value: read without ``.value``, an enum property (two Python calls).
        text = (
            str.__str__(severity)
            if isinstance(severity, enum.StrEnum)
            else str(getattr(severity, "value", severity))
        )
        level = _LEVELS.get(text, logging.DEBUG)
        if _logger(diagnostic_stage(diagnostic.code)).isEnabledFor(level):
            return True
    return False


def log_diagnostics(
    diagnostics: Iterable[Any], fields: Mapping[str, object], *, capture_content: bool
) -> None:
    """One record per diagnostic, on its stage's logger at its severity's level.

    ``fields`` are added to each record (``extra=``). The diagnostic's text is
    in the message only with ``capture_content``: it may quote content.
    """
    for diagnostic in diagnostics:
        severity = str(getattr(diagnostic.severity, "value", diagnostic.severity))
        level = _LEVELS.get(severity, logging.DEBUG)
        stage = diagnostic_stage(diagnostic.code)
        log = _logger(stage)
        if not log.isEnabledFor(level):
            continue
        extra = {
            **fields,
            "agentium_code": diagnostic.code,
            "agentium_severity": severity,
            "agentium_stage": stage or "engine",
        }
        if capture_content:
            # Content, by the host's choice; but one record stays one line whatever the text holds.
            log.log(level, "%s: %s", diagnostic.code, one_line(diagnostic.message), extra=extra)
        else:
            log.log(level, "%s (%s)", diagnostic.code, severity, extra=extra)
