"""The WARNING for an exception no stage typed names its class escaped: one record, one line.

``run failed with an unexpected <class>`` quoted the class name as it was
(``clean_text`` mends surrogates, not line breaks). Whoever raised it chose
that name (``type()`` takes any string): a line break in it started what
read as a record of its own (``CRITICAL agentium ...``), an ANSI escape
reached the terminal, whatever the capture setting (docs/observability.md:
"One record is one line"). The same name is the record's ``agentium_error_type``.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from test_unexpected_errors import ANA, _runtime

from agentium_harness import AgentiumError
from agentium_harness._engine import effects

pytestmark = pytest.mark.anyio

#: A class name that would forge a record and colour the terminal.
ODD = "Gone\nCRITICAL agentium.engine forged \x1b[31mred"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_an_unexpected_errors_class_is_one_line_in_its_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def odd(*args: Any, **kwargs: Any) -> Any:
        raise type(ODD, (RuntimeError,), {})("gone")

    monkeypatch.setattr(effects, "commit_turn", odd)  # the turn's commit: an exception no stage typed
    with caplog.at_level(logging.WARNING, logger="agentium"), pytest.raises(AgentiumError):
        await _runtime([]).run(ANA, "s1", "deploy v2", grants=["deploy"])
    # Two: the turn's commit, then that of what ran (the same stage, the same class).
    records = [r for r in caplog.records if "failed with an unexpected" in r.getMessage()]
    assert len(records) == 2
    for record in records:
        message = record.getMessage()
        assert message.isprintable(), message
        assert "Gone\\x0aCRITICAL" in message and "\\x1b[31m" in message
        assert record.agentium_error_type.isprintable()  # type: ignore[attr-defined]
