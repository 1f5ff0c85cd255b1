"""The guard that keeps subclasses from silently overriding or deleting standard tests."""

from __future__ import annotations

import textwrap

import pytest

from agentium_harness._ports.archive import HistoryArchive
from agentium_harness._ports.sessions import SessionStore
from agentium_harness.adapters.memory import InMemoryArchive, InMemorySessionStore
from agentium_harness.testing.contracts import (
    GUARD_TEST_NAME,
    ArchiveContract,
    SessionStoreContract,
    standard_tests,
    unmarked_overrides,
)

pytest_plugins = ["pytester"]


class _Archive(ArchiveContract):
    @pytest.fixture
    def archive(self) -> HistoryArchive:
        return InMemoryArchive()


def test_standard_tests_are_the_suites_test_methods() -> None:
    names = set(standard_tests(_Archive))
    assert GUARD_TEST_NAME in names
    assert "test_conflicting_reappend_raises_and_keeps_the_stored_group" in names
    assert "archive" not in names  # fixtures are not tests
    assert not any(n.startswith("test_list_sessions") for n in names)
    assert "test_list_sessions_sorted_bounded_and_per_user" in standard_tests(SessionStoreContract)


def test_a_plain_subclass_has_no_problems() -> None:
    assert unmarked_overrides(_Archive) == []
    _Archive().test_no_overrides_DO_NOT_OVERRIDE()


def test_an_override_without_xfail_is_reported() -> None:
    class Overrides(_Archive):
        async def test_health_probe(self, archive: HistoryArchive) -> None:
            pass

    assert unmarked_overrides(Overrides) == ["test_health_probe (overridden in Overrides)"]
    with pytest.raises(pytest.fail.Exception, match="test_health_probe"):
        Overrides().test_no_overrides_DO_NOT_OVERRIDE()


def test_a_deleted_test_is_reported() -> None:
    class Deletes(_Archive):
        test_health_probe = None  # type: ignore[assignment]

    assert unmarked_overrides(Deletes) == ["test_health_probe (deleted in Deletes)"]


def test_an_override_in_a_mixin_is_reported() -> None:
    class Mixin:
        async def test_aclose_is_idempotent(self, archive: HistoryArchive) -> None:
            pass

    class WithMixin(Mixin, _Archive):
        pass

    assert unmarked_overrides(WithMixin) == ["test_aclose_is_idempotent (overridden in Mixin)"]


def test_an_xfail_override_with_a_reason_is_accepted() -> None:
    class Marked(_Archive):
        @pytest.mark.xfail(reason="no health endpoint yet (issue 12)", strict=True)
        async def test_health_probe(self, archive: HistoryArchive) -> None:
            raise AssertionError

    assert unmarked_overrides(Marked) == []


@pytest.mark.parametrize(
    "mark",
    [
        pytest.mark.xfail(),
        pytest.mark.xfail(reason=""),
        pytest.mark.xfail(reason="   "),
        pytest.mark.skip(reason="a skip is not an xfail"),
        pytest.mark.slow,
    ],
    ids=["no-reason", "empty-reason", "blank-reason", "skip", "other-mark"],
)
def test_other_marks_do_not_excuse_an_override(mark: pytest.MarkDecorator) -> None:
    class Marked(SessionStoreContract):
        @pytest.fixture
        def session_store(self) -> SessionStore:
            return InMemorySessionStore()

        @mark
        async def test_health_probe(self, session_store: SessionStore) -> None:
            pass

    assert unmarked_overrides(Marked) == ["test_health_probe (overridden in Marked)"]


def test_reassigning_the_standard_function_is_not_an_override() -> None:
    class Same(_Archive):
        test_health_probe = ArchiveContract.test_health_probe

    assert unmarked_overrides(Same) == []


def test_the_guard_itself_cannot_be_overridden() -> None:
    with pytest.raises(TypeError, match="cannot be overridden"):

        class Sneaky(_Archive):
            def test_no_overrides_DO_NOT_OVERRIDE(self) -> None:
                pass


_HEADER = """
import pytest
from agentium_harness.adapters.memory import InMemoryArchive
from agentium_harness.testing import ArchiveContract


class TestArchive(ArchiveContract):
    @pytest.fixture
    def archive(self):
        return InMemoryArchive()
"""


def test_pytest_run_fails_the_guard_for_an_unmarked_override(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        _HEADER
        + textwrap.indent(
            textwrap.dedent(
                """
                async def test_health_probe(self, archive):
                    pass
                """
            ),
            "    ",
        )
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-k", "DO_NOT_OVERRIDE or health_probe")
    result.assert_outcomes(passed=2, failed=1)  # the override runs (both backends); the guard fails
    result.stdout.fnmatch_lines(["*test_health_probe (overridden in TestArchive)*xfail(reason=*"])


def test_pytest_run_accepts_an_xfail_override_with_reason(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        _HEADER
        + textwrap.indent(
            textwrap.dedent(
                """
                @pytest.mark.xfail(reason="no probe yet", raises=NotImplementedError, strict=True)
                async def test_health_probe(self, archive):
                    raise NotImplementedError
                """
            ),
            "    ",
        )
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-k", "DO_NOT_OVERRIDE or health_probe")
    result.assert_outcomes(passed=1, xfailed=2)


def test_a_missing_fixture_is_explained(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        from agentium_harness.testing import SessionStoreContract

        class TestForgotFixture(SessionStoreContract):
            pass
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-k", "load_missing")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*must provide a `session_store` fixture*"])
