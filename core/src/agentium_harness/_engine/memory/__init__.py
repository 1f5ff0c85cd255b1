"""The memory lifecycle: the memory manager, its owned work and drain, and the ``Agent`` (R36–R42).

Part of the engine: the runtime owns a manager and drains its work, and the
manager runs on the engine's tickets, bounded calls, hooks and owned work, so
the two are one package (no import cycle between packages).

- :mod:`.manager`: ``MemoryManager`` (remember, correct, forget, list,
  select, extraction, drain), over :mod:`.base` (its state and bounded
  calls) and :mod:`.writes` (remember, correct, forget);
- :mod:`.limits`: ``MemoryLimits``, and the deadline of an agent's model call;
- :mod:`.answers`: the engine's checks on what a store or extractor answers;
- :mod:`.selection`: the host-replaceable injection selection and the checks on it;
- :mod:`.work`: owned background work, ``DrainResult``, and the
  ``WorkSource`` through which a runtime's work is drained too;
- :mod:`.sources`: memory facts as labeled source blocks for a request;
- :mod:`.agent`: ``Agent`` and its lifecycle;
- :mod:`.claims`: the harness's per-runtime claims on the sessions it runs.

Importing this package imports nothing (the submodules import each other and
the engine's modules); take names from the submodules.
"""
