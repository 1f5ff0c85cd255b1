"""What every contract suite shares: the override guard, sample records and tricky keys.

The guard follows langchain-tests' ``test_no_overrides_DO_NOT_OVERRIDE``: a
subclass may not silently replace or delete a standard test. An override is
accepted only when it carries ``@pytest.mark.xfail(reason="…")`` with a
non-empty reason, so a known gap stays visible in every test report.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from typing import Any, ClassVar, TypeVar

import anyio.to_thread
import pytest

from .._engine.checks import instance_problems
from .._ports import PORT_KIND_TABLE, Capabilities, OpContext, is_port_stub
from .._ports._base import capabilities_of
from .helpers import (
    TRICKY_SESSION_KEYS,
    CorruptStored,
    Reopen,
    plain_group,
    reopen,
    rich_group,
)
from .loops import LoopStyle

__all__ = [
    "GUARD_TEST_NAME",
    "TRICKY_SESSION_KEYS",
    "ContractSuite",
    "CorruptStored",
    "Reopen",
    "call_hook",
    "from_threads",
    "plain_group",
    "reopen",
    "rich_group",
    "UndeclaredCapabilityWarning",
    "implements",
    "standard_tests",
    "unmarked_overrides",
]

T = TypeVar("T")
CapT = TypeVar("CapT", bound=Capabilities)

#: Name of the guard test. Overriding it is refused when the class is created.
GUARD_TEST_NAME = "test_no_overrides_DO_NOT_OVERRIDE"


def expired_context() -> OpContext:
    """A context whose signal is already cancelled."""
    ctx = OpContext()
    ctx.signal.cancel("contract test: cancelled before the call")
    return ctx


def past_deadline_context() -> OpContext:
    """A context whose deadline passed a second ago."""
    return OpContext.with_timeout(-1.0)


async def from_threads(work: Callable[[int], Awaitable[T]], backend_name: str, threads: int = 4) -> list[T]:
    """Run ``work(i)`` from ``threads`` threads at once, each on an event loop of its own (any-loop tests).

    Under the trio backend the threads run trio; under asyncio they mix the
    OpenAI Agents SDK's style (a new loop per thread, closed after) with
    ``anyio.run``. This test's own loop stays alive meanwhile. A thread still
    running after 60 s fails the test (a lost wake-up is a hang, not a wait).
    """
    from .loops import run_in_threads

    styles: tuple[LoopStyle, ...] = ("trio",) if backend_name == "trio" else ("asyncio-loop", "asyncio")
    call = partial(run_in_threads, work, threads=threads, styles=styles, timeout_s=60.0)
    return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)


async def call_hook(hook: Callable[..., Any], *args: Any) -> None:
    """Call an adapter author's sync or async hook; skip the test if it says it cannot apply.

    A hook raises ``LookupError`` (what :func:`~agentium_harness.testing.helpers.replace_once`
    raises) when the stored form does not contain what the transform looks
    for; the test then skips with that reason instead of passing untested.
    """
    try:
        result = hook(*args)
        if isinstance(result, Awaitable):
            await result
    except LookupError as exc:
        pytest.skip(f"the corruption hook could not apply its change: {exc}")


def _is_contract(cls: type) -> bool:
    return bool(cls.__dict__.get("__agentium_contract__", False))


def standard_tests(cls: type) -> dict[str, Callable[..., Any]]:
    """The standard test functions ``cls`` inherits from contract suites, by name."""
    tests: dict[str, Callable[..., Any]] = {}
    # Tests of a suite's parts (the erasure tests) come after the suite's own, in every listing.
    bases = [b for b in reversed(cls.__mro__) if _is_contract(b)]
    bases.sort(key=lambda b: bool(b.__dict__.get("__agentium_contract_part__", False)))
    for base in bases:
        for name, value in base.__dict__.items():
            if name.startswith("test_") and callable(value):
                tests[name] = value
    return tests


def _xfail_reason(obj: object) -> str:
    """The non-empty reason of an ``xfail`` mark on ``obj``, or an empty string."""
    marks = getattr(obj, "pytestmark", [])
    for mark in marks if isinstance(marks, list) else [marks]:
        if getattr(mark, "name", None) == "xfail":
            reason = mark.kwargs.get("reason", "")
            if isinstance(reason, str) and reason.strip():
                return reason
    return ""


def unmarked_overrides(cls: type) -> list[str]:
    """Standard tests that ``cls`` (or a non-contract base) overrides or deletes without an xfail reason.

    Each entry reads ``"<name> (overridden in <Class>)"`` or ``"<name> (deleted
    in <Class>)"``. An override decorated with
    ``@pytest.mark.xfail(reason="…")`` (non-empty reason) is allowed.
    """
    problems: list[str] = []
    for name, original in standard_tests(cls).items():
        for klass in cls.__mro__:
            if _is_contract(klass):
                break  # reached the suite itself: not overridden
            if name not in klass.__dict__:
                continue
            value = klass.__dict__[name]
            if value is original:
                break
            if not callable(value):
                problems.append(f"{name} (deleted in {klass.__name__})")
            elif not _xfail_reason(value):
                problems.append(f"{name} (overridden in {klass.__name__})")
            break
    return problems


class ContractSuite:
    """Base of the contract suites; holds the guard against silent overrides.

    Not collected by pytest (its name does not start with ``Test``). Every
    test in a suite runs under the anyio pytest plugin, on each backend the
    ``anyio_backend`` fixture names (asyncio and trio by default; override
    that fixture to narrow it).
    """

    __agentium_contract__: ClassVar[bool] = True
    #: Applied to every test of every subclass, overrides included.
    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]
    #: Fail (instead of warn) when a test is skipped for an undeclared capability the adapter implements.
    strict_capabilities: ClassVar[bool] = False

    @pytest.fixture(autouse=True)
    def _agentium_strictness(self) -> Iterator[None]:
        """Makes the class's ``strict_capabilities`` the rule for the running test."""
        _STRICT["on"] = bool(type(self).strict_capabilities)
        yield
        _STRICT["on"] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not _is_contract(cls) and GUARD_TEST_NAME in cls.__dict__:
            raise TypeError(
                f"{cls.__name__} overrides {GUARD_TEST_NAME}; the guard keeps a suite honest and "
                "cannot be overridden. Mark the standard tests you cannot pass with "
                "@pytest.mark.xfail(reason=...) instead."
            )

    def test_no_overrides_DO_NOT_OVERRIDE(self) -> None:
        """Fails when a subclass overrides or deletes a standard test without ``xfail(reason=...)``.

        A failure means a standard test was replaced (or set to ``None``) in
        your test class. Remove the override so the standard test runs, or
        decorate it with ``@pytest.mark.xfail(reason="why this backend cannot
        pass yet")`` so the gap shows in every report.
        """
        problems = unmarked_overrides(type(self))
        if problems:
            pytest.fail(
                f"{type(self).__name__} changes standard contract tests without an xfail reason: "
                + ", ".join(problems)
                + ". Remove the override, or decorate it with @pytest.mark.xfail(reason='...').",
                pytrace=False,
            )


class UndeclaredCapabilityWarning(UserWarning):
    """A standard test was skipped for an undeclared capability whose method the adapter implements.

    Either the adapter does what it does not declare (the engine never uses
    it, and its tests did not run), or its declaration depends on
    configuration and this instance turned the capability off. Declare it,
    or remove the method. Set ``strict_capabilities = True`` on the test
    class (or ``AGENTIUM_STRICT_CAPABILITIES=1`` in the environment) to fail
    instead of warning.
    """


#: Set for the running test by :meth:`ContractSuite._agentium_strictness` (tests run one at a time).
_STRICT = {"on": False}


def _strict() -> bool:
    return _STRICT["on"] or os.environ.get("AGENTIUM_STRICT_CAPABILITIES", "") not in ("", "0")


def declared_capabilities(adapter: object, cap_class: type[CapT], what: str) -> CapT:
    """What ``adapter`` declares (its instance's declaration if it narrows its class's), or fail the test.

    The declaration is read with :func:`~agentium_harness._ports._base.capabilities_of`,
    so a configurable adapter is tested for what this instance does; an
    instance declaration that is not a valid narrowing of the class's fails.
    """
    caps = capabilities_of(adapter)
    if not isinstance(caps, cap_class):
        pytest.fail(
            f"{what} {type(adapter).__name__} has no {cap_class.__name__} in `capabilities`; declare "
            f"`capabilities = {cap_class.__name__}(...)` in the class body",
            pytrace=False,
        )
    kind = next((k.name for k in PORT_KIND_TABLE if k.capability_class is cap_class), None)
    problems = instance_problems(kind, adapter) if kind is not None else []
    if problems:
        pytest.fail(f"{what} {type(adapter).__name__}: " + "; ".join(problems), pytrace=False)
    return caps


def implements(adapter: object, cap_class: type[Capabilities], flag: str) -> bool:
    """True if ``adapter``'s class (or session class) has a real method behind an undeclared ``flag``.

    A flag the class declares and only this instance turns off (its
    configuration) does not count: the instance must refuse the call, which
    the undeclared-operation tests check.
    """
    method = cap_class.METHODS.get(flag)
    if method is None or getattr(getattr(type(adapter), "capabilities", None), flag, False):
        return False
    owner: object = type(adapter)
    if method.startswith("session:"):
        owner, method = getattr(type(adapter), "session_class", None), method.removeprefix("session:")
    attr = getattr(owner, method, None)
    return attr is not None and callable(attr) and not is_port_stub(attr)


def require_flag(adapter: object, cap_class: type[Capabilities], what: str, flag: str) -> None:
    """Skip the test unless ``adapter`` declares ``flag``; the reason names the flag.

    When the flag is undeclared but its method is implemented, the skip
    comes with an :class:`UndeclaredCapabilityWarning`, or is a failure in
    strict mode (``strict_capabilities = True`` on the test class, or
    ``AGENTIUM_STRICT_CAPABILITIES=1``).
    """
    if getattr(declared_capabilities(adapter, cap_class, what), flag):
        return
    if implements(adapter, cap_class, flag):  # does what it does not declare
        message = (
            f"{what} {type(adapter).__name__} implements {cap_class.METHODS[flag]} but does not declare "
            f"{flag}: the tests of {flag} were skipped. Declare it, or remove the method"
        )
        if _strict():
            pytest.fail(message + " (strict capabilities)", pytrace=False)
        warnings.warn(message, UndeclaredCapabilityWarning, stacklevel=2)
    pytest.skip(f"{what} does not declare {flag}")


def require_not_flag(adapter: object, cap_class: type[Capabilities], what: str, flag: str) -> None:
    """Skip the test when ``adapter`` declares ``flag`` (its own tests cover it)."""
    if getattr(declared_capabilities(adapter, cap_class, what), flag):
        pytest.skip(f"{what} declares {flag}; its behaviour is tested by the {flag} tests")
