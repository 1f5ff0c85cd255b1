r"""The English stop-word list the built-in recall stores drop from queries (no I/O, no data files).

Function words (articles, pronouns, auxiliaries, prepositions, conjunctions,
question words) and the pieces ``\w+`` leaves of contractions (``don``,
``t``, ``ll``). They appear in most sources, so they add nothing to a
ranking but cost: each one makes discovery rank its many matches, and a
source that shares only them with a question looks relevant. Content words,
numbers and names are never in the list, nor are function words that are
also content words (``may``, ``us``, ``won``). The list is written for this
project, lower case, and used on lower-cased ``\w+`` tokens before stemming.
"""

from __future__ import annotations

from typing import Final

__all__ = ["ENGLISH_STOPWORDS"]

#: Lower-cased English function words dropped from recall queries.
ENGLISH_STOPWORDS: Final[frozenset[str]] = frozenset(
    """
    a about above after again against all also am an and any are aren as at
    be because been before being below between both but by
    can cannot could couldn
    d did didn do does doesn doing don down during
    each either else ever every
    few for from further
    get gets got had hadn has hasn have haven having he her here hers herself him himself his how
    i if in into is isn it its itself
    just
    let ll
    m me might mightn more most must mustn my myself
    neither no nor not now
    of off on once one only or other others ought our ours ourselves out over own
    re really
    s same shall shan she should shouldn so some such
    t than that the their theirs them themselves then there these they this those through to too
    under until up upon
    ve very
    was wasn we were weren what whatever when whenever where whereas wherever whether which while
    who whoever whom whose why will with within without would wouldn
    y yet you your yours yourself yourselves
    """.split()
)
