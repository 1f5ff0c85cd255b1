"""The bounded health probe both adapters run for ``agentium check --probe``.

Four to six requests, each under the operation's deadline and the client's
timeouts: ``HeadBucket`` (the bucket exists and the credentials are accepted),
``GetBucketVersioning``, and a create-only probe object written twice with
``IfNoneMatch="*"`` — the second write must be refused with 412, or the server
does not honour conditional writes and the adapters cannot keep their
promises (never overwrite; compare-and-set) — then deleted.
"""

from __future__ import annotations

import botocore.exceptions

from agentium_harness.plugin_api import OpContext

from .errors import S3BucketNotFoundError
from .keys import probe_key
from .link import S3Client, S3Link, error_code, error_status

__all__ = ["run_probe"]


def _probe(link: S3Link, s3: S3Client, ctx: OpContext, operation: str) -> str:
    config = link.config
    bucket = config.bucket
    try:
        s3.head_bucket(Bucket=bucket)
    except botocore.exceptions.ClientError as exc:
        if error_status(exc) == 404 or error_code(exc) in ("404", "NoSuchBucket", "NotFound"):
            raise S3BucketNotFoundError(
                f"{link.name}: {operation}: {link.describe()}: the bucket does not exist; create it first, "
                "the adapters never create buckets",
                code="NoSuchBucket",
                status=404,
            ) from None
        raise
    ctx.raise_if_expired(operation)
    try:
        status: str = s3.get_bucket_versioning(Bucket=bucket).get("Status") or "never enabled"
    except botocore.exceptions.ClientError as exc:
        status = f"unknown ({error_code(exc) or error_status(exc)})"
    ctx.raise_if_expired(operation)
    key = probe_key(config.prefix)
    s3.put_object(Bucket=bucket, Key=key, Body=b"agentium probe", IfNoneMatch="*")
    try:
        ctx.raise_if_expired(operation)
        try:
            s3.put_object(Bucket=bucket, Key=key, Body=b"agentium probe again", IfNoneMatch="*")
        except botocore.exceptions.ClientError as exc:
            if not (error_code(exc) == "PreconditionFailed" or error_status(exc) == 412):
                raise
        else:
            raise link.family(
                f"{link.name}: {operation}: {link.describe()} accepted a second create-only write "
                "(IfNoneMatch='*') of the same key: the server does not honour conditional writes, "
                "which this plugin needs (never overwrite, compare-and-set)",
                code="NoConditionalWrites",
            )
    finally:
        s3.delete_object(Bucket=bucket, Key=key)
    return (
        f"{link.name} ok: {link.describe()}, prefix {config.prefix!r}; conditional writes honoured "
        f"(a second create-only write got 412); versioning: {status}"
    )


async def run_probe(link: S3Link, ctx: OpContext, operation: str) -> str:
    """Run the probe under ``ctx`` and describe the result; raises the link's typed errors."""
    return await link.call(ctx, operation, lambda s3: _probe(link, s3, ctx, operation))
