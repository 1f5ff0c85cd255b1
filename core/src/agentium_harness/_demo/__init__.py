"""``agentium demo``: :mod:`.run` drives the scripted conversation, :mod:`.task` its verified-task part."""

from __future__ import annotations

from .run import DEMO_DB, prepare_demo_dir, run_demo, run_demo_config

__all__ = ["DEMO_DB", "prepare_demo_dir", "run_demo", "run_demo_config"]
