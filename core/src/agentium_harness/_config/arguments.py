"""The arguments of the config functions, checked before anything is read.

``parse_config``, ``load_config`` (and so ``load_runtime``) and ``resolve_config`` take a
source, an environment, a registry or a parsed config from a host program. A wrong type there
is the host's mistake, not a problem of the file: it is refused with
:class:`~agentium_harness._errors.InvalidArgumentError`, never a bare ``TypeError`` or
``AttributeError`` from deep inside the reading or the substitution.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._errors import InvalidArgumentError

__all__ = ["check_base_dir", "check_environ", "check_path", "check_source", "check_type"]


def _kind(value: object) -> str:
    return type(value).__name__


def check_source(source: object, what: str = "source") -> None:
    """``source`` is TOML text (``str``) or a path-like object naming a file with a ``str`` path."""
    if isinstance(source, str):
        return
    check_path(source, what)


def check_path(path: object, what: str = "path") -> None:
    """``path`` is a ``str`` or a path-like object whose ``__fspath__`` gives a ``str``."""
    if isinstance(path, str):
        return
    if isinstance(path, os.PathLike):
        try:
            named: Any = os.fspath(path)
        except Exception as exc:  # a host's own __fspath__: whatever it raises, the argument is bad
            raise InvalidArgumentError(f"{what}: its __fspath__ raised {_kind(exc)}") from None
        if isinstance(named, str):
            return
        raise InvalidArgumentError(f"{what} must name a file with a str path, got a {_kind(named)} path")
    raise InvalidArgumentError(
        f"{what} must be a str or a path-like object (such as pathlib.Path), got {_kind(path)}"
    )


def check_environ(environ: object) -> None:
    """``environ`` is ``None`` or a mapping of ``str`` names to ``str`` values (like ``os.environ``)."""
    if environ is None:
        return
    if not isinstance(environ, Mapping):
        raise InvalidArgumentError(
            f"environ must be a mapping of str to str (like os.environ), got {_kind(environ)}"
        )
    for name, value in environ.items():
        if not isinstance(name, str) or not isinstance(value, str):
            # Neither is repeated: a value may be a secret.
            raise InvalidArgumentError(
                f"environ must map str to str (like os.environ); it holds a {_kind(name)} name "
                f"with a {_kind(value)} value"
            )


def check_type(value: object, expected: type, what: str, *, optional: bool = False) -> None:
    """``value`` is an ``expected`` (or ``None`` when ``optional``)."""
    if (optional and value is None) or isinstance(value, expected):
        return
    raise InvalidArgumentError(
        f"{what} must be a {expected.__name__}{' or None' if optional else ''}, got {_kind(value)}"
    )


def check_base_dir(base_dir: object) -> None:
    """``base_dir`` is ``None`` or a path (a ``str`` path is taken as one)."""
    if base_dir is None or isinstance(base_dir, Path):
        return
    check_path(base_dir, "base_dir")
