"""``agentium run --json``: the archive's receipts show no value a ``${VAR}`` reference supplied.

A run that archived groups prints each receipt (``archived``: seq, digest and the location the
archive wrote, ``s3://<bucket>/<key>`` or ``sqlite://<file>#...``), the archive's own text,
which may name its options (a bucket, a path from the environment). The other adapters' text a
run prints was hidden (hiding.hidden_run); the receipts' locations were printed as written.
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from agentium_harness._cli import main
from agentium_harness._engine.runtime import HarnessRuntime
from agentium_harness._ports.archive import ArchiveReceipt

HIDDEN = "<a value from the environment, not shown>"
CONFIG = """
[provider]
plugin = "scripted"
options.responses = ["Noted."]
[plugins.sqlite]
path = "${AGT_TEST_DB}"
[archive]
plugin = "sqlite"
[session_store]
plugin = "sqlite"
"""


def test_a_runs_archive_receipts_hide_values_from_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "s3cret-folder").mkdir()
    monkeypatch.setenv("AGT_TEST_DB", "s3cret-folder/state.db")
    config = tmp_path / "agentium.toml"
    config.write_text(CONFIG, encoding="utf-8")
    named = f"{tmp_path}/s3cret-folder/state.db"
    real = HarnessRuntime.run

    async def archived(self: HarnessRuntime, *args: object, **kwargs: object) -> object:
        result = await real(self, *args, **kwargs)  # type: ignore[arg-type]
        receipt = ArchiveReceipt(0, "sha256:" + "0" * 64, f"file://{named}#acme/ana/s1/0")
        return attrs.evolve(result, archived=(receipt,))

    monkeypatch.setattr(HarnessRuntime, "run", archived)
    args = ["run", "--json", str(config), "--tenant", "acme", "--user", "ana", "--session", "s1", "hello"]
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert "s3cret" not in out + err, out
    (receipt,) = json.loads(out)["archived"]
    assert receipt["location"] == f"file://{tmp_path}/{HIDDEN}#acme/ana/s1/0"
    assert receipt["seq"] == 0 and receipt["digest"] == "sha256:" + "0" * 64
