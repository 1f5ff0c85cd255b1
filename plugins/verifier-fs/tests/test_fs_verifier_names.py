"""Failing test names in a record's evidence: a list that reads one way, names that show what they are.

The names were joined with ``", "``, so one test named ``t1, c::t2`` read as
two tests. Each name is now quoted (``"c::t1, c::t2"``; a ``"`` or ``\\`` in
it is written ``\\"`` or ``\\\\``), and failing cases past the three named are
counted (``and 4 more``). Look-alike letters of another script mixed into a
name (a Cyrillic ``е`` in ``tеst_ok``), compatibility forms (fullwidth,
mathematical letters) and characters that are neither letters nor digits
outside ASCII (a ``″`` that draws like the closing quote) show as their code
points.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from fs_verifier_helpers import CLAIM, context, details, root_fixture, verifier_for, write

from agentium_harness.plugin_api import Verdict

pytestmark = pytest.mark.anyio

root = root_fixture()

RECORD = "reports/junit.xml"

#: The list as the README gives it: quoted names, ``, `` between, then `` and N more`` if any.
_QUOTED = r'"(?:[^"\\]|\\.)*"'
_LIST = re.compile(rf"failing: ({_QUOTED}(?:, {_QUOTED})*)(?: and ([1-9][0-9]*) more)?$")
_ESCAPE = re.compile(r"\\(?:x([0-9a-f]{2})|u([0-9a-f]{4})|U([0-9a-f]{8})|(.))")


def _unescaped(shown: str) -> str:
    """A shown name back to its text (README's escapes), for names that were not cut."""

    def one(m: re.Match[str]) -> str:
        code = m.group(1) or m.group(2) or m.group(3)
        return chr(int(code, 16)) if code else m.group(4)

    return _ESCAPE.sub(one, shown)


def _listed(detail: str) -> tuple[list[str], int]:
    """The shown names of a ``fail:`` detail, and how many more it says failed."""
    match = _LIST.search(detail)
    assert match is not None, detail
    names = re.findall(_QUOTED, match.group(1))
    return [n[1:-1] for n in names], int(match.group(2) or 0)


def _record(cases: list[tuple[str, str]]) -> bytes:
    body = "".join(
        f'<testcase classname="{html.escape(c, quote=True)}" name="{html.escape(n, quote=True)}">'
        '<failure message="x"/></testcase>'
        for c, n in cases
    )
    return f'<testsuite tests="{len(cases)}">{body}</testsuite>'.encode()


async def _detail(root: Path, cases: list[tuple[str, str]]) -> str:
    write(root / RECORD, _record(cases))
    result = await verifier_for(root, records=(RECORD,)).verify(CLAIM, context())
    assert result.verdict is Verdict.FAIL
    return details(result)[RECORD]


async def test_a_name_holding_the_separator_reads_as_one_name(root: Path) -> None:
    detail = await _detail(root, [("c", "t1, c::t2")])
    assert detail == 'fail: 1 tests ran, 1 failures, 0 errors, 0 skipped; failing: "c::t1, c::t2"'
    assert _listed(detail) == (["c::t1, c::t2"], 0)


TRICKY = [
    'a", "b',
    'x" and 2 more',
    "back\\slash\\",
    '\\"',
    "",
    'quote"',
    "t1, c::t2",
]


@pytest.mark.parametrize("name", TRICKY)
async def test_every_name_reads_back_as_itself_and_the_list_keeps_its_length(root: Path, name: str) -> None:
    # The name between two plain ones: the list reads back as three names, the middle one this one.
    detail = await _detail(root, [("", "first"), ("", name), ("", "last")])
    shown, more = _listed(detail)
    assert more == 0
    assert [_unescaped(s) for s in shown] == ["first", name, "last"], detail
    assert detail.startswith("fail: 3 tests ran, 3 failures, 0 errors, 0 skipped; failing: ")


#: A case's classname and name, and the text it shows as: ``classname::name``, or the one that is
#: not empty, with the colons of its own (every leading and trailing colon was cut off).
COLONS = [
    (("", ":setup"), ":setup"),
    (("c", "t:"), "c::t:"),
    (("", "::"), "::"),
    (("c:", ""), "c:"),
    (("c", ""), "c"),
]


@pytest.mark.parametrize(("case", "text"), COLONS, ids=[t for _, t in COLONS])
async def test_a_names_own_leading_and_trailing_colons_are_kept(
    root: Path, case: tuple[str, str], text: str
) -> None:
    detail = await _detail(root, [("c", "t"), case])
    shown, _ = _listed(detail)
    assert [_unescaped(s) for s in shown] == ["c::t", text], detail


async def test_failing_cases_past_the_three_named_are_counted(root: Path) -> None:
    detail = await _detail(root, [("c", f"t{i}") for i in range(7)])
    assert detail == (
        'fail: 7 tests ran, 7 failures, 0 errors, 0 skipped; failing: "c::t0", "c::t1", "c::t2" and 4 more'
    )


#: A name, and how it shows: look-alikes of another script mixed in, compatibility forms, and
#: characters outside ASCII that are neither letters, digits nor marks, as code points.
LOOK_ALIKES = [
    ("t\u0435st_ok", "t\\u0435st_ok"),  # Cyrillic е among Latin letters
    ("test_\u03bfk", "test_\\u03bfk"),  # Greek omicron
    ("\u0430dmin", "\\u0430dmin"),  # Cyrillic а first
    ("\uff54est", "\\uff54est"),  # fullwidth t
    ("\U0001d42dest", "\\U0001d42dest"),  # mathematical bold t
    ("\ufb01le", "\\ufb01le"),  # the fi ligature
    ("x\u2033, \u2033y", "x\\u2033, \\u2033y"),  # double prime: draws like the closing quote
    ("a\u2236\u2236b", "a\\u2236\\u2236b"),  # ratio signs that draw like the :: separator
    ("test_\U0001f680", "test_\\U0001f680"),  # a symbol
]


@pytest.mark.parametrize(("name", "shown"), LOOK_ALIKES, ids=[s for _, s in LOOK_ALIKES])
async def test_look_alikes_show_as_code_points(root: Path, name: str, shown: str) -> None:
    detail = await _detail(root, [("", name)])
    assert _listed(detail) == ([shown], 0), detail
    assert name not in detail


#: Names in one script, or Latin with Han, Hiragana and Katakana (Unicode's "highly restrictive"
#: mix), with ASCII digits and punctuation: shown as they are.
READABLE = ["тест_вход", "caf\u00e9_crème", "test_ログイン_漢字", "테스트_한국어", "ελληνικά_2", "Straße"]


@pytest.mark.parametrize("name", READABLE)
async def test_names_in_one_script_show_as_themselves(root: Path, name: str) -> None:
    detail = await _detail(root, [("", name)])
    assert _listed(detail) == ([name], 0), detail


async def test_a_look_alike_name_and_the_name_it_imitates_show_differently(root: Path) -> None:
    detail = await _detail(root, [("c", "test_login"), ("c", "test_l\u043egin")])
    shown, _ = _listed(detail)
    assert shown == ["c::test_login", "c::test_l\\u043egin"]
    assert [_unescaped(s) for s in shown] == ["c::test_login", "c::test_l\u043egin"]


async def test_a_quoted_count_escapes_its_quote(root: Path) -> None:
    # A count attribute is quoted with ' in an unparseable record's detail: its own ' is escaped.
    write(root / RECORD, b'<testsuite tests="1" failures="0\' or \'1"/>')
    result = await verifier_for(root, records=(RECORD,)).verify(CLAIM, context())
    assert result.verdict is Verdict.UNKNOWN
    assert details(result)[RECORD] == (
        "unknown: unparseable: <testsuite> has failures='0\\' or \\'1', not a count"
    )
