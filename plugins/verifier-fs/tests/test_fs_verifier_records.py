"""JUnit XML test records: fresh, well-formed, at least one test run, no failures — or a clear outcome."""

from __future__ import annotations

import os
import re
import sys
import time
import tracemalloc
from pathlib import Path

import anyio
import pytest
from fs_verifier_helpers import (
    ARTIFACT_BYTES,
    CLAIM,
    context,
    details,
    junit,
    root_fixture,
    verifier_for,
    write,
)

from agentium_harness.plugin_api import OpContext, Verdict

pytestmark = pytest.mark.anyio

root = root_fixture()

RECORD = "reports/junit.xml"

BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
 <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
 <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
 <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
 <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<testsuites><testsuite tests="1"><testcase name="&lol9;"/></testsuite></testsuites>"""

EXTERNAL_ENTITY = b"""<?xml version="1.0"?>
<!DOCTYPE t [<!ENTITY secret SYSTEM "file:///etc/passwd">]>
<testsuite tests="1"><testcase name="&secret;"/></testsuite>"""


def _shown_names(detail: str) -> list[str]:
    """The names a ``fail:`` detail lists, as shown (each between double quotes, README)."""
    return re.findall(r'"((?:[^"\\]|\\.)*)"', detail.split("; failing: ", 1)[1])


async def _record(root: Path, data: bytes, **ctx: float) -> tuple[Verdict, str]:
    write(root / RECORD, data)
    result = await verifier_for(root, records=(RECORD,)).verify(CLAIM, context(**ctx))
    return result.verdict, details(result)[RECORD]


async def test_a_fresh_passing_record_passes(root: Path) -> None:
    assert await _record(root, junit(tests=3, skipped=1)) == (
        Verdict.PASS,
        "pass: 2 tests ran, 0 failures, 0 errors, 1 skipped",
    )


async def test_a_single_testsuite_root_is_accepted(root: Path) -> None:
    data = b'<testsuite name="x" tests="1"><testcase classname="c" name="t"/></testsuite>'
    assert (await _record(root, data))[0] is Verdict.PASS


async def test_failures_fail_and_name_the_failing_tests(root: Path) -> None:
    verdict, detail = await _record(root, junit(tests=5, failures=2))
    assert verdict is Verdict.FAIL
    assert detail == (
        "fail: 5 tests ran, 2 failures, 0 errors, 0 skipped; "
        'failing: "tests.test_x::test_0", "tests.test_x::test_1"'
    )


async def test_errors_fail(root: Path) -> None:
    assert (await _record(root, junit(tests=3, errors=1)))[0] is Verdict.FAIL


async def test_a_failure_count_without_failure_elements_still_fails(root: Path) -> None:
    data = b'<testsuites><testsuite tests="1" failures="1"><testcase name="t"/></testsuite></testsuites>'
    verdict, detail = await _record(root, data)
    assert verdict is Verdict.FAIL
    assert "1 failures" in detail


async def test_a_record_older_than_the_run_is_stale(root: Path) -> None:
    write(root / RECORD, junit())
    an_hour_ago = time.time() - 3600
    os.utime(root / RECORD, (an_hour_ago, an_hour_ago))
    result = await verifier_for(root, records=(RECORD,)).verify(CLAIM, context(started=time.time() - 60))
    assert result.verdict is Verdict.UNKNOWN
    assert details(result)[RECORD].startswith("unknown: stale: last written 3540.")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the coarse clock's lag is Linux's")
async def test_a_record_stamped_in_the_runs_first_clock_tick_is_not_stale(root: Path) -> None:
    """Linux stamps a write from its coarse clock, up to one tick behind ``time.time()``.

    A record written in the run's first tick can carry a time just before
    the run's start (CI saw "stale: last written 0.000s before the run
    started" for a record the run itself wrote): half a tick earlier is the
    run's own record, an hour earlier is stale.
    """
    started = time.time()
    write(root / RECORD, junit())  # its ctime: at most one tick before ``started``
    half_a_tick = time.clock_getres(getattr(time, "CLOCK_REALTIME_COARSE", 5)) / 2
    os.utime(root / RECORD, (started - half_a_tick, started - half_a_tick))
    result = await verifier_for(root, records=(RECORD,)).verify(CLAIM, context(started=started))
    assert result.verdict is Verdict.PASS, details(result)
    os.utime(root / RECORD, (started - 3600, started - 3600))
    result = await verifier_for(root, records=(RECORD,)).verify(CLAIM, context(started=started))
    assert details(result)[RECORD].startswith("unknown: stale: last written 3600.")


async def test_a_stale_failing_record_is_unknown_not_fail(root: Path) -> None:
    """Failures from an earlier run say nothing about this run."""
    write(root / RECORD, junit(tests=2, failures=2))
    os.utime(root / RECORD, (1_000_000, 1_000_000))
    result = await verifier_for(root, records=(RECORD,)).verify(CLAIM, context())
    assert result.verdict is Verdict.UNKNOWN


async def test_a_record_from_before_the_run_with_a_future_mtime_is_stale(root: Path) -> None:
    """touch -d tomorrow on an old record: its ctime still says when it was last changed."""
    write(root / RECORD, junit())
    tomorrow = time.time() + 86400
    os.utime(root / RECORD, (tomorrow, tomorrow))
    await anyio.sleep(0.05)  # past the file system's timestamp tick
    result = await verifier_for(root, records=(RECORD,)).verify(CLAIM, context(started=time.time()))
    assert result.verdict is Verdict.UNKNOWN
    # Changed 0.05 s before the run started, or more on a stalled machine: not tomorrow's mtime.
    stale = re.fullmatch(
        r"unknown: stale: last written (\d+\.\d{3})s before the run started", details(result)[RECORD]
    )
    assert stale is not None and float(stale.group(1)) < 60, details(result)[RECORD]


REPORT = "dist/report.txt"


def _ten_seconds_ago(path: Path) -> float:
    """Set ``path``'s times ten seconds back (within the run, which started a minute ago)."""
    then = time.time() - 10
    os.utime(path, (then, then))
    return then


async def test_a_record_written_before_the_artifact_last_changed_is_stale(root: Path) -> None:
    """The tests ran on an earlier artifact: their record says nothing about the one there now."""
    write(root / RECORD, junit(tests=3))
    _ten_seconds_ago(root / RECORD)
    write(root / REPORT, ARTIFACT_BYTES)  # the artifact changes after the tests ran
    result = await verifier_for(root, REPORT, records=(RECORD,)).verify(CLAIM, context())
    assert result.verdict is Verdict.UNKNOWN
    assert details(result)[REPORT].startswith("pass: sha256")  # the artifact itself is right...
    assert details(result)[RECORD].startswith("unknown: stale: last written 1")  # ...but untested
    assert f"before artifact {REPORT!r} last changed" in details(result)[RECORD]


async def test_backdating_the_artifact_does_not_hide_its_change(root: Path) -> None:
    write(root / RECORD, junit(tests=3))
    _ten_seconds_ago(root / RECORD)
    write(root / REPORT, ARTIFACT_BYTES)
    earlier = time.time() - 30  # touch -d: the modification time now predates the record
    os.utime(root / REPORT, (earlier, earlier))
    result = await verifier_for(root, REPORT, records=(RECORD,)).verify(CLAIM, context())
    assert result.verdict is Verdict.UNKNOWN and "stale" in details(result)[RECORD]


async def test_a_future_mtime_does_not_make_a_record_newer_than_the_artifact(root: Path) -> None:
    write(root / RECORD, junit(tests=3))
    tomorrow = time.time() + 86400
    os.utime(root / RECORD, (tomorrow, tomorrow))
    await anyio.sleep(0.05)
    write(root / REPORT, ARTIFACT_BYTES)  # the artifact changes after the tests ran
    result = await verifier_for(root, REPORT, records=(RECORD,)).verify(CLAIM, context())
    assert result.verdict is Verdict.UNKNOWN
    assert f"before artifact {REPORT!r} last changed" in details(result)[RECORD]


async def test_a_record_written_after_the_artifact_passes(root: Path) -> None:
    write(root / REPORT, ARTIFACT_BYTES)
    await anyio.sleep(0.05)  # past the file system's timestamp tick
    write(root / RECORD, junit(tests=3))
    result = await verifier_for(root, REPORT, records=(RECORD,)).verify(CLAIM, context())
    assert result.verdict is Verdict.PASS, result.reason


@pytest.mark.parametrize(
    "data",
    [
        b"<testsuites><testsuite><testcase>",
        b"not xml at all",
        b"",
        b"\xff\xfe<\x00t\x00",
    ],
)
async def test_malformed_xml_is_unknown(root: Path, data: bytes) -> None:
    verdict, detail = await _record(root, data)
    assert verdict is Verdict.UNKNOWN
    assert detail.startswith("unknown: unparseable: not well-formed XML")


@pytest.mark.parametrize("encoding", ["shift_jis", "euc-jp", "utf-7", "no-such-codec"])
async def test_a_record_declaring_an_unreadable_encoding_is_unknown(root: Path, encoding: str) -> None:
    # The record is untrusted: its declaration must not make verify() raise ValueError/LookupError.
    data = f'<?xml version="1.0" encoding="{encoding}"?><testsuite><testcase name="t"/></testsuite>'
    verdict, detail = await _record(root, data.encode())
    assert verdict is Verdict.UNKNOWN
    assert detail.startswith("unknown: unparseable: the XML declares an encoding it cannot be read in")


async def test_a_long_declared_encoding_is_not_copied_into_the_evidence(root: Path) -> None:
    """One oversized entry would push every other entry out of the evidence budget."""
    data = f'<?xml version="1.0" encoding="{"x" * 100_000}"?><testsuite><testcase name="t"/></testsuite>'
    verdict, detail = await _record(root, data.encode())
    assert verdict is Verdict.UNKNOWN
    assert len(detail) < 200 and "xxxx" not in detail


async def test_a_billion_laughs_bomb_is_refused_before_expansion(root: Path) -> None:
    verdict, detail = await _record(root, BILLION_LAUGHS)
    assert (verdict, detail) == (
        Verdict.UNKNOWN,
        "unknown: refused: the XML declares a DTD or entities (DTDForbidden); a test record needs neither",
    )


async def test_an_external_entity_is_refused(root: Path) -> None:
    verdict, detail = await _record(root, EXTERNAL_ENTITY)
    assert verdict is Verdict.UNKNOWN
    assert "refused: the XML declares a DTD" in detail


async def _peak(root: Path, data: bytes) -> tuple[tuple[Verdict, str], int]:
    """The outcome of ``data`` as the record, and the peak Python allocation (expat's too) verifying it."""
    write(root / RECORD, data)
    # Tracing every allocation of a 4 MiB parse slows it several times over (3 s on a quiet machine,
    # past 30 s on a loaded one): the verifier's own read bound (30 s by default) and the call's
    # deadline both stop only a hang here; this test measures memory, not time.
    verifier = verifier_for(root, records=(RECORD,), read_timeout_s=120.0)
    tracemalloc.start()
    try:
        result = await verifier.verify(CLAIM, context(op=OpContext.with_timeout(120.0)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return (result.verdict, details(result)[RECORD]), peak


async def test_a_record_of_many_elements_is_counted_in_memory_near_its_size(root: Path) -> None:
    # 4 MiB of <testcase/>: as an ElementTree over 35 MB traced (far more resident); counted as
    # it is parsed, the bytes themselves (read, then joined) and little more.
    cases = 4 * 1024**2 // len(b"<testcase/>")
    outcome, peak = await _peak(root, b"<testsuite>" + b"<testcase/>" * cases + b"</testsuite>")
    assert outcome == (Verdict.PASS, f"pass: {cases} tests ran, 0 failures, 0 errors, 0 skipped")
    assert peak < 16 * 1024**2, f"peak Python allocation {peak} bytes"


async def test_a_record_nested_a_million_deep_is_refused_without_holding_every_open_tag(root: Path) -> None:
    depth = 1_000_000  # 3 MB of <a>: expat alone kept hundreds of bytes per open tag
    outcome, peak = await _peak(root, b"<testsuites>" + b"<a>" * depth + b"</a>" * depth + b"</testsuites>")
    assert outcome == (Verdict.UNKNOWN, "unknown: unparseable: elements nested more than 256 deep")
    assert peak < 16 * 1024**2, f"peak Python allocation {peak} bytes"


async def test_a_record_nested_256_deep_is_read(root: Path) -> None:
    suites = 254  # <testsuites>, 254 suites and the test case: 256 open elements at the deepest
    data = b"<testsuites>" + b"<testsuite>" * suites + b'<testcase name="t"/>' + b"</testsuite>" * suites
    assert await _record(root, data + b"</testsuites>") == (
        Verdict.PASS,
        "pass: 1 tests ran, 0 failures, 0 errors, 0 skipped",
    )


async def test_a_failure_deep_in_nested_suites_still_fails(root: Path) -> None:
    data = (
        b'<testsuites><testsuite failures="0"><testsuite><testcase name="ok"/>'
        b'<testcase classname="c" name="bad"><failure>x</failure><system-out>y</system-out></testcase>'
        b'</testsuite><testsuite errors="2"/></testsuite></testsuites>'
    )
    assert await _record(root, data) == (
        Verdict.FAIL,
        'fail: 2 tests ran, 1 failures, 2 errors, 0 skipped; failing: "c::bad"',
    )


async def test_a_record_with_zero_tests_is_unknown(root: Path) -> None:
    data = b'<testsuites><testsuite name="empty" tests="0"/></testsuites>'
    assert await _record(root, data) == (
        Verdict.UNKNOWN,
        "unknown: holds no test that ran (0 tests ran, 0 failures, 0 errors, 0 skipped)",
    )


async def test_a_record_whose_tests_were_all_skipped_is_unknown(root: Path) -> None:
    assert (await _record(root, junit(tests=2, skipped=2)))[0] is Verdict.UNKNOWN


async def test_xml_that_is_not_junit_is_unknown(root: Path) -> None:
    verdict, detail = await _record(root, b"<html><body>all tests passed</body></html>")
    assert (verdict, detail) == (
        Verdict.UNKNOWN,
        "unknown: unparseable: root element <html> is not <testsuites> or <testsuite>",
    )


async def test_a_count_that_is_not_a_number_is_unknown(root: Path) -> None:
    data = b'<testsuite tests="1" failures="none"><testcase name="t"/></testsuite>'
    verdict, detail = await _record(root, data)
    assert verdict is Verdict.UNKNOWN
    assert detail == "unknown: unparseable: <testsuite> has failures='none', not a count"


async def test_a_record_over_its_size_bound_is_not_read(root: Path) -> None:
    write(root / RECORD, junit(tests=200))
    size = (root / RECORD).stat().st_size
    result = await verifier_for(root, records=(RECORD,), max_record_bytes=1024).verify(CLAIM, context())
    assert result.verdict is Verdict.UNKNOWN
    assert details(result)[RECORD] == (
        f"unknown: too large: {size} bytes, more than max_record_bytes=1024; not read"
    )


async def test_a_missing_record_is_unknown(root: Path) -> None:
    result = await verifier_for(root, records=(RECORD,)).verify(CLAIM, context())
    assert details(result)[RECORD] == "unknown: missing: directory 'reports' does not exist"


async def test_failing_test_names_are_shortened_and_cleaned(root: Path) -> None:
    name = "\x7f" + "x" * 200  # DEL: a control character XML 1.0 allows
    data = f'<testsuite tests="1"><testcase name="{name}"><failure/></testcase></testsuite>'.encode()
    verdict, detail = await _record(root, data)
    assert verdict is Verdict.FAIL
    (shown,) = _shown_names(detail)
    assert len(shown) == 60 and shown.endswith("…") and "\x7f" not in detail
    assert shown.startswith("\\x7fxxx")


async def test_a_shortened_name_is_never_cut_inside_an_escape(root: Path) -> None:
    name = "x" * 56 + "\U000e0041" * 3  # the first escape (10 characters) does not fit in 60
    data = f'<testsuite tests="1"><testcase name="{name}"><failure/></testcase></testsuite>'.encode()
    verdict, detail = await _record(root, data)
    assert verdict is Verdict.FAIL
    assert detail.endswith('failing: "' + "x" * 56 + '…"')


async def test_failing_test_names_show_c1_controls_and_line_separators_escaped(root: Path) -> None:
    """XML 1.0 allows NEL (U+0085) and U+2028/2029, which end a line for str.splitlines and viewers."""
    name = "a\x85b\u2028c\u2029d\x9be\x7ff"
    data = f'<testsuite tests="1"><testcase name="{name}"><failure/></testcase></testsuite>'.encode()
    verdict, detail = await _record(root, data)
    assert verdict is Verdict.FAIL
    assert detail.endswith('failing: "a\\x85b\\u2028c\\u2029d\\x9be\\x7ff"') and len(detail.splitlines()) == 1


#: Every bidirectional-text control: embeddings and overrides (U+202A-U+202E), isolates
#: (U+2066-U+2069), the left-to-right and right-to-left marks and the Arabic letter mark.
BIDI_CONTROLS = [chr(c) for c in range(0x202A, 0x202F)] + [chr(c) for c in range(0x2066, 0x206A)]
BIDI_CONTROLS += ["\u200e", "\u200f", "\u061c"]


def _failing_one(name: str) -> bytes:
    return (
        '<testsuite tests="1" failures="1">'
        f'<testcase classname="c" name="{name}"><failure message="x"/></testcase></testsuite>'
    ).encode()


def _code(char: str) -> str:
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


@pytest.mark.parametrize("control", BIDI_CONTROLS, ids=[f"U+{ord(c):04X}" for c in BIDI_CONTROLS])
async def test_bidirectional_controls_in_a_failing_test_name_are_escaped(root: Path, control: str) -> None:
    """A failing test's name is shown to the model and the operator: it must read as it is stored.

    ``test_ok\u202e)deliaf(`` displays as ``test_ok(failed)`` reversed; an
    override or isolate in a name can make the evidence look like other text
    (another test, a ``pass:``). They show as their code point, like every
    character that does not draw as itself.
    """
    verdict, detail = await _record(root, _failing_one(f"test_ok{control}deliaf :ssap"))
    assert verdict is Verdict.FAIL
    assert detail == (
        "fail: 1 tests ran, 1 failures, 0 errors, 0 skipped; "
        f'failing: "c::test_ok{_code(control)}deliaf :ssap"'
    )
    assert not any(c in detail for c in BIDI_CONTROLS)


#: Characters that draw nothing: zero-width space, non-joiner, joiner, word joiner, invisible
#: operators, no-break space U+FEFF, soft hyphen, Mongolian vowel separator, and the tag
#: characters (U+E0001, U+E0020-U+E007F: "invisible ASCII" a model reads); plus the printable
#: ones (combining grapheme joiner, Hangul fillers, variation selectors) and spaces that look
#: like U+0020. Each makes a name that draws like another, or hides text in it.
HIDDEN = ["\u200b", "\u200c", "\u200d", "\u2060", "\u2061", "\u2064", "\ufeff", "\u00ad", "\u180e"]
HIDDEN += ["\U000e0001", "\U000e0020", "\U000e0041", "\U000e007f"]
HIDDEN += ["\u034f", "\u115f", "\u3164", "\uffa0", "\ufe0f", "\U000e0100", "\u00a0", "\u3000"]


@pytest.mark.parametrize("hidden", HIDDEN, ids=[f"U+{ord(c):04X}" for c in HIDDEN])
async def test_invisible_characters_in_a_failing_test_name_are_escaped(root: Path, hidden: str) -> None:
    """``test_ok\u200b`` draws as ``test_ok``: shown, it names its hidden character."""
    verdict, detail = await _record(root, _failing_one(f"test_ok{hidden}more"))
    assert verdict is Verdict.FAIL
    assert detail.endswith(f'failing: "c::test_ok{_code(hidden)}more"')
    assert hidden not in detail


async def test_text_hidden_in_tag_characters_shows(root: Path) -> None:
    """Tag characters spell ASCII no viewer draws (a model reads it): each shows as its code point."""
    smuggled = "".join(chr(0xE0000 + ord(c)) for c in "pass")
    verdict, detail = await _record(root, _failing_one(f"t{smuggled}"))
    assert verdict is Verdict.FAIL
    assert detail.endswith('failing: "c::t\\U000e0070\\U000e0061\\U000e0073\\U000e0073"')


async def test_names_that_draw_alike_show_differently(root: Path) -> None:
    """A real zero-width space, the text of its escape, and no character at all are three names."""
    names = ["test_ok", "test\u200b_ok", "test\\u200b_ok"]
    cases = "".join(f'<testcase classname="c" name="{n}"><failure/></testcase>' for n in names)
    verdict, detail = await _record(root, f'<testsuite tests="3">{cases}</testsuite>'.encode())
    assert verdict is Verdict.FAIL
    shown = _shown_names(detail)
    assert shown == ["c::test_ok", "c::test\\u200b_ok", "c::test\\\\u200b_ok"]
    assert len(set(shown)) == 3


async def test_an_unparseable_count_shows_hidden_characters_escaped(root: Path) -> None:
    verdict, detail = await _record(root, '<testsuite tests="1" failures="0\u3164\u200b"/>'.encode())
    assert verdict is Verdict.UNKNOWN
    assert detail == "unknown: unparseable: <testsuite> has failures='0\\u3164\\u200b', not a count"


async def test_a_whole_name_ending_in_an_ellipsis_never_shows_as_a_shortened_one(root: Path) -> None:
    """``…`` ends only a name that was cut: a name that holds one shows it escaped.

    The whole name ``x``*50 + ``…`` and the longer ``x``*50 + two tag
    characters (cut before its first escape, which does not fit) showed alike.
    """
    names = ["x" * 50 + "…", "x" * 50 + "\U000e0041\U000e0041"]
    cases = "".join(f'<testcase classname="" name="{n}"><failure/></testcase>' for n in names)
    verdict, detail = await _record(root, f'<testsuite tests="2">{cases}</testsuite>'.encode())
    assert verdict is Verdict.FAIL
    shown = _shown_names(detail)
    assert shown == ["x" * 50 + "\\u2026", "x" * 50 + "…"]


#: Names that draw like another, the same text spelled with other code points (canonically
#: equivalent): a decomposed accent, Hangul conjoining jamo, the Angstrom and Ohm signs, accents
#: in another order; and a combining mark with no character of the name to draw on (first, or
#: after an escape, where it drew on the separator or on the escape's last digit).
EQUIVALENT = [
    ("cafe\u0301", "caf\u00e9", "cafe\\u0301"),
    ("\u1100\u1161", "\uac00", "\u1100\\u1161"),
    ("\u212b", "\u00c5", "\\u212b"),
    ("\u2126", "\u03a9", "\\u2126"),
    ("a\u0307\u0323", "\u1ea1\u0307", "a\\u0307\\u0323"),
    ("\u0301x", "x", "\\u0301x"),
    ("t\u200b\u0338", "t", "t\\u200b\\u0338"),
]


@pytest.mark.parametrize(("name", "alike", "shown"), EQUIVALENT, ids=[s for _, _, s in EQUIVALENT])
async def test_names_spelled_with_other_code_points_show_differently(
    root: Path, name: str, alike: str, shown: str
) -> None:
    """Each name shows its composing or stray mark escaped; the name in its usual spelling shows as itself."""
    cases = "".join(f'<testcase classname="" name="{n}"><failure/></testcase>' for n in (name, alike))
    verdict, detail = await _record(root, f'<testsuite tests="2">{cases}</testsuite>'.encode())
    assert verdict is Verdict.FAIL
    assert _shown_names(detail) == [shown, alike]
