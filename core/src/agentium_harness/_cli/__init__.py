"""The ``agentium`` command, one module per command group.

:mod:`.main` builds the parser and dispatches (the console script's entry
point, ``agentium_harness._cli:main``); :mod:`.output` holds what every command
shares (exit codes, ``--config``, JSON output, user text); :mod:`.interrupt`
what Ctrl-C does to any command (status 130, a bounded shutdown); the other modules
each add one group of subcommands: :mod:`.erase`, :mod:`.eval`,
:mod:`.memory`, :mod:`.plugins`, :mod:`.recall`, :mod:`.verify`.
Private: hosts run the command, they do not import it.
"""

from __future__ import annotations

from .main import *  # noqa: F403  (the package's names are its entry module's)
from .main import __all__ as __all__
