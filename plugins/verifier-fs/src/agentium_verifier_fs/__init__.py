"""A completion verifier for Agentium that reads current evidence from the file system.

Register it by installing the distribution (``agentium-verifier-fs``); select
it with ``[verifier] plugin = "fs"`` and configure ``[verifier.options]``
(:class:`FsVerifierConfig`). See the README for the confinement rules and the
hardlink policy.
"""

from __future__ import annotations

from .config import (
    DEFAULT_MAX_FILE_BYTES,
    DEFAULT_MAX_RECORD_BYTES,
    DEFAULT_READ_TIMEOUT_S,
    ExpectedArtifact,
    FsVerifierConfig,
    RootNotFoundError,
)
from .verifier import ARTIFACT, MAX_STRANDED_WORKERS, TEST_RECORD, FsVerifier, VerifierClosedError

__version__ = "0.1.0"

__all__ = [
    "ARTIFACT",
    "DEFAULT_MAX_FILE_BYTES",
    "DEFAULT_MAX_RECORD_BYTES",
    "DEFAULT_READ_TIMEOUT_S",
    "MAX_STRANDED_WORKERS",
    "TEST_RECORD",
    "ExpectedArtifact",
    "FsVerifier",
    "FsVerifierConfig",
    "RootNotFoundError",
    "VerifierClosedError",
    "__version__",
]
