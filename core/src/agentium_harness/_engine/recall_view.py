"""The validated source view of a run and the conditional-publication extension point (R24–R26).

The engine validates included sources before dispatch and again before the
session commit (:mod:`.recall_turn`). A race after that second fence is still
possible (R25): a source may change between the fence and the commit. Hosts
that need atomic publication supply a :class:`ConditionalPublication`; the
engine hands it the :class:`RecallView` and a ``commit`` callable, and the
host commits only under its own condition (a lock, a transaction, a
revision check on its document store), or refuses.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, runtime_checkable

import attrs

from .._codec import digest_of
from .._errors import PublicationRefusedError
from .._ports.recall import SourceRef
from .._scope import Scope
from .._text import error_text
from .._validators import require_instances
from .bounded import Overrun, bounded
from .commit import CommitOutcome
from .results import CommitState

__all__ = ["ConditionalPublication", "RecallView", "publish", "source_view_revision"]


def source_view_revision(refs: Sequence[SourceRef]) -> str:
    """A digest over the included source ids and revisions, order-independent (R26).

    Two runs that saw the same sources at the same revisions get the same
    value; any changed revision, added or removed source changes it.

    :raises InvalidArgumentError: ``refs`` is not a sequence of :class:`SourceRef`.
    """
    pairs = sorted({(r.source_id, r.revision) for r in require_instances(refs, SourceRef, "refs")})
    return digest_of([list(p) for p in pairs])


@attrs.frozen(slots=True)
class RecallView:
    """What a run's answer was built on: its scope, the included sources and their view revision."""

    scope: Scope
    refs: tuple[SourceRef, ...]
    source_view_revision: str


@runtime_checkable
class ConditionalPublication(Protocol):
    """Hook the session commit for atomic publication (R25).

    ``publish`` is called once per run that recalled sources, after the
    commit fence. It must ``await commit()`` exactly once to commit the
    session, under whatever condition the host needs (for example while
    holding the lock its document writers take, after checking that every
    ``view.refs`` revision is still current), or raise to refuse: the engine
    then commits no answer and raises
    :class:`~agentium_harness._errors.PublicationRefusedError` (when a tool
    of the turn ran, its calls and results are committed without the
    answer, which the error's ``commit_state`` says). Returning without
    calling ``commit`` is also a refusal.
    """

    async def publish(self, view: RecallView, commit: Callable[[], Awaitable[None]]) -> None:
        """Commit the run with ``await commit()`` under the host's condition, or raise to refuse."""
        ...


async def publish(
    publication: ConditionalPublication,
    view: RecallView,
    do_commit: Callable[[], Awaitable[None]],
    done: list[CommitOutcome],
    timeout_s: float,
) -> None:
    """Hand the commit to the host's conditional publication (R25), bounded; refusal commits nothing.

    The hook runs in its own task (:func:`~.bounded.bounded`), so one blocked
    in a worker thread cannot hold the run past ``timeout_s``; from the
    deadline on, a late ``commit()`` from it is refused.
    """
    late = False
    committing = False

    async def guarded_commit() -> None:
        nonlocal committing
        if late:
            raise PublicationRefusedError(
                f"commit() came after the publication hook's {timeout_s}s deadline; nothing was committed"
            )
        committing = True
        try:
            await do_commit()
        finally:
            committing = False

    def deadline() -> None:
        nonlocal late
        late = True

    try:
        await bounded(lambda: publication.publish(view, guarded_commit), timeout_s, on_deadline=deadline)
    except PublicationRefusedError:
        raise
    except Overrun as exc:
        if done:
            return  # committed; only the host's code after commit() was slow
        if exc.abandoned and committing:
            unknown = PublicationRefusedError(
                f"the publication hook did not return within {timeout_s}s and was abandoned while its "
                "commit() was still running; whether the session was committed is unknown: inspect it "
                "before retrying"
            )
            # Its commit may still land: nothing else may be committed in its place (docs/runtime.md).
            unknown.commit_state = CommitState.UNKNOWN
            raise unknown from exc
        raise PublicationRefusedError(
            f"the publication hook did not commit within {timeout_s}s; the session was not changed"
        ) from exc
    except Exception as exc:
        if done:
            raise PublicationRefusedError(
                f"the publication hook raised after committing ({error_text(exc)}); the session WAS committed"
            ) from exc
        raise PublicationRefusedError(
            f"the publication hook refused the commit ({error_text(exc)}); the session was not changed"
        ) from exc
    if not done:
        raise PublicationRefusedError(
            "the publication hook returned without calling commit(); the session was not changed"
        )
