"""Every documented example runs.

Each fenced ``python`` block in ``docs/**/*.md`` and ``README.md`` is executed
in a fresh namespace (``__name__ == "__main__"``) inside a temporary working
directory, one test per block, with an id such as ``docs/concepts/scope.md:L42``.
Top-level ``await`` is not supported: examples use ``anyio.run(main)``.

A block whose preceding line is ``<!-- not-run: reason -->`` is skipped with
that reason; keep such blocks rare. Every ``examples/*.py`` is also run as a
script with the current interpreter and must exit 0.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

ROOT = Path(__file__).resolve().parents[1]

_FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")
_NOT_RUN = re.compile(r"^\s*<!--\s*not-run\s*:\s*(?P<reason>\S.*?)\s*-->\s*$")
_NOT_RUN_ANY = re.compile(r"<!--\s*not-run\b")


@attrs.frozen
class CodeBlock:
    """One fenced python block: where it is, its source, and why it is skipped (if it is)."""

    path: str
    line: int  # 1-based line of the opening fence
    source: str
    skip_reason: str | None = None
    marker_error: str | None = None

    @property
    def id(self) -> str:
        return f"{self.path}:L{self.line}"


def parse_python_blocks(text: str, path: str) -> Iterator[CodeBlock]:
    """Yield the fenced ``python`` blocks of a Markdown text (indented fences allowed)."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        match = _FENCE_OPEN.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence, info = match["indent"], match["fence"], match["info"].strip()
        start = i
        body: list[str] = []
        i += 1
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        while i < len(lines) and not closing.match(lines[i]):
            line = lines[i]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            i += 1
        i += 1  # past the closing fence
        if info.split()[:1] != ["python"]:
            continue
        previous = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        skip = _NOT_RUN.match(previous)
        error = None
        if skip is None and _NOT_RUN_ANY.search(previous):
            error = f"malformed marker {previous.strip()!r}; write <!-- not-run: reason -->"
        yield CodeBlock(
            path=path,
            line=start + 1,
            source="\n".join(body) + "\n",
            skip_reason=skip["reason"] if skip else None,
            marker_error=error,
        )


def _markdown_files() -> list[Path]:
    files = sorted((ROOT / "docs").rglob("*.md"))
    readme = ROOT / "README.md"
    return [readme, *files] if readme.exists() else files


def _docs_blocks() -> list[CodeBlock]:
    blocks: list[CodeBlock] = []
    for md in _markdown_files():
        rel = md.relative_to(ROOT).as_posix()
        blocks.extend(parse_python_blocks(md.read_text("utf-8"), rel))
    return blocks


DOCS_BLOCKS = _docs_blocks()
EXAMPLE_SCRIPTS = sorted((ROOT / "examples").glob("*.py"))


def _params() -> list[object]:
    params = []
    for block in DOCS_BLOCKS:
        marks = [pytest.mark.skip(reason=block.skip_reason)] if block.skip_reason else []
        params.append(pytest.param(block, id=block.id, marks=marks))
    return params


@pytest.mark.parametrize("block", _params())
def test_docs_block_runs(block: CodeBlock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert block.marker_error is None, f"{block.id}: {block.marker_error}"
    monkeypatch.chdir(tmp_path)
    # Compiled under the Markdown file's path, padded with newlines, so a
    # traceback points at the failing line of the document itself.
    code = compile("\n" * block.line + block.source, str(ROOT / block.path), "exec")
    namespace: dict[str, object] = {"__name__": "__main__", "__file__": str(ROOT / block.path)}
    exec(code, namespace)


@pytest.mark.parametrize("script", EXAMPLE_SCRIPTS, ids=lambda p: f"examples/{p.name}")
def test_example_script_exits_zero(script: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"


def test_docs_contain_runnable_examples() -> None:
    runnable = [b for b in DOCS_BLOCKS if b.skip_reason is None]
    assert runnable, "no runnable ```python blocks were found under docs/ or in README.md"
    # Skips stay rare: at most one block in five may opt out.
    assert len(DOCS_BLOCKS) - len(runnable) <= max(1, len(DOCS_BLOCKS) // 5), [
        b.id for b in DOCS_BLOCKS if b.skip_reason
    ]


def test_the_parser_finds_blocks_lines_and_markers() -> None:
    text = "\n".join(
        [
            "# Title",  # 1
            "```sh",  # 2
            "echo not python",  # 3
            "```",  # 4
            "<!-- not-run: needs a live Redis -->",  # 5
            "",  # 6
            "```python",  # 7
            "import redis",  # 8
            "```",  # 9
            "1. a list item:",  # 10
            "   ```python",  # 11
            "   x = 1",  # 12
            "   if x:",  # 13
            "       y = 2",  # 14
            "   ```",  # 15
            "<!-- not-run -->",  # 16
            "````python title=demo",  # 17
            "print('```')",  # 18
            "````",  # 19
            "```pycon",  # 20
            ">>> 1",  # 21
            "```",  # 22
        ]
    )
    blocks = list(parse_python_blocks(text, "x.md"))
    assert [b.id for b in blocks] == ["x.md:L7", "x.md:L11", "x.md:L17"]
    assert blocks[0].skip_reason == "needs a live Redis"
    assert blocks[0].source == "import redis\n"
    assert blocks[1].skip_reason is None
    assert blocks[1].source == "x = 1\nif x:\n    y = 2\n"
    assert blocks[2].marker_error is not None  # a marker without a reason is an error
    assert blocks[2].source == "print('```')\n"


def test_a_failing_block_fails_with_its_markdown_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    [block] = parse_python_blocks("text\n\n```python\nx = 1\nraise RuntimeError('boom')\n```\n", "d.md")
    with pytest.raises(RuntimeError, match="boom") as info:
        test_docs_block_runs(block, tmp_path, monkeypatch)
    frame = info.traceback[-1]
    assert Path(frame.path) == ROOT / "d.md"
    assert frame.lineno + 1 == 5  # pytest's lineno is 0-based; the raise is on line 5 of d.md
