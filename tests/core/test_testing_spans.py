"""``agentium_harness.testing``'s span recorder: it records, and gives the global provider back."""

from __future__ import annotations

import opentelemetry.trace as otel_trace
import pytest

from agentium_harness.testing import SpanRecorder, recording_spans


def test_recording_spans_records_the_global_providers_spans_and_restores_the_previous_one() -> None:
    before = otel_trace._TRACER_PROVIDER
    with recording_spans() as recorder:
        assert otel_trace.get_tracer_provider() is recorder.provider
        with otel_trace.get_tracer("t").start_as_current_span("work", attributes={"k": "value-1"}) as span:
            span.add_event("happened", {"why": "value-2"})
        [done] = recorder.finished
        assert done.name == "work"
        assert {"work", "value-1", "happened", "value-2"} <= set(recorder.carried())
        recorder.clear()
        assert recorder.finished == ()
    assert otel_trace._TRACER_PROVIDER is before


def test_the_previous_provider_is_restored_when_the_block_raises() -> None:
    before = otel_trace._TRACER_PROVIDER
    with pytest.raises(KeyError), recording_spans():
        raise KeyError("boom")
    assert otel_trace._TRACER_PROVIDER is before


def test_a_recorder_alone_leaves_the_global_provider_alone() -> None:
    before = otel_trace._TRACER_PROVIDER
    recorder = SpanRecorder()
    with recorder.provider.get_tracer("t").start_as_current_span("own"):
        pass
    assert [s.name for s in recorder.finished] == ["own"]
    assert otel_trace._TRACER_PROVIDER is before
