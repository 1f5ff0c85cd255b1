"""Claims an error's text makes of its own call ("nothing was changed"), removed only whole.

A raise site says what its call did not do; an error re-marked with another
``commit_state`` (something was written, or may have been) must lose those
words, and only those: a claim is taken as a clause ("; nothing was changed",
" and the session was not changed") or a sentence (". Nothing was erased"),
with the ``(commit_state ...)`` that marked it, and only where it ends (the
text's end, ";", "." or a parenthesis that explains it). One inside a cause
quoted in parentheses is the cause's own call's, and cutting it would change
the quote. Shared by the turn path (:func:`.settle.mark_commit_state`) and the
erasure calls (:func:`.erasure_api.said_by_the_call`).
"""

from __future__ import annotations

import re

__all__ = ["claims_of", "without_claims"]


def claims_of(*phrases: str, joined: bool = False) -> re.Pattern[str]:
    """The pattern of ``phrases`` (lower case) said as a clause or a sentence, ended where text ends one.

    ``joined``: a clause joined by " and " is one too.
    """
    clause = "(?:; | and )" if joined else "; "
    forms = "|".join(rf"{clause}{re.escape(p)}|\. {re.escape(p[:1].upper() + p[1:])}" for p in phrases)
    return re.compile(rf"(?:{forms})(?: \(commit_state not_committed\))?(?=$|[;.]| \()")


def without_claims(said: str, claims: re.Pattern[str]) -> str:
    """``said`` without the ``claims`` it makes itself: none inside a cause it quotes in parentheses."""
    kept: list[str] = []
    at = 0
    for claim in claims.finditer(said):
        before = said[: claim.start()]
        if before.count("(") > before.count(")"):
            continue  # within a quoted cause
        kept.append(said[at : claim.start()])
        at = claim.end()  # what follows ends the clause (or the sentence) before it
    kept.append(said[at:])
    return "".join(kept)
