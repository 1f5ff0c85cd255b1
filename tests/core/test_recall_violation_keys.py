"""Two different contract violations are never taken for one, nor a violation naming one source for another.

A violation is the one an earlier round met by its key (its misbehaviour and
item, or its text), but the key was cut as the text is listed (400
characters): a source id past that length (a document named in CJK, each
character nine once encoded) left the key the same for two documents whose
names share their first words, and for two revisions a store gave one
document. An answer not asked for and one given twice were worded alike. The
later violation was never listed, warned of or made a span event. And a read
violation naming ``rota-10`` was taken to name ``rota-1``, which was then
never said discovered but not read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import pytest
from _recall_support import ANA, Scripted, runtime, sid
from _recall_violation_support import deploy_run, said

from agentium_harness import (
    RecallLimits,
    current_session_recall_policy,
)
from agentium_harness.plugin_api import Excerpt, SourceOwner, SourceRef, Validation, ValidationStatus

pytestmark = pytest.mark.anyio

#: Two document names sharing their first 45 characters: their source ids, each over 400 characters
#: once encoded (a CJK character is three UTF-8 bytes, each ``%XX``), differ only past the 400th.
_SHARED = "週次リリース列車の時刻表と担当者一覧プラットフォームチーム二〇二六年版の運用手順書および連絡先一覧"
_DOCS = [(f"{_SHARED}-{part}", f"The release train {part} leaves on Thursday.") for part in ("a", "b")]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _run(store: Scripted, looks: int, caplog: pytest.LogCaptureFixture) -> tuple[Any, list[str]]:
    """A run making ``looks`` tool rounds (a look before each later call); its result and its violations,
    checked to be one WARNING record and one span event each."""
    result, t = await deploy_run(store, looks, caplog)
    assert len(result.recall.included) == 2, result.recall
    assert all(len(r.source_id) > 400 for r in result.recall.included)
    found = said(result, caplog, t)
    assert found == list(result.recall.violations)
    return result, found


class OneDocumentALook(Scripted):
    """Look ``n`` calls the ``n``-th carried document current at another revision (a violation); recall
    and the commit fence answer as read."""

    def validations(self, refs: Sequence[SourceRef]) -> list[Any]:
        look = self.validate_calls
        answers = super().validations(refs)
        if look in (1, 2):
            odd = refs[look - 1]
            return [
                Validation(r, ValidationStatus.CURRENT, "r-other") if r == odd else a
                for r, a in zip(refs, answers, strict=True)
            ]
        return answers


async def test_two_documents_whose_long_ids_share_a_prefix_are_two_violations(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Look 1 breaks on one document, look 2 on the other: two violations, listed and warned of."""
    _, found = await _run(OneDocumentALook(_DOCS), 2, caplog)
    assert len(found) == 2, found


class NewRevisionEachLook(Scripted):
    """Each look calls the first carried document current at a revision of its own: a new violation each."""

    def validations(self, refs: Sequence[SourceRef]) -> list[Any]:
        look = self.validate_calls
        answers = super().validations(refs)
        if look in (1, 2):
            return [Validation(refs[0], ValidationStatus.CURRENT, f"r-look{look}"), *answers[1:]]
        return answers


async def test_two_revisions_of_one_long_id_are_two_violations(caplog: pytest.LogCaptureFixture) -> None:
    """As with a short id (the bounded-warnings tests): a revision per look, one violation each."""
    _, found = await _run(NewRevisionEachLook(_DOCS), 2, caplog)
    assert len(found) == 2, found


class NotAskedThenTwice(Scripted):
    """Recall (refs A, B, C) gets an answer for A at a revision not asked, none for B; the commit fence
    (refs A, C) two answers for A, none for C: four violations, two of them about A."""

    def validations(self, refs: Sequence[SourceRef]) -> list[Any]:
        first = self.validate_calls == 0
        answers = super().validations(refs)
        a = answers[0]
        if first:
            return [
                a,
                Validation(SourceRef(a.ref.source_id, "r9"), ValidationStatus.CURRENT, "r9"),
                answers[2],
            ]
        return [a, a]


async def test_an_answer_not_asked_and_one_given_twice_are_two_violations() -> None:
    """Worded alike ("not asked (or twice)"), the commit fence's answer twice was the one recall met."""
    docs = [(f"rota-{i}", f"The release train {i} leaves on Thursday.") for i in range(3)]
    rt, _, _ = runtime(
        NotAskedThenTwice(docs), recall_policy=current_session_recall_policy(on_partial="continue")
    )
    async with rt:
        with anyio.fail_after(30):
            result = await rt.run(ANA, "s1", "Thursday?")
    about_a = [v for v in result.recall.violations if "answered for" in v]
    assert len(about_a) == 2 and len(set(about_a)) == 2, result.recall.violations
    assert len(result.recall.violations) == 4, result.recall.violations


class SkipsOneMislabelsAnother(Scripted):
    """Reads every document but ``rota-1`` (not returned: discovered but not read), and returns
    ``rota-10`` under another owner than discovery reported (a violation naming it)."""

    def excerpts(self, refs: Sequence[SourceRef]) -> list[Any]:
        out = []
        for e in super().excerpts(refs):
            if e.ref.source_id == sid("rota-1"):
                continue
            out.append(
                Excerpt(e.ref, SourceOwner("acme", "ana"), e.text) if e.ref.source_id == sid("rota-10") else e
            )
        return out


async def test_a_violation_naming_a_source_whose_id_extends_anothers_does_not_hide_the_other_unread() -> None:
    """``rota-10``'s violation names an id ``rota-1``'s is the start of: rota-1 is still said not read."""
    docs = [(f"rota-{i}", f"The release train {i} leaves on Thursday.") for i in range(11)]
    rt, _, _ = runtime(
        SkipsOneMislabelsAnother(docs),
        recall_policy=current_session_recall_policy(on_partial="continue"),
        recall_limits=RecallLimits(max_candidates=11, max_validations=32),
    )
    async with rt:
        with anyio.fail_after(30):
            result = await rt.run(ANA, "s1", "Thursday?")
    assert any(sid("rota-10") in v and "another owner" in v for v in result.recall.violations)
    unread = f"source {sid('rota-1')} was discovered but not read"
    assert any(u.endswith(unread) for u in result.recall.uncertainty), result.recall.uncertainty
