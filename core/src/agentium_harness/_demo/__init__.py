"""``agentium demo``: :mod:`.run` drives the scripted conversation, :mod:`.task` its verified-task part."""

from __future__ import annotations

from .run import *  # noqa: F403  (the package's names are its entry module's)
from .run import __all__ as __all__
