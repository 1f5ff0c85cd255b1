"""What the tests of a turn whose tool ran share: the scripted tool call and a verifier that refuses."""

from __future__ import annotations

from typing import ClassVar

from agentium_harness import Verdict
from agentium_harness.plugin_api import (
    CompletionCandidate,
    CompletionVerifier,
    VerificationResult,
    VerifierCapabilities,
    VerifyContext,
)

#: A scripted model reply calling the ``deploy`` tool once.
DEPLOY = {"content": "", "tool_calls": [{"id": "c1", "name": "deploy", "arguments": {"to": "prod"}}]}


class AlwaysFails(CompletionVerifier):
    """A verifier that refuses every candidate (a revision policy then asks the model again)."""

    capabilities: ClassVar[VerifierCapabilities] = VerifierCapabilities(artifact_digests=True)

    async def verify(self, candidate: CompletionCandidate, ctx: VerifyContext) -> VerificationResult:
        return VerificationResult(Verdict.FAIL, (), "the report is still the draft")
