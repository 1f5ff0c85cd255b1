"""The memory lifecycle: the memory manager, its owned work and drain, and the ``Agent`` (R36–R42).

- :mod:`.manager`: ``MemoryManager`` (remember, correct, forget, list,
  select, extraction, drain) and ``MemoryLimits``;
- :mod:`.selection`: the host-replaceable injection selection and the checks on it;
- :mod:`.work`: owned background work, ``DrainResult``, and the
  ``WorkSource`` through which a runtime's work is drained too;
- :mod:`.agent`: ``Agent`` and its lifecycle.

Importing this package imports nothing (the submodules import each other and
:mod:`agentium_harness._engine.memory_sources`); take names from the submodules.
"""
