"""JUnit XML test records, parsed with defusedxml and summarized as counts.

A record may be written by the model's own tools, so it is untrusted input:
it is parsed with :mod:`defusedxml` with DTDs forbidden (a JUnit record never
needs one), which refuses entity-expansion bombs and external entities
before anything is expanded. It is counted as it is parsed (no tree is
built) and may nest at most :data:`MAX_DEPTH` elements deep, so its memory
stays near its size. Only counts and a few test names (shortened, with every
character that does not show as itself escaped: see :func:`~._visible.visible`) come out of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final
from xml.etree.ElementTree import ParseError

import attrs
from defusedxml import DefusedXmlException
from defusedxml.ElementTree import DefusedXMLParser

from ._confined import EvidenceUnavailable
from ._visible import visible

__all__ = ["FEED_BYTES", "MAX_DEPTH", "TestCounts", "parse_junit"]

#: Bytes fed to the parser per step; the time and cancel checks run between steps.
FEED_BYTES: Final = 64 * 1024

#: Deepest nesting of elements a record may have: JUnit records nest a few levels (suites in
#: suites, a test case, its failure); expat keeps every open tag, so depth is bounded too.
MAX_DEPTH: Final = 256

_ROOTS: Final = ("testsuites", "testsuite")
_NAME_CHARS: Final = 60
_NAMES: Final = 3


@attrs.frozen(slots=True)
class TestCounts:
    """What one record reports: test cases, those that ran, failures, errors, skips, failing names."""

    __test__ = False  # not a pytest test class, despite the name

    cases: int
    failures: int
    errors: int
    skipped: int
    #: The first failing cases' names, as :func:`~._visible.visible` shows them (unquoted).
    failing: tuple[str, ...] = ()
    #: How many test cases hold a ``<failure>`` or ``<error>`` (``failing`` names the first ones).
    failing_cases: int = 0

    @property
    def ran(self) -> int:
        """Test cases that were not skipped."""
        return self.cases - self.skipped

    def describe(self) -> str:
        """``"3 tests ran, 0 failures, 0 errors, 1 skipped"``."""
        return f"{self.ran} tests ran, {self.failures} failures, {self.errors} errors, {self.skipped} skipped"

    def describe_failing(self) -> str:
        r"""The failing cases named: ``"c::t1", "c::t2" and 4 more``; empty when none is named.

        Each name is in double quotes, with a ``"`` or a backslash in it
        written ``\"`` or ``\\`` (and what does not show as itself as its code
        point: :func:`~._visible.visible`), so a name holding ``", "`` reads as
        one name, never as two. ``and N more`` counts the failing cases past
        those named; the failure and error counts are :meth:`describe`'s.
        """
        if not self.failing:
            return ""
        more = self.failing_cases - len(self.failing)
        return ", ".join(f'"{name}"' for name in self.failing) + (f" and {more} more" if more > 0 else "")


def _count(tag: str, attrib: dict[str, str], name: str) -> int:
    raw = attrib.get(name)
    if raw is None:
        return 0
    try:
        value = int(raw.strip())
    except ValueError:
        shown = visible(raw, 20, quote="'")
        raise EvidenceUnavailable(f"unparseable: <{tag}> has {name}='{shown}', not a count") from None
    if value < 0:
        raise EvidenceUnavailable(f"unparseable: <{tag}> has a negative {name}")
    return value


def _name(attrib: dict[str, str]) -> str:
    """``classname::name`` as shown between double quotes; the one that is not empty; empty for neither.

    Only the separator is left out for an empty part: a name's own leading or trailing colons
    (``t:``, ``::``) are its text, and cut off they showed it as another name (``t``, nothing).
    """
    classname, name = attrib.get("classname", ""), attrib.get("name", "")
    raw = f"{classname}::{name}" if classname and name else classname or name
    return visible(raw, _NAME_CHARS, quote='"')


class _Case:
    """An open ``<testcase>``: its attributes and the tags of its direct children so far."""

    __slots__ = ("attrib", "children")

    def __init__(self, attrib: dict[str, str]) -> None:
        self.attrib = attrib  # its name is made only if it fails: most cases never need it
        self.children: set[str] = set()


class _Counter:
    """A parser target that counts as elements open and close, keeping no tree.

    An ``ElementTree`` of a record holds every element: an 8 MiB record of
    ``<testcase/>`` took close to 1 GB, and one nested millions deep as
    much again inside expat. Counting on the fly holds only the open
    elements, and refusing to nest deeper than :data:`MAX_DEPTH` stops expat
    before its own stack of open tags grows: memory stays near the record's
    size whatever its shape.
    """

    def __init__(self) -> None:
        # One entry per open element: a _Case for a <testcase>, None for anything else.
        self._open: list[_Case | None] = []
        self._root: str | None = None
        self.attr_failures = self.attr_errors = 0
        self.cases = self.failures = self.errors = self.skipped = 0
        self.failing: list[str] = []
        self.failing_cases = 0

    def start(self, tag: str, attrib: dict[str, str]) -> None:
        if self._root is None:
            self._root = tag
            if tag not in _ROOTS:
                raise EvidenceUnavailable(
                    f"unparseable: root element <{visible(tag, 40)}> is not <testsuites> or <testsuite>"
                )
        if len(self._open) >= MAX_DEPTH:
            raise EvidenceUnavailable(f"unparseable: elements nested more than {MAX_DEPTH} deep")
        parent = self._open[-1] if self._open else None
        if parent is not None:
            parent.children.add(tag)
        # The suites whose counts are read: every <testsuite>, and a <testsuites> root.
        if tag == "testsuite" or (tag == "testsuites" and not self._open):
            self.attr_failures = max(self.attr_failures, _count(tag, attrib, "failures"))
            self.attr_errors = max(self.attr_errors, _count(tag, attrib, "errors"))
        self._open.append(_Case(attrib) if tag == "testcase" else None)

    def end(self, tag: str) -> None:
        case = self._open.pop()
        if case is None:
            return
        self.cases += 1
        tags = case.children
        if "failure" in tags:
            self.failures += 1
        if "error" in tags:
            self.errors += 1
        if tags & {"failure", "error"}:
            self.failing_cases += 1
            if len(self.failing) < _NAMES:
                self.failing.append(_name(case.attrib))
        elif "skipped" in tags:
            self.skipped += 1

    def data(self, data: str) -> None:
        """Text (failure messages, output) is not evidence: dropped as it comes."""

    def close(self) -> None:
        """The document ended (the parser has checked it is well-formed)."""

    def counts(self) -> TestCounts:
        """What the record reports; a suite's attribute counts when it says more than its cases."""
        return TestCounts(
            cases=self.cases,
            failures=max(self.failures, self.attr_failures),
            errors=max(self.errors, self.attr_errors),
            skipped=self.skipped,
            failing=tuple(self.failing),
            failing_cases=self.failing_cases,
        )


def _parse(data: bytes, check: Callable[[], None]) -> TestCounts:
    # defusedxml's parser, fed in steps: it is the pure-Python one, so one
    # multi-megabyte feed could run for seconds without a chance to stop.
    counter = _Counter()
    parser = DefusedXMLParser(target=counter, forbid_dtd=True, forbid_entities=True, forbid_external=True)
    for start in range(0, len(data), FEED_BYTES):
        check()
        parser.feed(data[start : start + FEED_BYTES])
    check()
    parser.close()  # raises ParseError when the document is incomplete
    return counter.counts()


def parse_junit(data: bytes, check: Callable[[], None] = lambda: None) -> TestCounts:
    """Count the test cases, failures, errors and skips of a JUnit XML record.

    A failure or error is counted when a ``<testcase>`` holds a ``<failure>``
    or ``<error>`` element, or when a suite's ``failures`` / ``errors``
    attribute says so (the larger of the two counts is kept, so a record
    cannot hide a failing test by leaving the attribute at zero or the other
    way round).

    The bytes are fed to the parser in steps of :data:`FEED_BYTES` with
    ``check()`` before each, so a record that is slow to parse (millions of
    elements) cannot hold the worker past the time bound. Elements are counted
    as they are parsed and no tree is kept, so memory follows the record's
    size, not its element count.

    :raises EvidenceUnavailable: the bytes are not well-formed XML, declare a DTD,
        entities or an encoding expat cannot decode, nest elements more than
        :data:`MAX_DEPTH` deep, or are not a JUnit record.
    """
    try:
        return _parse(data, check)
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
