"""What a plugin registers: an :class:`AdapterSpec` per adapter."""

from __future__ import annotations

import os
from collections.abc import Callable
from contextvars import ContextVar
from pathlib import Path, PurePath
from typing import Any

import attrs

from .._ports import Capabilities

__all__ = [
    "BUILDING",
    "PATH_OPTION",
    "AdapterSpec",
    "BuildContext",
    "Register",
    "path_option_names",
    "resolve_path_options",
]


@attrs.frozen
class BuildContext:
    """What a config's adapters are being built with: its plugin registry and its folder.

    ``build_runtime`` sets :data:`BUILDING` while it builds, so an adapter that
    builds another plugin's adapter (the recorded provider wraps a provider)
    takes it from the host's registry (``registry=``, ``environ=``: never a
    wider one) and resolves its relative paths against the config's folder.
    """

    registry: Any
    base_dir: Path | None


#: The build in progress in this context, or ``None`` outside ``build_runtime``.
BUILDING: ContextVar[BuildContext | None] = ContextVar("agentium_building", default=None)

#: attrs field metadata key that marks an option as a file path. A config
#: file's relative value for such a field is resolved against the folder the
#: file is in (``ResolvedConfig.base_dir``) before the adapter is built:
#: ``path: str = attrs.field(default="agentium.db", metadata={PATH_OPTION: True})``.
#: Mark only fields that always hold a path (a ``str``, a :class:`pathlib.Path`,
#: or ``None`` for an optional one).
PATH_OPTION = "agentium_path"


def path_option_names(config_class: type) -> tuple[str, ...]:
    """The fields of an attrs options class marked with :data:`PATH_OPTION`, in declaration order."""
    if not attrs.has(config_class):
        return ()
    return tuple(f.name for f in attrs.fields(config_class) if f.metadata.get(PATH_OPTION) is True)


def resolve_path_options(config: Any, base_dir: str | os.PathLike[str]) -> Any:
    """``config`` with every relative path option resolved against ``base_dir``.

    Absolute paths, ``None`` and empty strings are kept as they are; a ``str``
    stays a ``str`` and a :class:`~pathlib.PurePath` keeps its type. The
    result is a new instance (``attrs.evolve``), so the class's validators
    check the resolved values. Options without marked fields come back unchanged.

    :raises ValueError: or another error of the class's validators, when a resolved value is refused.
    """
    names = path_option_names(type(config))
    if not names:
        return config
    base = Path(base_dir)
    changes: dict[str, Any] = {}
    for name in names:
        value = getattr(config, name)
        if isinstance(value, str) and value and not os.path.isabs(value):
            changes[name] = str(base / value)
        elif isinstance(value, PurePath) and not value.is_absolute():
            changes[name] = type(value)(base / value)
    return attrs.evolve(config, **changes) if changes else config


@attrs.frozen(slots=True)
class AdapterSpec:
    """One adapter a plugin offers.

    - ``name``: the name config selects it by (``plugin = "sqlite"``), unique within its kind.
    - ``adapter_class``: the concrete class; it must declare ``capabilities`` in its own body.
    - ``config_class``: an attrs class; the adapter's options are structured into it. Fields
      whose metadata holds :data:`PATH_OPTION` are file paths, resolved against the config
      file's folder.
    - ``factory``: builds the adapter from a config instance; defaults to ``adapter_class(config)``.
      Building must do no I/O: connections are opened lazily or by the adapter's first call.
    - ``description``: one line for ``agentium plugins``.
    """

    name: str
    adapter_class: type
    config_class: type
    factory: Callable[[Any], Any] | None = None
    description: str = ""

    @property
    def capabilities(self) -> Capabilities | None:
        """The capability object declared on ``adapter_class`` itself (not inherited), if any."""
        declared = self.adapter_class.__dict__.get("capabilities")
        return declared if isinstance(declared, Capabilities) else None

    def build(self, config: Any, *, base_dir: str | os.PathLike[str] | None = None) -> Any:
        """Create the adapter from a structured config instance.

        With ``base_dir``, relative path options are resolved against it first
        (see :func:`resolve_path_options`); options from ``load_config`` are
        already resolved, and resolving again changes nothing.
        """
        if base_dir is not None:
            config = resolve_path_options(config, base_dir)
        factory = self.factory if self.factory is not None else self.adapter_class
        return factory(config)


#: The callable a registration hook receives: ``register(spec)``.
Register = Callable[[AdapterSpec], None]
