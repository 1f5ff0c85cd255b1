"""A dotted key of very many parts is refused before :mod:`tomllib` parses it.

tomllib's time grows with the square of a dotted key's parts (16,000 parts took
5 s, the 400,000 a 1 MiB file holds about an hour), so the nesting cap checked
on the parsed data came too late: ``agentium check`` on an 800 KB file never
returned. The text is scanned for such keys first, as it is for brackets.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from agentium_harness import parse_config
from agentium_harness._config.source import parse_toml
from agentium_harness._errors import ConfigError

BASE = """
[provider]
plugin = "scripted"
[archive]
plugin = "memory"
[session_store]
plugin = "memory"
"""


@pytest.mark.parametrize(
    "line",
    [
        "a." * 400_000 + "b = 1",  # a key
        "[" + "a." * 400_000 + "b]",  # a table header
        "[[" + "a." * 400_000 + "b]]",  # an array of tables' header
        "x = { " + "a." * 400_000 + "b = 1 }",  # a key in an inline table
    ],
    ids=["key", "table", "array-of-tables", "inline-table"],
)
def test_a_key_of_very_many_parts_is_refused_at_once_by_the_command(tmp_path: Path, line: str) -> None:
    path = tmp_path / "agentium.toml"
    path.write_text(BASE + line + "\n", encoding="utf-8")
    assert path.stat().st_size < 1024 * 1024  # within the size bound: only the parse was unbounded
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIUM_")}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "agentium_harness", "check", str(path)],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("agentium check on a key of 400,000 parts did not return within 30 s")
    assert done.returncode == 2, done.stderr
    assert "$: tables and arrays nested more than 32 levels deep (line 8)" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_a_key_of_many_parts_is_refused_before_it_is_parsed() -> None:
    # Refused by the scan of the text (the line), not after tomllib's parse (the path).
    text = BASE + "[archive.options]\n" + "k." * 5000 + "v = 1\n"
    with pytest.raises(ConfigError) as info:
        parse_config(text, environ={})
    (issue,) = info.value.issues
    assert (issue.path, issue.message) == ("$", "tables and arrays nested more than 32 levels deep (line 9)")


def test_dots_outside_keys_are_not_counted_as_parts() -> None:
    many = ".".join(["a"] * 200)
    text = (
        BASE
        + "[runtime]\n"
        + f'instructions = "{many}"\n'  # in a string value
        + "[provider.options]\n"
        + f'"{many}" = 1\n'  # one quoted key: a single part
        + f"floats = [{', '.join(['1.5'] * 200)}]\n"  # dots in numbers
        + "when = 1979-05-27T07:32:00.999\n"
        + f"table = {{ a.b = [2.5, {{ c.d = 3.5 }}], e = '{many}' }}\n"
        + "multi = [\n"
        + "  1.5,\n" * 100
        + "]\n"
        + f"# {many} = 1\n"
        + "[archive.options]\n"
        + ".".join(["p"] * 30)
        + " = 1\n"  # 32 levels in all, within the cap
    )
    config = parse_config(text, environ={})
    assert config.runtime.instructions == many
    assert config.provider.options[many] == 1
    assert config.provider.options["table"]["a"]["b"][1]["c"]["d"] == 3.5
    assert len(config.provider.options["multi"]) == 100
    assert config.archive.options["p"]["p"]["p"] is not None


@pytest.mark.parametrize(
    "value",
    ['"""say "hi""""', '"""say ""hi"""""', "'''it's''''", "'''x'''''"],
    ids=["basic+1", "basic+2", "literal+1", "literal+2"],
)
def test_a_multi_line_string_closed_after_its_own_quotes_hides_no_key_from_the_scan(value: str) -> None:
    # TOML lets one or two quotes end a multi-line string's text right before the closing three.
    # The scanner closed it at the first three; the quote left over read as an opening one and
    # took the newline with it, so the next line's key (400,000 parts: an hour in tomllib) was
    # never counted, and only the after-parse check (its path) saw a short one.
    text = BASE + "[archive.options]\n" + f"s = {value}\n" + "k." * 100 + "v = 1\n"
    with pytest.raises(ConfigError) as info:
        parse_config(text, environ={})
    (issue,) = info.value.issues
    assert (issue.path, issue.message) == ("$", "tables and arrays nested more than 32 levels deep (line 10)")
    # Valid TOML, read as tomllib reads it, with a key of a few parts after it.
    config = parse_config(BASE + "[archive.options]\n" + f"s = {value}\n" + "k.v = 1\n", environ={})
    assert config.archive.options["k"]["v"] == 1


def test_the_line_of_a_refused_key_counts_escaped_newlines() -> None:
    # A multi-line basic string's line-ending backslash escapes a newline the file still has.
    text = BASE + "[archive.options]\n" + 's = """a \\\n  b"""\n' + "k." * 100 + "v = 1\n"
    with pytest.raises(ConfigError) as info:
        parse_config(text, environ={})
    assert info.value.issues[0].message == "tables and arrays nested more than 32 levels deep (line 11)"


def _toml_in_the_docs() -> list[tuple[str, str]]:
    root = Path(__file__).resolve().parents[2]
    examples = sorted(root.glob("examples/**/*.toml"))
    found = [(str(p.relative_to(root)), p.read_text(encoding="utf-8")) for p in examples]
    for doc in sorted([*root.glob("docs/*.md"), *root.glob("*.md")]):
        blocks = re.findall(r"```toml\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)
        for number, block in enumerate(blocks):
            found.append((f"{doc.relative_to(root)}#{number}", block))
    return found


def test_no_toml_in_the_docs_or_examples_is_refused_by_the_scan() -> None:
    # Every snippet tomllib reads is read by parse_toml too: the scan refuses no valid config.
    read = 0
    for name, text in _toml_in_the_docs():
        try:
            expected = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            continue  # a fragment, not a whole file
        assert parse_toml(text, name) == expected, name
        read += 1
    assert read >= 10


_TRICKY = (
    's = """say "hi""""\n'
    "t = '''x'''''\n"
    'u = """a \\\n b"""\n'
    'v = "a\\"b.c"\n'
    "w = 'C:\\\\x'\n"
    '"a.b" . c = 1\n'
    'x = [ "a]", { y."z" = "}" } ]\r\n'
    'y = { a = [ [ 1.5 ], ], b = "x,y=z" }\n'
    "[t1]\n"
    "[[t2.'p.q']]\n"
    "ip = '1.2.3.4' # a.b.c [d\n"
)


def _keys(data: object) -> set[str]:
    if isinstance(data, dict):
        return set(data).union(*(_keys(v) for v in data.values()))
    if isinstance(data, list):
        return set().union(*(_keys(v) for v in data))
    return set()


def test_a_long_key_on_any_line_of_valid_toml_is_refused_at_that_line() -> None:
    # Whatever valid TOML comes before it (strings with quotes, escapes, brackets or dots, comments,
    # inline tables, CRLF), the scan stays in step with it: a key of 100 parts put on a line where
    # a key can stand is refused from the text, at that line, never left to the parse.
    tried = 0
    for name, text in [*_toml_in_the_docs(), ("tricky", _TRICKY)]:
        lines = text.split("\n")
        for at in range(len(lines) + 1):
            try:
                short = tomllib.loads("\n".join([*lines[:at], f"zz{at}.q.r = 1", *lines[at:]]))
            except tomllib.TOMLDecodeError:
                continue  # no key can stand there (inside a table it would redefine, say)
            if f"zz{at}" not in _keys(short):
                continue  # inside a multi-line string
            long_key = ".".join([f"zz{at}"] * 100) + " = 1"
            with pytest.raises(ConfigError) as info:
                parse_toml("\n".join([*lines[:at], long_key, *lines[at:]]), name)
            expected = f"tables and arrays nested more than 32 levels deep (line {at + 1})"
            assert info.value.issues[0].message == expected, (name, at)
            tried += 1
    assert tried >= 100
