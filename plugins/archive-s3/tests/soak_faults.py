"""The soak's faults (``soak.py``): one is armed before an operation and disarmed right after it.

Proxy faults (``s3_fault_proxy``): a dropped acknowledgment, a reply delayed
past the SDK's read timeout, an upload or a reply corrupted, and a *late
write*: a write request (PUT, DELETE, or DeleteObjects' POST) held by the
proxy past the client's read timeout, so the SDK attempt (every attempt, when
``count`` covers them) gives up and the call fails typed, and then forwarded
to the server anyway: the write lands late, perhaps after the next
operation (an erasure) has run. botocore-injected errors (``s3_faults``): a
503 storm, 409s.
"""

from __future__ import annotations

import random
from typing import Any

from s3_fault_proxy import Fault, FaultProxy
from s3_faults import InjectedErrors
from soak_model import Stats

#: How long a delayed reply is held: past the SDK read timeout (``READ_TIMEOUT_S`` in soak.py).
DELAY_S = 2.4
#: How long a late write is held before it is forwarded: past one SDK attempt's read timeout at
#: least, and up to past both attempts, the backoff between them and a session save's read-back
#: and resend (the call has failed by then); within the adapters' bound on one request,
#: ``(connect_timeout_s + read_timeout_s) * max_attempts`` (8 s in soak.py), which is what their
#: erase waits for (a write held longer can land after an erase: README, Known limits).
HOLD_S = (2.2, 7.5)
#: S3 operations a 503 storm or a 409 may hit.
OPERATIONS = ("PutObject", "GetObject", "HeadObject", "ListObjectsV2", "DeleteObject", "DeleteObjects")
FAULTS = ("drop", "delay", "late", "corrupt_request", "corrupt_response", "503", "409")


class Armed:
    """The fault armed for one operation; ``disarm`` removes it and counts whether it hit."""

    def __init__(
        self,
        name: str,
        proxy: FaultProxy,
        fault: Fault | None,
        hook: InjectedErrors | None,
        reads: Fault | None = None,
    ) -> None:
        self.name, self.proxy, self.fault, self.hook = name, proxy, fault, hook
        #: A late write's companion: the reads of the same path held too (their answers come late).
        self.reads = reads

    def disarm(self, stats: Stats) -> None:
        """Stop the fault (a late write already held still lands later) and count it if it hit."""
        with self.proxy._lock:  # the proxy's own lock: its threads consume faults under it
            self.proxy.faults.clear()
        hit = self.fault.applied if self.fault is not None else 0
        if self.hook is not None:
            self.hook.remove()
            hit = self.hook.answered
        if hit:
            stats.injected[self.name] += 1
            if self.name == "late":
                stats.late_held += hit


def arm(
    rng: random.Random,
    proxy: FaultProxy,
    clients: tuple[Any, Any],
    stats: Stats,
    *,
    corrupt_snapshots: bool,
    late: bool,
    erasing: bool = False,
) -> Armed | None:
    """Arm one random fault (or none, 45 %); ``late``: late writes are in the mix (twice as often as
    each other fault); ``erasing``: the operation is an erasure (a late write may be a delete)."""
    if rng.random() < 0.45:
        return None
    name = rng.choice((*FAULTS, "late") if late else tuple(f for f in FAULTS if f != "late"))
    where = rng.choice(("/archive/", "/sessions/", "/"))
    fault: Fault | None = None
    hook: InjectedErrors | None = None
    reads: Fault | None = None
    if name == "drop":
        fault = Fault("drop", rng.choice(("PUT", "PUT", "DELETE", "POST")), where, count=rng.randint(1, 2))
    elif name == "delay":
        fault = Fault("delay", rng.choice(("PUT", "GET")), where, count=1, seconds=DELAY_S)
    elif name == "late":
        # One held lands behind the SDK's successful retry; two or three, behind the session store's
        # resend after a read-back; every matching write of the operation held makes it fail typed
        # (unknown), and each lands later.
        method = rng.choice(("PUT", "DELETE", "POST"))  # drawn always: the seed's sequence stays put
        method = method if erasing else "PUT"
        count = rng.choice((1, 2, 3, 50))
        fault = Fault("hold", method, where, count=count, seconds=rng.uniform(*HOLD_S))
        if count == 50:
            # Every write of the operation held, and its reads once one was: a session save's read-back
            # then cannot tell either, so the call fails typed (outcome unknown) and its write
            # lands later, perhaps after the next operation.
            reads = proxy.add(Fault("hold", "GET", where, count=50, seconds=fault.seconds, after=fault))
    elif name == "corrupt_request":
        # Session-store uploads corrupted in flight only when asked for (``--corrupt-snapshots``).
        path = where if corrupt_snapshots else "/archive/"
        fault = Fault("corrupt_request", "PUT", path, count=rng.randint(1, 2))
    elif name == "corrupt_response":
        fault = Fault("corrupt_response", "GET", where, count=1)
    else:
        client = rng.choice(clients)
        operation = rng.choice(OPERATIONS) if name == "503" else "PutObject"
        hook = InjectedErrors(client, int(name), operation=operation, count=rng.randint(1, 6))
    if fault is not None:
        proxy.add(fault)
    stats.armed[name] += 1
    return Armed(name, proxy, fault, hook, reads)
