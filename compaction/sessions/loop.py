"""A reference agent loop: one turn of model calls and tool executions, recorded as session events.

Per turn the loop appends ``user/message`` (the prompt), ``turn/start`` and, on the first turn or
when the request envelope changed, ``request/header``. Each step then runs:

1. the ``pre_step`` hooks, awaited one at a time, after the previous step closed and before the next
   opens (auto-compaction runs here; a hook's error is logged and the turn continues);
2. ``step/start``; the request is derived from the surface *after* the hooks, so their surface
   changes are in it;
3. the model call (``on_model_error`` hooks may ask for a retry from a re-derived surface);
4. ``assistant/chunk`` per streamed chunk, then ``assistant/message`` citing the chunk seqs;
5. per tool-call block: ``tool/call``, the tool, ``tool/result`` citing the ``tool/call`` seq;
6. ``step/end``, then one atomic save when a store is given. A save that fails in the database
   (:class:`~compaction.errors.SaveError`: a dropped connection, a restart) is retried once after a
   second, once the store answers again; if the failed save's events turn out stored, they are not
   saved again (:mod:`compaction.sessions.retry`), so a step's events are never doubled.

A prompt naming a registered command (``/compact``; :meth:`AgentLoop.submit`) runs the command
between turns instead (:mod:`compaction.sessions.commands`): ``command/run``, what the command
appends, ``command/done``; no turn opens and the model is not called.

A step without tool calls ends the turn (``turn/end completed``). A model error closes the step and
the turn (``turn/end error``) and is re-raised; cancellation answers pending calls with synthetic
error results, closes the step and the turn (``turn/end aborted``) and is re-raised.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import msgspec

from compaction.errors import AgentLoopError, ConfigurationError
from compaction.sessions.blocks import (
    Message,
    Source,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    tool_calls_of,
)
from compaction.sessions.commands import Command, CommandResult, command_for, run_command
from compaction.sessions.events import (
    APPEND,
    AssistantChunk,
    AssistantMessage,
    RequestHeader,
    SessionEvent,
    StepEnd,
    StepStart,
    ToolCall,
    ToolError,
    ToolResult,
    ToolSpec,
    TurnEndReason,
    TurnStart,
    Usage,
    UserMessage,
)
from compaction.sessions.interrupted import turn_closers
from compaction.sessions.invariants import DEFAULT_INVARIANTS
from compaction.sessions.retry import RETRY_DELAY, asave_retrying

if TYPE_CHECKING:
    from compaction.sessions.session import Session
    from compaction.sessions.store import SessionStore

logger = logging.getLogger("compaction.sessions.loop")

MAX_STEPS_MESSAGE = "max steps reached"


# ---------------------------------------------------------------- the model and tool seams


class ModelRequest(msgspec.Struct, frozen=True):
    provider: str
    model: str
    system: str | None
    tools: tuple[ToolSpec, ...]
    messages: tuple[Message, ...]
    max_tokens: int | None = None


class ModelResponse(msgspec.Struct, frozen=True):
    message: Message  # role "assistant"; the loop stamps a model source when it has none
    usage: Usage | None = None
    chunks: tuple[str, ...] = ()
    stop_reason: str = "stop"


class ModelClient(Protocol):
    async def complete(self, request: ModelRequest) -> ModelResponse: ...


class ToolOutput(msgspec.Struct, frozen=True):
    text: str
    is_error: bool = False


ToolFunction = Callable[[str], Awaitable[ToolOutput]]
"""A tool: the call's raw JSON arguments in, its output out. Raising counts as an error result."""


@dataclass
class StepContext:
    """What a hook sees: the session, the store, and the step about to open (or open)."""

    session: Session
    store: SessionStore | None
    turn: int
    step: int
    header: RequestHeader | None
    loop: AgentLoop


PreStepHook = Callable[[StepContext], Awaitable[None]]
ModelErrorHook = Callable[[StepContext, Exception], Awaitable[bool]]
"""Called inside the open step after the model call failed; return True to retry the call from a
re-derived surface (the overflow-recovery seam)."""


class TurnOutcome(msgspec.Struct, frozen=True):
    turn: int
    steps: int
    reason: TurnEndReason


@dataclass
class _TurnState:
    turn: int
    steps: int = 0


# ---------------------------------------------------------------- the loop


class AgentLoop:
    """Runs turns of one session against a model client and tool functions."""

    def __init__(
        self,
        session: Session,
        model: ModelClient,
        tools: dict[str, ToolFunction],
        *,
        store: SessionStore | None = None,
        provider: str,
        model_name: str,
        system: str | None = None,
        tool_specs: Sequence[ToolSpec] = (),
        context_window: int | None = None,
        max_steps: int = 50,
        max_tokens: int | None = None,
        pre_step: Sequence[PreStepHook] = (),
        on_model_error: Sequence[ModelErrorHook] = (),
        max_model_retries: int = 1,
        commands: Mapping[str, Command] | None = None,
        invariants: Sequence[str] = DEFAULT_INVARIANTS,
        save_retry_delay: float = RETRY_DELAY,
    ) -> None:
        """``invariants``: put in force (a ``session/invariants`` marker) when the loop writes the
        first event of an empty session; a session with history keeps the ones it has."""
        if max_steps < 1:
            raise ConfigurationError(f"max_steps must be at least 1; got {max_steps}")
        if max_model_retries < 0:
            raise ConfigurationError(f"max_model_retries must be >= 0; got {max_model_retries}")
        self.session = session
        self.model = model
        self.tools = dict(tools)
        self.store = store
        self.provider = provider
        self.model_name = model_name
        self.system = system
        self.tool_specs = tuple(tool_specs)
        self.context_window = context_window
        self.max_steps = max_steps
        self.max_tokens = max_tokens
        self.pre_step: list[PreStepHook] = list(pre_step)
        self.on_model_error: list[ModelErrorHook] = list(on_model_error)
        self.max_model_retries = max_model_retries
        self.commands: dict[str, Command] = dict(commands or {})
        self.invariants = tuple(invariants)
        self.save_retry_delay = save_retry_delay

    def add_pre_step(self, hook: PreStepHook) -> None:
        self.pre_step.append(hook)

    def add_on_model_error(self, hook: ModelErrorHook) -> None:
        self.on_model_error.append(hook)

    @property
    def header(self) -> RequestHeader | None:
        """The latest ``request/header`` of the session, or None."""
        return self.session.latest_header()

    def request(self) -> ModelRequest:
        """The model request for the current surface and envelope."""
        return ModelRequest(
            provider=self.provider,
            model=self.model_name,
            system=self.system,
            tools=self.tool_specs,
            messages=tuple(self.session.derive_messages()),
            max_tokens=self.max_tokens,
        )

    # ------------------------------------------------------------ a user message

    async def submit(self, prompt: str | Message) -> TurnOutcome | CommandResult:
        """A user message: a registered command (``/compact``) when its text names one, run
        between turns; otherwise a turn (:meth:`run_turn`)."""
        text = prompt if isinstance(prompt, str) else None
        found = command_for(text, self.commands) if text is not None else None
        if found is None:
            return await self.run_turn(prompt)
        self._begin()
        name, args = found
        return await run_command(self.session, self.store, self.commands[name], name, args)

    # ------------------------------------------------------------ a turn

    async def run_turn(self, prompt: str | Message) -> TurnOutcome:
        """Run one turn to its end; a model error or a cancellation is re-raised after closing."""
        if self.session.open_turn is not None:
            raise AgentLoopError(
                f"session {self.session.id}: run_turn expected no open turn, found turn "
                f"{self.session.open_turn} open (repair or close it first)"
            )
        self._begin()
        turn = self.session.structure.next_turn
        self._append(UserMessage(message=self._prompt_message(prompt), surface_op=APPEND))
        self._append(TurnStart(turn=turn))
        self._ensure_header()
        state = _TurnState(turn)
        try:
            reason = await self._run_steps(state)
        except asyncio.CancelledError:
            await self._close_turn(TurnEndReason(kind="aborted", message="cancelled"))
            raise
        except Exception as exc:
            await self._close_turn(_error_reason(exc))
            raise
        await self._close_turn(reason)
        return TurnOutcome(turn=turn, steps=state.steps, reason=reason)

    async def _run_steps(self, state: _TurnState) -> TurnEndReason:
        for step in range(1, self.max_steps + 1):
            await self._run_pre_step(state.turn, step)
            self._ensure_header()
            response = await self._run_step(state, step)
            if not tool_calls_of(response.message):
                if response.stop_reason in ("max-tokens", "max_tokens", "length"):
                    return TurnEndReason(kind="max-tokens")
                return TurnEndReason(kind="completed")
        return TurnEndReason(kind="error", message=MAX_STEPS_MESSAGE, code="MAX_STEPS")

    async def _run_pre_step(self, turn: int, step: int) -> None:
        for hook in list(self.pre_step):
            try:
                await hook(self._context(turn, step))
            except Exception as exc:
                logger.warning("pre-step hook failed: %s; continuing the turn", exc, exc_info=exc)

    async def _run_step(self, state: _TurnState, step: int) -> ModelResponse:
        turn = state.turn
        self._append(StepStart(turn=turn, step=step))
        state.steps = step
        response = await self._call_model(turn, step)
        message = self._assistant_message(response, step)
        chunk_seqs = tuple(
            self._append(AssistantChunk(turn=turn, step=step, chunk=c)).seq for c in response.chunks
        )
        self._append(
            AssistantMessage(
                turn=turn,
                step=step,
                message=message,
                usage=response.usage,
                surface_op=APPEND,
                source_event_seqs=chunk_seqs,
            )
        )
        for call in tool_calls_of(message):
            await self._dispatch(state, step, call)
        self._append(StepEnd(turn=turn, step=step))
        await self._save()
        return response

    # ------------------------------------------------------------ the model call

    async def _call_model(self, turn: int, step: int) -> ModelResponse:
        retries = 0
        while True:
            try:
                return await self.model.complete(self.request())
            except Exception as exc:
                if retries >= self.max_model_retries or not await self._retry_wanted(turn, step, exc):
                    raise
                retries += 1
                logger.info(
                    "retrying the model call of turn %d step %d from the re-derived surface after: %s",
                    turn,
                    step,
                    exc,
                )

    async def _retry_wanted(self, turn: int, step: int, exc: Exception) -> bool:
        for hook in list(self.on_model_error):
            try:
                if await hook(self._context(turn, step), exc):
                    return True
            except Exception as hook_exc:
                logger.warning(
                    "model-error hook failed: %s; preserving the original model error",
                    hook_exc,
                    exc_info=hook_exc,
                )
        return False

    def _assistant_message(self, response: ModelResponse, step: int) -> Message:
        message = response.message
        if message.role != "assistant":
            raise AgentLoopError(
                f"session {self.session.id} step {step}: the model response message must have "
                f"role 'assistant'; got {message.role!r} (message {message.id})"
            )
        if message.source.kind != "model":
            source = Source(kind="model", provider=self.provider, model=self.model_name)
            message = msgspec.structs.replace(message, source=source)
        return message

    # ------------------------------------------------------------ tools

    async def _dispatch(self, state: _TurnState, step: int, call: ToolCallBlock) -> None:
        recorded = self._append(
            ToolCall(
                turn=state.turn,
                step=step,
                call_id=call.id,
                name=call.name,
                arguments=call.arguments,
            )
        )
        output, error = await self._run_tool(call)
        self._append(
            ToolResult(
                turn=state.turn,
                step=step,
                message=_tool_result_message(f"tool-result-{call.id}", call.id, output),
                error=error,
                surface_op=APPEND,
                source_event_seqs=(recorded.seq,),
            )
        )

    async def _run_tool(self, call: ToolCallBlock) -> tuple[ToolOutput, ToolError | None]:
        tool = self.tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(self.tools)) or "none"
            text = f"unknown tool {call.name!r}: expected one of the registered tools ({known})"
            return ToolOutput(text, is_error=True), ToolError("UnknownToolError", "TOOL_NOT_FOUND")
        try:
            output = await tool(call.arguments)
        except Exception as exc:
            text = f"tool {call.name!r} raised {type(exc).__name__}: {exc}"
            return ToolOutput(text, is_error=True), ToolError(type(exc).__name__, "TOOL_ERROR")
        error = ToolError("ToolError", "TOOL_ERROR") if output.is_error else None
        return output, error

    # ------------------------------------------------------------ closing

    async def _close_turn(self, reason: TurnEndReason) -> None:
        """Answer the open step's pending calls, close the step if open, end the turn, save."""
        for closer in turn_closers(self.session, reason):
            self._append(closer)
        await self._save()

    # ------------------------------------------------------------ helpers

    def _begin(self) -> None:
        """An empty session gets the loop's invariants before its first event."""
        if len(self.session) == 0 and self.invariants:
            self.session.enforce(self.invariants)

    def _context(self, turn: int, step: int) -> StepContext:
        return StepContext(self.session, self.store, turn, step, self.header, self)

    def _ensure_header(self) -> None:
        latest = self.header
        wanted = (self.provider, self.model_name, self.system, self.tool_specs, self.context_window)
        if latest is not None and wanted == (
            latest.provider,
            latest.model,
            latest.system,
            latest.tools,
            latest.context_window,
        ):
            return
        self._append(
            RequestHeader(
                provider=self.provider,
                model=self.model_name,
                system=self.system,
                tools=self.tool_specs,
                context_window=self.context_window,
                reason="initial" if latest is None else "change",
            )
        )

    def _prompt_message(self, prompt: str | Message) -> Message:
        if isinstance(prompt, str):
            return Message(id=f"user-{self.session.next_seq}", role="user", content=(TextBlock(prompt),))
        if prompt.role != "user":
            raise AgentLoopError(
                f"session {self.session.id}: run_turn expected a prompt with role 'user'; got "
                f"{prompt.role!r} (message {prompt.id})"
            )
        return prompt

    def _append(self, event: SessionEvent) -> SessionEvent:
        return self.session.append(event)

    async def _save(self) -> None:
        if self.store is not None:
            await asave_retrying(self.store, self.session, delay=self.save_retry_delay)


def _tool_result_message(message_id: str, call_id: str, output: ToolOutput) -> Message:
    block = ToolResultBlock(tool_call_id=call_id, content=(TextBlock(output.text),), is_error=output.is_error)
    return Message(id=message_id, role="user", content=(block,), source=Source(kind="tool", call_id=call_id))


def _error_reason(exc: Exception) -> TurnEndReason:
    code = getattr(exc, "code", None)
    message = str(exc) or type(exc).__name__
    return TurnEndReason(kind="error", message=message, code=code if isinstance(code, str) else None)
