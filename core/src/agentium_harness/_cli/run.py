"""``agentium run``: one turn of a session on the runtime a config file describes (docs/cli.md).

Also the identity arguments every session command takes (:func:`add_identity_args`).
An error the run ends with can quote an adapter's error, and that the options it was
given: values a ``${VAR}`` reference supplied are hidden from it (``args.hide_env``, set by
:func:`~agentium_harness._cli.output.load_hiding`, which :func:`~agentium_harness._cli.main.main`
applies as it reports the error).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import attrs

from .._codec import unstructure
from .._config.runtime import build_runtime
from .._engine.results import RunResult, RunStatus
from .._engine.tools import ToolRegistry
from .._errors import AgentiumError, InvalidArgumentError
from .._observe import tree
from .._scope import RecallScope, VerifiedIdentity
from .._text import error_text
from .hiding import hidden_run
from .interrupt import run_async
from .output import (
    EXIT_OK,
    RUN_EXIT_STATUS,
    add_config_argument,
    hide_env,
    json_error,
    load_hiding,
    print_json,
    shown,
    text_argument,
)
from .run_outcome import print_run_outcome
from .verify import print_verification

__all__ = [
    "CLI_VERIFIER",
    "add_identity_args",
    "add_run_command",
    "cmd_run",
    "identity",
    "recall_scope",
]


#: How the CLI attests identity: whoever runs the command on the host is the
#: operator the host trusts, so identity given on the command line is verified
#: by that operator (the library itself still takes only VerifiedIdentity).
CLI_VERIFIER = "cli-operator"


def identity(args: argparse.Namespace) -> VerifiedIdentity:
    """The identity the command line gives, verified by the operator running the command."""
    return VerifiedIdentity(tenant=args.tenant, user=args.user, verified_by=CLI_VERIFIER)


def recall_scope(args: argparse.Namespace) -> RecallScope | None:
    """The recall scope ``--project`` and ``--repository`` give, if any."""
    if args.project is None and args.repository is None:
        return None
    return RecallScope(project=args.project, repository=args.repository)


def add_identity_args(parser: argparse.ArgumentParser) -> None:
    """Add CONFIG, ``--tenant``, ``--user``, ``--session``, the recall scope and ``--json`` to ``parser``."""
    add_config_argument(parser)
    parser.add_argument("--tenant", required=True, help="tenant id")
    parser.add_argument("--user", required=True, help="user id")
    parser.add_argument("--session", required=True, help="session id")
    parser.add_argument("--project", default=None, help="optional recall scope: project id")
    parser.add_argument("--repository", default=None, help="optional recall scope: repository id")
    parser.add_argument("--json", action="store_true", help="print the JSON form (see docs/cli.md)")


def cmd_run(args: argparse.Namespace) -> int:
    """Run one turn of a session on the runtime a config file describes."""
    if not args.trace:
        return _run_turn(args)
    try:
        exporter = tree.capture()
    except tree.SdkMissingError as exc:  # reported by main(), as JSON on stdout with --json too
        raise InvalidArgumentError(f"{error_text(exc, named=False)}; nothing was run") from None
    try:
        return _run_turn(args)
    finally:
        # The tree is printed whatever happened: a failed run's spans say where it failed.
        spans = exporter.get_finished_spans()
        sys.stderr.write("trace:\n" + (tree.render(spans) or "(no spans)") + "\n")


def _run_turn(args: argparse.Namespace) -> int:
    text = text_argument(args.text, "the TEXT argument", "nothing was run")
    if not text.strip():  # as recall search refuses an empty query: a turn with no input is a mistake
        raise InvalidArgumentError("the TEXT argument is empty; give the user input. Nothing was run")
    # A config file names no code, so the command's runtime has no tools: a granted name that is
    # not a tool was accepted and silently did nothing, as if the tool had been offered.
    tools = ToolRegistry()
    unknown = [name for name in args.grant if name not in tools]
    if unknown:
        raise InvalidArgumentError(
            f"--grant {unknown[0]!r} names no tool: the command's runtime has no tools to grant "
            "(a config file names no code; tools come from a host program). Nothing was run"
        )
    # What the run ends with may quote an adapter's error, which may repeat its options: main()
    # hides the values ${VAR} references supplied as it reports it, as this does the result's.
    resolved = load_hiding(args)
    hide = hide_env(args)
    runtime = build_runtime(resolved, tools=tools)
    ran: list[RunResult] = []  # what runtime.run returned, kept if Ctrl-C cuts the summary settle short

    async def go() -> RunResult:
        async with runtime:
            result = await runtime.run(
                identity(args),
                args.session,
                text,
                recall_scope=recall_scope(args),
                attest_legacy_memory_scope=args.attest_legacy_memory_scope,
                grants=args.grant,
                completion=args.task or None,
            )
            ran.append(result)
            # One turn per process: let a background summary update land, and show the summary after it.
            report = await runtime.resources.settle_summary(identity(args), args.session)
            if report is not None:
                result = attrs.evolve(
                    result,
                    summary=report.state or result.summary,
                    diagnostics=result.diagnostics + report.diagnostics,
                )
            return result

    try:
        result = run_async(go)
    except KeyboardInterrupt:
        if not ran:  # cut short inside runtime.run, perhaps after its commit (archived groups indexed)
            sys.stderr.write(
                "agentium run: whether the turn was committed is not known: "
                "agentium session inspect shows it\n"
            )
            raise
        # The turn ended (committed, as it says) before Ctrl-C cut the summary settle short: it is
        # reported as any run is, then main() says "interrupted" (it said only that, as if nothing ran).
        _report_run(args, hidden_run(ran[0], hide))
        raise
    except AgentiumError as exc:
        # With --json a failed run still prints its RunResult (status interrupted: what ran, and
        # whether the turn was committed); stdout used to stay empty. main() reports the error.
        if args.json and exc.run_result is not None:
            failed = exc.run_result
            failed = hidden_run(failed, hide)
            print_json(
                {**unstructure(failed), "committed": failed.committed, **json_error(exc, hide)}, sys.stdout
            )
            args.printed_json = True  # main() prints no second document
        raise
    return _report_run(args, hidden_run(result, hide))


def _report_run(args: argparse.Namespace, result: RunResult) -> int:
    """Print ``result`` as ``agentium run`` does (stdout: the reply or JSON; stderr: the rest); its status."""
    status = RUN_EXIT_STATUS[result.status]
    if args.json:
        # ``committed`` is derived (init=False), so the converter leaves it out: add it for scripts.
        print_json({**unstructure(result), "committed": result.committed}, sys.stdout)
    elif result.committed and result.status is not RunStatus.STOPPED:
        # Only a committed turn has a reply: a stopped run has none (even one whose tool calls were
        # committed), and a clarification question is not an answer (it is in the line below).
        sys.stdout.write(result.output + "\n")
    if status != EXIT_OK:
        print_run_outcome(result, status, sys.stderr)
    if not args.json:
        sys.stderr.write(
            f"[group {result.group_seq}, boundary {result.boundary}, resident {result.resident_groups}, "
            f"revision {result.snapshot_revision}, run {result.status.value}, "
            f"eviction {result.eviction.value}, sources {result.sources.value}]\n"
        )
        if result.recall is not None:
            r = result.recall
            sys.stderr.write(
                f"[recall {r.status.value}, decision {r.decision.value}, "
                f"{len(r.included)} source(s) included, "
                f"{r.usage.evidence_tokens} evidence tokens, {r.usage.candidates} candidate(s), "
                f"{r.usage.latency_s * 1000:.1f} ms]\n"
            )
        if result.summary is not None:
            sys.stderr.write(f"[summary: {result.summary.coverage()}]\n")
        if result.verification is not None:
            print_verification(result.verification, sys.stderr)
        for d in result.diagnostics:
            sys.stderr.write(f"  {d.severity.value}: {d.code}: {shown(d.message)}\n")
    return status


def add_run_command(subparsers: Any) -> None:
    """Add ``agentium run`` to the CLI's subcommands."""
    parser = subparsers.add_parser("run", help="run one turn", description=cmd_run.__doc__)
    add_identity_args(parser)
    parser.add_argument("text", metavar="TEXT", help="the user input; - reads it from standard input (UTF-8)")
    parser.add_argument("--grant", action="append", default=[], help="grant a tool for this run (repeatable)")
    parser.add_argument(
        "--attest-legacy-memory-scope",
        action="store_true",
        help="load a legacy snapshot after you verified its exact scope",
    )
    parser.add_argument(
        "--task",
        action="store_true",
        help="verify the answer as a completion with the configured [verifier] and its policy",
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="print the turn's span tree on stderr (needs agentium-harness[otel]; docs/observability.md)",
    )
    parser.set_defaults(func=cmd_run)
