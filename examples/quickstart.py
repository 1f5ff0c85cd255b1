"""Build a runtime from examples/agentium.toml and run a few turns.

Run it from anywhere: ``python examples/quickstart.py``. The database goes to
a temporary directory through the ``AGENTIUM_DB`` variable the config reads.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import anyio

from agentium_harness import VerifiedIdentity, load_runtime

CONFIG = Path(__file__).with_name("agentium.toml")


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        environ = {**os.environ, "AGENTIUM_DB": str(Path(tmp) / "quickstart.db")}
        runtime = load_runtime(CONFIG, environ=environ)
        # The host verified this identity (for example from its SSO session).
        ana = VerifiedIdentity(tenant="acme", user="ana", verified_by="example-sso")
        async with runtime:  # closes the SQLite adapters it built, nothing else
            for text in ["Plan the release.", "Add a changelog entry.", "Tag it."]:
                result = await runtime.run(ana, "release-42", text)
                where = f"group {result.group_seq}, revision {result.snapshot_revision}"
                print(f"{text!r:28} -> {result.output!r:16} {where}")
            report = await runtime.resources.close_session(ana, "release-42")
            print("close_session:", report.status.value)
            assert report.status.value == "clean"


if __name__ == "__main__":
    anyio.run(main)
