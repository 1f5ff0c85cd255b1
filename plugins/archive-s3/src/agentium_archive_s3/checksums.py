"""Transfer checksums of every upload: archived groups, snapshots, tombstones, the revision floor.

Each write sends ``Content-MD5`` and
``x-amz-checksum-sha256`` of its body: a server that checks either refuses
bytes damaged on the way (one of :data:`DIGEST_CODES`), and with
``etag_is_md5`` the returned ETag (a single-part object's MD5) tells when a
server that checks neither stored other bytes than those sent.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Final

__all__ = ["DIGEST_CODES", "Checksums"]

#: The server received other bytes than those sent and refused them: nothing was written.
DIGEST_CODES: Final = frozenset({"BadDigest", "InvalidDigest", "XAmzContentSHA256Mismatch"})


class Checksums:
    """A body's ``put_object`` checksum arguments and the ETag its bytes would get."""

    __slots__ = ("args", "md5_hex")

    def __init__(self, body: bytes) -> None:
        md5 = hashlib.md5(body, usedforsecurity=False).digest()  # a transfer checksum
        #: ``ContentMD5`` and ``ChecksumSHA256``, to pass to ``put_object``.
        self.args: dict[str, str] = {
            "ContentMD5": base64.b64encode(md5).decode("ascii"),
            "ChecksumSHA256": base64.b64encode(hashlib.sha256(body).digest()).decode("ascii"),
        }
        #: The MD5 of the body, as hex: the ETag S3 gives a single-part object holding it.
        self.md5_hex = md5.hex()

    def stored_other_bytes(self, etag: str, etag_is_md5: bool) -> bool:
        """True if a write answered with ``etag`` (unquoted) stored other bytes than the body."""
        return etag_is_md5 and etag != self.md5_hex
