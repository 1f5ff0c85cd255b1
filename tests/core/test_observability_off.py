"""Without OpenTelemetry, or with it but no SDK configured, the core runs and records nothing (issue 24).

Each case runs in a fresh interpreter: one with ``opentelemetry`` made
unimportable, one with it installed and no provider set (the state a host is
in before it configures anything). ``agentium run --trace`` is checked the
same way, with and without the SDK.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Makes ``import opentelemetry…`` fail as it would where it is not installed.
BLOCK = textwrap.dedent(
    """
    import sys
    class _Block:
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None
    sys.meta_path.insert(0, _Block())
    """
)

TURN = textwrap.dedent(
    """
    import anyio, logging
    from agentium_harness import (
        ResidentLimits, RuntimeLimits, VerifiedIdentity, create_harness_runtime,
    )
    from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
    from agentium_harness.adapters.providers import ScriptedProvider
    from agentium_harness._observe import spans

    records = []
    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)
    logging.getLogger("agentium").addHandler(Keep())
    logging.getLogger("agentium").setLevel(logging.DEBUG)

    async def main():
        runtime = create_harness_runtime(
            provider=ScriptedProvider(replies=["ok"], cycle=True),
            archive=InMemoryArchive(),
            session_store=InMemorySessionStore(),
            limits=RuntimeLimits(resident=ResidentLimits(max_groups=1)),
        )
        async with runtime:
            for text in ("one", "two"):
                result = await runtime.run(VerifiedIdentity("t", "u", "x"), "s", text)
                assert result.committed, result
                # Nothing records: no live state in a run, none outside one.
                assert spans.current() is None
        return result

    result = anyio.run(main)
    print("have_otel", spans.HAVE_OTEL)
    print("imported", any(m.startswith("opentelemetry") for m in sys.modules))
    print("eviction", result.eviction.value)
    print("logged", sorted({r.name for r in records}))
    """
)


def _python(code: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("OTEL_PYTHON_TRACER_PROVIDER", None)
    env.pop("OTEL_PYTHON_METER_PROVIDER", None)
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120
    )


def test_the_core_imports_and_runs_without_opentelemetry() -> None:
    done = _python(BLOCK + "\nimport sys\n" + TURN)
    assert done.returncode == 0, done.stderr
    assert "have_otel False" in done.stdout
    assert "imported False" in done.stdout
    assert "eviction archived" in done.stdout
    # Logging works without it: the run's end is an INFO record on agentium.engine.
    assert "'agentium.engine'" in done.stdout


def test_with_opentelemetry_but_no_sdk_configured_nothing_is_recorded() -> None:
    done = _python("import sys\n" + TURN)
    assert done.returncode == 0, done.stderr
    assert "have_otel True" in done.stdout
    assert "eviction archived" in done.stdout


def _cli(code_prefix: str, tmp: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    config = tmp / "agentium.toml"
    config.write_text((ROOT / "examples" / "agentium.toml").read_text(encoding="utf-8"), encoding="utf-8")
    code = (
        code_prefix + "\nimport sys\nfrom agentium_harness._cli import main\nsys.exit(main(sys.argv[1:]))\n"
    )
    return _python(code, "run", str(config), "--tenant", "t", "--user", "u", "--session", "s", *argv, cwd=tmp)


def test_agentium_run_trace_prints_the_span_tree(tmp_path: Path) -> None:
    done = _cli("", tmp_path, "--trace", "hello there")
    assert done.returncode == 0, done.stderr
    tree = done.stderr.split("trace:\n", 1)[1].splitlines()
    assert tree[0].startswith("invoke_agent agentium ")
    assert "run=completed" in tree[0] and "commit=committed" in tree[0]
    for child in ("  agentium.admission ", "  agentium.load ", "    agentium.session.load ", "  chat "):
        assert any(line.startswith(child) for line in tree), (child, tree)
    assert "hello there" not in done.stderr.split("trace:\n", 1)[1]


def test_agentium_run_trace_without_the_sdk_says_what_to_install_and_runs_nothing(tmp_path: Path) -> None:
    done = _cli(BLOCK, tmp_path, "--trace", "hello there")
    assert done.returncode == 2
    assert "pip install 'agentium-harness[otel]'" in done.stderr
    assert "nothing was run" in done.stderr
    assert not (tmp_path / "agentium.db").exists()
