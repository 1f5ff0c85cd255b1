"""A memory manager's bounds, :class:`MemoryLimits`, and the deadline of its model calls.

An :class:`~.agent.Agent`'s model call is a model call like a runtime's turn
and gets a model deadline, not a store deadline (the manager's
``op_timeout_s`` catches a hung memory store; a model may need a minute).
So does the manager's extractor call: an extractor is host code that may
well call a model to find the facts worth keeping.
:func:`model_timeout` resolves it at each call, the first that is set of:

1. the manager's ``MemoryLimits.model_timeout_s`` (memory's own word);
2. inside an operation of a runtime given the manager (its turn, its
   ``forget``, a ``runtime_span`` block of its, a tool or hook of its; the
   extraction such an operation starts keeps it): *that* runtime's
   ``model_timeout_s`` (:mod:`.holders`), so a host that raised its
   runtime's model deadline does not see the same model cut off earlier
   there. Outside any runtime's operation (a host's own call, an ``Agent``
   on ``runtime.memory``): the ``model_timeout_s`` of the runtimes given the
   manager when they all set the same one (a single runtime's), else none;
3. the deadline the call had before model calls had their own: the agent's
   own ``op_timeout_s`` (60 s by default) for its model call, the manager's
   ``op_timeout_s`` (10 s by default) for the extractor.

It used to be the *first* runtime's whatever the call: two tenants'
runtimes sharing a manager, the second's operations ran under the first's
model deadline.

A runtime never changes a manager's telemetry. Inside the runtime's own
operations (its turn's memory selection, ``runtime.forget``, its drain and
close) the manager's calls record under that runtime's ``Telemetry``: the
operation's state is a context variable (:mod:`..._observe.state`), set and
reset around each operation in its own task, so two runtimes sharing one
manager each record their own calls, however their tasks interleave. A
host's own call on the manager, outside any runtime's operation, records under
the ``Telemetry`` the host gave the manager, else the defaults (the global
providers, no content capture unless the environment opts in): never under a
runtime's it was handed to. It used to take the first runtime's, so one
manager shared by two tenants' runtimes put the host's calls for the second
tenant on the first's exporter, under its content capture, until the second
runtime was built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from ..._ports.memory import MAX_FACT_BYTES, MAX_LOOKUP_LIMIT
from ..._validators import bounded_count, bounded_duration
from .holders import agreed_model_timeout, operation_runtime

if TYPE_CHECKING:
    from .manager import MemoryManager

__all__ = ["MemoryLimits", "model_timeout"]


@attrs.frozen(slots=True)
class MemoryLimits:
    """Bounds of a memory manager.

    - ``max_fact_bytes``: largest fact text accepted (at most :data:`MAX_FACT_BYTES`).
    - ``max_injected_facts``: most facts one selection may inject.
    - ``injection_tokens``: token budget of the memory blocks of one request, wrappers included.
    - ``op_timeout_s``: deadline of each store call.
    - ``drain_timeout_s``: default timeout of :meth:`MemoryManager.drain`, and how long each
      ``agentium_memory_event`` broadcast is waited for.
    - ``max_extracted_facts``: most facts one extraction may write.
    - ``model_timeout_s``: deadline of each model call an :class:`Agent` makes with this
      manager, and of each call of its extractor; ``None`` (the default) means the
      ``model_timeout_s`` of the runtime whose operation makes the call (outside any: of
      the runtimes given the manager, when they agree) when it sets one, else the agent's
      ``op_timeout_s`` (its model call) or ``op_timeout_s`` here (the extractor).

    Every count is an integer from 1 to its ceiling and every duration a finite
    number of seconds above 0 and at most 3600, else :class:`InvalidArgumentError`.
    """

    max_fact_bytes: int = attrs.field(default=MAX_FACT_BYTES, validator=bounded_count(ceiling=MAX_FACT_BYTES))
    max_injected_facts: int = attrs.field(default=8, validator=bounded_count(ceiling=MAX_LOOKUP_LIMIT))
    injection_tokens: int = attrs.field(default=512, validator=bounded_count())
    op_timeout_s: float = attrs.field(default=10.0, validator=bounded_duration())
    drain_timeout_s: float = attrs.field(default=10.0, validator=bounded_duration())
    max_extracted_facts: int = attrs.field(default=8, validator=bounded_count(ceiling=MAX_LOOKUP_LIMIT))
    # Last, so that positional construction of the fields above keeps its meaning.
    model_timeout_s: float | None = attrs.field(default=None, validator=bounded_duration(optional=True))


def model_timeout(manager: MemoryManager, op_timeout_s: float) -> float:
    """The deadline of a model call with ``manager`` (module docs); ``op_timeout_s``: the caller's own."""
    own = manager.limits.model_timeout_s
    if own is not None:
        return own
    runtime = operation_runtime(manager)
    deadline = runtime.limits.model_timeout_s if runtime is not None else agreed_model_timeout(manager)
    return op_timeout_s if deadline is None else deadline
