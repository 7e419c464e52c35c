"""LangChain v1 agents: a middleware that keeps the conversation in a compacting event log
(extra ``langchain``).

    memory = CompactionMiddleware("sqlite:///./.compaction/sessions.db", model="gpt-4o")
    agent = create_agent(model, tools=[...], middleware=[memory], checkpointer=InMemorySaver())
    agent.invoke({"messages": [...]}, {"configurable": {"thread_id": "user-42"}})

Before every model call, :meth:`CompactionMiddleware.before_model` records the state's messages the
log does not hold yet (a ``HumanMessage`` opens a turn; an ``AIMessage`` is one step with its tool
calls; a ``ToolMessage`` answers its call; ``after_model`` records each answer as it arrives),
compacts when the session is over its threshold, and, only when a compaction replaced something,
replaces the state's messages with the surface (as LangChain's ``SummarizationMiddleware`` does),
but with every original message kept in the log, the task statement pinned first, tool pairs
never split, and ``compaction audit`` able to re-check every compaction. Messages are matched by
their LangChain ``id``; a message the state still holds is handed back as the state's own object.

This module imports LangChain when it is imported; ``import compaction.integrations`` does not.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, NotRequired

from compaction.errors import FrameworkMissingError, IntegrationError
from compaction.integrations.media import audio_block, base64_size, format_media_type
from compaction.integrations.memory import (
    AssistantItem,
    Compacted,
    CompactingMemory,
    ContextItem,
    Item,
    ResultItem,
    UserItem,
    is_command,
)
from compaction.service import BasicCompactService, Settings
from compaction.sessions.blocks import (
    Block,
    ImageBlock,
    Message,
    OpaqueBlock,
    ReasoningBlock,
    ResultPart,
    Source,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    text_of,
    tool_calls_of,
)
from compaction.sessions.commands import CommandResult
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from compaction.vocabulary.summarizer import Summarizer

try:
    from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, hook_config
    from langchain.agents.middleware.types import PrivateStateAttr
    from langchain_core.messages import (
        AIMessage,
        AnyMessage,
        BaseMessage,
        HumanMessage,
        RemoveMessage,
        SystemMessage,
        ToolMessage,
    )
    from langgraph.config import get_config
    from langgraph.graph.message import REMOVE_ALL_MESSAGES
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.runtime import Runtime
except ImportError as e:  # pragma: no cover - exercised by a subprocess test without LangChain
    raise FrameworkMissingError(
        f"CompactionMiddleware needs LangChain v1: pip install 'event-compaction[langchain]' ({e})"
    ) from e

PROVIDER = "langchain"
RUN_KEY = "compaction_run"
"""The state key holding the token of the run that holds its thread's run lock."""


class RunState(AgentState[Any]):
    """The agent state with this middleware's private key: the run that holds the thread."""

    compaction_run: NotRequired[Annotated[str | None, PrivateStateAttr]]


COMMAND_KEY = "event_compaction_command"


class CompactionMiddleware(AgentMiddleware[RunState, Any, Any]):
    """Records the agent's messages as events and hands the model the compacted surface.

    The conversation is the run's LangGraph ``thread_id`` (``config={"configurable":
    {"thread_id": ...}}``, as a checkpointer needs anyway), namespaced for LangChain; ``thread``
    names the conversation of runs without one (else such a run is refused). The store is at
    ``url`` (or ``store``, or the ``memory`` several agents share)."""

    state_schema = RunState

    def __init__(
        self,
        url: str | None = None,
        *,
        store: SessionStore | None = None,
        memory: CompactingMemory | None = None,
        service: BasicCompactService | None = None,
        context_window: int | None = None,
        summarizer: Summarizer | None = None,
        model: str = "unknown",
        thread: str | None = None,
        retries: int = 1,
        allow_foreign: bool = False,
        custom_instructions: bool = False,
        config: str | Path | Settings | None = None,
    ) -> None:
        super().__init__()
        self.thread = thread
        self.memory = CompactingMemory.given(
            memory,
            "CompactionMiddleware",
            url,
            store=store,
            service=service,
            context_window=context_window,
            summarizer=summarizer,
            framework=PROVIDER,
            model=model,
            retries=retries,
            allow_foreign=allow_foreign,
            custom_instructions=custom_instructions,
            config=config,
        )
        self._holders: dict[str, tuple[str, Callable[[], None]]] = {}

    def close(self) -> None:
        self.memory.close()

    def thread_of(self, runtime: Runtime[Any] | None) -> str:
        """The run's ``thread_id`` (LangGraph's conversation id), else ``thread``."""
        info = getattr(runtime, "execution_info", None)
        found = getattr(info, "thread_id", None)
        if found is None:
            try:
                found = get_config().get("configurable", {}).get("thread_id")
            except RuntimeError:
                found = None
        if found is not None:
            return str(found)
        if self.thread is not None:
            return self.thread
        raise IntegrationError(
            "CompactionMiddleware: expected the run's thread_id (invoke the agent with "
            "config={'configurable': {'thread_id': ...}}) or CompactionMiddleware(thread=...); found neither"
        )

    # ------------------------------------------------------------ one run of a thread at a time

    async def abefore_agent(self, state: RunState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Wait for the thread's earlier runs in this process to end (the thread's run lock, held
        until :meth:`aafter_agent` or until the run fails), then catch the state up with what
        they added to the log."""
        key = self.thread_of(runtime)
        lock = self.memory.run_lock(key)
        await lock.acquire_async()
        token = self._held(key, lock.release)
        messages = state["messages"]
        try:
            update = await self.memory.view(key, lambda found: _caught_up(messages, found))
        except BaseException:
            self._let_go(key, token)
            raise
        return {**(update or {}), RUN_KEY: token}

    async def aafter_agent(self, state: RunState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        self._let_go(self.thread_of(runtime), state.get(RUN_KEY))
        return None

    def before_agent(self, state: RunState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """:meth:`abefore_agent` for ``invoke``: the same run lock, so an ``invoke`` and an
        ``ainvoke`` of one thread follow each other too."""
        key = self.thread_of(runtime)
        lock = self.memory.run_lock(key)
        lock.acquire()
        token = self._held(key, lock.release)
        try:
            update = _caught_up(state["messages"], self.memory.compacted_sync(key))
        except BaseException:
            self._let_go(key, token)
            raise
        return {**(update or {}), RUN_KEY: token}

    def after_agent(self, state: RunState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        self._let_go(self.thread_of(runtime), state.get(RUN_KEY))
        return None

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], Any]) -> Any:
        with self._failing_run(request.state, request.runtime):
            return handler(request)

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[Any]]
    ) -> Any:
        with self._failing_run(request.state, request.runtime):
            return await handler(request)

    def wrap_tool_call(self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Any]) -> Any:
        with self._failing_run(request.state, request.runtime):
            return handler(request)

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[Any]]
    ) -> Any:
        with self._failing_run(request.state, request.runtime):
            return await handler(request)

    def _held(self, key: str, release: Callable[[], None]) -> str:
        """Record that a new run holds ``key``'s lock; its token (kept in the run's state)."""
        token = str(uuid.uuid4())
        self._holders[key] = (token, release)
        return token

    def _let_go(self, key: str, token: object) -> None:
        """Release ``key``'s run lock when the run ``token`` still holds it."""
        held = self._holders.get(key)
        if held is not None and held[0] == token:
            del self._holders[key]
            held[1]()

    @contextlib.contextmanager
    def _failing_run(self, state: Any, runtime: Any) -> Iterator[None]:
        """Let the thread go when the run fails here (an error or a cancellation leaving a model
        call, a tool call or a hook of this middleware): it will not reach ``after_agent``."""
        try:
            yield
        except BaseException:
            token = state.get(RUN_KEY) if isinstance(state, dict) else None
            if token is not None:
                self._let_go(self.thread_of(runtime), token)
            raise

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: RunState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        with self._failing_run(state, runtime):
            return self._before_model(state, runtime)

    @hook_config(can_jump_to=["end"])
    async def abefore_model(self, state: RunState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        with self._failing_run(state, runtime):
            return await self._abefore_model(state, runtime)

    def after_model(self, state: RunState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        with self._failing_run(state, runtime):
            return self._after_model(state, runtime)

    async def aafter_model(self, state: RunState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        with self._failing_run(state, runtime):
            return await self._aafter_model(state, runtime)

    def _before_model(self, state: RunState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Record, compact, and replace the state's messages only when a compaction replaced some
        (blocking: the agent's sync API; ``ainvoke`` runs :meth:`abefore_model`). A run whose
        new message is ``/compact`` runs the command instead and ends with its answer."""
        key = self.thread_of(runtime)
        messages = state["messages"]
        text = _command_of(messages)
        if text is not None:
            self.memory.record_sync(key, self._unrecorded(messages), origin="langchain state")
            result = self.memory.command_sync(key, text)
            return _answered(messages, self.memory.surface_sync(key), result)
        self.memory.record_sync(key, self._unrecorded(messages), origin="langchain state")
        found = self.memory.compacted_sync(key)
        return _replacement(messages, found.before, found.after)

    async def _abefore_model(self, state: RunState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        key = self.thread_of(runtime)
        messages = state["messages"]
        text = _command_of(messages)
        if text is not None:
            await self.memory.record(key, self._unrecorded(messages), origin="langchain state")
            result = await self.memory.command(key, text)
            return await self.memory.view(key, lambda found: _answered(messages, found.after, result))
        await self.memory.record(key, self._unrecorded(messages), origin="langchain state")
        return await self.memory.view(key, lambda found: _replacement(messages, found.before, found.after))

    def _after_model(self, state: RunState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Record the model's answer right away, so the last answer of a run is in the log too."""
        self.memory.record_sync(
            self.thread_of(runtime), self._unrecorded(state["messages"]), origin="langchain state"
        )
        return None

    async def _aafter_model(self, state: RunState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        await self.memory.record(
            self.thread_of(runtime), self._unrecorded(state["messages"]), origin="langchain state"
        )
        return None

    def _unrecorded(self, messages: Sequence[BaseMessage]) -> Callable[[Session], list[Item]]:
        """What of ``messages`` the session does not hold yet (by id), in order."""

        def unrecorded(session: Session) -> list[Item]:
            known = self.memory.recorded_ids(session)
            return [
                from_langchain(m)
                for m in messages
                if not {m.id, f"system:{m.id}", f"parts:{m.id}"} & known and not _is_command_message(m)
            ]

        return unrecorded


def _caught_up(state: Sequence[BaseMessage], found: Compacted) -> dict[str, Any] | None:
    """None when the state holds every message of the surface; else (another run of the thread
    went first, from a state this run did not see) the surface, then the state's messages the
    log does not hold yet (the new prompt)."""
    held = {m.id for m in state}
    if all(_lc_id(m) in held for m in found.after):
        return None
    recorded = {_lc_id(m) for m in found.recorded}
    fresh = [m for m in state if m.id not in recorded and not _is_command_message(m)]
    replaced = _replacement(state, [], found.after)
    if replaced is None:  # pragma: no cover - [] is never the surface after
        return None
    return {"messages": [*replaced["messages"], *fresh]}


def _is_surface(state: Sequence[BaseMessage], surface: list[Message]) -> bool:
    """Whether ``state`` holds exactly the surface's messages, in order (the ``/compact`` messages
    the log keeps out aside)."""
    held = [m.id for m in state if not _is_command_message(m)]
    return held == [_lc_id(m) for m in surface]


def _lc_id(message: Message) -> str:
    return message.id.removeprefix("system:").removeprefix("parts:")


def _command_of(messages: Sequence[BaseMessage]) -> str | None:
    """The ``/compact`` text when the newest message is that human message (a new run's)."""
    last = messages[-1] if messages else None
    if isinstance(last, HumanMessage) and isinstance(last.content, str) and is_command(last.content):
        return last.content
    return None


def _is_command_message(message: BaseMessage) -> bool:
    """A ``/compact`` message or its answer: kept out of the log (the command is logged as
    ``command/run`` / ``command/done``)."""
    if isinstance(message, HumanMessage):
        return isinstance(message.content, str) and is_command(message.content)
    return isinstance(message, AIMessage) and bool(message.response_metadata.get(COMMAND_KEY))


def _answered(
    state: Sequence[BaseMessage], surface: list[Message], result: CommandResult | None
) -> dict[str, Any]:
    """The run's end after ``/compact``: the command's answer as an AI message (tagged, never
    recorded); when the command compacted, the state becomes the compacted surface followed by
    the command and its answer."""
    if result is None:  # pragma: no cover - the caller checked the text
        raise IntegrationError(f"expected /compact as the newest message; found {state[-1]!r}")
    answer = AIMessage(content=result.text, response_metadata={COMMAND_KEY: True})
    update: dict[str, Any] = {"messages": [answer], "jump_to": "end"}
    if result.source_event_seq is not None:
        replaced = _replacement(state[:-1], [], surface)
        assert replaced is not None
        update["messages"] = [*replaced["messages"], state[-1], answer]
    return update


def _replacement(
    state: Sequence[BaseMessage], before: list[Message], after: list[Message]
) -> dict[str, Any] | None:
    """None (the state as it is) when no compaction changed the surface and the state is the
    surface already; else the surface, each message the state still holds handed back as the
    state's own object (its metadata, artifact and id untouched).

    The state can differ from an uncompacted surface when a tool call never returned (its process
    was killed inside the tool, or the tool raised): the log answers the call (``The tool call was
    interrupted``) when the next message is recorded, the state does not, and a provider rejects a
    request with an unanswered call."""
    if after is before and _is_surface(state, after):
        return None
    kept = {m.id: m for m in state if m.id}
    surface = [
        kept.get(m.id.removeprefix("system:").removeprefix("parts:"), converted)
        for m, converted in zip(after, to_langchain(after), strict=True)
    ]
    return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *surface]}


# ---------------------------------------------------------------- LangChain -> items


def from_langchain(message: BaseMessage) -> Item:
    message_id = message.id or ""
    if not message_id:
        raise IntegrationError(f"expected a LangChain message with an id; found {message!r}")
    if isinstance(message, AIMessage):
        return _ai_item(message, message_id)
    if isinstance(message, ToolMessage):
        failed = message.status == "error"
        if isinstance(message.content, list):  # text, image, file and audio blocks, kept block by block
            parts = tuple(_part(p) for p in message.content)
            return ResultItem(message.tool_call_id, parts, f"parts:{message_id}", failed)
        return ResultItem(message.tool_call_id, (TextBlock(str(message.text)),), message_id, failed)
    if isinstance(message, HumanMessage):
        if isinstance(message.content, list):
            parts = tuple(_part(p) for p in message.content)
            return UserItem(Message(id=f"parts:{message_id}", role="user", content=parts))
        return UserItem(Message(id=message_id, role="user", content=(TextBlock(str(message.text)),)))
    if isinstance(message, SystemMessage):
        return ContextItem(
            Message(id=f"system:{message_id}", role="user", content=(TextBlock(str(message.text)),))
        )
    raise IntegrationError(
        f"LangChain message {message_id}: expected a human, AI, tool or system message; "
        f"found {message.type!r}"
    )


def _ai_item(message: AIMessage, message_id: str) -> AssistantItem:
    """An AI message as one model response. Text content is a text block; a list of content blocks
    (Anthropic's ``thinking`` / ``text`` / ``tool_use``, ``reasoning``, audio, ...) keeps every
    block, in order (``parts:`` before the id): a plain text block as text, any other as an
    opaque block handed back unchanged, in the response it came with. The tool calls follow, as
    tool-call blocks; a ``tool_use`` block that repeats its call's arguments is stored without
    them (they are the call's) and given them back on reading, so they are priced once."""
    calls = {call["id"] or "": call for call in message.tool_calls}
    blocks: list[Block] = []
    if isinstance(message.content, list):
        blocks.extend(_ai_part(part, calls) for part in message.content)
    elif str(message.text):
        blocks.append(TextBlock(str(message.text)))
    for call in message.tool_calls:
        arguments = json.dumps(call["args"])
        blocks.append(ToolCallBlock(id=call["id"] or "", name=call["name"], arguments=arguments))
    model = str(message.response_metadata.get("model_name", "unknown"))
    source = Source(kind="model", provider=PROVIDER, model=model)
    shaped = f"parts:{message_id}" if isinstance(message.content, list) else message_id
    return AssistantItem(Message(id=shaped, role="assistant", content=tuple(blocks), source=source))


def _ai_part(part: Any, calls: dict[str, Any]) -> Block:
    if isinstance(part, str) or part == {"type": "text", "text": part.get("text")}:
        return _part(part)
    kind = str(part.get("type", ""))
    if kind in ("audio", "input_audio"):
        return _audio(part, kind, json.dumps(part, sort_keys=True))
    call = calls.get(str(part.get("id", ""))) if kind == "tool_use" else None
    if call is not None and part.get("input") == call["args"]:
        part = {k: v for k, v in part.items() if k != "input"}  # the call's arguments: priced once
    payload = json.dumps(part, sort_keys=True)
    return OpaqueBlock(framework=PROVIDER, kind=kind, payload=payload, text=_said(part))


def _said(part: dict[str, Any]) -> str:
    """What a reader (or a summary) may see of a content block: its thinking, reasoning or text."""
    for key in ("thinking", "reasoning", "text"):
        if isinstance(part.get(key), str):
            return str(part[key])
    summary = part.get("summary")
    if isinstance(summary, list):
        return "\n".join(str(s.get("text", "")) for s in summary if isinstance(s, dict))
    return ""


# ---------------------------------------------------------------- surface -> LangChain


def to_langchain(messages: Sequence[Message]) -> list[AnyMessage]:
    """Surface messages as LangChain messages, under the ids they were recorded with."""
    names = {call.id: call.name for m in messages if m.role == "assistant" for call in tool_calls_of(m)}
    out: list[AnyMessage] = []
    for message in messages:
        if message.role == "assistant":
            calls = [
                {"name": b.name, "args": _arguments(b.arguments), "id": b.id, "type": "tool_call"}
                for b in message.content
                if isinstance(b, ToolCallBlock)
            ]
            reasoning = [b.text for b in message.content if isinstance(b, ReasoningBlock)]
            extra = {"reasoning_content": "\n".join(reasoning)} if reasoning else {}
            lc_id = message.id.removeprefix("parts:")
            content = _ai_content(message) if message.id.startswith("parts:") else _ai_text(message)
            out.append(AIMessage(content=content, tool_calls=calls, id=lc_id, additional_kwargs=extra))
            continue
        result = next((b for b in message.content if isinstance(b, ToolResultBlock)), None)
        if result is not None:
            listed = message.id.startswith("parts:")
            out.append(
                ToolMessage(
                    content=[_part_of(b) for b in result.content] if listed else text_of(result.content),
                    tool_call_id=result.tool_call_id,
                    name=names.get(result.tool_call_id),
                    status="error" if result.is_error else "success",
                    id=message.id.removeprefix("parts:"),
                )
            )
        elif message.id.startswith("parts:"):
            parts = [_part_of(b) for b in message.content]
            out.append(HumanMessage(content=parts, id=message.id.removeprefix("parts:")))
        elif message.id.startswith("system:"):
            out.append(SystemMessage(content=text_of(message.content), id=message.id.removeprefix("system:")))
        else:
            out.append(HumanMessage(content=text_of(message.content), id=message.id))
    return out


def _ai_text(message: Message) -> str:
    return "\n".join(b.text for b in message.content if isinstance(b, TextBlock))


def _ai_content(message: Message) -> list[Any]:
    """The content blocks of an AI message recorded as a list, as they came (a ``tool_use``
    block given back its call's arguments)."""
    args = {b.id: _arguments(b.arguments) for b in message.content if isinstance(b, ToolCallBlock)}
    content: list[Any] = []
    for block in message.content:
        if isinstance(block, ToolCallBlock | ReasoningBlock):
            continue
        part = _part_of(block)
        if isinstance(part, dict) and part.get("type") == "tool_use" and "input" not in part:
            part["input"] = args.get(str(part.get("id")), {})
        content.append(part)
    return content


def _part(part: Any) -> ResultPart:
    """A content part: text; an image by URL or base64 in LangChain's two usual shapes; anything
    else opaque (returned as it came)."""
    if isinstance(part, str):
        return TextBlock(part)
    if part == {"type": "text", "text": part.get("text")}:
        return TextBlock(str(part["text"]))
    image_url = part.get("image_url")
    if part == {"type": "image_url", "image_url": image_url} and image_url == {"url": _url(image_url)}:
        url = str(image_url["url"])
        digest = hashlib.sha256(url.encode()).hexdigest()[:16]
        return ImageBlock(attachment_id=f"sha256-{digest}", media_type="image", url=url)
    if set(part) == {"type", "base64", "mime_type"} and part["type"] == "image":
        data = str(part["base64"])
        digest = hashlib.sha256(data.encode()).hexdigest()[:16]
        return ImageBlock(attachment_id=f"sha256-{digest}", media_type=str(part["mime_type"]), data=data)
    payload = json.dumps(part, sort_keys=True)
    kind = str(part.get("type", ""))
    if kind in ("audio", "input_audio"):
        return _audio(part, kind, payload)
    return OpaqueBlock(framework=PROVIDER, kind=kind, payload=payload)


def _audio(part: dict[str, Any], kind: str, payload: str) -> OpaqueBlock:
    """An audio block, LangChain's (``base64`` / ``url`` / ``file_id`` with a ``mime_type``) or
    OpenAI's chat shape (``input_audio`` with ``data`` and ``format``), priced as audio."""
    inner = part.get("input_audio")
    if kind == "input_audio" and isinstance(inner, dict):
        media = format_media_type(inner.get("format"))
        size = base64_size(str(inner.get("data", "")))
        return audio_block(PROVIDER, kind, payload, media_type=media, size=size)
    data = part.get("base64") or part.get("data")
    size = base64_size(str(data)) if isinstance(data, str) else 0
    reference = str(part.get("url") or part.get("file_id") or part.get("id") or "")
    return audio_block(
        PROVIDER, kind, payload, media_type=part.get("mime_type"), size=size, reference=reference
    )


def _url(value: Any) -> Any:
    return value.get("url") if isinstance(value, dict) else None


def _part_of(block: Block) -> Any:
    if isinstance(block, ImageBlock) and block.data is not None:
        return {"type": "image", "base64": block.data, "mime_type": block.media_type}
    if isinstance(block, ImageBlock):
        return {"type": "image_url", "image_url": {"url": block.url}}
    if isinstance(block, OpaqueBlock):
        return json.loads(block.payload)
    return {"type": "text", "text": block.text if isinstance(block, TextBlock) else ""}


def _arguments(raw: str) -> dict[str, Any]:
    try:
        parsed = json.loads(raw) if raw else {}
    except ValueError:
        return {"arguments": raw}
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}
