"""Bad input: each gets a clear, typed error and nothing is written or lost.

Missing bucket, wrong credentials (never echoed), hostile scope ids, objects
replaced out of band, oversized groups and snapshots, bad options.
"""

from __future__ import annotations

import traceback
from typing import Any

import boto3
import pytest
from s3_helpers import BUCKET, live_keys, make_config, raw_client, versions
from s3_servers import S3Server, free_port

from agentium_archive_s3 import (
    S3AccessDeniedError,
    S3Archive,
    S3ArchiveError,
    S3BucketNotFoundError,
    S3Config,
    S3ObjectTooLargeError,
    S3SessionStore,
    S3SessionStoreError,
    S3UnavailableError,
)
from agentium_archive_s3.keys import archive_key, archive_root, sessions_root
from agentium_harness import InvalidArgumentError, InvalidIdError
from agentium_harness.plugin_api import (
    ArchiveConflictError,
    ArchiveCorruptError,
    EraseTarget,
    OpContext,
    SeqRange,
    SessionKey,
    SnapshotCorruptError,
)
from agentium_harness.testing import plain_group, scoped_snapshot

pytestmark = pytest.mark.anyio

KEY = SessionKey("acme", "ana", "bad-input")
SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"


def _all_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)) + repr(exc)


# -- the bucket and the credentials -----------------------------------------------------------------


async def test_a_missing_bucket_is_a_typed_error_at_first_use(server: S3Server) -> None:
    config = make_config(server, bucket="no-such-bucket-at-all")
    archive, store = S3Archive(config), S3SessionStore(config)
    try:
        with pytest.raises(S3BucketNotFoundError, match="no-such-bucket-at-all"):
            await archive.append(KEY, [plain_group(0)], OpContext.with_timeout(20))
        with pytest.raises(S3BucketNotFoundError):
            await archive.read_groups(KEY, 0, 10, OpContext.with_timeout(20))
        with pytest.raises(S3BucketNotFoundError):
            await store.save(KEY, scoped_snapshot(KEY), None, OpContext.with_timeout(20))
        with pytest.raises(S3BucketNotFoundError):
            await store.load(KEY, OpContext.with_timeout(20))
        with pytest.raises(S3BucketNotFoundError, match="does not exist"):
            await archive.health(OpContext.with_timeout(20))
    finally:
        await archive.aclose()
        await store.aclose()


async def test_wrong_credentials_are_refused_and_the_secret_is_never_echoed(
    server: S3Server, admin: Any
) -> None:
    if server.flavour == "moto":
        pytest.skip("moto's server accepts any signature; wrong credentials are tested on Ceph RGW")
    config = make_config(server, secret_access_key=SECRET)
    archive, store = S3Archive(config), S3SessionStore(config)
    try:
        with pytest.raises(S3AccessDeniedError) as caught:
            await archive.append(KEY, [plain_group(0)], OpContext.with_timeout(20))
        assert caught.value.code == "SignatureDoesNotMatch"
        assert SECRET not in _all_text(caught.value)
        with pytest.raises(S3AccessDeniedError) as again:
            await store.save(KEY, scoped_snapshot(KEY), None, OpContext.with_timeout(20))
        assert SECRET not in _all_text(again.value)
        with pytest.raises(S3AccessDeniedError):
            await archive.health(OpContext.with_timeout(20))
    finally:
        await archive.aclose()
        await store.aclose()
    assert live_keys(admin, config.prefix) == []


async def test_an_unreachable_endpoint_is_typed_and_never_shows_the_secret() -> None:
    config = S3Config(
        bucket="agentium-tests",
        endpoint_url=f"http://127.0.0.1:{free_port()}",
        region="us-east-1",
        access_key_id="AKIDEXAMPLE",
        secret_access_key=SECRET,
        session_token="token-" + SECRET,
        max_attempts=1,
        connect_timeout_s=0.5,
    )
    archive = S3Archive(config)
    try:
        with pytest.raises(S3UnavailableError) as caught:
            await archive.append(KEY, [plain_group(0)], OpContext.with_timeout(20))
        assert SECRET not in _all_text(caught.value)
    finally:
        await archive.aclose()
    assert SECRET not in repr(config) and "AKIDEXAMPLE" not in repr(config)


def test_options_are_checked_without_echoing_secrets() -> None:
    with pytest.raises(ValueError, match="bucket"):
        S3Config(bucket="Not_A_Bucket")
    # A layout folder inside a prefix: "apps/archive/v1/eu"'s keys lay in prefix "apps"'s tenant "eu"
    # folder, and "apps"'s erasure of tenant "eu" deleted them all (reproduced on moto).
    # The folders refused are those the layout writes (keys.py), whatever its version.
    refused = [archive_root("apps") + "eu", sessions_root("a").rstrip("/"), archive_root("archive")[:-1]]
    for prefix in ("apps/archive/v1/eu", "archive/v1", "a/sessions/v1", *refused):
        with pytest.raises(InvalidArgumentError, match="layout"):
            S3Config(bucket="agentium-tests", prefix=prefix)
    # A version the layout does not write nests in no prefix's folders: "a/sessions/v2/b"'s keys are
    # all below "a/sessions/v2/", where no prefix's tenant folder is. Refusing it stopped such a
    # deployment at start-up after an upgrade, for no nesting at all.
    for prefix in ("apps/archive", "archive/v1x", "sessions/x/v1", "apps/archive-v1", "a/sessions/v2/b"):
        assert S3Config(bucket="agentium-tests", prefix=prefix).prefix == prefix
    for prefix in ("archive/v01", "x/sessions/v0", "x/archive/v2", "Archive/v1", "x/sessions/V1"):
        assert S3Config(bucket="agentium-tests", prefix=prefix).prefix == prefix
    for prefix in ("", "/abs", "a//b", "a/../b", "a/./b", "trailing/", "sp ace"):
        with pytest.raises(ValueError, match="prefix"):
            S3Config(bucket="agentium-tests", prefix=prefix)
    with pytest.raises(ValueError, match="endpoint_url") as caught:
        S3Config(bucket="agentium-tests", endpoint_url=f"http://user:{SECRET}@127.0.0.1:9000")
    assert SECRET not in str(caught.value)
    with pytest.raises(ValueError, match="together"):
        S3Config(bucket="agentium-tests", secret_access_key=SECRET)
    with pytest.raises(ValueError, match="secret_access_key") as multi:
        S3Config(bucket="agentium-tests", access_key_id="AKID", secret_access_key=SECRET + "\nx")
    assert SECRET not in str(multi.value)


def test_bad_options_are_refused_with_the_typed_error_and_flags_must_be_bools() -> None:
    # Each raised a bare ValueError (the validators' own), and etag_is_md5 was taken for its
    # truth: "no" or 0 kept every upload's ETag checked, "" or None silently turned it off.
    bad: list[dict[str, Any]] = [
        {"bucket": "Not_A_Bucket"},
        {"bucket": None},
        {"prefix": "a//b"},
        {"prefix": 5},
        {"endpoint_url": "ftp://127.0.0.1"},
        {"endpoint_url": "http://127.0.0.1:99999"},
        # urlsplit drops a newline or a tab (another URL than the one given), and a NUL reached botocore.
        {"endpoint_url": "http://127.0.0.1:9000/a\nb"},
        {"endpoint_url": "http://127.0.0.1\x00x:9000"},
        {"endpoint_url": "http://127.0.0.1:9000/\t"},
        {"region": "US EAST"},
        {"profile": ""},
        {"addressing_style": "sideways"},
        {"secret_access_key": SECRET},
        {"session_token": "token"},
        {"etag_is_md5": "no"},
        {"etag_is_md5": "false"},
        {"etag_is_md5": 0},
        {"etag_is_md5": 1},
        {"etag_is_md5": None},
    ]
    for kwargs in bad:
        with pytest.raises(InvalidArgumentError) as caught:
            S3Config(**{"bucket": "agentium-tests", **kwargs})
        assert SECRET not in str(caught.value)
    assert S3Config(bucket="agentium-tests", etag_is_md5=False).etag_is_md5 is False


@pytest.mark.parametrize("adapter", [S3Archive, S3SessionStore])
def test_an_adapter_built_from_something_else_is_refused_typed(adapter: Any) -> None:
    # A dict of options, a bucket name or None raised a bare AttributeError (no max_concurrency).
    for bad in ({"bucket": "agentium-tests"}, "agentium-tests", None):
        with pytest.raises(InvalidArgumentError, match="config must be an S3Config"):
            adapter(bad)
    # A lent client of another kind raised a bare AttributeError ('object' has no 'meta') at the first call.
    config = S3Config(bucket="agentium-tests")
    for client in (object(), "s3", boto3.client("sqs", region_name="us-east-1")):
        with pytest.raises(InvalidArgumentError, match="client must be a boto3 S3 client"):
            adapter(config, client=client)


# -- hostile scope ids ------------------------------------------------------------------------------


HOSTILE = [
    SessionKey("tenant-a", "u", "../tenant-b/u/s"),
    SessionKey("tenant-a", "u/../../tenant-b", "s"),
    SessionKey("tenant-a", "u%2Fx", "s"),
    SessionKey("tenant-a", "u/x", "s"),
    SessionKey("tenant-a/..", "u", "s"),
]


async def test_hostile_ids_stay_inside_their_own_folders(config: S3Config, admin: Any) -> None:
    archive, store = S3Archive(config), S3SessionStore(config)
    victim = SessionKey("tenant-b", "u", "s")
    try:
        await archive.append(victim, [plain_group(0, " tenant b's")], OpContext.with_timeout(20))
        await store.save(victim, scoped_snapshot(victim), None, OpContext.with_timeout(20))
        for key in HOSTILE:
            group = plain_group(0, f" {key!r}")
            await archive.append(key, [group], OpContext.with_timeout(20))
            await store.save(key, scoped_snapshot(key), None, OpContext.with_timeout(20))
            assert list(await archive.read_groups(key, 0, 10, OpContext.with_timeout(20))) == [group]
        # Tenant B's history is untouched and only its own.
        assert list(await archive.read_groups(victim, 0, 10, OpContext.with_timeout(20))) == [
            plain_group(0, " tenant b's")
        ]
        assert await store.list_sessions("tenant-b", "u", 10, OpContext.with_timeout(20)) == ["s"]
        assert await store.list_sessions("tenant-a", "u", 10, OpContext.with_timeout(20)) == [
            "../tenant-b/u/s"
        ]
        assert await store.list_sessions("tenant-a", "u%2Fx", 10, OpContext.with_timeout(20)) == ["s"]
    finally:
        await archive.aclose()
        await store.aclose()
    for object_key in live_keys(admin, config.prefix):
        segments = object_key.split("/")
        assert ".." not in segments and "" not in segments, object_key
    # Every key is one of the fixed layout's: prefix / kind / v1 / tenant / user / session[/seq].
    assert {len(k.split("/")) for k in live_keys(admin, config.prefix + "/archive/")} == {7}
    assert {len(k.split("/")) for k in live_keys(admin, config.prefix + "/sessions/")} == {6}


# -- out-of-band changes --------------------------------------------------------------------------


async def test_listing_refuses_ids_no_key_could_hold_and_a_bad_limit_before_any_request(
    server: S3Server,
) -> None:
    # The bucket does not exist: a request sent would fail S3BucketNotFoundError, not the typed refusal.
    # An empty or NUL id listed a folder no key could name ([] for any tenant's call, as if it held no
    # session), a lone surrogate escaped as a bare UnicodeEncodeError, a str limit as a TypeError.
    store = S3SessionStore(make_config(server, bucket="no-such-bucket-at-all"))
    try:
        for tenant, user, after in (
            ("", "ana", None),
            ("acme", "", None),
            ("acme\x00", "ana", None),
            ("\ud800", "ana", None),
            ("acme", "\ud800", None),
            ("acme", "ana", "\x00"),
            (5, "ana", None),
            ("acme", "ana", 5),
        ):
            with pytest.raises(InvalidIdError):
                await store.list_sessions(tenant, user, 10, OpContext.with_timeout(20), after=after)  # type: ignore[arg-type]
        for limit in ("5", True, None, 1.0):
            with pytest.raises(InvalidArgumentError, match="limit"):
                await store.list_sessions("acme", "ana", limit, OpContext.with_timeout(20))  # type: ignore[arg-type]
    finally:
        await store.aclose()


async def test_a_listed_snapshot_name_no_session_id_encodes_to_fails_closed(
    config: S3Config, admin: Any
) -> None:
    # An object put beside the snapshots out of band, named like one: the listing handed out ids no
    # SessionKey takes ("\x00", 300 characters), which no load could read and no next page's
    # ``after`` could pass, or skipped a name that decodes to no text, as if the user had no such object.
    store = S3SessionStore(config)
    folder = f"{config.prefix}/sessions/v1/acme/ana/"
    ctx = OpContext.with_timeout(20)
    try:
        await store.save(KEY, scoped_snapshot(KEY), None, ctx)
        for name in ("%00", "X" * 300, "%FF", "%41", "a.b", "%2"):
            admin.put_object(Bucket=BUCKET, Key=f"{folder}{name}.json", Body=b"agentium-s3-snapshot/2 x")
            before = versions(admin, config.prefix)
            with pytest.raises(SnapshotCorruptError, match="names no session id"):
                await store.list_sessions("acme", "ana", 10, ctx)
            assert versions(admin, config.prefix) == before  # nothing changed
            admin.delete_object(Bucket=BUCKET, Key=f"{folder}{name}.json")
        # Keys of no snapshot's form are not the store's and stay skipped, as before.
        admin.put_object(Bucket=BUCKET, Key=f"{folder}notes.txt", Body=b"x")
        admin.put_object(Bucket=BUCKET, Key=f"{folder}sub/s.json", Body=b"x")
        assert await store.list_sessions("acme", "ana", 10, ctx) == [KEY.session]
        # The user's erasure removes a damaged name with the rest.
        admin.put_object(Bucket=BUCKET, Key=f"{folder}%00.json", Body=b"x")
        await store.erase(EraseTarget.user("acme", "ana"), ctx)
        assert await store.list_sessions("acme", "ana", 10, ctx) == []
    finally:
        await store.aclose()


async def test_reads_refuse_a_key_or_counts_of_the_wrong_type_before_any_request(server: S3Server) -> None:
    # The bucket does not exist: a request sent would fail S3BucketNotFoundError. A str key reached
    # key_segments() as a bare AttributeError, a str seq or limit a bare TypeError.
    config = make_config(server, bucket="no-such-bucket-at-all")
    archive, store = S3Archive(config), S3SessionStore(config)
    ctx = OpContext.with_timeout(20)
    try:
        for key in ("acme/ana/s", None, ("acme", "ana", "s")):
            with pytest.raises(InvalidArgumentError, match="key must be a SessionKey"):
                await archive.read_groups(key, 0, 10, ctx)  # type: ignore[arg-type]
            with pytest.raises(InvalidArgumentError, match="key must be a SessionKey"):
                await store.load(key, ctx)  # type: ignore[arg-type]
        for start_seq, max_groups in (("0", 10), (0, "10"), (True, 10), (0, None), (0.0, 10)):
            with pytest.raises(InvalidArgumentError, match=r"start_seq|max_groups"):
                await archive.read_groups(KEY, start_seq, max_groups, ctx)  # type: ignore[arg-type]
    finally:
        await archive.aclose()
        await store.aclose()


async def test_every_call_refuses_arguments_of_the_wrong_type_before_any_request(server: S3Server) -> None:
    # The bucket does not exist: a request sent would fail S3BucketNotFoundError, not the typed refusal.
    # Each raised a bare TypeError or AttributeError (a None ctx, groups None or a str, a str revision).
    config = make_config(server, bucket="no-such-bucket-at-all")
    archive, store = S3Archive(config), S3SessionStore(config)
    ctx, snap, user = OpContext.with_timeout(20), scoped_snapshot(KEY), EraseTarget.user("acme", "ana")
    calls: list[Any] = [
        lambda: archive.append(KEY, None, ctx),
        lambda: archive.append(KEY, [None], ctx),
        lambda: archive.append(KEY, "ab", ctx),
        lambda: archive.append(KEY, [plain_group(0)], None),
        lambda: archive.read_groups(KEY, 0, 5, None),
        lambda: archive.erase(user, None),
        lambda: archive.health(None),
        lambda: archive.forget_session("acme/ana/s", ctx),
        lambda: archive.forget_session(KEY, ctx, max_objects="3"),
        lambda: store.load(KEY, None),
        lambda: store.save(KEY, snap, None, None),
        lambda: store.save(KEY, snap, "1", ctx),
        lambda: store.list_sessions("acme", "ana", 5, None),
        lambda: store.erase(user, None),
        lambda: store.health(None),
    ]
    try:
        for call in calls:
            with pytest.raises(InvalidArgumentError):
                await call()
    finally:
        await archive.aclose()
        await store.aclose()


async def test_a_bool_is_no_expected_revision(config: S3Config, admin: Any) -> None:
    # True compared equal to revision 1: a save "expecting True" overwrote revision 1.
    store = S3SessionStore(config)
    ctx = OpContext.with_timeout(20)
    try:
        assert await store.save(KEY, scoped_snapshot(KEY, " one"), None, ctx) == 1
        before = versions(admin, config.prefix)
        with pytest.raises(InvalidArgumentError, match="expected_revision"):
            await store.save(KEY, scoped_snapshot(KEY, " two"), True, ctx)  # type: ignore[arg-type]
        assert versions(admin, config.prefix) == before
        loaded = await store.load(KEY, ctx)
        assert loaded is not None and loaded.revision == 1 and loaded.snapshot == scoped_snapshot(KEY, " one")
    finally:
        await store.aclose()


async def test_an_object_replaced_out_of_band_fails_closed_and_is_never_overwritten(
    config: S3Config, admin: Any
) -> None:
    archive = S3Archive(config)
    groups = [plain_group(0, " original zero"), plain_group(1, " original one")]
    try:
        await archive.append(KEY, groups, OpContext.with_timeout(20))
        # Group 1's object, bytes and digest, copied over group 0's key: valid data, wrong place.
        source = admin.get_object(Bucket=BUCKET, Key=archive_key(config.prefix, KEY, 1))
        admin.put_object(
            Bucket=BUCKET,
            Key=archive_key(config.prefix, KEY, 0),
            Body=source["Body"].read(),
            Metadata=source["Metadata"],
        )
        with pytest.raises(ArchiveCorruptError, match="seq"):
            await archive.read_groups(KEY, 0, 10, OpContext.with_timeout(20))
        # Re-appending the original finds different content there: a conflict, never an overwrite.
        with pytest.raises(ArchiveConflictError):
            await archive.append(KEY, groups[:1], OpContext.with_timeout(20))
        assert list(await archive.read_groups(KEY, 1, 10, OpContext.with_timeout(20))) == groups[1:]
        # A stranger object inside the session's folder is refused too.
        admin.put_object(Bucket=BUCKET, Key=archive_key(config.prefix, KEY, 1)[:-5] + "x.json", Body=b"{}")
        with pytest.raises(ArchiveCorruptError, match="not an archived group"):
            await archive.read_groups(KEY, 1, 10, OpContext.with_timeout(20))
    finally:
        await archive.aclose()


async def test_a_group_truncated_to_nothing_is_not_read_as_an_erased_marker(
    config: S3Config, admin: Any
) -> None:
    """An empty object is an erased group's marker only with the erasure's metadata.

    Group 2 links to group 1; truncating group 1 to zero bytes out of band
    must fail the read closed, not pass it over as erased (the link would
    then hold and group 1 would vanish unnoticed).
    """
    archive = S3Archive(config)
    try:
        await archive.append(KEY, [plain_group(0)], OpContext.with_timeout(20))
        await archive.append(KEY, [plain_group(1), plain_group(2)], OpContext.with_timeout(20))
        admin.put_object(Bucket=BUCKET, Key=archive_key(config.prefix, KEY, 1), Body=b"")
        for reader in (archive, S3Archive(config)):
            with pytest.raises(ArchiveCorruptError, match="not an erased group's marker"):
                await reader.read_groups(KEY, 0, 10, OpContext.with_timeout(20))
            if reader is not archive:
                await reader.aclose()
        # Group 0, below the damage, still reads.
        assert list(await archive.read_groups(KEY, 0, 1, OpContext.with_timeout(20))) == [plain_group(0)]
    finally:
        await archive.aclose()


async def test_ids_too_long_for_an_s3_key_and_seqs_past_the_key_are_refused_before_any_request(
    config: S3Config, admin: Any
) -> None:
    """Valid ids of 256 characters outside ``[A-Za-z0-9_-]`` encode to keys past S3's 1024 bytes.

    AWS and Ceph RGW refused such writes with a bare ``InvalidObjectName`` (HTTP 400) and moto
    stored them; a seq past the 20-digit key raised ``ValueError``. Each is now a typed error
    before any request, on every server, and nothing is written; a read past the last seq a key
    holds finds nothing.
    """
    archive, store = S3Archive(config), S3SessionStore(config)
    long_key = SessionKey("租" * 40, "用" * 40, "会" * 40)
    try:
        with pytest.raises(S3ArchiveError, match="more than S3's 1024") as err:
            await archive.append(long_key, [plain_group(0)], OpContext.with_timeout(20))
        assert err.value.code == "KeyTooLong"
        with pytest.raises(S3SessionStoreError, match="more than S3's 1024"):
            await store.save(long_key, scoped_snapshot(long_key), None, OpContext.with_timeout(20))
        # A seq past the key's 20 digits cannot reach the adapter any more: the core refuses to
        # build a group past MAX_SEQ (far below 10**20), so no request can be made for one.
        with pytest.raises(InvalidArgumentError, match="at most"):
            plain_group(10**20)
        assert list(await archive.read_groups(KEY, 10**21, 5, OpContext.with_timeout(20))) == []
    finally:
        await archive.aclose()
        await store.aclose()
    assert live_keys(admin, config.prefix) == []


# -- sizes ------------------------------------------------------------------------------------------


async def test_a_group_over_the_object_limit_is_refused_before_any_write(
    server: S3Server, admin: Any
) -> None:
    config = make_config(server, max_object_bytes=2048)
    archive = S3Archive(config)
    try:
        with pytest.raises(S3ObjectTooLargeError, match="max_object_bytes=2048"):
            await archive.append(
                KEY, [plain_group(0), plain_group(1, " " + "x" * 4096)], OpContext.with_timeout(20)
            )
    finally:
        await archive.aclose()
    assert live_keys(admin, config.prefix) == []  # not even group 0


async def test_an_object_grown_out_of_band_past_the_limit_is_not_read(server: S3Server, admin: Any) -> None:
    config = make_config(server, max_object_bytes=2048)
    archive = S3Archive(config)
    try:
        await archive.append(KEY, [plain_group(0)], OpContext.with_timeout(20))
        admin.put_object(Bucket=BUCKET, Key=archive_key(config.prefix, KEY, 0), Body=b"x" * 5000)
        with pytest.raises(S3ObjectTooLargeError):
            await archive.read_groups(KEY, 0, 10, OpContext.with_timeout(20))
    finally:
        await archive.aclose()


async def test_a_snapshot_over_the_object_limit_is_refused_and_nothing_is_written(
    server: S3Server, admin: Any
) -> None:
    config = make_config(server, max_object_bytes=1024)
    store = S3SessionStore(config)
    try:
        with pytest.raises(S3ObjectTooLargeError):
            await store.save(KEY, scoped_snapshot(KEY, " " + "y" * 2000), None, OpContext.with_timeout(20))
        assert await store.load(KEY, OpContext.with_timeout(20)) is None
    finally:
        await store.aclose()
    assert live_keys(admin, config.prefix) == []


async def test_forgetting_a_session_is_bounded_and_reported(config: S3Config, admin: Any) -> None:
    archive = S3Archive(config)
    other = SessionKey("acme", "ana", "kept")
    try:
        await archive.append(KEY, [plain_group(s) for s in range(5)], OpContext.with_timeout(20))
        await archive.append(other, [plain_group(0)], OpContext.with_timeout(20))
        first = await archive.forget_session(KEY, OpContext.with_timeout(20), max_objects=3)
        assert (first.deleted, first.complete) == (3, False)
        second = await archive.forget_session(KEY, OpContext.with_timeout(20), max_objects=3)
        assert (second.deleted, second.complete) == (2, True)
        assert list(await archive.read_groups(KEY, 0, 10, OpContext.with_timeout(20))) == []
        assert len(list(await archive.read_groups(other, 0, 10, OpContext.with_timeout(20)))) == 1
    finally:
        await archive.aclose()


async def test_a_lent_client_is_never_closed(server: S3Server, admin: Any, config: S3Config) -> None:
    archive = S3Archive(config, client=admin)
    assert not archive.link.owns_client
    await archive.append(KEY, [plain_group(0)], OpContext.with_timeout(20))
    await archive.aclose()
    admin.head_bucket(Bucket=BUCKET)  # still usable: the host owns it


# -- erase's dry_run ---------------------------------------------------------------------------------


def _stored(admin: Any, prefix: str) -> dict[str, tuple[int, bytes]]:
    """Every key below ``prefix``: its version count and current bytes (a change to either shows)."""
    counts = versions(admin, prefix)
    live = set(live_keys(admin, prefix))
    return {
        key: (n, bytes(admin.get_object(Bucket=BUCKET, Key=key)["Body"].read()) if key in live else b"")
        for key, n in counts.items()
    }


@pytest.mark.parametrize("dry_run", [0, 1, "no", "", None, 1.0])
async def test_erase_refuses_a_dry_run_that_is_not_a_bool_before_any_request(
    server: S3Server, admin: Any, dry_run: Any
) -> None:
    # The PostgreSQL plugin once erased for real on dry_run=0: a falsy stand-in must not mean "erase".
    config = make_config(server)
    client = raw_client(server)
    archive, store = S3Archive(config, client=client), S3SessionStore(config, client=client)
    try:
        await archive.append(KEY, [plain_group(0), plain_group(1)], OpContext.with_timeout(30))
        await store.save(KEY, scoped_snapshot(KEY, " kept"), None, OpContext.with_timeout(30))
        before = _stored(admin, config.prefix)
        assert len(before) >= 3
        sent: list[str] = []
        client.meta.events.register("before-send.s3", lambda request, **_: sent.append(request.method))
        targets = [
            EraseTarget.session(KEY.tenant, KEY.user, KEY.session),
            EraseTarget.user(KEY.tenant, KEY.user),
            EraseTarget.tenant(KEY.tenant),
            EraseTarget.groups_of(KEY, [SeqRange(0, 1)]),
        ]
        for target in targets:
            for adapter in (archive, store):
                with pytest.raises(InvalidArgumentError, match="dry_run must be a bool"):
                    await adapter.erase(target, OpContext.with_timeout(30), dry_run=dry_run)
        assert sent == []  # refused before any request
        assert _stored(admin, config.prefix) == before
        # The same calls with a real bool still work: a dry run changes nothing either.
        report = await archive.erase(targets[0], OpContext.with_timeout(30), dry_run=True)
        assert [seq for s in report.sessions for seq, _ in s.groups] == [0, 1]
        assert _stored(admin, config.prefix) == before
    finally:
        await archive.aclose()
        await store.aclose()
        client.close()


@pytest.mark.parametrize("damage", ["bytes", "digest dropped"])
async def test_an_equal_append_over_a_damaged_object_is_refused_as_damage(
    config: S3Config, admin: Any, damage: str
) -> None:
    # The 412 path compared the stored bytes with the group: damage was reported as
    # ArchiveConflictError ("already holds a different group"), which the engine records as a
    # divergence from another writer's group, though no writer stored other content there.
    archive = S3Archive(config)
    group = plain_group(0, " the original")
    object_key = archive_key(config.prefix, KEY, 0)
    try:
        await archive.append(KEY, [group], OpContext.with_timeout(20))
        stored = admin.get_object(Bucket=BUCKET, Key=object_key)
        data, meta = stored["Body"].read(), stored["Metadata"]
        if damage == "bytes":
            data = data.replace(b"original", b"originaL")
        else:
            meta = {k: v for k, v in meta.items() if k != "agentium-digest"}
        admin.put_object(Bucket=BUCKET, Key=object_key, Body=data, Metadata=meta)
        before = versions(admin, config.prefix)
        with pytest.raises(ArchiveCorruptError, match="does not match its stored digest"):
            await archive.append(KEY, [group], OpContext.with_timeout(20))
        assert versions(admin, config.prefix) == before
    finally:
        await archive.aclose()
