"""The ``agentium`` command, one module per command group.

:mod:`.main` builds the parser and dispatches (the console script's entry
point, ``agentium_harness._cli:console``, runs it); :mod:`.output` holds what every command
shares (exit codes, ``--config``, JSON output, user text); :mod:`.interrupt`
what Ctrl-C does to any command (status 130, a bounded shutdown); the other modules
each add one group of subcommands: :mod:`.erase`, :mod:`.eval`,
:mod:`.memory`, :mod:`.plugins`, :mod:`.recall`, :mod:`.verify`.
Private: hosts run the command, they do not import it.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Sequence

from .interrupt import exiting
from .main import *  # noqa: F403  (the package's names are its entry module's, and console)
from .main import __all__ as _main_all
from .main import main

__all__ = [*_main_all, "console"]


def console(argv: Sequence[str] | None = None) -> int:
    """The ``agentium`` console script (and ``python -m agentium_harness``): :func:`main`'s exit code.

    ``argv`` as :func:`main` takes it (default: ``sys.argv[1:]``). It returns the code, as
    ``main`` does, for the script's wrapper to exit with (``sys.exit(console())``), so a caller
    that loads the entry point and calls it still gets the code back.

    Its process exits as ``main()`` returns, so after a Ctrl-C the exit stays bounded by the
    interrupt watchdog (:func:`.interrupt.exiting`); ``main()`` called in-process leaves none.
    """
    exiting()
    _printable_stdout()
    return main(argv)


def _printable_stdout() -> None:
    r"""Let stdout write what Python holds for a byte that is not UTF-8, as stderr already does.

    A file name (or argument) of such bytes reaches Python as lone surrogates, and a UTF-8
    locale other than ``C.UTF-8`` makes stdout encode strictly: every line naming one (``agentium
    demo``'s database, ``agentium eval``'s report paths) raised ``UnicodeEncodeError``, a
    traceback. Written as ``\udcff`` instead, as stderr's ``backslashreplace`` writes it.
    """
    if getattr(sys.stdout, "errors", None) == "strict" and isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="backslashreplace")
