"""``agentium eval CONFIG CASES [--compare OTHER_CONFIG] [--out DIR] [--json]``.

Runs a case file (``bundled`` for the bundled set) on the runtime a config
file describes, and on a second one with ``--compare``; writes
``report.json`` and ``report.html`` into ``--out`` (default
``agentium-eval-report``) and prints a one-screen summary, or the JSON
report with ``--json``. Exit status: 0 when the eval ran, whatever the
scores (infrastructure failures included); 2 on bad input — a config or
case file that does not validate, a grader that is not installed, an output
directory that cannot be written — with nothing run. See ``docs/eval.md``.

The reports and what is printed hold adapters' text throughout (answers,
excerpts, errors, graders' reasons): a value a ``${VAR}`` reference supplied
to either config's options is hidden in all of them, as every command that
builds adapters hides it (docs/config.md, "Values from the environment in
messages").
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from typing import Any

from .._config import load_config
from .._config.runtime import hide_configs_env
from .hiding import hidden_report
from .interrupt import run_async
from .output import add_config_argument, hide_env, load_hiding, print_json

__all__ = ["DEFAULT_OUT", "add_eval_commands", "cmd_eval"]

#: Where reports go without ``--out``.
DEFAULT_OUT = "agentium-eval-report"


def cmd_eval(args: argparse.Namespace) -> int:
    """Validate everything first (exit 2 on bad input, nothing run), then run, report and exit 0."""
    # Imported here: the eval package and its harness target are heavy, and only this command needs them.
    from ..eval import (
        Progress,
        build_report,
        check_out_dir,
        installed_graders,
        load_cases,
        render_summary,
        run_eval,
        write_reports,
    )
    from ..testing.eval_target import HarnessEvalTarget

    graders = installed_graders()
    cases = load_cases(args.cases, graders=list(graders))
    # Loaded here, not by the target, so its values from the environment can be hidden (load_hiding).
    primary = load_hiding(args)
    targets = [HarnessEvalTarget(resolved=primary)]
    if args.compare:
        resolved = load_config(args.compare)
        # Both configs' values in one pass (hide_configs_env), in the reports and in main()'s error.
        args.hide_env = partial(hide_configs_env, resolved=(primary, resolved))
        other = HarnessEvalTarget(resolved=resolved)
        if other.info.label == targets[0].info.label:  # two configs of the same file name
            other = HarnessEvalTarget(resolved=resolved, label=f"{other.info.label} (compare)")
        targets.append(other)
    out = check_out_dir(args.out)  # last: a bad config or case file leaves no directory behind
    concurrency: int = args.concurrency

    async def main() -> list[Any]:
        runs = []
        for target in targets:
            progress = Progress(len(cases), sys.stderr, label=f"eval {target.info.label}")
            runs.append(
                await run_eval(
                    cases, target, graders, concurrency=concurrency, progress=progress, cases_file=args.cases
                )
            )
        return runs

    runs = run_async(main)
    report = hidden_report(build_report(runs, list(graders.values())), hide_env(args))
    json_path, html_path = write_reports(report, out)
    if args.json:
        print_json(report)
    else:
        sys.stdout.write(render_summary(report, [str(json_path), str(html_path)]))
    return 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def add_eval_commands(subparsers: Any) -> None:
    """Add ``agentium eval`` to the CLI's subcommands."""
    p = subparsers.add_parser(
        "eval",
        help="evaluate the runtime a config describes on a case file",
        description=(
            "Run eval cases through run() on the runtime CONFIG describes and grade them separately "
            "(discovered evidence, read evidence, prompt inclusion, supported answer, stale facts, "
            "abstention, scope). Exit 0 when it ran, whatever the scores; 2 on bad input."
        ),
    )
    add_config_argument(p, " of the runtime to evaluate")
    p.add_argument("cases", metavar="CASES", help="a JSONL case file, or 'bundled' for the bundled set")
    p.add_argument("--compare", metavar="OTHER_CONFIG", help="also run on this config and compare")
    p.add_argument(
        "--out", metavar="DIR", default=DEFAULT_OUT, help=f"report directory (default {DEFAULT_OUT})"
    )
    p.add_argument("--json", action="store_true", help="print the JSON report instead of the summary")
    p.add_argument(
        "--concurrency", type=_positive, default=4, metavar="N", help="cases run at once (default 4)"
    )
    p.set_defaults(func=cmd_eval)
