"""The eval case format: one JSON object per line (JSONL), validated with file, line and path.

A case states facts through setup turns that go through ``run()`` (or
indexes host documents), then asks one probe question and says what a
correct runtime does: which labeled sources it should discover, read and
put in the request, what the answer must state, which stale facts it must
not use, whether it must abstain, and which foreign-scope text must never
appear. ``docs/eval.md`` documents every field. :func:`load_cases` reads a
file and reports *every* problem at once, each as ``file:line: $.path: message``.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import attrs

from .._codec import decode_json
from .._config.source import read_limited
from .._errors import InvalidJSONError
from .._ports.recall import RecallLimits
from ._errors import CaseIssue, EvalCaseError, UnknownGraderError

__all__ = [
    "BUNDLED_CASES",
    "MAX_CASE_FILE_BYTES",
    "EvalCase",
    "Expectations",
    "OwnerSpec",
    "SetupStep",
    "bundled_cases_path",
    "load_cases",
    "parse_cases",
]

#: The name that selects the bundled case set (``agentium eval CONFIG bundled``).
BUNDLED_CASES = "bundled"
#: Case files larger than this are refused after one bounded read.
MAX_CASE_FILE_BYTES = 16 * 1024 * 1024
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")

StepKind = Literal["say", "document", "forget_document"]


@attrs.frozen(slots=True)
class OwnerSpec:
    """Who owns a host document: a tenant and optionally user, session, project and repository."""

    tenant: str
    user: str | None = None
    session: str | None = None
    project: str | None = None
    repository: str | None = None


@attrs.frozen(slots=True)
class SetupStep:
    """One setup step, run in order before the probe.

    - ``say``: a user turn through ``run()`` as ``tenant``/``user`` on ``session``
      (the case's own unless overridden); ``label`` names the committed group.
    - ``document``: index host document ``doc_id`` (``text``) owned by ``owner``.
    - ``forget_document``: delete host document ``doc_id`` of ``owner``.
    """

    kind: StepKind
    text: str = ""
    label: str | None = None
    tenant: str | None = None
    user: str | None = None
    session: str | None = None
    doc_id: str | None = None
    title: str = ""
    owner: OwnerSpec | None = None


@attrs.frozen(slots=True)
class Expectations:
    """What a correct runtime does with the probe; each grader reads its own fields.

    ``evidence`` lists labels every evidence grader expects; ``discovered``,
    ``read`` and ``in_prompt`` override it for one grader (``[]`` meaning
    "nothing expected"). ``excluded`` labels must not reach the request;
    ``answer`` strings must all be in the answer, ``stale`` strings none of
    them; ``abstain`` says whether the runtime must decline; ``foreign_text``
    must appear nowhere the model or the user could see it.
    """

    evidence: tuple[str, ...] = ()
    discovered: tuple[str, ...] | None = None
    read: tuple[str, ...] | None = None
    in_prompt: tuple[str, ...] | None = None
    excluded: tuple[str, ...] = ()
    answer: tuple[str, ...] = ()
    stale: tuple[str, ...] = ()
    abstain: bool | None = None
    foreign_text: tuple[str, ...] = ()

    def labels_for(self, grader: Literal["discovered", "read", "in_prompt"]) -> tuple[str, ...]:
        """The labels one evidence grader expects: its override, else ``evidence``."""
        own: tuple[str, ...] | None = getattr(self, grader)
        return self.evidence if own is None else own


@attrs.frozen(slots=True)
class EvalCase:
    """One evaluation case (see ``docs/eval.md``, "Case format").

    ``line`` is where it was read (1-based), for reports; ``graders`` is
    ``None`` for every installed grader.
    """

    id: str
    probe: str
    setup: tuple[SetupStep, ...] = ()
    expect: Expectations = Expectations()
    tenant: str = "acme"
    user: str = "ana"
    session: str = "main"
    project: str | None = None
    repository: str | None = None
    description: str = ""
    tags: tuple[str, ...] = ()
    recall_budget: Mapping[str, int | float] = attrs.field(factory=dict)
    graders: tuple[str, ...] | None = None
    extra: Mapping[str, Any] = attrs.field(factory=dict)
    #: Ask the runtime to verify the probe's answer (``run(completion=True)``; needs a verifier).
    completion: bool = False
    line: int | None = None

    def labels(self) -> dict[str, SetupStep]:
        """Every label a setup step defines, with its step."""
        return {s.label: s for s in self.setup if s.label is not None}


def bundled_cases_path() -> Path:
    """The bundled case set shipped inside the package (``eval/cases/default.jsonl``)."""
    return Path(str(resources.files("agentium_harness.eval").joinpath("cases", "default.jsonl")))


# ----------------------------------------------------------------- validation


class _Checker:
    """Collects issues for one line; each check returns a value, or ``None`` after recording a problem."""

    def __init__(self, file: str, line: int, issues: list[CaseIssue]) -> None:
        self.file, self.line, self.issues = file, line, issues

    def bad(self, path: str, message: str) -> None:
        self.issues.append(CaseIssue(self.file, self.line, path, message))

    def keys(self, data: Mapping[str, Any], path: str, allowed: Iterable[str]) -> None:
        allowed = tuple(allowed)
        for key in data:
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                self.bad(f"{path}.{key}", f"unknown key{hint}; allowed keys: {', '.join(allowed)}")

    def string(self, value: object, path: str, *, empty: bool = False) -> str | None:
        if not isinstance(value, str):
            self.bad(path, f"expected a string, got {_kind(value)}")
            return None
        if not empty and not value.strip():
            self.bad(path, "must not be empty")
            return None
        return value

    def ident(self, value: object, path: str) -> str | None:
        text = self.string(value, path)
        if text is not None and not _ID.fullmatch(text):
            self.bad(path, "must be 1-100 letters, digits, '.', '_' or '-', starting with a letter or digit")
            return None
        return text

    def strings(self, value: object, path: str) -> tuple[str, ...] | None:
        if not isinstance(value, list):
            self.bad(path, f"expected an array of strings, got {_kind(value)}")
            return None
        out = [self.string(item, f"{path}[{i}]") for i, item in enumerate(value)]
        return tuple(s for s in out if s is not None) if all(s is not None for s in out) else None

    def obj(self, value: object, path: str) -> dict[str, Any] | None:
        if not isinstance(value, dict):
            self.bad(path, f"expected an object, got {_kind(value)}")
            return None
        return value


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else type(value).__name__


_CASE_KEYS = (
    "id", "probe", "setup", "expect", "tenant", "user", "session", "project", "repository",
    "description", "tags", "recall_budget", "graders", "extra", "completion",
)  # fmt: skip
_EXPECT_KEYS = (
    "evidence", "discovered", "read", "in_prompt", "excluded", "answer", "stale", "abstain", "foreign_text",
)  # fmt: skip
_OWNER_KEYS = ("tenant", "user", "session", "project", "repository")
_STEP_KINDS: tuple[StepKind, ...] = ("say", "document", "forget_document")
_STEP_KEYS: Mapping[str, tuple[str, ...]] = {
    "say": ("say", "label", "tenant", "user", "session"),
    "document": ("document", "id", "label", "title", "owner"),
    "forget_document": ("forget_document", "owner"),
}
_BUDGET_FIELDS = {f.name: f.type for f in attrs.fields(RecallLimits)}


def _owner(c: _Checker, value: object, path: str, tenant: str) -> OwnerSpec | None:
    if value is None:
        return OwnerSpec(tenant)
    data = c.obj(value, path)
    if data is None:
        return None
    c.keys(data, path, _OWNER_KEYS)
    fields: dict[str, str | None] = {}
    for key in _OWNER_KEYS:
        if key in data and data[key] is not None:
            fields[key] = c.ident(data[key], f"{path}.{key}")
    if fields.get("session") is not None and fields.get("user") is None:
        # A session id is unique only within its user (SourceOwner refuses this too).
        c.bad(path, "an owner naming a session must name its user")
        return None
    return OwnerSpec(
        tenant=fields.get("tenant") or tenant,
        user=fields.get("user"),
        session=fields.get("session"),
        project=fields.get("project"),
        repository=fields.get("repository"),
    )


def _step(c: _Checker, value: object, path: str, tenant: str) -> SetupStep | None:
    data = c.obj(value, path)
    if data is None:
        return None
    kinds = [k for k in _STEP_KINDS if k in data]
    if len(kinds) != 1:
        c.bad(path, f"a setup step has exactly one of {', '.join(_STEP_KINDS)}; got {kinds or 'none'}")
        return None
    kind = kinds[0]
    c.keys(data, path, _STEP_KEYS[kind])
    label = c.ident(data["label"], f"{path}.label") if "label" in data else None
    if kind == "say":
        text = c.string(data["say"], f"{path}.say")
        ids = {k: c.ident(data[k], f"{path}.{k}") for k in ("tenant", "user", "session") if k in data}
        if text is None:
            return None
        return SetupStep("say", text, label, ids.get("tenant"), ids.get("user"), ids.get("session"))
    owner = _owner(c, data.get("owner"), f"{path}.owner", tenant)
    if kind == "document":
        text = c.string(data["document"], f"{path}.document")
        doc_id = c.ident(data.get("id"), f"{path}.id") if "id" in data else None
        if "id" not in data:
            c.bad(f"{path}.id", "a document step needs an id")
        title = c.string(data.get("title", ""), f"{path}.title", empty=True)
        if text is None or doc_id is None or owner is None:
            return None
        return SetupStep("document", text, label, doc_id=doc_id, title=title or "", owner=owner)
    doc_id = c.ident(data["forget_document"], f"{path}.forget_document")
    if doc_id is None or owner is None:
        return None
    return SetupStep("forget_document", doc_id=doc_id, owner=owner)


def _expect(c: _Checker, value: object, labels: set[str]) -> Expectations | None:
    data = c.obj(value, "$.expect")
    if data is None:
        return None
    c.keys(data, "$.expect", _EXPECT_KEYS)
    fields: dict[str, Any] = {}
    ok = True
    for key in _EXPECT_KEYS:
        if key not in data or (key in ("discovered", "read", "in_prompt") and data[key] is None):
            continue
        path = f"$.expect.{key}"
        if key == "abstain":
            if not isinstance(data[key], bool) and data[key] is not None:
                c.bad(path, f"expected true, false or null, got {_kind(data[key])}")
                ok = False
            fields[key] = data[key]
            continue
        items = c.strings(data[key], path)
        if items is None:
            ok = False
            continue
        if key in ("evidence", "discovered", "read", "in_prompt", "excluded"):
            for i, label in enumerate(items):
                if label not in labels:
                    close = difflib.get_close_matches(label, sorted(labels), n=1)
                    hint = f"; did you mean {close[0]!r}?" if close else ""
                    c.bad(f"{path}[{i}]", f"no setup step defines label {label!r}{hint}")
                    ok = False
        fields[key] = items
    return Expectations(**fields) if ok else None


def _budget(c: _Checker, value: object) -> dict[str, int | float] | None:
    data = c.obj(value, "$.recall_budget")
    if data is None:
        return None
    c.keys(data, "$.recall_budget", tuple(_BUDGET_FIELDS))
    out: dict[str, int | float] = {}
    for key, item in data.items():
        if key not in _BUDGET_FIELDS:
            continue
        wants_float = "float" in str(_BUDGET_FIELDS[key])
        if (
            isinstance(item, bool)
            or not isinstance(item, int | float)
            or (not wants_float and isinstance(item, float))
        ):
            c.bad(
                f"$.recall_budget.{key}",
                f"expected {'a number' if wants_float else 'an integer'}, got {_kind(item)}",
            )
            continue
        out[key] = item
    try:
        RecallLimits(**out)  # type: ignore[arg-type]  # checked per field above
    except (ValueError, TypeError) as exc:
        c.bad("$.recall_budget", str(exc))
        return None
    return out


def _case(c: _Checker, data: dict[str, Any], graders: Sequence[str] | None) -> EvalCase | None:
    before = len(c.issues)
    c.keys(data, "$", _CASE_KEYS)
    case_id = c.ident(data.get("id"), "$.id") if "id" in data else None
    if "id" not in data:
        c.bad("$.id", "missing required key")
    probe = c.string(data["probe"], "$.probe") if "probe" in data else None
    if "probe" not in data:
        c.bad("$.probe", "missing required key")
    ids: dict[str, str | None] = {}
    for key in ("tenant", "user", "session", "project", "repository"):
        if key in data and data[key] is not None:
            ids[key] = c.ident(data[key], f"$.{key}")
    tenant = ids.get("tenant") or "acme"
    steps: list[SetupStep] = []
    raw_steps = data.get("setup", [])
    if not isinstance(raw_steps, list):
        c.bad("$.setup", f"expected an array of steps, got {_kind(raw_steps)}")
        raw_steps = []
    seen_labels: set[str] = set()
    for i, raw in enumerate(raw_steps):
        step = _step(c, raw, f"$.setup[{i}]", tenant)
        if step is None:
            continue
        if step.label is not None:
            if step.label in seen_labels:
                c.bad(f"$.setup[{i}].label", f"label {step.label!r} is defined twice")
            seen_labels.add(step.label)
        steps.append(step)
    expect = _expect(c, data["expect"], seen_labels) if "expect" in data else Expectations()
    budget = _budget(c, data["recall_budget"]) if "recall_budget" in data else {}
    tags = c.strings(data["tags"], "$.tags") if "tags" in data else ()
    description = c.string(data.get("description", ""), "$.description", empty=True)
    names: tuple[str, ...] | None = None
    if "graders" in data and data["graders"] is not None:
        names = c.strings(data["graders"], "$.graders")
    extra = c.obj(data["extra"], "$.extra") if "extra" in data else {}
    completion = data.get("completion", False)
    if not isinstance(completion, bool):
        c.bad("$.completion", f"expected true or false, got {_kind(completion)}")
    if len(c.issues) > before:
        return None
    assert case_id is not None and probe is not None and expect is not None
    case = EvalCase(
        id=case_id,
        probe=probe,
        setup=tuple(steps),
        expect=expect,
        tenant=tenant,
        user=ids.get("user") or "ana",
        session=ids.get("session") or "main",
        project=ids.get("project"),
        repository=ids.get("repository"),
        description=description or "",
        tags=tags or (),
        recall_budget=budget or {},
        graders=names,
        extra=extra or {},
        completion=completion is True,
        line=c.line,
    )
    if names is not None and graders is not None:
        _check_graders(c, names, graders)
    return case


def _check_graders(c: _Checker, names: Sequence[str], installed: Sequence[str]) -> None:
    for i, name in enumerate(names):
        if name not in installed:
            close = difflib.get_close_matches(name, installed, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            c.bad(
                f"$.graders[{i}]",
                f"no grader named {name!r} is installed{hint}; installed graders: {', '.join(installed)}",
            )


def parse_cases(text: str, *, file: str = "<text>", graders: Sequence[str] | None = None) -> list[EvalCase]:
    """Parse JSONL case text; every problem is collected and raised as one :class:`EvalCaseError`.

    Lines end at a line feed (a carriage return before it is dropped) and nowhere else:
    U+2028, U+2029 or U+0085 inside a JSON string is text of that line,
    as JSONL means. Blank lines are skipped. ``graders`` (installed grader names) lets a case
    naming an unknown grader fail here, as :class:`UnknownGraderError`, before
    anything runs. An empty file (no case at all) is an error too.
    """
    issues: list[CaseIssue] = []
    cases: list[EvalCase] = []
    first_line: dict[str, int] = {}
    unknown_grader = False
    # Not str.splitlines(): it also breaks at U+2028, U+2029, U+0085 and the
    # like, which JSON allows unescaped inside strings, so a valid line would be
    # cut in pieces and every later line number would be wrong.
    for number, raw_line in enumerate(text.split("\n"), start=1):
        line = raw_line.removesuffix("\r")
        if not line.strip():
            continue
        c = _Checker(file, number, issues)
        try:
            data = decode_json(line)
        except InvalidJSONError as exc:  # malformed, nested too deep, duplicate keys, NaN
            # The reason may already say "not valid JSON: ..." (a parse error) or name
            # another fault (a duplicate key, NaN): the prefix is said once either way.
            c.bad("$", f"not valid JSON: {exc.reason.removeprefix('not valid JSON: ')}")
            continue
        if not isinstance(data, dict):
            c.bad("$", f"each line must be a JSON object, got {_kind(data)}")
            continue
        before = len(issues)
        case = _case(c, data, graders)
        unknown_grader = unknown_grader or any("no grader named" in i.message for i in issues[before:])
        if case is None:
            continue
        if case.id in first_line:
            c.bad("$.id", f"case id {case.id!r} is also used on line {first_line[case.id]}")
            continue
        first_line[case.id] = number
        cases.append(case)
    if not issues and not cases:
        issues.append(CaseIssue(file, None, "$", "the case file holds no cases (it is empty or blank)"))
    if issues:
        if unknown_grader and all("no grader named" in i.message for i in issues):
            raise UnknownGraderError(issues)
        raise EvalCaseError(issues)
    return cases


def load_cases(path: str | os.PathLike[str], *, graders: Sequence[str] | None = None) -> list[EvalCase]:
    """Read and validate a JSONL case file (``bundled`` names the bundled set).

    Raises :class:`EvalCaseError` (file, line and path in each issue) for an
    unreadable, oversized, malformed or empty file, and
    :class:`UnknownGraderError` for a case naming a grader not installed.
    """
    target = bundled_cases_path() if os.fspath(path) == BUNDLED_CASES else Path(path)
    name = os.fspath(path)
    try:
        raw = read_limited(target, MAX_CASE_FILE_BYTES)  # a named pipe nobody writes to hung the command
    except OSError as exc:
        raise EvalCaseError(
            [CaseIssue(name, None, "$", f"cannot read the case file: {exc.strerror or exc}")]
        ) from exc
    if len(raw) > MAX_CASE_FILE_BYTES:
        raise EvalCaseError([CaseIssue(name, None, "$", f"larger than {MAX_CASE_FILE_BYTES} bytes")])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise EvalCaseError([CaseIssue(name, line, "$", "not valid UTF-8")]) from exc
    return parse_cases(text, file=name, graders=graders)
