"""S3 archive: append and read against raw boto3, and a 100-group eviction concurrent vs sequential.

Three ratios for the ``agentium-archive-s3`` archive (issue 12), measured side
by side in one run on the same server, interleaved round by round so machine
load hits both sides alike:

1. **append** (target <= 1.2): ``S3Archive.append`` of one group (create-only
   ``IfNoneMatch``, Content-MD5, SHA-256, ETag check, worker thread) against
   raw boto3 ``put_object`` of the same bytes, one request each.
2. **read** (target <= 1.2): ``S3Archive.read_groups`` of a page of
   ``--page`` groups (one listing, bounded ranged GETs in parallel, digest,
   strict decoding and scope checks) against raw boto3 doing the same
   requests one after the other (``list_objects_v2`` + ``get_object`` per
   key, no checks).
3. **eviction** (target <= 0.3): one ``append`` of ``--evict`` groups (their
   uploads run concurrently within the limiter) against the same groups
   appended one call at a time.

Setup: the script starts moto's standalone server (``python -m moto.server``,
from the plugin's ``test`` extra) on a free loopback port, or uses
``--endpoint URL`` (any S3 server; ``--access-key`` / ``--secret-key``,
default ``test``/``test``, and ``--bucket``, created if missing). Prints
medians and ratios with PASS or MISS; exits 0 either way: it is a benchmark,
not a test. ``--quick`` runs fewer rounds and a 20-group eviction.
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import boto3
import botocore.config

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "plugins" / "archive-s3" / "tests"))

from agentium_archive_s3 import S3Archive, S3Config
from agentium_harness.plugin_api import MessageGroup, OpContext, SessionKey
from agentium_harness.testing import plain_group

APPEND_TARGET = 1.2
READ_TARGET = 1.2
EVICT_TARGET = 0.3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _moto() -> Iterator[str]:
    port = _free_port()
    log = tempfile.NamedTemporaryFile(prefix="moto-bench-", suffix=".log", delete=False)
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log
    )
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                urllib.request.urlopen(url + "/moto-api/", timeout=1).close()  # loopback
                break
            except urllib.error.HTTPError:
                break
            except OSError:
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
        os.unlink(log.name)


def _raw(endpoint: str, access: str, secret: str, concurrency: int) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=access,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=botocore.config.Config(
            s3={"addressing_style": "path"},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            max_pool_connections=max(10, concurrency),
        ),
    )


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def _verdict(ratio: float, target: float) -> str:
    return "PASS" if ratio <= target else "MISS"


async def _timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


async def _run(args: argparse.Namespace, endpoint: str) -> None:
    raw = _raw(endpoint, args.access_key, args.secret_key, args.concurrency)
    try:
        raw.create_bucket(Bucket=args.bucket)
    except raw.exceptions.BucketAlreadyOwnedByYou:
        pass
    except raw.exceptions.BucketAlreadyExists:
        pass
    prefix = f"bench{int(time.time() * 1000)}"
    config = S3Config(
        bucket=args.bucket,
        prefix=prefix,
        endpoint_url=endpoint,
        region="us-east-1",
        access_key_id=args.access_key,
        secret_access_key=args.secret_key,
        addressing_style="path",
        max_concurrency=args.concurrency,
    )
    archive = S3Archive(config)
    key = SessionKey("bench-tenant", "bench-user", "bench-session")
    text = " " + "lorem ipsum dolor sit amet " * (args.group_bytes // 27)
    ctx = OpContext.unbounded
    try:
        # Warm both clients (connection pools, the plugin's client creation).
        await archive.append(SessionKey("w", "w", "w"), [plain_group(0, text)], ctx())
        raw.put_object(Bucket=args.bucket, Key=f"{prefix}/raw/warm", Body=b"warm")

        # 1. append, one group per call, interleaved.
        plugin_append: list[float] = []
        raw_append: list[float] = []
        for seq in range(args.rounds):
            group = plain_group(seq, text)
            data = group.canonical_bytes()
            plugin_append.append(await _timed(lambda g=group: archive.append(key, [g], ctx())))

            async def raw_put(s: int = seq, d: bytes = data) -> None:
                await anyio.to_thread.run_sync(
                    lambda: raw.put_object(Bucket=args.bucket, Key=f"{prefix}/raw/{s:020d}.json", Body=d)
                )

            raw_append.append(await _timed(raw_put))

        # 2. read a page, interleaved.
        page = args.page
        plugin_read: list[float] = []
        raw_read: list[float] = []
        folder = f"{prefix}/archive/v1/bench-tenant/bench-user/bench-session/"
        for r in range(args.rounds):
            start = (r * page) % max(1, args.rounds - page)

            async def plugin_page(s: int = start) -> None:
                # A page may come back shorter than asked (only an empty one ends the history): read
                # on from the last group's seq + 1 until the page's groups are all in.
                got: list[MessageGroup] = []
                at = s
                while len(got) < page:
                    part = await archive.read_groups(key, at, page - len(got), ctx())
                    if not part:
                        break
                    got += part
                    at = part[-1].seq + 1
                assert [g.seq for g in got] == list(range(s, s + page)), [g.seq for g in got]

            def raw_page_sync(s: int = start) -> None:
                listing = raw.list_objects_v2(
                    Bucket=args.bucket, Prefix=folder, StartAfter=f"{folder}{s - 1:020d}.json" if s else "",
                    MaxKeys=page,
                )  # fmt: skip
                for item in listing.get("Contents", []):
                    raw.get_object(Bucket=args.bucket, Key=item["Key"])["Body"].read()

            async def raw_page() -> None:
                await anyio.to_thread.run_sync(raw_page_sync)

            plugin_read.append(await _timed(plugin_page))
            raw_read.append(await _timed(raw_page))

        # 3. evict N groups: one concurrent append vs N sequential appends (fresh sessions each).
        concurrent: list[float] = []
        sequential: list[float] = []
        for r in range(args.evict_rounds):
            groups: list[MessageGroup] = [plain_group(s, text) for s in range(args.evict)]
            k1 = SessionKey("bench-tenant", "bench-user", f"evict-c{r}")
            k2 = SessionKey("bench-tenant", "bench-user", f"evict-s{r}")
            concurrent.append(await _timed(lambda k=k1, gs=groups: archive.append(k, gs, ctx())))

            async def one_by_one(k: SessionKey = k2, gs: list[MessageGroup] = groups) -> None:
                for g in gs:
                    await archive.append(k, [g], ctx())

            sequential.append(await _timed(one_by_one))
    finally:
        await archive.aclose()
        raw.close()

    pa, ra = _median_ms(plugin_append), _median_ms(raw_append)
    pr, rr = _median_ms(plugin_read), _median_ms(raw_read)
    ec, es = _median_ms(concurrent), _median_ms(sequential)
    print(
        f"server: {endpoint}; python "
        f"{platform.python_version()}, {os.cpu_count()} cores; group ~{len(text)} bytes; "
        f"rounds {args.rounds}; page {page}; eviction of {args.evict} groups x {args.evict_rounds}; "
        f"max_concurrency {args.concurrency}"
    )
    print(f"append one group: plugin {pa:.2f} ms, raw put_object {ra:.2f} ms")
    verdict = _verdict(pa / ra, APPEND_TARGET)
    print(f"ratio append plugin/raw: {pa / ra:.2f}  target <= {APPEND_TARGET}  {verdict}")
    print(f"read a page of {page}: plugin {pr:.2f} ms, raw list+get_object {rr:.2f} ms")
    print(f"ratio read plugin/raw: {pr / rr:.2f}  target <= {READ_TARGET}  {_verdict(pr / rr, READ_TARGET)}")
    print(f"evict {args.evict} groups: concurrent {ec:.1f} ms, sequential {es:.1f} ms")
    print(
        f"ratio eviction concurrent/sequential: {ec / es:.2f}  target <= {EVICT_TARGET}  "
        f"{_verdict(ec / es, EVICT_TARGET)}"
    )


def main(argv: list[str] | None = None) -> None:
    """Parse arguments, start moto unless ``--endpoint`` is given, run, print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--endpoint", help="an S3 endpoint to use instead of starting moto")
    parser.add_argument("--access-key", default="test")
    parser.add_argument("--secret-key", default="test")
    parser.add_argument("--bucket", default="agentium-bench")
    parser.add_argument("--rounds", type=int, default=60, help="append and read rounds")
    parser.add_argument("--page", type=int, default=10, help="groups per read")
    parser.add_argument("--evict", type=int, default=100, help="groups per eviction")
    parser.add_argument("--evict-rounds", type=int, default=3)
    parser.add_argument("--group-bytes", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--latency-ms",
        type=float,
        default=0.0,
        help="also run through a loopback proxy adding this much to every response (a network round trip)",
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: fewer rounds, 20-group eviction")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.evict, args.evict_rounds = 12, 20, 1
    if args.endpoint:
        _both(args, args.endpoint)
    else:
        with _moto() as endpoint:
            _both(args, endpoint)


def _both(args: argparse.Namespace, endpoint: str) -> None:
    print("== direct (loopback, no added latency)")
    anyio.run(_run, args, endpoint)
    if args.latency_ms > 0:
        from s3_fault_proxy import FaultProxy  # the tests' proxy, here only adding latency

        port = int(endpoint.rsplit(":", 1)[1])
        proxy = FaultProxy(port, latency_s=args.latency_ms / 1000)
        try:
            print(f"== through a proxy adding {args.latency_ms:g} ms to every response")
            anyio.run(_run, args, proxy.endpoint)
        finally:
            proxy.close()


if __name__ == "__main__":
    main()
