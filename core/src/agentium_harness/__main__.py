"""``python -m agentium_harness``: the ``agentium`` command, for an environment without its script on PATH."""

from __future__ import annotations

import sys

from ._cli import console

if __name__ == "__main__":
    sys.exit(console())
