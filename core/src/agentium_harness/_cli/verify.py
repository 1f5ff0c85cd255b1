"""``agentium verify``: run the configured verifier on demand and print its evidence.

It builds the runtime the config file describes and calls
:meth:`~agentium_harness._engine.runtime.HarnessRuntime.verify`, so the
verdict is reached exactly as in a turn: under the verifier's deadline and
the evidence budget, with a failing verifier reported as ``unknown``.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from typing import Any, TextIO

import attrs

from .._codec import unstructure
from .._config.runtime import build_runtime
from .._engine.results import Diagnostic
from .._scope import VerifiedIdentity
from .._verdicts import Verdict, VerificationRecord
from .hiding import hidden_verification
from .interrupt import run_async
from .output import EXIT_NOT_ACCEPTED, hide_env, load_hiding, print_json, shown, text_argument

__all__ = ["EXIT_NOT_ACCEPTED", "add_verify_commands", "print_verification"]


def print_verification(record: VerificationRecord, out: TextIO) -> None:
    """Each attempt's verdict, reason and evidence, one line per entry."""
    for attempt in record.attempts:
        label = (
            "verification" if record.policy == "on-demand" else f"verification (revision {attempt.revision})"
        )
        out.write(f"[{label}: {attempt.verdict.value}: {shown(attempt.reason or 'no reason given')}]\n")
        for entry in attempt.evidence:
            out.write(f"  evidence {shown(entry.kind)} {shown(entry.ref)}: {shown(entry.detail)}\n")
        if attempt.omitted:
            out.write(f"  ({attempt.omitted} evidence entries omitted for the budget)\n")


def _cmd_verify(
    identity: Callable[[argparse.Namespace], VerifiedIdentity],
) -> Callable[[argparse.Namespace], int]:
    def cmd_verify(args: argparse.Namespace) -> int:
        """Run the configured verifier now and print the verdict with its evidence."""
        claim = text_argument(args.claim, "the --claim text", "nothing was verified")
        runtime = build_runtime(load_hiding(args))  # main() hides the options' values from its error

        async def go() -> tuple[VerificationRecord, tuple[Diagnostic, ...]]:
            async with runtime:
                return await runtime.verify(identity(args), args.session, claim, since=args.since)

        record, notes = run_async(go)
        # The verifier's reasons (or its error), its evidence and the notes may repeat the options
        # it was given.
        hide = hide_env(args)
        record = hidden_verification(record, hide)
        notes = tuple(attrs.evolve(d, message=hide(d.message)) for d in notes)
        if args.json:
            data: dict[str, Any] = {
                "verdict": record.verdict.value,
                "record": unstructure(record),
                "diagnostics": unstructure(list(notes)),
            }
            print_json(data)
        else:
            print_verification(record, sys.stdout)
            for d in notes:
                if d.code != "verified":
                    sys.stderr.write(f"  {d.severity.value}: {d.code}: {shown(d.message)}\n")
        return 0 if record.verdict is Verdict.PASS else EXIT_NOT_ACCEPTED

    return cmd_verify


def add_verify_commands(
    subparsers: Any,
    add_identity_args: Callable[[argparse.ArgumentParser], None],
    identity: Callable[[argparse.Namespace], VerifiedIdentity],
) -> None:
    """Declare ``agentium verify CONFIG --tenant … --user … --session … [--claim TEXT] [--json]``."""
    command = _cmd_verify(identity)
    parser = subparsers.add_parser(
        "verify", help="run the configured verifier now and print its evidence", description=command.__doc__
    )
    add_identity_args(parser)
    parser.add_argument(
        "--claim",
        default="",
        help="the completion claim to judge (it proves nothing); - reads it from standard input (UTF-8)",
    )
    parser.add_argument(
        "--since",
        type=_epoch,
        default=0.0,
        metavar="EPOCH",
        help="treat evidence older than this Unix time as stale (default: accept any age)",
    )
    parser.set_defaults(func=command)


def _epoch(text: str) -> float:
    """``--since``: a finite Unix time (``nan`` compared false with every mtime: no staleness check)."""
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a Unix time (a finite number of seconds, 0 or more)"
        )
    return value
