"""pydantic-ai's message history as a compacting event log (extra ``pydantic-ai``).

    history = CompactingHistory("sqlite:///./.compaction/sessions.db", context_window=128_000)
    agent = Agent(model, capabilities=[history.capability("user-42")])  # pydantic-ai 2
    agent = Agent(model, history_processors=[history.processor("user-42")])  # pydantic-ai 1
    result = await agent.run("Fix the failing test", message_history=await history.load("user-42"))
    history.record("user-42", result.new_messages())

The processor records every message it has not seen yet (a user prompt opens a turn; a
``ModelResponse`` is one step with its tool calls; a ``ToolReturnPart`` answers its call, an error
when its ``outcome`` is not ``success``; retry feedback that answers no call is context), compacts
when the session is over its threshold, and hands pydantic-ai the surface as ``ModelRequest`` /
``ModelResponse`` messages: tool calls and their returns stay paired, the task statement stays
first. :meth:`CompactingHistory.record` skips what is already recorded, so recording
``result.new_messages()`` (or ``all_messages()``) after a run adds only the final response.

Messages this module hands out carry ``metadata["event_compaction"]``: the ids of the recorded
messages they stand for; a message without it is identified by a hash of its parts.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compaction.errors import FrameworkMissingError, IntegrationError
from compaction.integrations.media import audio_block
from compaction.integrations.memory import (
    AssistantItem,
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
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from compaction.vocabulary.summarizer import Summarizer

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from pydantic_ai.messages import ModelMessage, ModelRequestPart, ModelResponse

PROVIDER = "pydantic-ai"
METADATA_KEY = "event_compaction"
COMMAND_KEY = "event_compaction_command"


def _messages_module() -> Any:
    try:
        from pydantic_ai import messages
    except ImportError as e:
        raise FrameworkMissingError(
            f"CompactingHistory needs pydantic-ai: pip install 'event-compaction[pydantic-ai]' ({e})"
        ) from e
    return messages


class CompactingHistory:
    """pydantic-ai message histories, one per conversation key, kept in a :class:`SessionStore`
    (at ``url``, or ``store``, or the ``memory`` several histories share)."""

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
        retries: int = 1,
        allow_foreign: bool = False,
        custom_instructions: bool = False,
        config: str | Path | Settings | None = None,
    ) -> None:
        _messages_module()
        self.memory = CompactingMemory.given(
            memory,
            "CompactingHistory",
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

    def close(self) -> None:
        self.memory.close()

    async def load(self, session_id: str) -> list[ModelMessage]:
        """The surface of ``session_id`` as pydantic-ai messages, compacted first when over the
        threshold (an empty list for a new session)."""
        return await self.memory.view(session_id, lambda found: to_model_messages(found.after))

    def load_sync(self, session_id: str) -> list[ModelMessage]:
        """:meth:`load` for synchronous code (``agent.run_sync``); blocking."""
        return to_model_messages(self.memory.surface_sync(session_id))

    def record(self, session_id: str, messages: Sequence[ModelMessage]) -> int:
        """Record the messages not recorded yet, in order; returns how many were new. Blocking
        (:meth:`arecord` in async code)."""
        fresh: list[int] = []
        unrecorded = _unrecorded(self.memory, messages, fresh)
        self.memory.record_sync(session_id, unrecorded, origin="pydantic-ai messages")
        return fresh[-1] if fresh else 0

    async def arecord(self, session_id: str, messages: Sequence[ModelMessage]) -> int:
        """:meth:`record` off the event loop."""
        fresh: list[int] = []
        unrecorded = _unrecorded(self.memory, messages, fresh)
        await self.memory.record(session_id, unrecorded, origin="pydantic-ai messages")
        return fresh[-1] if fresh else 0

    def processor(self, session_id: str) -> Callable[[list[ModelMessage]], Awaitable[list[ModelMessage]]]:
        """A history processor for ``Agent(history_processors=[...])``: records what is new, then
        returns the compacted surface."""

        async def process(messages: list[Any]) -> list[Any]:  # resolved at run time by pydantic-ai
            await self.arecord(session_id, messages)
            return await self.load(session_id)

        return process

    def capability(self, key: str | None = None) -> Any:
        """The pydantic-ai 2 capability: ``Agent(capabilities=[history.capability()])`` records
        every message of every run (final answers included) and sends the model the compacted
        conversation, ``key``'s or, without one, the run's ``conversation_id``'s
        (:class:`~compaction.integrations.pydantic_ai_capability.CompactionCapability`). pydantic-ai 1
        takes :meth:`processor` as ``Agent(history_processors=[...])``."""
        try:
            from compaction.integrations.pydantic_ai_capability import CompactionCapability
        except ImportError as e:
            raise FrameworkMissingError(
                f"pydantic-ai {_version()} has no capabilities; pass processor({key!r}) as "
                f"Agent(history_processors=[...]) instead ({e})"
            ) from e
        return CompactionCapability(self, key)


def _unrecorded(
    memory: CompactingMemory, messages: Sequence[ModelMessage], fresh: list[int]
) -> Callable[[Session], list[Item]]:
    """What of ``messages`` the session does not hold yet, as items (how many messages: appended
    to ``fresh``, once per attempt)."""

    def unrecorded(session: Session) -> list[Item]:
        recorded = memory.recorded_ids(session)
        added: set[str] = set()  # ids of this call's items (not stored yet)
        items: list[Item] = []
        count = 0
        for message in messages:
            if _is_recorded(message, recorded, added) or is_command_message(message):
                continue
            found = from_model_message(message)
            added.update(_item_id(i) for i in found)
            items.extend(found)
            count += 1
        fresh.append(count)
        return items

    return unrecorded


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pydantic-ai-slim")
    except PackageNotFoundError:
        return "(unknown version)"


# ---------------------------------------------------------------- pydantic-ai -> items


def _is_recorded(message: ModelMessage, recorded: AbstractSet[str], added: AbstractSet[str]) -> bool:
    def known(message_id: str) -> bool:
        return message_id in recorded or message_id in added

    tagged = (message.metadata or {}).get(METADATA_KEY)
    if isinstance(tagged, list) and tagged and all(known(t) for t in tagged):
        return True
    first = f"{fingerprint(message)}-0"
    return any(known(f"{prefix}{first}") for prefix in ("", "parts:", "part:", "system:", "retry:"))


def command_of(message: ModelMessage) -> str | None:
    """The ``/compact`` text of a request that is only that user prompt (else None)."""
    from pydantic_ai.messages import UserPromptPart

    prompts = [p for p in message.parts if isinstance(p, UserPromptPart)] if message.kind == "request" else []
    if len(prompts) == 1 and isinstance(prompts[0].content, str) and is_command(prompts[0].content):
        return prompts[0].content
    return None


def command_reply(text: str) -> ModelResponse:
    """The ``/compact`` command's answer as a model response, tagged so it is never recorded."""
    pai = _messages_module()
    reply: ModelResponse = pai.ModelResponse(
        parts=[pai.TextPart(content=text)], model_name=None, metadata={COMMAND_KEY: True}
    )
    return reply


def is_command_message(message: ModelMessage) -> bool:
    """A ``/compact`` request or its answer: kept out of the log (the command is logged as
    ``command/run`` / ``command/done``)."""
    return command_of(message) is not None or bool((message.metadata or {}).get(COMMAND_KEY))


def fingerprint(message: ModelMessage) -> str:
    """A stable id of a message from its parts (kinds, contents, call ids and timestamps)."""
    parts = [
        [
            getattr(p, "part_kind", ""),
            str(getattr(p, "content", getattr(p, "args", ""))),
            str(getattr(p, "tool_call_id", "")),
            str(getattr(p, "timestamp", "")),
        ]
        for p in message.parts
    ]
    raw = json.dumps([message.kind, str(getattr(message, "timestamp", "")), parts])
    return "pai-" + hashlib.sha256(raw.encode()).hexdigest()[:24]


def _item_id(item: Item) -> str:
    return item.message_id if isinstance(item, ResultItem) else item.message.id


def from_model_message(message: ModelMessage) -> list[Item]:
    """One pydantic-ai message as items: a response is one assistant message; a request's parts
    are user prompts, system prompts (context) and tool answers."""
    base = fingerprint(message)
    if message.kind == "response":
        return [_response(message, f"{base}-0")]
    return [_request_part(part, f"{base}-{index}") for index, part in enumerate(message.parts)]


def _response(message: ModelResponse, message_id: str) -> AssistantItem:
    from pydantic_ai.messages import TextPart, ThinkingPart, ToolCallPart

    blocks: list[Block] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            blocks.append(TextBlock(part.content))
        elif isinstance(part, ThinkingPart) and part == ThinkingPart(content=part.content):
            blocks.append(ReasoningBlock(part.content))
        elif isinstance(part, ToolCallPart):
            blocks.append(
                ToolCallBlock(id=part.tool_call_id, name=part.tool_name, arguments=part.args_as_json_str())
            )
        elif part.part_kind == "file" and _is_audio(getattr(part, "content", None)):
            blocks.append(_audio(_response_parts(), part, part.part_kind))
        else:  # built-in tool calls and returns, files, signed thinking: kept as they came
            text = str(getattr(part, "tool_name", getattr(part, "content", "")))
            blocks.append(_opaque(_response_parts(), part, part.part_kind, text))
    source = Source(kind="model", provider=PROVIDER, model=message.model_name or "unknown")
    return AssistantItem(Message(id=message_id, role="assistant", content=tuple(blocks), source=source))


def _request_part(part: ModelRequestPart, message_id: str) -> Item:
    from pydantic_ai.messages import (
        RetryFeedbackPart,
        RetryPromptPart,
        SystemPromptPart,
        ToolReturnPart,
        UserPromptPart,
    )

    if isinstance(part, UserPromptPart):
        content = part.content
        if isinstance(content, str):
            return UserItem(Message(id=message_id, role="user", content=(TextBlock(content),)))
        blocks = tuple(_user_content(c) for c in content)
        return UserItem(Message(id=f"parts:{message_id}", role="user", content=blocks))
    if isinstance(part, SystemPromptPart):
        return ContextItem(_user_text(f"system:{message_id}", part.content))
    if isinstance(part, ToolReturnPart):
        return _tool_return(part, message_id)
    if isinstance(part, RetryFeedbackPart):
        return ContextItem(_user_text(f"retry:{message_id}", part.model_response()))
    if isinstance(part, RetryPromptPart):  # pydantic-ai 1 histories
        if part.tool_name is None:
            return ContextItem(_user_text(f"retry:{message_id}", part.model_response()))
        return ResultItem(part.tool_call_id, (TextBlock(part.model_response()),), message_id, is_error=True)
    raise IntegrationError(
        f"pydantic-ai request part {message_id}: expected user-prompt, system-prompt, tool-return or "
        f"retry-prompt; found {part.part_kind!r}"
    )


def _tool_return(part: Any, message_id: str) -> ResultItem:
    """A tool's return: its text, or, when it holds files (images, documents, audio: a
    multi-modal return), each of its parts as a user prompt's part is kept (``part:`` before the
    id for one file, ``parts:`` for a list)."""
    from pydantic_ai.messages import is_multi_modal_content

    content = part.content
    failed = part.outcome != "success"
    if is_multi_modal_content(content):
        return ResultItem(part.tool_call_id, (_user_content(content),), f"part:{message_id}", failed)
    if isinstance(content, list) and any(is_multi_modal_content(c) for c in content):
        blocks = tuple(_user_content(c) for c in content if isinstance(c, str) or is_multi_modal_content(c))
        if len(blocks) == len(content):
            return ResultItem(part.tool_call_id, blocks, f"parts:{message_id}", failed)
    text = TextBlock(part.model_response_str(wrap_if_error=False))  # the error flag says it
    return ResultItem(part.tool_call_id, (text,), message_id, is_error=failed)


def _user_content(content: Any) -> ResultPart:
    """A part of a user prompt: text; an image (URL or bytes) as an image block when it comes
    back equal; anything else (documents, audio, video, images with extra settings) opaque."""
    from pydantic_ai.messages import AudioUrl, BinaryContent, ImageUrl

    if isinstance(content, str):
        return TextBlock(content)
    if isinstance(content, ImageUrl) and ImageUrl(url=content.url) == content:
        digest = hashlib.sha256(content.url.encode()).hexdigest()[:16]
        return ImageBlock(attachment_id=f"sha256-{digest}", media_type=content.media_type, url=content.url)
    if isinstance(content, BinaryContent) and content.is_image:
        again = BinaryContent(data=content.data, media_type=content.media_type)
        if again == content:
            digest = hashlib.sha256(content.data).hexdigest()[:16]
            return ImageBlock(
                attachment_id=f"sha256-{digest}",
                media_type=content.media_type,
                bytes=len(content.data),
                data=base64.b64encode(content.data).decode(),
            )
    kind = str(getattr(content, "kind", type(content).__name__))
    if isinstance(content, AudioUrl | BinaryContent) and _is_audio(content):
        return _audio(_user_contents(), content, kind)
    return _opaque(_user_contents(), content, kind, str(getattr(content, "url", "")))


def _is_audio(content: Any) -> bool:
    from pydantic_ai.messages import AudioUrl

    return isinstance(content, AudioUrl) or str(_media_type(content)).startswith("audio/")


def _media_type(content: Any) -> str | None:
    """The media type of a content part; None when pydantic-ai cannot tell (a URL without a known
    extension and no ``media_type`` given raises ``ValueError``)."""
    try:
        found = getattr(content, "media_type", None)
    except ValueError:
        return None
    return str(found) if found is not None else None


def _audio(adapter: Any, value: Any, kind: str) -> OpaqueBlock:
    """An audio part (an ``AudioUrl``, audio ``BinaryContent``, or a response's audio file part),
    priced as audio."""
    content = getattr(value, "content", value)  # a FilePart holds its BinaryContent
    data = getattr(content, "data", None)
    return audio_block(
        PROVIDER,
        kind,
        adapter.dump_json(value).decode(),
        media_type=_media_type(content),
        size=len(data) if isinstance(data, bytes) else 0,
        reference=str(getattr(content, "url", "")),
    )


def _opaque(adapter: Any, value: Any, kind: str, text: str) -> OpaqueBlock:
    payload = adapter.dump_json(value).decode()
    return OpaqueBlock(framework=PROVIDER, kind=kind, payload=payload, text=text)


def _user_contents() -> Any:
    from pydantic import TypeAdapter
    from pydantic_ai.messages import UserContent

    return TypeAdapter(UserContent)


def _response_parts() -> Any:
    from pydantic import TypeAdapter
    from pydantic_ai.messages import ModelResponsePart

    return TypeAdapter(ModelResponsePart)


def _user_text(message_id: str, text: str) -> Message:
    return Message(id=message_id, role="user", content=(TextBlock(text),))


# ---------------------------------------------------------------- surface -> pydantic-ai


def to_model_messages(messages: Sequence[Message]) -> list[ModelMessage]:
    """Surface messages as pydantic-ai messages: consecutive user-role messages (prompts, context,
    tool returns) merge into one ``ModelRequest``; each assistant message is a ``ModelResponse``."""
    pai = _messages_module()
    names = {call.id: call.name for m in messages if m.role == "assistant" for call in tool_calls_of(m)}
    out: list[ModelMessage] = []
    parts: list[Any] = []
    ids: list[str] = []
    for message in messages:
        if message.role == "assistant":
            if parts:
                out.append(pai.ModelRequest(parts=parts, metadata={METADATA_KEY: ids}))
                parts, ids = [], []
            out.append(_model_response(pai, message))
            continue
        parts.append(_request_part_of(pai, message, names))
        ids.append(message.id)
    if parts:
        out.append(pai.ModelRequest(parts=parts, metadata={METADATA_KEY: ids}))
    return out


def _request_part_of(pai: Any, message: Message, names: dict[str, str]) -> Any:
    result = next((b for b in message.content if isinstance(b, ToolResultBlock)), None)
    if result is None:
        if message.id.startswith("system:"):
            return pai.SystemPromptPart(content=text_of(message.content))
        if message.id.startswith("retry:"):
            return pai.RetryFeedbackPart(
                content=text_of(message.content), retry=pai.RetryInfo(cause="model_retry")
            )
        if message.id.startswith("parts:"):
            return pai.UserPromptPart(content=[_content_of(pai, b) for b in message.content])
        return pai.UserPromptPart(content=text_of(message.content))
    name = names.get(result.tool_call_id, "")
    outcome = "failed" if result.is_error else "success"
    content: Any = text_of(result.content)
    if message.id.startswith("parts:"):
        content = [_content_of(pai, b) for b in result.content]
    elif message.id.startswith("part:") and result.content:
        content = _content_of(pai, result.content[0])
    return pai.ToolReturnPart(
        tool_name=name, content=content, tool_call_id=result.tool_call_id, outcome=outcome
    )


def _content_of(pai: Any, block: Block) -> Any:
    if isinstance(block, ImageBlock) and block.data is not None:
        return pai.BinaryContent(data=base64.b64decode(block.data), media_type=block.media_type)
    if isinstance(block, ImageBlock) and block.url is not None:
        return pai.ImageUrl(url=block.url)
    if isinstance(block, OpaqueBlock) and block.framework == PROVIDER:
        return _user_contents().validate_json(block.payload)
    return block.text if isinstance(block, TextBlock) else ""


def _model_response(pai: Any, message: Message) -> Any:
    parts: list[Any] = []
    for block in message.content:
        if isinstance(block, TextBlock):
            parts.append(pai.TextPart(content=block.text))
        elif isinstance(block, ReasoningBlock):
            parts.append(pai.ThinkingPart(content=block.text))
        elif isinstance(block, ToolCallBlock):
            parts.append(pai.ToolCallPart(tool_name=block.name, args=block.arguments, tool_call_id=block.id))
        elif isinstance(block, OpaqueBlock) and block.framework == PROVIDER:
            parts.append(_response_parts().validate_json(block.payload))
    model = message.source.model if message.source.model not in (None, "unknown") else None
    return pai.ModelResponse(parts=parts, model_name=model, metadata={METADATA_KEY: [message.id]})
