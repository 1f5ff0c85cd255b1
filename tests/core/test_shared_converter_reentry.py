"""A collection run while a shared converter is being made may use the shared converters itself.

:func:`agentium_harness._codec.shared_converter` makes a converter under a
lock, and making one allocates hundreds of objects: a collection almost
surely runs meanwhile, in that thread, and with it the finalizers of what it
frees (a ``__del__``, a dropped coroutine's ``finally``, a
``weakref.finalize``), as may a signal handler. One that decodes or encodes a
record (``unstructure``, ``digest_of``) calls :func:`shared_converter` again in
the same thread, while its converter is stale too (a rule was registered
since). With a non-reentrant lock that call waited for itself forever, and
every other thread's later ``structure``/``unstructure`` with it.

Each case runs in a child process, so a deadlock fails its deadline instead of
leaving this process's converters locked.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

DEADLINE_S = 20.0

# The finalizer re-arms itself (a new cyclic object) until a collection runs it inside the window
# named on the command line; then it encodes a record, as a finalizer of host or engine code may.
SCRIPT = """
import gc, sys
import attrs
from agentium_harness import parse_config
from agentium_harness._codec import _RULES_LOCK, register_structure_hook, unstructure

WINDOW = sys.argv[1]

@attrs.frozen
class Rec:
    n: int

class _Marker:
    pass

encoded = []

def _making_a_converter() -> bool:
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_name != "make_converter":
        frame = frame.f_back
    return frame is not None

def _rules_locked() -> bool:
    held = getattr(_RULES_LOCK, "_is_owned", None)  # an RLock: held by this thread
    return bool(held()) if held is not None else _RULES_LOCK.locked()

class Finalizer:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it, in whichever call allocates then

    def __del__(self) -> None:
        inside = _making_a_converter() and (WINDOW == "build" or _rules_locked())
        if encoded or not inside:
            if not encoded:
                Finalizer()
            return
        encoded.append(unstructure(Rec(7)))

# A rule registered since the shared converters were made (or none made yet): the next use makes them.
register_structure_hook(_Marker, lambda conv: (lambda value, _: _Marker()))
Finalizer()
gc.set_threshold(1)
config = parse_config(
    '[provider]\\nplugin = "scripted"\\n[archive]\\nplugin = "memory"\\n'
    '[session_store]\\nplugin = "memory"\\n',
    environ={},
)
gc.set_threshold(700)
print(config.provider.plugin if config.provider else None, encoded)
"""


@pytest.mark.parametrize(
    "window",
    [
        "build",  # anywhere while the shared converter is made (under its lock)
        "rules",  # while make_converter copies the registered rules (under the rules' lock)
    ],
)
def test_a_collection_while_a_shared_converter_is_made_may_encode_a_record(window: str) -> None:
    try:
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, window], capture_output=True, text=True, timeout=DEADLINE_S
        )
    except subprocess.TimeoutExpired:
        pytest.fail(
            f"deadlock: a finalizer run while a converter was made ({window}) waited for its own thread"
        )
    assert done.returncode == 0, done.stderr
    # The config loaded, and the finalizer ran inside the window and encoded its record.
    assert done.stdout.split("\n")[0] == "scripted [{'n': 7}]", done.stdout + done.stderr
