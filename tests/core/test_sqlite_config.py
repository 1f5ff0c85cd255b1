"""``SQLiteConfig`` refuses a bad option with the library's own typed error (it also is a ``ValueError``)."""

from __future__ import annotations

import pytest

from agentium_harness import InvalidArgumentError
from agentium_harness.adapters.sqlite import SQLiteConfig


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("path", 5),
        ("path", ""),
        ("path", "   "),
        ("path", ":memory:"),
        ("path", "file:agentium.db?mode=memory"),
        ("path", "a\x00b.db"),
        ("path", "a\ud800b.db"),  # no file system name: sqlite3.connect failed on first use, untyped
        ("synchronous", "OFF"),
        ("synchronous", "full "),
    ],
)
def test_a_bad_option_is_an_invalid_argument_error_naming_it(option: str, value: object) -> None:
    with pytest.raises(InvalidArgumentError, match=option):
        SQLiteConfig(**{option: value})  # type: ignore[arg-type]


def test_good_options_are_kept() -> None:
    config = SQLiteConfig(path="state/agentium.db", synchronous="NORMAL")
    assert (config.path, config.synchronous) == ("state/agentium.db", "NORMAL")
