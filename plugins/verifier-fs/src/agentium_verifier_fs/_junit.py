"""JUnit XML test records, parsed with defusedxml and summarized as counts.

A record may be written by the model's own tools, so it is untrusted input:
it is parsed with :mod:`defusedxml` with DTDs forbidden (a JUnit record never
needs one), which refuses entity-expansion bombs and external entities
before anything is expanded. Only counts and a few test names (shortened,
control characters removed) come out of it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final
from xml.etree.ElementTree import Element, ParseError, TreeBuilder

import attrs
from defusedxml import DefusedXmlException
from defusedxml.ElementTree import DefusedXMLParser

from ._confined import EvidenceUnavailable

__all__ = ["FEED_BYTES", "TestCounts", "parse_junit"]

#: Bytes fed to the parser per step; the time and cancel checks run between steps.
FEED_BYTES: Final = 64 * 1024

_ROOTS: Final = ("testsuites", "testsuite")
_NAME_CHARS: Final = 60
_NAMES: Final = 3
#: C0, DEL, C1 (NEL U+0085 ends a line for str.splitlines and many viewers) and the Unicode
#: line and paragraph separators: each would break a name across lines of the evidence.
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


@attrs.frozen(slots=True)
class TestCounts:
    """What one record reports: test cases, those that ran, failures, errors, skips, failing names."""

    __test__ = False  # not a pytest test class, despite the name

    cases: int
    failures: int
    errors: int
    skipped: int
    failing: tuple[str, ...] = ()

    @property
    def ran(self) -> int:
        """Test cases that were not skipped."""
        return self.cases - self.skipped

    def describe(self) -> str:
        """``"3 tests ran, 0 failures, 0 errors, 1 skipped"``."""
        return f"{self.ran} tests ran, {self.failures} failures, {self.errors} errors, {self.skipped} skipped"


def _count(element: Element, name: str) -> int:
    raw = element.get(name)
    if raw is None:
        return 0
    try:
        value = int(raw.strip())
    except ValueError:
        shown = raw[:20]
        raise EvidenceUnavailable(f"unparseable: <{element.tag}> has {name}={shown!r}, not a count") from None
    if value < 0:
        raise EvidenceUnavailable(f"unparseable: <{element.tag}> has a negative {name}")
    return value


def _name(case: Element) -> str:
    raw = f"{case.get('classname', '')}::{case.get('name', '')}".strip(":")
    clean = _CONTROL.sub(" ", raw) or "(unnamed)"
    return clean if len(clean) <= _NAME_CHARS else clean[: _NAME_CHARS - 1] + "…"


def _parse(data: bytes, check: Callable[[], None]) -> Element:
    # defusedxml's fromstring, fed in steps: its parser is the pure-Python one, so one
    # multi-megabyte feed could run for seconds without a chance to stop.
    parser = DefusedXMLParser(
        target=TreeBuilder(), forbid_dtd=True, forbid_entities=True, forbid_external=True
    )
    for start in range(0, len(data), FEED_BYTES):
        check()
        parser.feed(data[start : start + FEED_BYTES])
    check()
    root: Element = parser.close()
    return root


def parse_junit(data: bytes, check: Callable[[], None] = lambda: None) -> TestCounts:
    """Count the test cases, failures, errors and skips of a JUnit XML record.

    A failure or error is counted when a ``<testcase>`` holds a ``<failure>``
    or ``<error>`` element, or when a suite's ``failures`` / ``errors``
    attribute says so (the larger of the two counts is kept, so a record
    cannot hide a failing test by leaving the attribute at zero or the other
    way round).

    The bytes are fed to the parser in steps of :data:`FEED_BYTES` with
    ``check()`` before each, so a record that is slow to parse (deep nesting,
    millions of elements) cannot hold the worker past the time bound.

    :raises EvidenceUnavailable: the bytes are not well-formed XML, declare a DTD,
        entities or an encoding expat cannot decode, or are not a JUnit record.
    """
    try:
        root = _parse(data, check)
    except DefusedXmlException as exc:
        raise EvidenceUnavailable(
            f"refused: the XML declares a DTD or entities ({type(exc).__name__}); a test record needs neither"
        ) from None
    except ParseError as exc:
        raise EvidenceUnavailable(f"unparseable: not well-formed XML ({exc})") from None
    except (ValueError, LookupError):
        # The record's own XML declaration picks the decoder: expat refuses a multi-byte
        # one (shift_jis) with ValueError and an unknown name with LookupError. Untrusted
        # bytes must make the record unknown, never escape verify() as a bare error. The
        # error's text is left out: it quotes the declared name, of any length.
        raise EvidenceUnavailable(
            "unparseable: the XML declares an encoding it cannot be read in (multi-byte or unknown)"
        ) from None
    if root.tag not in _ROOTS:
        tag = root.tag[:40]
        raise EvidenceUnavailable(f"unparseable: root element <{tag}> is not <testsuites> or <testsuite>")
    suites = [root, *root.iter("testsuite")] if root.tag == "testsuites" else list(root.iter("testsuite"))
    attr_failures = max((_count(s, "failures") for s in suites), default=0)
    attr_errors = max((_count(s, "errors") for s in suites), default=0)
    cases = failures = errors = skipped = 0
    failing: list[str] = []
    for case in root.iter("testcase"):
        cases += 1
        tags = {child.tag for child in case}
        if "failure" in tags:
            failures += 1
        if "error" in tags:
            errors += 1
        if tags & {"failure", "error"}:
            if len(failing) < _NAMES:
                failing.append(_name(case))
        elif "skipped" in tags:
            skipped += 1
    return TestCounts(
        cases=cases,
        failures=max(failures, attr_failures),
        errors=max(errors, attr_errors),
        skipped=skipped,
        failing=tuple(failing),
    )
