"""Admission's argument checks: a run's identity, session id, recall scope, grants and sources.

Each is checked before anything is admitted, so a bad argument raises a
typed error and changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final, cast

import attrs

from .._errors import IdentityError, InvalidArgumentError
from .._host_items import iter_host_items, read_host_items
from .._ports.provider import SourceBlock
from .._ports.recall import RecallLimits
from .._ports.summary import SummaryLimits
from .._ports.verify import CompletionVerifier
from .._scope import RecallScope, Scope, VerifiedIdentity, require_identity, validate_id
from .._validators import check_duration, unicode_text, valid_ids
from .._verdicts import EvidenceLimits
from .limits import RuntimeLimits
from .recall_policy import RecallPolicy
from .recall_view import ConditionalPublication
from .tools import ToolRegistry
from .verification import CompletionPolicy

__all__ = [
    "MAX_RUN_GRANTS",
    "MAX_RUN_SOURCES",
    "check_attest",
    "check_completion",
    "check_grants",
    "check_options",
    "check_sources",
    "check_text",
    "check_user_input",
    "check_verification",
    "run_scope",
    "source_uncertainty",
]


# The scope of each (tenant, user, session, project, repository) a run or history call asked for
# lately: every call builds one, and building it validates its five ids again (each checked already:
# the identity's when it was made, the session id just above). A scope is a pure function of five
# exact ``str`` (or ``None``) values that passed validation (both are required to enter), and it is
# frozen, so the one kept is equal in every way to a new one. Cleared when full: bounded.
_SCOPES: dict[tuple[str, str, str, str | None, str | None], Scope] = {}
_MAX_SCOPES: Final = 4096


def run_scope(identity: object, session_id: object, recall_scope: object) -> Scope:
    """Validate the caller's identity, session id and recall scope into a :class:`Scope`."""
    verified = require_identity(identity)
    session_id = validate_id(session_id, "session_id")  # the plain text, checked (a subclass copied)
    if recall_scope is not None and not isinstance(recall_scope, RecallScope):
        raise IdentityError(
            f"recall_scope must be a RecallScope or None, got {type(recall_scope).__name__}; "
            "build it with RecallScope(project=..., repository=...)"
        )
    # Only exact types are remembered or looked up: a subclass's fields (or truth) may be its own.
    if type(verified) is not VerifiedIdentity or (
        recall_scope is not None and type(recall_scope) is not RecallScope
    ):
        return Scope.of(verified, session_id, recall_scope)
    project, repository = (
        (None, None) if recall_scope is None else (recall_scope.project, recall_scope.repository)
    )
    ids = (verified.tenant, verified.user, session_id, project, repository)
    if not (
        type(ids[0]) is str
        and type(ids[1]) is str
        and (project is None or type(project) is str)
        and (repository is None or type(repository) is str)
    ):
        return Scope.of(verified, session_id, recall_scope)
    scope = _SCOPES.get(ids)
    if scope is None:
        scope = Scope.of(verified, session_id, recall_scope)
        # Checked again before it is kept: validators may have been switched off (on another thread).
        if not attrs.validators.get_disabled() and valid_ids(ids):
            if len(_SCOPES) >= _MAX_SCOPES:
                _SCOPES.clear()
            _SCOPES[ids] = scope
    return scope


#: Built-in collections, each iterable and none a ``str`` or ``bytes``: what the checks below pass.
_PLAIN_COLLECTIONS: Final = frozenset({tuple, list, frozenset, set})

#: The most items ``run()`` reads of ``grants``, repeats included (and no more distinct names than
#: the registry has tools: one more names no tool). A host's own iterable is read no further.
MAX_RUN_GRANTS: Final = 10_000
#: The most source blocks one ``run()`` takes (``sources``); a host's own iterable is read no further.
MAX_RUN_SOURCES: Final = 10_000

_NO_GRANTS: Final[frozenset[str]] = frozenset()


#: How a host iterable whose reading raised is refused (``iter_host_items``), and what was done.
_UNREADABLE: Final = "%s could not be read"
_NOT_RUN: Final = "nothing was run"


def _too_many(name: str, bound: int, constant: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{name} holds more than {bound} items ({constant}); nothing was run")


def check_grants(grants: object, tools: ToolRegistry) -> frozenset[str]:
    """Tool grants as a set of names, each a tool registered in ``tools``; anything else is refused.

    A bare string is refused, not split into characters. A name no tool has
    (a typo, a tool registered under another name or not yet) is refused
    too, before the run is admitted: it could grant nothing, and the turn
    would run with the model offered fewer tools than the host meant.
    An iterable of the host's own type is read once, no further than
    :data:`MAX_RUN_GRANTS` items or one distinct name more than ``tools``
    holds; an exception raised iterating it is :class:`InvalidArgumentError`.
    """
    if type(grants) is tuple and not grants:
        return _NO_GRANTS  # the default, ``()``: what the checks below make of it, without their calls
    # The built-in collections pass without the ABC's Python-level check (a run's every call).
    plain = type(grants) in _PLAIN_COLLECTIONS
    if not plain and (isinstance(grants, str | bytes) or not isinstance(grants, Iterable)):
        raise InvalidArgumentError(
            f"grants must be a collection of tool names, got {type(grants).__name__} {grants!r}; "
            'write grants=["shell"], not grants="shell"'
        )
    given = cast("Iterable[Any]", grants)  # checked above (the type or the ABC)
    if plain and len(cast("tuple[Any, ...]", given)) > MAX_RUN_GRANTS:
        raise _too_many("grants", MAX_RUN_GRANTS, "MAX_RUN_GRANTS")
    registered = len(tools.names())
    names: set[str] = set()
    read = 0
    read_on = given if plain else iter_host_items(given, unreadable=_UNREADABLE % "grants", outcome=_NOT_RUN)
    for name in read_on:
        read += 1
        if read > MAX_RUN_GRANTS:
            raise _too_many("grants", MAX_RUN_GRANTS, "MAX_RUN_GRANTS")
        if not isinstance(name, str):
            raise InvalidArgumentError(f"grants must hold tool names (str), got {type(name).__name__}")
        names.add(str.__str__(name))  # the text held: a subclass's == is not asked
        if len(names) > registered:
            break  # one name more than there are tools names no tool: refused below, unread further
    granted = frozenset(names)
    unknown = sorted(name for name in granted if name not in tools)
    if unknown:
        shown = ", ".join(repr(name[:64]) for name in unknown[:5])
        known = ", ".join(repr(name) for name in tools.names()[:20]) or "none"
        raise InvalidArgumentError(
            f"grants name no registered tool: {shown}{' …' if len(unknown) > 5 else ''} "
            f"(registered: {known}); nothing was run"
        )
    return granted


def check_text(value: object, name: str) -> str:
    """A plain copy of ``value`` if it is a ``str`` of valid Unicode text, else :class:`InvalidArgumentError`.

    A lone surrogate (what Python makes of bytes that were not UTF-8) cannot
    be encoded, stored or hashed: finding it only when the turn is committed
    would be after the model and the tools ran, so it is refused here.
    """
    return unicode_text(
        value,
        name,
        ", as text decoded from bytes that were not UTF-8 does; decode it strictly (or replace the bad "
        "bytes) and try again. Nothing was run",
    )


def check_attest(attest: object) -> bool:
    """``attest_legacy_memory_scope``: exactly ``True`` or ``False``, else :class:`InvalidArgumentError`.

    Not its truth: an attestation is what the host says on purpose, and ``"no"`` is truthy.
    """
    if type(attest) is not bool:
        raise InvalidArgumentError(
            f"attest_legacy_memory_scope must be True or False, got {type(attest).__name__}; nothing was run"
        )
    return attest


def check_user_input(user_input: object) -> str:
    """The run's user input: a ``str`` of valid Unicode text (see :func:`check_text`)."""
    return check_text(user_input, "user_input")


def check_sources(sources: object) -> tuple[SourceBlock, ...]:
    """Host sources as a tuple of :class:`SourceBlock`, each holding only valid Unicode text.

    At most :data:`MAX_RUN_SOURCES` blocks: an iterable of the host's own type
    is read once and no further; an exception raised iterating it is
    :class:`InvalidArgumentError`.
    """
    if type(sources) is tuple and not sources:
        return ()  # the default: what the checks below make of it, without their calls
    plain = type(sources) in _PLAIN_COLLECTIONS
    if not plain and (isinstance(sources, str | bytes) or not isinstance(sources, Iterable)):
        raise InvalidArgumentError(f"sources must be a sequence of SourceBlock, got {type(sources).__name__}")
    given = cast("Iterable[Any]", sources)  # checked above (the type or the ABC)
    if plain:
        blocks = tuple(given)
        if len(blocks) > MAX_RUN_SOURCES:
            raise _too_many("sources", MAX_RUN_SOURCES, "MAX_RUN_SOURCES")
    else:
        blocks = tuple(
            read_host_items(
                given,
                MAX_RUN_SOURCES,
                too_many=str(_too_many("sources", MAX_RUN_SOURCES, "MAX_RUN_SOURCES")),
                unreadable=_UNREADABLE % "sources",
                outcome=_NOT_RUN,
            )
        )
    for i, block in enumerate(blocks):
        if not isinstance(block, SourceBlock):
            raise InvalidArgumentError(f"sources must hold SourceBlock items, got {type(block).__name__}")
        check_text(block.source_id, f"sources[{i}].source_id")
        check_text(block.content, f"sources[{i}].content")
        for key, value in block.attributes:
            check_text(key, f"sources[{i}].attributes")
            check_text(value, f"sources[{i}].attributes[{key!r}]")
    return blocks


def source_uncertainty(omitted: Sequence[str]) -> tuple[str, ...]:
    if not omitted:
        return ()  # nearly every turn: no generator made for nothing
    return tuple(f"source {s} omitted by the source budget" for s in omitted)


def check_options(
    *,
    limits: object,
    tools: object,
    recall: object,
    recall_limits: object,
    recall_policy: object,
    publication: object,
    summarizer: object,
    summary_limits: object,
) -> None:
    """Refuse option values of the wrong type, and options given without the adapter they tune."""
    if limits is not None and not isinstance(limits, RuntimeLimits):
        raise InvalidArgumentError(f"limits must be a RuntimeLimits, got {type(limits).__name__}")
    if tools is not None and not isinstance(tools, ToolRegistry):
        raise InvalidArgumentError(f"tools must be a ToolRegistry, got {type(tools).__name__}")
    if recall_limits is not None and not isinstance(recall_limits, RecallLimits):
        raise InvalidArgumentError(
            f"recall_limits must be a RecallLimits, got {type(recall_limits).__name__}"
        )
    if recall_policy is not None and not isinstance(recall_policy, RecallPolicy):
        raise InvalidArgumentError(
            f"recall_policy must be a RecallPolicy (see current_session_recall_policy()), "
            f"got {type(recall_policy).__name__}"
        )
    if publication is not None and not isinstance(publication, ConditionalPublication):
        raise InvalidArgumentError(
            f"publication must have an async publish(view, commit) method, got {type(publication).__name__}"
        )
    if summary_limits is not None and not isinstance(summary_limits, SummaryLimits):
        raise InvalidArgumentError(
            f"summary_limits must be a SummaryLimits, got {type(summary_limits).__name__}"
        )
    if summarizer is None and summary_limits is not None:
        raise InvalidArgumentError("summary_limits needs a summarizer")
    if recall is None and (recall_limits, recall_policy, publication) != (None, None, None):
        raise InvalidArgumentError("recall_limits, recall_policy and publication need a recall store")


def check_completion(
    completion: object, default: CompletionPolicy, verifier: CompletionVerifier | None
) -> CompletionPolicy | None:
    """The run's completion policy: ``None``/``False`` none, ``True`` the runtime's, or the one given."""
    if completion is None or completion is False:
        return None
    if completion is not True and not isinstance(completion, CompletionPolicy):
        raise InvalidArgumentError(
            "completion must be True, False, None or a CompletionPolicy from verified_completion_policy(), "
            f"got {type(completion).__name__}"
        )
    if verifier is None:
        raise InvalidArgumentError(
            "completion verification was asked for, but the runtime has no verifier; configure "
            "[verifier] (or pass verifier=) — nothing was run"
        )
    return default if completion is True else completion


def check_verification(policy: object, limits: object, timeout_s: object) -> None:
    """Refuse a wrong-typed completion policy, evidence budget or verifier deadline."""
    if policy is not None and not isinstance(policy, CompletionPolicy):
        raise InvalidArgumentError(
            f"completion_policy must be a CompletionPolicy, got {type(policy).__name__}"
        )
    if limits is not None and not isinstance(limits, EvidenceLimits):
        raise InvalidArgumentError(f"evidence_limits must be EvidenceLimits, got {type(limits).__name__}")
    if timeout_s is not None:
        check_duration(timeout_s, "verify_timeout_s")
