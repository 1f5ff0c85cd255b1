"""The plugin module named by the ``agentium`` entry point: registers the ``fs`` completion verifier."""

from __future__ import annotations

from agentium_harness.plugin_api import AdapterSpec, Register, hookimpl

from .config import FsVerifierConfig
from .verifier import FsVerifier

__all__ = ["agentium_register_verifiers"]


@hookimpl
def agentium_register_verifiers(register: Register) -> None:
    """Register the file-system verifier as verifier adapter ``fs`` (options: :class:`FsVerifierConfig`).

    Building it only checks that ``root`` is an existing directory and holds it open (one descriptor
    per verifier, released when the runtime closes it); each verification opens the root afresh,
    refuses another directory there, and reads within its bounds.
    """
    register(
        AdapterSpec(
            name="fs",
            adapter_class=FsVerifier,
            config_class=FsVerifierConfig,
            description="checks expected artifact sha256s and JUnit XML test records under a root directory",
        )
    )
