"""Steps 6 and 7 of a turn: build the model request, dispatch it, run granted tools.

Every provider answer is checked before anything acts on it
(:mod:`.reply_check`: its type, that it only carries tool calls when the
provider declared ``tool_calls``, at most :data:`MAX_TOOL_CALLS`, and that it is what
``append`` would store, at most :data:`MAX_REPLY_BYTES` of text), and that
the turn with it, and room for each call's result, stays within
what a committed turn may take (:mod:`.turn_budget`) — a response that fails
any check is refused with
:class:`~agentium_harness._errors.ContractViolationError` before a tool runs,
so a turn whose tool already ran is still committed. A tool's output is
bounded too (:data:`MAX_TOOL_OUTPUT_BYTES`, and cut to the room the turn has
left), and an adapter's or a tool's exception is read as text that never
raises and can always be stored.
"""

from __future__ import annotations

import json
import operator
from typing import Any

import attrs

from .._codec import canonical_json
from .._errors import (
    AgentiumError,
    ToolNotGrantedError,
)
from .._history import Message, Role, ToolCall
from .._observe import spans as observe
from .._ports._base import capabilities_of
from .._ports.provider import ModelProvider, ModelRequest, SourceBlock, Usage
from .._text import clean_text, cut_text, error_text
from .._validators import lone_surrogate_at
from .bounded import Overrun, bounded
from .call_ids import distinct_ids, renamed_note
from .lifecycle import Ticket
from .limits import RuntimeLimits
from .provider_call import complete_bounded
from .reply_check import MAX_REPLY_BYTES, MAX_TOOL_CALLS, checked_response
from .results import Diagnostic, RunStatus, Severity
from .tools import EffectLevel, ToolOutcome, ToolRegistry, ToolStatus
from .turn_budget import TurnBudget, message_limit, room_for_reply
from .turn_fence import TurnFence

__all__ = [
    "MAX_REPLY_BYTES",
    "MAX_TOOL_CALLS",
    "MAX_TOOL_OUTPUT_BYTES",
    "TurnInterrupted",
    "TurnOutcome",
    "TurnTrace",
    "executed",
    "merge_turns",
    "run_turn",
]


@attrs.frozen(slots=True)
class TurnOutcome:
    """The messages of the turn, how it ended, and how many model calls (``steps``) it made."""

    messages: tuple[Message, ...]
    status: RunStatus
    tool_outcomes: tuple[ToolOutcome, ...]
    usage: Usage
    diagnostics: tuple[Diagnostic, ...]
    steps: int = 0


#: Most UTF-8 bytes of one tool's output a turn keeps: longer text is cut to it, with a marker (8 MiB).
MAX_TOOL_OUTPUT_BYTES = 8 * 1024 * 1024

#: The diagnostic code of each tool outcome but ``ok`` (a handler that ran and raised: ``tool_failed``).
_CODES = {
    ToolStatus.TIMED_OUT: "tool_timeout",
    ToolStatus.REFUSED_EFFECT: "revision_effect_refused",
    ToolStatus.INVALID_OUTPUT: "tool_invalid_output",
    ToolStatus.FAILED: "tool_failed",
    ToolStatus.REFUSED_NOT_GRANTED: "tool_refused",
    ToolStatus.REFUSED_UNKNOWN: "tool_refused",
}

#: Outcomes of calls that were never executed: only these had no effect.
_REFUSALS = frozenset({ToolStatus.REFUSED_NOT_GRANTED, ToolStatus.REFUSED_UNKNOWN, ToolStatus.REFUSED_EFFECT})


class TurnInterrupted(Exception):
    """A model call failed mid-turn: ``error`` is what to raise, ``partial`` the turn up to it.

    ``partial`` holds every message, tool outcome and model call made before
    the failure, so tools that already ran are never dropped (the runtime
    commits them) and the usage is still reported.
    """

    def __init__(self, error: AgentiumError, partial: TurnOutcome) -> None:
        super().__init__(str(error))
        self.error = error
        self.partial = partial

    def take(self) -> tuple[AgentiumError, TurnOutcome]:
        """The error and the turn so far, let go of: to raise the error in this exception's handler.

        Raised there, the error gets this exception as its context; were it
        still held here (as ``error`` or as the cause), the two and every frame
        of their tracebacks would form a cycle that outlives the run.
        """
        error = self.error
        del self.error
        self.__cause__ = None
        return error, self.partial


def executed(turn: TurnOutcome) -> bool:
    """True when a tool handler ran in ``turn`` (any outcome but a refusal): it may have had effects."""
    return any(o.status not in _REFUSALS for o in turn.tool_outcomes)


class TurnTrace:
    """The turn as it goes, across its model calls and verification revisions.

    :func:`run_turn` records each message, tool outcome and model call here as
    it happens, so a cancellation — which leaves no return value — still
    leaves what ran (:meth:`partial`). ``running`` is the tool call whose
    handler was entered last and has no outcome yet. ``fence`` (the run's
    :class:`~.turn_fence.TurnFence`) is checked before each model call.
    """

    __slots__ = ("estimated", "fence", "messages", "outcomes", "running", "steps", "usage_in", "usage_out")

    def __init__(self, fence: TurnFence | None = None) -> None:
        #: Looked at before each model call of the run: an erasure of the session since its load stops it.
        self.fence = fence
        self.messages: tuple[Message, ...] = ()
        self.outcomes: list[ToolOutcome] = []
        self.usage_in = self.usage_out = self.steps = 0
        self.estimated = False
        self.running: tuple[ToolCall, EffectLevel] | None = None

    def partial(self, ended: str = "was cancelled") -> TurnOutcome:
        """The turn so far as a complete turn: every call of the last reply answered.

        A call whose handler was entered (``running``) is answered as
        ``cancelled`` — it may have had its effects —, and so are the calls of
        the same reply after it, which never started. A reply none of whose
        calls started is left out: nothing of it ran. ``ended`` says how the
        run ended, in those answers (``was cancelled``, ``failed``).
        """
        messages = list(self.messages)
        outcomes = list(self.outcomes)
        last = max((i for i, m in enumerate(messages) if m.tool_calls), default=None)
        if last is not None:
            answered = {m.tool_call_id for m in messages[last + 1 :] if m.role is Role.TOOL}
            missing = [c for c in messages[last].tool_calls if c.id not in answered]
            running = self.running[0].id if self.running is not None else None
            if missing and not answered and running is None:
                messages = messages[:last]
            for call in missing:
                if call.id == running:
                    assert self.running is not None
                    effect: EffectLevel | None = self.running[1]
                    detail = f"tool {call.name!r} was running when the run {ended}; it may have run"
                else:
                    effect = None
                    detail = f"the run {ended} before tool {call.name!r} started; it did not run"
                outcomes.append(ToolOutcome(call.id, call.name, ToolStatus.CANCELLED, effect, detail))
                messages.append(Message(Role.TOOL, f"error: {detail}", tool_call_id=call.id))
        return TurnOutcome(
            tuple(messages),
            RunStatus.INTERRUPTED,
            tuple(outcomes),
            Usage(input_tokens=self.usage_in, output_tokens=self.usage_out, estimated=self.estimated),
            (),
            self.steps,
        )


def merge_turns(first: TurnOutcome, more: TurnOutcome) -> TurnOutcome:
    """``more`` (which continued ``first``: its messages include ``first``'s) with both turns' counts."""
    return TurnOutcome(
        messages=more.messages,
        status=more.status,
        tool_outcomes=(*first.tool_outcomes, *more.tool_outcomes),
        usage=Usage(
            input_tokens=(first.usage.input_tokens or 0) + (more.usage.input_tokens or 0),
            output_tokens=(first.usage.output_tokens or 0) + (more.usage.output_tokens or 0),
            estimated=first.usage.estimated or more.usage.estimated,
        ),
        diagnostics=(*first.diagnostics, *more.diagnostics),
        steps=first.steps + more.steps,
    )


async def run_turn(
    ticket: Ticket,
    *,
    provider: ModelProvider,
    tools: ToolRegistry,
    limits: RuntimeLimits,
    instructions: str,
    sources: tuple[SourceBlock, ...],
    history: tuple[Message, ...],
    user_input: str,
    granted: frozenset[str],
    prior: tuple[Message, ...] = (),
    refuse_write_effects: bool = False,
    max_steps: int | None = None,
    trace: TurnTrace | None = None,
) -> TurnOutcome:
    """Call the provider until it answers without tool calls, at most ``max_steps`` times.

    ``max_steps`` defaults to the limits'; a verification revision passes what
    the run has left. ``prior`` continues a turn already under way (a
    revision): its messages stay first and ``user_input`` follows them. With
    ``refuse_write_effects``, a granted tool whose effect is ``write`` is
    refused and recorded instead of run (R31). A failing model call raises
    :class:`TurnInterrupted` with the turn so far. ``trace`` (shared by the
    calls of one run) follows the turn as it goes, for a cancellation; its
    fence raises :class:`~agentium_harness._errors_run.ErasedDuringRunError`
    before a call when the session began to be erased since the run's load.
    """
    trace = trace if trace is not None else TurnTrace()
    steps = limits.max_steps if max_steps is None else max_steps
    may_call_tools = bool(getattr(capabilities_of(provider), "tool_calls", False))
    diagnostics: list[Diagnostic] = []
    turn: list[Message] = [*prior, Message(Role.USER, user_input)]
    budget = TurnBudget(turn)  # what a committed turn may take: checked before any tool runs
    if prior and not room_for_reply(len(turn), MAX_TOOL_CALLS):
        turn.pop()  # a revision with no room for a reply: its request is neither made nor kept
        steps = 0
        diagnostics.append(message_limit(len(turn), 0))
    outcomes: list[ToolOutcome] = []
    usage_in = usage_out = 0
    estimated = False
    status = RunStatus.STEP_LIMIT
    specs = tools.specs(granted)
    made = 0
    # The ids of the calls every request of this turn carries: the history sent and the turn's
    # own (a revision's prior ones too). Chat Completions refuses two tool results of one id
    # anywhere in a request, so a call of a reply naming one again gets an id of its own.
    used = {call.id for messages in (history, turn) for message in messages for call in message.tool_calls}
    # What the provider is handed: the same messages, but each one with tool calls (or a payload)
    # as its own copy. A ToolCall's arguments are a dict: shared, a provider could rewrite the
    # arguments the engine commits (not those the tool ran with), or put in a value no commit can
    # encode and lose the turn's writes; the history's are the loaded snapshot's own.
    shown_history = history if _plain(history) else tuple(map(_shown, history))
    shown: list[Message] = [*map(_shown, turn)]
    for _step in range(steps):
        if not room_for_reply(len(turn), MAX_TOOL_CALLS):
            diagnostics.append(message_limit(len(turn), made))  # its reply could not all be committed
            break
        asked = tuple(turn)
        request = ModelRequest(
            instructions=instructions, sources=sources, history=history, turn=asked, tools=specs
        )
        if trace.fence is not None:
            # Before every call, not only the first: the history is the load's, and an erasure that
            # began since (in any process) must not see it sent. Raised as it is: nothing is kept.
            await trace.fence.check()
        told = tuple(shown)
        if shown_history is history and all(map(operator.is_, told, asked)):
            sent = request  # every message is handed as it is (frozen, nothing to copy): the same request
        else:
            sent = ModelRequest(
                instructions=instructions, sources=sources, history=shown_history, turn=told, tools=specs
            )
        try:
            reply, usage, renamed = await _complete(
                ticket, provider, request, sent, may_call_tools, budget, limits.model_timeout_s, used
            )
        except AgentiumError as exc:
            partial = TurnOutcome(
                tuple(turn),
                RunStatus.INTERRUPTED,
                tuple(outcomes),
                Usage(input_tokens=usage_in, output_tokens=usage_out, estimated=estimated),
                tuple(diagnostics),
                made,
            )
            raise TurnInterrupted(exc, partial) from exc
        made += 1
        if renamed:
            diagnostics.append(renamed_note(renamed, "reply"))
        # The provider's counts where it reported them (a reported 0 stays 0), estimates otherwise.
        call_in = request.estimated_tokens if usage.input_tokens is None else usage.input_tokens
        call_out = reply.estimated_tokens if usage.output_tokens is None else usage.output_tokens
        estimated = estimated or usage.input_tokens is None or usage.output_tokens is None
        usage_in += call_in
        usage_out += call_out
        turn.append(reply)
        shown.append(_shown(reply))
        used.update(call.id for call in reply.tool_calls)
        trace.messages = tuple(turn)
        trace.steps += 1
        trace.usage_in += call_in
        trace.usage_out += call_out
        trace.estimated = trace.estimated or estimated
        if not reply.tool_calls:
            status = RunStatus.COMPLETED
            break
        for call in reply.tool_calls:
            # A name the registry does not know is the model's own text, not the host's: no span name.
            with observe.tool(call.name, call.id, registered=call.name in tools) as span:
                span.content("gen_ai.tool.call.arguments", call.arguments)
                outcome, content = budget.fit(
                    *await _run_tool(tools, call, granted, limits.tool_timeout_s, refuse_write_effects, trace)
                )
                span.set("agentium.tool.status", outcome.status.value)
                if outcome.status is not ToolStatus.OK:
                    span.fail(outcome.status.value)
                else:
                    span.content("gen_ai.tool.call.result", content)
            outcomes.append(outcome)
            if outcome.status is not ToolStatus.OK:
                diagnostics.append(
                    Diagnostic(_CODES.get(outcome.status, "tool_failed"), outcome.detail, Severity.WARNING)
                )
            elif outcome.detail:
                diagnostics.append(Diagnostic("tool_output_cut", outcome.detail, Severity.WARNING))
            turn.append(Message(Role.TOOL, content, tool_call_id=call.id))
            shown.append(turn[-1])
            trace.running = None
            trace.outcomes.append(outcome)
            trace.messages = tuple(turn)
    if status is RunStatus.STEP_LIMIT and not any(d.code == "message_limit" for d in diagnostics):
        diagnostics.append(Diagnostic("step_limit", f"stopped after {made} model call(s)", Severity.WARNING))
    if estimated:
        diagnostics.append(
            Diagnostic(
                "usage_estimated",
                "the provider reported no token counts for some calls; usage includes estimates",
            )
        )
    return TurnOutcome(
        messages=tuple(turn),
        status=status,
        tool_outcomes=tuple(outcomes),
        usage=Usage(input_tokens=usage_in, output_tokens=usage_out, estimated=estimated),
        diagnostics=tuple(diagnostics),
        steps=made,
    )


def _plain(messages: tuple[Message, ...]) -> bool:
    """True when :func:`_shown` would hand back every one of ``messages`` as it is (a loop, no calls)."""
    for message in messages:
        if message.tool_calls or message.payload is not None:
            return False
    return True


def _shown(message: Message) -> Message:
    """``message`` as a provider may be handed it: its tool calls' arguments and payload its own copies."""
    if not message.tool_calls and message.payload is None:
        return message  # frozen, and every field immutable: nothing to rewrite
    payload = message.payload
    return Message(
        role=message.role,
        content=message.content,
        tool_calls=tuple(
            ToolCall(c.id, c.name, json.loads(canonical_json(c.arguments))) for c in message.tool_calls
        ),
        tool_call_id=message.tool_call_id,
        payload=None if payload is None else json.loads(canonical_json(payload)),
        payload_format=message.payload_format,
    )


async def _complete(
    ticket: Ticket,
    provider: ModelProvider,
    request: ModelRequest,
    sent: ModelRequest,
    may_call_tools: bool,
    budget: TurnBudget,
    timeout_s: float | None,
    used: set[str],
) -> tuple[Message, Usage, int]:
    """The provider's reply and usage, checked (:func:`.reply_check.checked_response`) before the span.

    ``sent`` is what the provider is handed; ``request``, the same request on the engine's own
    messages, is what the span and the token estimate read (whatever the provider did to ``sent``).
    ``timeout_s`` bounds the call (the limits' ``model_timeout_s``; ``None``: the op deadline);
    ``used`` holds the ids of the calls the request sends (history and turn so far): a call
    naming one again is given an id of its own (:func:`.call_ids.distinct_ids`), before the
    budget and the span read the reply; how many were is returned with it.
    """
    # The model call's GenAI span (``chat {model}``); Ticket.call leaves this one to us.
    with observe.chat(provider) as span:
        if span.captures_content:
            span.content("gen_ai.system_instructions", [{"type": "text", "content": request.instructions}])
            span.content("gen_ai.input.messages", observe.messages_json(request.turn))
        response = await complete_bounded(ticket, provider, sent, timeout_s)
        # Checked first: the span's token estimate and content read the reply, and a reply of
        # the wrong shape (content that is no text, arguments nested thousands deep) would make
        # them raise untyped errors, outside the handler that commits what ran.
        reply, usage = checked_response(response, may_call_tools)
        reply, renamed = distinct_ids(reply, used)
        budget.admit(reply)  # a turn that could not be committed: refused before its tools run
        if span.recording or observe.current() is not None:
            _describe(span, request, usage, reply)
        return reply, usage, renamed


def _describe(
    span: observe.Span | observe.NullSpan, request: ModelRequest, usage: Usage, message: Message
) -> None:
    """Token usage (the engine's estimate where the provider gave none, as the run counts it)."""
    given_in, given_out = usage.input_tokens, usage.output_tokens
    if given_in is None or given_out is None:
        span.set("agentium.usage.estimated", True)
    observe.tokens(
        span,
        request.estimated_tokens if given_in is None else given_in,
        message.estimated_tokens if given_out is None else given_out,
    )
    span.set("agentium.tool_calls", len(message.tool_calls))
    if span.captures_content:
        span.content("gen_ai.output.messages", observe.messages_json((message,)))


async def _run_tool(
    tools: ToolRegistry,
    call: ToolCall,
    granted: frozenset[str],
    timeout_s: float,
    refuse_write: bool,
    trace: TurnTrace,
) -> tuple[ToolOutcome, str]:
    try:
        tool = tools.resolve(call.name, granted)
    except ToolNotGrantedError as exc:
        status = ToolStatus.REFUSED_UNKNOWN if call.name not in tools else ToolStatus.REFUSED_NOT_GRANTED
        detail = f"ToolNotGrantedError: {exc}"
        return ToolOutcome(call.id, call.name, status, None, detail), f"refused: {exc}"
    # ``==``, not ``is``: a plain ``"write"`` (an object built around Tool's converter) is a write too.
    if refuse_write and tool.effect == EffectLevel.WRITE:
        # Grants were checked first: a revision never widens what the run may do (R31).
        detail = (
            f"tool {call.name!r} has write effects, which are not allowed during a verification "
            "revision (allow_revision_effects is off); the call was not executed"
        )
        return ToolOutcome(
            call.id, call.name, ToolStatus.REFUSED_EFFECT, tool.effect, detail
        ), f"refused: {detail}"
    # The handler gets its own deep copy: the arguments stored in the frozen
    # ToolCall are committed history and must not be rewritable by a tool.
    arguments: dict[str, Any] = json.loads(canonical_json(call.arguments))
    trace.running = (call, tool.effect)  # from here on the handler may have effects
    try:
        # In its own task, so a handler blocked in a worker thread cannot hold the run past its deadline.
        content = await bounded(lambda: tool.handler(arguments), timeout_s)
    except Overrun as over:
        detail = f"tool {call.name!r} did not finish within {timeout_s}s and was cancelled"
        if over.abandoned:
            detail += (
                "; it did not stop, so it was abandoned (it may still complete; its result is discarded)"
            )
        return ToolOutcome(call.id, call.name, ToolStatus.TIMED_OUT, tool.effect, detail), f"error: {detail}"
    except Exception as exc:  # a tool's failure is reported to the model, not raised
        # The exception is the tool's: its text is read so that it can never raise or be unstorable.
        detail = cut_text(error_text(exc), MAX_TOOL_OUTPUT_BYTES)[0]
        return ToolOutcome(call.id, call.name, ToolStatus.FAILED, tool.effect, detail), f"error: {detail}"
    return _tool_text(call, tool.effect, content)


def _tool_text(call: ToolCall, effect: EffectLevel, content: object) -> tuple[ToolOutcome, str]:
    """The outcome of a handler that returned ``content``, and the text the model sees and history keeps.

    The tool ran and its effects stand whatever it returned; only its text
    may be unusable. A value that is not a ``str`` (handlers return text) or
    text that is not valid Unicode (it could never be stored or sent) is
    ``invalid_output``, with an error text in its place; text over
    :data:`MAX_TOOL_OUTPUT_BYTES` is cut to it, with a marker saying so and a
    detail on the outcome (the run reports it as diagnostic ``tool_output_cut``).
    """
    if not isinstance(content, str):
        detail = (
            f"tool {call.name!r} ran but returned {clean_text(type(content).__name__)}, not text; "
            "its output was replaced by this error"
        )
        return ToolOutcome(call.id, call.name, ToolStatus.INVALID_OUTPUT, effect, detail), f"error: {detail}"
    text = str.__str__(content)  # a plain copy: a str subclass's own methods are not trusted
    at = lone_surrogate_at(text)
    if at is not None:
        detail = (
            f"tool {call.name!r} ran but returned text that is not valid Unicode "
            f"(a lone surrogate at index {at}); its output was replaced by this error"
        )
        return ToolOutcome(call.id, call.name, ToolStatus.INVALID_OUTPUT, effect, detail), f"error: {detail}"
    if len(text) * 4 > MAX_TOOL_OUTPUT_BYTES:
        text, cut = cut_text(text, MAX_TOOL_OUTPUT_BYTES)
        if cut:
            detail = (
                f"tool {call.name!r} returned more than {MAX_TOOL_OUTPUT_BYTES} bytes of text; "
                f"{cut} bytes were cut from its output"
            )
            return ToolOutcome(call.id, call.name, ToolStatus.OK, effect, detail), text
    return ToolOutcome(call.id, call.name, ToolStatus.OK, effect), text
