"""What a plugin registers: an :class:`AdapterSpec` per adapter."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from ..ports import Capabilities

__all__ = ["AdapterSpec", "Register"]


@attrs.frozen(slots=True)
class AdapterSpec:
    """One adapter a plugin offers.

    - ``name``: the name config selects it by (``plugin = "sqlite"``), unique within its kind.
    - ``adapter_class``: the concrete class; it must declare ``capabilities`` in its own body.
    - ``config_class``: an attrs class; the adapter's options are structured into it.
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

    def build(self, config: Any) -> Any:
        """Create the adapter from a structured config instance."""
        factory = self.factory if self.factory is not None else self.adapter_class
        return factory(config)


#: The callable a registration hook receives: ``register(spec)``.
Register = Callable[[AdapterSpec], None]
