"""The options of the file-system verifier (``[verifier.options]``): root, expected facts, bounds.

Everything here is the *host's* statement of what a finished task looks like:
which artifacts must exist under ``root`` with which sha256, and which JUnit
XML records the task's tests must have written. Nothing in it ever comes from
the model's candidate (R29).

Paths are checked when the options are built, so a bad one is an error at
``$.verifier.options.<key>`` in ``agentium check``: artifact and record paths
are relative, ``/``-separated, without ``..``, ``.``, empty components, NUL or
backslashes. ``root`` is resolved against the config file's folder (a path
option) and must be an existing directory.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

from agentium_harness.plugin_api import PATH_OPTION, InvalidArgumentError, bounded_count, bounded_duration

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "DEFAULT_MAX_RECORD_BYTES",
    "DEFAULT_READ_TIMEOUT_S",
    "ExpectedArtifact",
    "FsVerifierConfig",
    "RootNotFoundError",
    "check_root",
    "normalize_sha256",
    "split_relative_path",
]

#: Largest artifact hashed by default (bytes). Larger files are ``unknown``, never read whole.
DEFAULT_MAX_FILE_BYTES: Final = 256 * 1024 * 1024
#: Largest JUnit XML record parsed by default (bytes): records are parsed in memory.
DEFAULT_MAX_RECORD_BYTES: Final = 8 * 1024 * 1024
#: Seconds one verification may spend reading evidence by default.
DEFAULT_READ_TIMEOUT_S: Final = 30.0

#: Ceilings on the bounds themselves, so a config cannot switch the bounds off.
_MAX_FILE_CEILING: Final = 64 * 1024**3
_MAX_RECORD_CEILING: Final = 256 * 1024 * 1024
_MAX_ITEMS: Final = 256
_MAX_PATH_CHARS: Final = 1024

_HEX64: Final = re.compile(r"[0-9a-f]{64}")


class RootNotFoundError(InvalidArgumentError):
    """The configured ``root`` is not an existing directory (or, building the verifier, cannot be opened).

    Create the directory (or fix the path: a relative ``root`` in a config
    file is relative to the config file's folder), then run ``agentium check``
    again. Raised when the options are built, so no verification runs; the
    verifier, which opens the root when it is built, raises it too for a root
    it cannot open (no permission to read it).
    """


def split_relative_path(value: object, what: str) -> tuple[str, ...]:
    """The components of a confined relative path, or ``InvalidArgumentError`` saying why it is refused.

    Refused: non-strings, empty paths, absolute paths, backslashes, NUL, lone surrogates, and
    ``..``, ``.`` or empty components (``a//b``, a trailing ``/``). What is
    left names exactly one place under the root, so the walk that opens it
    can refuse anything unexpected instead of interpreting it.
    """
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"{what} must be a non-empty relative path, got {value!r}")
    if len(value) > _MAX_PATH_CHARS:
        raise InvalidArgumentError(f"{what} is longer than {_MAX_PATH_CHARS} characters")
    if "\x00" in value:
        raise InvalidArgumentError(f"{what} must not contain NUL")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        # Most lone surrogates cannot be encoded (os.open would raise UnicodeEncodeError);
        # U+DC80-U+DCFF do name a non-UTF-8 file name, but the evidence ref naming it would be
        # refused (evidence text must be valid Unicode) in the middle of a verification.
        raise InvalidArgumentError(f"{what} must be valid Unicode text (it holds a lone surrogate)") from None
    if "\\" in value:
        raise InvalidArgumentError(f"{what} {value!r} must use '/' separators, not backslashes")
    if value.startswith("/"):
        raise InvalidArgumentError(f"{what} {value!r} must be relative to root, not absolute")
    parts = tuple(value.split("/"))
    for part in parts:
        if part in ("", ".", ".."):
            shown = part or "an empty component"
            raise InvalidArgumentError(f"{what} {value!r} must not contain {shown!r}: paths stay under root")
    return parts


def normalize_sha256(value: object, what: str = "sha256") -> str:
    """``value`` as 64 lowercase hex digits; a ``sha256:`` prefix is accepted and dropped."""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{what} must be a string of 64 hex digits, got {type(value).__name__}")
    text = value.strip().lower().removeprefix("sha256:")
    if not _HEX64.fullmatch(text):
        raise InvalidArgumentError(
            f"{what} must be 64 hex digits (optionally prefixed 'sha256:'), got {value!r}"
        )
    return text


def _encodable_root(root: str) -> None:
    """Refuse a root no file name can spell: a NUL, or a lone surrogate the file system cannot encode."""
    if "\x00" in root:
        raise InvalidArgumentError("root must not contain NUL")
    try:
        os.fsencode(root)
    except UnicodeEncodeError:
        # os.path.isdir is False for it, so it read as a root that "does not exist". U+DC80-U+DCFF
        # encode (Python's spelling of a file name byte that is not UTF-8): such a root is read.
        raise InvalidArgumentError(
            "root must be valid text: it holds a lone surrogate that no file name can hold"
        ) from None


def check_root(root: str) -> str:
    """``root`` as an absolute path, or :class:`RootNotFoundError` when it is not an existing directory.

    A root with NUL or a lone surrogate no file name can hold is ``InvalidArgumentError``.
    """
    _encodable_root(root)
    try:
        resolved = os.path.abspath(root)
    except OSError as exc:  # a relative root, and the current directory was deleted (getcwd fails)
        raise RootNotFoundError(
            f"root {root!r} is relative and the current directory cannot be read ({exc.strerror or exc}); "
            "give an absolute root"
        ) from exc
    if not os.path.isdir(resolved):
        why = "does not exist" if not os.path.lexists(resolved) else "is not a directory"
        raise RootNotFoundError(
            f"root {resolved!r} {why}; the verifier reads evidence only under an existing directory "
            "(a relative root in a config file is relative to the config file's folder)"
        )
    return resolved


def _relative(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    split_relative_path(value, attribute.name)


def _root(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgumentError(f"root must be a non-empty directory path, got {value!r}")
    _encodable_root(value)
    # A relative root is checked once it is resolved: the config loader resolves
    # it against the config file's folder (and validates again), and a host that
    # builds the options itself gets the check when the verifier is built.
    if os.path.isabs(value):
        check_root(value)


def _listed(value: object, what: str, items: str) -> tuple[object, ...]:
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise InvalidArgumentError(f"{what} must be a list of {items}, got {type(value).__name__}")
    # A loop, not tuple(): an iterable that never ends is cut off past the bound (tuple() never
    # returned), and what a host's own iterable raises is this error, not its own.
    given: list[object] = []
    try:
        for item in value:
            given.append(item)
            if len(given) > _MAX_ITEMS:
                raise InvalidArgumentError(f"{what} may list at most {_MAX_ITEMS} paths")
    except InvalidArgumentError:
        raise
    except Exception as exc:
        raise InvalidArgumentError(f"{what} could not be iterated ({type(exc).__name__} raised)") from exc
    return tuple(given)


def _artifact(value: object, index: int) -> ExpectedArtifact:
    if isinstance(value, ExpectedArtifact):
        return value
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(
            f"artifacts[{index}] must be a table with path and sha256, got {type(value).__name__}"
        )
    unknown = sorted(str(k) for k in value if k not in ("path", "sha256"))
    missing = [k for k in ("path", "sha256") if k not in value]
    if unknown or missing:
        # attrs would raise a bare TypeError naming __init__; name the keys instead.
        said = [f"unknown key(s) {', '.join(map(repr, unknown))}"] if unknown else []
        said += [f"missing {', '.join(missing)}"] if missing else []
        raise InvalidArgumentError(f"artifacts[{index}] has {'; '.join(said)}: give exactly path and sha256")
    return ExpectedArtifact(path=value["path"], sha256=value["sha256"])


def _artifacts(value: object) -> tuple[ExpectedArtifact, ...]:
    return tuple(_artifact(a, i) for i, a in enumerate(_listed(value, "artifacts", "{path, sha256} tables")))


def _records(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        raise InvalidArgumentError("test_records must be a list of paths, not one string")
    return _listed(value, "test_records", "paths")  # type: ignore[return-value]  # each is checked by _relative


@attrs.frozen(slots=True)
class ExpectedArtifact:
    """One artifact the host expects: its path under ``root`` and the sha256 of its bytes."""

    path: str = attrs.field(validator=_relative)
    sha256: str = attrs.field(converter=normalize_sha256)


@attrs.frozen(slots=True)
class FsVerifierConfig:
    """Options of the ``fs`` verifier.

    - ``root``: the directory all evidence is read under (a path option: relative to the
      config file's folder). It must exist.
    - ``artifacts``: the host's expected artifacts, each ``{path, sha256}``; ``path`` is
      relative to ``root``.
    - ``test_records``: JUnit XML files under ``root`` that the task's tests must write
      during the run.
    - ``max_file_bytes``: the largest artifact hashed; a larger one is ``unknown``.
    - ``max_record_bytes``: the largest test record parsed; a larger one is ``unknown``.
    - ``read_timeout_s``: time one verification may spend reading; evidence not read in time is
      ``unknown``.

    At least one artifact or test record is required (a verifier with nothing to check would
    pass anything), and no path may be listed twice.
    """

    root: str = attrs.field(validator=_root, metadata={PATH_OPTION: True})
    artifacts: tuple[ExpectedArtifact, ...] = attrs.field(default=(), converter=_artifacts)
    test_records: tuple[str, ...] = attrs.field(
        default=(), converter=_records, validator=attrs.validators.deep_iterable(_relative)
    )
    max_file_bytes: int = attrs.field(
        default=DEFAULT_MAX_FILE_BYTES, validator=bounded_count(ceiling=_MAX_FILE_CEILING)
    )
    max_record_bytes: int = attrs.field(
        default=DEFAULT_MAX_RECORD_BYTES, validator=bounded_count(ceiling=_MAX_RECORD_CEILING)
    )
    read_timeout_s: float = attrs.field(default=DEFAULT_READ_TIMEOUT_S, validator=bounded_duration())

    def __attrs_post_init__(self) -> None:
        if not self.artifacts and not self.test_records:
            raise InvalidArgumentError(
                "artifacts and test_records are both empty: list at least one expected artifact or "
                "test record, or the verifier would pass any claim"
            )
        if len(self.artifacts) + len(self.test_records) > _MAX_ITEMS:
            raise InvalidArgumentError(
                f"artifacts and test_records may list at most {_MAX_ITEMS} paths together"
            )
        seen: dict[str, str] = {}
        listed = (
            *(("artifacts", a.path) for a in self.artifacts),
            *(("test_records", r) for r in self.test_records),
        )
        for key, path in listed:
            if path in seen:
                # Name both lists it is in: the fix is in one of them, maybe not in artifacts.
                where = key if seen[path] == key else f"{seen[path]} and {key}"
                raise InvalidArgumentError(f"path {path!r} is listed twice (in {where}); list each path once")
            seen[path] = key
