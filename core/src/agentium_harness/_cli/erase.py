"""``agentium erase`` and ``agentium retention apply``: the operator's erasure commands (docs/erasure.md).

``agentium erase CONFIG --tenant T [--user U] [--session S] --reason R``
erases that scope from every store the config builds and prints the
tombstone; ``--dry-run`` prints what each store would remove and changes
nothing; ``--resume`` completes the tenant's erasures an earlier run left
pending; ``--status`` lists the erasures covering the scope. The operator is
``--operator`` (default: the login name), verified as ``cli-operator``: a
command run on the host is trusted as the host's operator.
``agentium retention apply CONFIG --tenant T [--user U] [--session S]``
applies the config's ``[retention]`` policy the same way.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

import attrs

from .._codec import unstructure
from .._config.runtime import build_runtime
from .._engine.erasure import ErasureResult, OperatorAttestation
from .._engine.erasure_resume import is_save_note
from .._engine.erasure_status import MAX_STATUS_LIMIT
from .._engine.maintenance import SessionView
from .._erasure_errors import ErasureOvertakenError
from .._errors import ErasureIncompleteError, InvalidArgumentError
from .._ports.erasure import EraseTarget, ErasureRecord, ErasureState, SeqRange
from .._scope import VerifiedIdentity
from .._validators import validate_id
from .hiding import hidden_erasure
from .interrupt import run_async
from .output import (
    EXIT_OK,
    NEVER_WRITTEN,
    hide_env,
    json_error,
    load_hiding,
    print_json,
    reading_only,
    refuse_missing,
    shown,
    shown_lines,
)

__all__ = [
    "EXIT_PENDING",
    "add_erase_commands",
    "cmd_erase",
    "cmd_retention_apply",
    "erasure_lines",
    "record_lines",
]

#: An erasure stopped part way and stays pending (runs on its scope are refused): resume it.
EXIT_PENDING: Final = 7

#: How the command's operator is verified: running on the host is the host's trust.
CLI_OPERATOR_VERIFIER: Final = "cli-operator"

T = TypeVar("T")


def _target(args: argparse.Namespace) -> EraseTarget:
    if args.session is not None and args.user is None:
        raise InvalidArgumentError("--session needs --user: a session id is unique only within its user")
    if args.session is not None:
        return EraseTarget.session(args.tenant, args.user, args.session)
    if args.user is not None:
        return EraseTarget.user(args.tenant, args.user)
    return EraseTarget.tenant(args.tenant)


def _attestation(args: argparse.Namespace) -> OperatorAttestation:
    # Only an absent --operator means the login name: an empty one is refused like any bad id,
    # never silently replaced (the tombstone would name someone the operator did not give). Checked
    # here under its own name: as the identity's user it was refused as "invalid user", pointing at
    # --user, which may well be fine.
    operator = validate_id(_login_name() if args.operator is None else args.operator, "operator (--operator)")
    identity = VerifiedIdentity(tenant=args.tenant, user=operator, verified_by=CLI_OPERATOR_VERIFIER)
    return OperatorAttestation(identity, args.statement or "")


def _login_name() -> str:
    """The login name, the operator when ``--operator`` is not given.

    A process under a uid with no passwd entry and no ``USER`` or ``LOGNAME`` (a container run
    with ``-u 12345``) has none: ``getpass.getuser()`` raises ``KeyError`` (``OSError`` from
    Python 3.13), which was a traceback.

    :raises InvalidArgumentError: there is none; nothing was done.
    """
    try:
        return getpass.getuser()
    except (KeyError, OSError, ImportError):  # ImportError: no pwd module (not POSIX)
        raise InvalidArgumentError(
            "no login name to name the operator; give --operator (who erases). Nothing was done"
        ) from None


def _spans(ranges: tuple[SeqRange, ...]) -> str:
    return ", ".join(
        f"{r.start}" if r.stop == r.start + 1 else f"{r.start}\u2013{r.stop - 1}" for r in ranges
    )


def record_lines(record: ErasureRecord) -> list[str]:
    """The record (a tombstone, a pending erasure or a plan) as the text the commands print."""
    lines = [
        f"erasure {record.erasure_id} ({record.kind.value}) {record.state.value}: {record.target.describe()}",
        f"  reason     {shown(record.reason)}",
        f"  operator   {record.operator.user} ({record.operator.verified_by})"
        + (f", {shown(record.statement)}" if record.statement else ""),
        f"  started    {record.started_at.isoformat()}",
    ]
    if record.completed_at is not None:
        lines.append(f"  completed  {record.completed_at.isoformat()}")
    for store in record.stores:
        counts = ", ".join(f"{c.count} {c.kind}(s)" for c in store.counts) or "nothing"
        # The adapter's name and detail and the notes are the stores' text: escaped like other foreign text.
        physical = store.physical.value + (f": {shown(store.detail)}" if store.detail else "")
        lines.append(
            f"  {store.role:<14} {shown(store.adapter)}: {counts} [{store.status.value}, {physical}]"
        )
    for session in record.sessions:
        what = f"groups {_spans(session.ranges)} ({session.count})" if session.count else "no group"
        snapshot = ", snapshot" if session.snapshot else ""
        lines.append(f"  session    {session.session.key()}: {what}{snapshot}")
    if record.omitted_sessions:
        # A lower bound: the ids past the cap are not kept, so one session is never counted twice.
        lines.append(
            f"  and {record.omitted_sessions} more session(s) at least, counted in the stores' totals"
        )
    # The notes the calls' progress saves leave (which save of which call the record holds, so a save
    # whose reply was lost is counted once) tell an operator nothing: counted on one line, --json has them.
    saves = sum(1 for note in record.notes if is_save_note(note))
    lines.extend(f"  note       {shown(note)}" for note in record.notes if not is_save_note(note))
    if saves:
        lines.append(
            f"  note       {saves} progress save note(s) of the calls that carried it out (--json shows them)"
        )
    return lines


def erasure_lines(view: SessionView) -> list[str]:
    """What ``agentium session inspect`` prints about a session's erasures."""
    lines: list[str] = []
    if view.erased:
        lines.append(f"  erased     groups {_spans(view.erased)} (retention or a forgotten fact's sources)")
    for record in view.erasures:
        when = record.completed_at or record.started_at
        lines.append(
            f"  erasure    {record.erasure_id} {record.state.value} {when.isoformat()}: "
            f"{record.target.describe()} ({shown(record.reason)})"
        )
    return lines


def _run(
    args: argparse.Namespace,
    work: Callable[[Any], Awaitable[T]],
    *,
    reading: bool = False,
    needs: tuple[str, ...] | None = None,
    command: str = "erase",
) -> T:
    """``work`` on the config's runtime; ``reading`` (a dry run, a status) creates no database file.

    Ctrl-C while it erases (``command``: its name in the messages) says, before main()'s
    ``interrupted``, that an erasure it began stays pending: it fences its scope (every write
    there refused) until resumed, and the bare ``interrupted`` let the operator think nothing
    had happened.

    Any other (an erasure, a resume, retention) is refused when a store it erases from or
    records in is a built-in SQLite database that does not exist (:func:`refuse_missing`):
    the adapters create their file on first use, so a mistyped path created an empty
    database, and the tombstone said nothing was there while the data stayed where it was
    (retention even marked groups erased in the session store that the real archive kept).
    ``needs`` names those stores (default: every configured one, the session store first).
    """
    resolved = load_hiding(args)  # a store's error may repeat its options: main() hides them
    if reading:
        resolved = reading_only(resolved)
    else:
        sections = ("session_store", *resolved.components()) if needs is None else needs
        refuse_missing(resolved, sections, "nothing was erased", NEVER_WRITTEN)
    runtime = build_runtime(resolved)

    async def go() -> T:
        async with runtime:
            return await work(runtime)

    try:
        return run_async(go)
    except KeyboardInterrupt:
        if not reading:
            sys.stderr.write(
                f"agentium {command}: an erasure it had begun stays pending (its scope refuses writes) "
                "until agentium erase --resume completes it; agentium erase --status shows it\n"
            )
        raise


async def _all_status(
    rt: Any, attestation: OperatorAttestation, target: EraseTarget | None
) -> list[ErasureRecord]:
    """Every erasure ``erasure_status`` lists for ``target``, page after page (each page one bounded read)."""
    records: list[ErasureRecord] = []
    after: str | None = None
    while True:
        page = await rt.erasure_status(attestation, target, after=after, limit=MAX_STATUS_LIMIT)
        records.extend(page)
        after = page.next_after
        if after is None:
            return records


def _print(results: list[ErasureResult], as_json: bool, hide: Callable[[str], str]) -> None:
    # The stores' details and the notes may repeat the options they were given (hidden_erasure).
    results = [attrs.evolve(r, record=hidden_erasure(r.record, hide)) for r in results]
    if as_json:
        print_json([dict(unstructure(r.record), resumed=r.resumed) for r in results], sys.stdout)
        return
    if not results:
        sys.stdout.write("no erasure\n")
    for result in results:
        sys.stdout.write("\n".join(record_lines(result.record)) + "\n")


def cmd_erase(args: argparse.Namespace) -> int:
    """Erase a tenant, a user (--user) or a session (--user --session) from every configured store.

    Needs --reason. With --dry-run, print what each store would remove and
    change nothing. With --resume, complete the tenant's erasures left
    pending. With --status, list the erasures covering the scope. An
    erasure or a resume with a store whose SQLite database does not exist
    is refused, and creates nothing.
    """
    modes = [m for m in ("dry_run", "resume", "status") if getattr(args, m)]
    # Usage errors are raised, not printed: main() reports them (as JSON on stdout with --json too).
    if len(modes) > 1:
        raise InvalidArgumentError("give at most one of --dry-run, --resume, --status")
    if args.resume and (args.user is not None or args.session is not None):
        # --resume completes every pending erasure of the tenant; accepting a narrower scope
        # would resume erasures outside the one the operator named.
        raise InvalidArgumentError(
            "--resume completes every pending erasure of the tenant; "
            "it takes no --user or --session (see --status for what is pending)"
        )
    attestation = _attestation(args)
    target = _target(args)
    if args.status:
        records = _run(args, lambda rt: _all_status(rt, attestation, target), reading=True)
        hide = hide_env(args)  # the stores' details and the notes may repeat their options
        records = [hidden_erasure(r, hide) for r in records]
        if args.json:
            print_json([unstructure(r) for r in records], sys.stdout)
        else:
            sys.stdout.write("\n".join(line for r in records for line in record_lines(r)) or "no erasure")
            sys.stdout.write("\n")
        return EXIT_OK
    try:
        if args.resume:
            results = list(_run(args, lambda rt: rt.resume_erasures(attestation)))
        else:
            if args.reason is None:
                raise InvalidArgumentError("--reason is required (say why the data is erased)")
            results = [
                _run(
                    args,
                    lambda rt: rt.erase(
                        target, reason=args.reason, attestation=attestation, dry_run=args.dry_run
                    ),
                    reading=args.dry_run,
                )
            ]
    except ErasureIncompleteError as exc:
        hide = hide_env(args)  # the error may quote a store's, and that the options it was given
        sys.stderr.write(f"agentium erase: {shown_lines(hide(str(exc)))}\n")
        if exc.record is None and args.json:  # no progress to print: the JSON error form says why
            print_json(json_error(exc, hide), sys.stdout)
        if exc.record is not None:
            record = hidden_erasure(exc.record, hide)
            # Its progress is printed either way: with --json it was printed nowhere.
            if args.json and record.state is ErasureState.COMPLETE:
                # A completed erasure's tombstone, yet the target may still hold data (overtaken) or the
                # fence may still be up (its removal from pending not known): printed with the error's
                # fields, so no script reads it as the erasure's success.
                said = dict(unstructure(record), resumed=bool(args.resume), **json_error(exc, hide))
                if isinstance(exc, ErasureOvertakenError):
                    said.update(still_held=list(exc.still_held), pending_id=exc.pending_id)
                print_json([said], sys.stdout)
            elif args.json:
                _print([ErasureResult(record, resumed=bool(args.resume))], True, hide)
            else:
                sys.stderr.write("\n".join(record_lines(record)) + "\n")
        return EXIT_PENDING
    _print(results, args.json, hide_env(args))
    return EXIT_OK


def cmd_retention_apply(args: argparse.Namespace) -> int:
    """Apply the config's [retention] policy: erase archived groups past it, one tombstone per session.

    The scope is the tenant, or --user (and --session) of it. With
    --dry-run, print what would go and change nothing. Refused, creating
    nothing, when the session store, archive or recall store is a SQLite
    database that does not exist.
    """
    attestation = _attestation(args)
    target = _target(args)
    # Only an absent --reason takes the default: an empty one is refused as the API refuses it.
    reason = "retention policy" if args.reason is None else args.reason

    async def apply(rt: Any) -> tuple[Any, list[ErasureRecord]]:
        before = {r.erasure_id for r in await _all_status(rt, attestation, target)}
        result = await rt.apply_retention(attestation, target, reason=reason, dry_run=args.dry_run)
        # The erasures this application started and left pending (one stopped part way): their
        # sessions are refused until resumed, which the exit status must say as `erase` does.
        after = await _all_status(rt, attestation, target)
        return result, [r for r in after if r.state is ErasureState.PENDING and r.erasure_id not in before]

    # Retention reads the sessions' snapshots and erases archived groups and their index entries: those
    # stores must exist (a mistyped archive path let it mark groups erased that the real archive kept).
    needs = ("session_store", "archive", "recall")
    result, stopped = _run(args, apply, reading=args.dry_run, needs=needs, command="retention")
    hide = hide_env(args)  # the records' store details and the notes are the stores' text
    erasures = [hidden_erasure(e.record, hide) for e in result.erasures]
    notes = [hide(note) for note in result.notes]
    if stopped:
        sys.stderr.write(
            f"agentium retention: {len(stopped)} erasure(s) stopped part way and stay pending (their "
            "sessions are refused until they complete): fix the cause, then agentium erase --resume\n"
        )
    if args.json:
        print_json(
            {
                "policy": unstructure(result.policy),
                "checked": result.checked,
                "erasures": [unstructure(record) for record in erasures],
                "notes": notes,
            },
            sys.stdout,
        )
        return EXIT_PENDING if stopped else EXIT_OK
    sys.stdout.write(
        f"retention {'planned' if args.dry_run else 'applied'}: {result.checked} session(s) checked, "
        f"{len(erasures)} trimmed\n"
    )
    for record in erasures:
        sys.stdout.write("\n".join(record_lines(record)) + "\n")
    for note in notes:
        sys.stdout.write(f"note: {shown(note)}\n")
    return EXIT_PENDING if stopped else EXIT_OK


def _scope_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="path of the TOML config file")
    parser.add_argument("--tenant", required=True, help="tenant id (the operator acts in it)")
    parser.add_argument("--user", default=None, help="user id: only this user (or one of their sessions)")
    parser.add_argument("--session", default=None, help="session id (with --user): only this session")
    parser.add_argument("--operator", default=None, help="who acts (default: the login name)")
    parser.add_argument("--statement", default=None, help="the request's reference, kept in the tombstone")
    parser.add_argument("--json", action="store_true", help="print the JSON form (see docs/cli.md)")


def add_erase_commands(subparsers: Any) -> None:
    """Add ``agentium erase`` and ``agentium retention apply`` to the CLI's subparsers."""
    retention = subparsers.add_parser("retention", help="apply the [retention] policy")
    inner = retention.add_subparsers(dest="retention_command", metavar="ACTION", required=True)
    apply = inner.add_parser(
        "apply", help="erase archived groups past the policy", description=cmd_retention_apply.__doc__
    )
    _scope_args(apply)
    apply.add_argument("--reason", default=None, help="why (default: 'retention policy')")
    apply.add_argument("--dry-run", action="store_true", help="print what would go; change nothing")
    apply.set_defaults(func=cmd_retention_apply)
    parser = subparsers.add_parser(
        "erase", help="erase a tenant, user or session from every store", description=cmd_erase.__doc__
    )
    _scope_args(parser)
    parser.add_argument("--reason", default=None, help="why (required to erase; kept in the tombstone)")
    parser.add_argument("--dry-run", action="store_true", help="print what would be removed, per store")
    parser.add_argument("--resume", action="store_true", help="complete the tenant's pending erasures")
    parser.add_argument("--status", action="store_true", help="list the erasures covering the scope")
    parser.set_defaults(func=cmd_erase)
