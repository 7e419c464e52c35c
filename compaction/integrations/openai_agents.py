"""The OpenAI Agents SDK's ``Session`` protocol over a :class:`SessionStore` (extra ``openai-agents``).

    session = CompactingSession("user-42", "sqlite:///./.compaction/sessions.db", context_window=128_000)
    result = await Runner.run(agent, "Fix the failing test", session=session)

``add_items`` records the SDK's input items as events: a user ``message`` opens a turn; the
assistant-side items of one model response (``reasoning``, assistant ``message``, ``function_call``)
become one ``assistant/message`` in a step of its own, each call also a ``tool/call``; a
``function_call_output`` answers its call as a ``tool/result``. ``get_items`` returns the surface in
the SDK's item shapes, compacted first when it is over the threshold. ``pop_item`` and
``clear_session`` append; nothing is deleted from the log.

Each assistant message keeps the SDK item ids of its blocks (a JSON list in ``Message.id``), so the
items come back as they went in until a compaction replaces some of them with its summary.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import inspect
import json
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
)
from compaction.sessions.store import SessionStore
from compaction.vocabulary.summarizer import Summarizer

if TYPE_CHECKING:
    from agents.memory.session_settings import SessionSettings
    from agents.result import RunResultStreaming
    from agents.run_config import CallModelData, ModelInputData, RunConfig

log = logging.getLogger("compaction.integrations")

JSON = dict[str, Any]
PROVIDER = "openai-agents"
ASSISTANT_SIDE = frozenset({"reasoning", "function_call"})
OWN_TYPES = frozenset({"message", "reasoning", "function_call", "function_call_output"})
"""The item types this module interprets; every other one (a hosted tool call such as
``web_search_call``, a computer or shell call and its output, ...) is kept as an opaque block of
the model's response it came with, and handed back unchanged."""
PLAIN_REASONING = frozenset({"id", "type", "summary"})
CONTEXT_ROLES = frozenset({"system", "developer"})

_HOLDING: contextvars.ContextVar[frozenset[tuple[int, str]]] = contextvars.ContextVar(
    "compaction_agents_runs", default=frozenset()
)
"""The conversations (memory id, session id) whose run lock the current run holds: the session's
methods the SDK calls inside that run (its task, or a task it starts) do not wait for it again."""


def _settings_type() -> Any:
    try:
        from agents.memory.session_settings import SessionSettings
    except ImportError as e:
        raise FrameworkMissingError(
            "CompactingSession needs the OpenAI Agents SDK: "
            f"pip install 'event-compaction[openai-agents]' ({e})"
        ) from e
    return SessionSettings


class CompactingSession:
    """An Agents SDK ``Session`` whose history is an append-only, compacting event log.

    ``session_id`` is the SDK's conversation id; the events live in the store at ``url`` (or
    ``store``, or the ``memory`` several sessions share: one store, one set of locks), in the
    session :meth:`CompactingMemory.session_id` names for the Agents SDK. ``service`` (or
    ``context_window``, or the known window of ``model``) sets when to compact; ``summarizer``
    (e.g. :class:`AgentsModelSummarizer`) writes the summaries.

    :meth:`run` is ``Runner.run`` with this session, one run of the conversation at a time in this
    process, and compaction before every model call of the run (:meth:`run_config`); an input
    that is ``/compact`` runs the command instead (:meth:`run_command`). :meth:`run_streamed` is
    the same for ``Runner.run_streamed``: the run lock is held until the streamed run ends.

    The session's own methods (``get_items``, ``add_items``, ``pop_item``, ``clear_session``,
    :meth:`filter_model_input`) called from outside such a run wait for the run in progress to
    end, so nothing is written into the middle of it. A run the SDK drives itself
    (``Runner.run(agent, input, session=session)``) cannot hold the lock for its whole length: the
    SDK calls the session at the start of a run and after each turn but never says when a run ends
    (a failure, a guardrail or ``max_turns`` ends it without a call), so each call is serialized
    on its own and two such runs of one conversation can still interleave their turns."""

    def __init__(
        self,
        session_id: str,
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
        session_settings: SessionSettings | None = None,
    ) -> None:
        settings_type = _settings_type()
        self.session_id = session_id
        self.session_settings: SessionSettings | None = session_settings or settings_type()
        self.memory = CompactingMemory.given(
            memory,
            f"session {session_id!r}",
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
        self._added = 0

    def close(self) -> None:
        self.memory.close()

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The surface as SDK input items (the newest ``limit`` of them), compacted first when the
        session is over its threshold."""
        from agents.memory.session_settings import resolve_session_limit

        async with self._serialized():
            items = await self.memory.view(self.session_id, lambda found: to_items(found.after))
        wanted = resolve_session_limit(limit, self.session_settings)
        return items if wanted is None else items[-wanted:] if wanted > 0 else []

    async def add_items(self, items: list[Any]) -> None:
        """Record ``items`` as events (one atomic save)."""
        if not items:
            return
        origin = f"add_items #{self._added}"
        self._added += 1
        recorded = from_items([as_json(i) for i in items], origin)
        async with self._serialized():
            await self.memory.record(self.session_id, recorded, origin=origin)

    async def pop_item(self) -> Any | None:
        """Remove the newest item from the surface and return it.

        Append-only: the log keeps the item; an appended ``assistant/message`` without content
        replaces its node on the surface (see :meth:`CompactingMemory.pop`). When the newest node
        is an assistant message holding several items, the whole message leaves the surface and
        its last item is returned."""
        async with self._serialized():
            popped = await self.memory.pop(self.session_id)
        if popped is None:
            return None
        items = to_items([popped])
        return items[-1] if items else None

    async def clear_session(self) -> None:
        """Start a new, empty surface generation under the same ``session_id``.

        Append-only: the earlier generations stay in the store as they were (``compaction
        sessions`` lists them); only ``get_items`` stops seeing them."""
        async with self._serialized():
            await self.memory.clear(self.session_id)

    # ------------------------------------------------------------ runs

    async def run(self, agent: Any, input: Any, **kwargs: Any) -> Any:
        """``Runner.run(agent, input, session=self, ...)`` holding this conversation's run lock,
        with :meth:`run_config` (compaction before every model call)."""
        from agents import Runner

        async with self._serialized():
            if is_command(command_text(input)):
                return await self.run_command(agent, str(command_text(input)), **kwargs)
            kwargs["run_config"] = self.run_config(kwargs.get("run_config"))
            return await Runner.run(agent, input, session=self, **kwargs)

    async def run_streamed(self, agent: Any, input: Any, **kwargs: Any) -> RunResultStreaming:
        """``Runner.run_streamed(agent, input, session=self, ...)`` with :meth:`run_config`, once no
        other run of this conversation is in progress in this process; the run lock is held until
        the streamed run ends (finished, failed or cancelled), whether or not its events are read.
        An input that is ``/compact`` runs the command; its answer is the stream's one response."""
        from agents import Runner

        held = self._mark() in _HOLDING.get()
        lock = self.memory.run_lock(self.session_id)
        if not held:
            await lock.acquire_async()
        token = _HOLDING.set(_HOLDING.get() | {self._mark()})
        try:  # the run's task is made here and copies this context: its session calls hold the lock
            text = command_text(input)
            if is_command(text):
                result = await self._command_streamed(agent, str(text), **kwargs)
            else:
                kwargs["run_config"] = self.run_config(kwargs.get("run_config"))
                result = Runner.run_streamed(agent, input, session=self, **kwargs)
        except BaseException:
            if not held:
                lock.release()
            raise
        finally:
            _HOLDING.reset(token)
        task = result.run_loop_task
        if not held:
            if task is None:  # pragma: no cover - the SDK starts the run before it returns
                lock.release()
            else:
                task.add_done_callback(lambda _: lock.release())
        return result

    async def _command_config(self, text: str, kwargs: dict[str, Any]) -> RunConfig:
        """Run ``/compact`` (logged as ``command/run``, ``command/done``); the run's ``RunConfig``
        (``kwargs``'s, popped) whose model answers the command's one line."""
        from agents import RunConfig

        result = await self.memory.command(self.session_id, text)
        if result is None:  # pragma: no cover - the caller checked
            raise IntegrationError(f"session {self.session_id!r}: expected /compact; found {text!r}")
        base = kwargs.pop("run_config", None)
        return dataclasses.replace(base if base is not None else RunConfig(), model=_reply_model(result.text))

    async def _command_streamed(self, agent: Any, text: str, **kwargs: Any) -> RunResultStreaming:
        """:meth:`run_command` for :meth:`run_streamed`."""
        from agents import Runner

        config = await self._command_config(text, kwargs)
        return Runner.run_streamed(agent, text, run_config=config, **kwargs)

    def _mark(self) -> tuple[int, str]:
        return (id(self.memory), self.session_id)

    @contextlib.asynccontextmanager
    async def _serialized(self) -> AsyncIterator[None]:
        """Hold this conversation's run lock (waiting for a run in progress in this process),
        unless the current run holds it already."""
        mark = self._mark()
        if mark in _HOLDING.get():
            yield
            return
        async with self.memory.run_lock(self.session_id):
            token = _HOLDING.set(_HOLDING.get() | {mark})
            try:
                yield
            finally:
                _HOLDING.reset(token)

    async def run_command(self, agent: Any, text: str, **kwargs: Any) -> Any:
        """The ``/compact`` command as a run: the manual compaction, logged (``command/run``,
        ``command/done``), then ``Runner.run`` without this session and with a model that
        answers the command's one line (the agent's model is not called), so the result is
        the SDK's own ``RunResult`` with the line as its ``final_output``; the command and its
        answer do not join the conversation."""
        from agents import Runner

        config = await self._command_config(text, kwargs)
        return await Runner.run(agent, text, run_config=config, **kwargs)

    def run_config(self, base: RunConfig | None = None) -> RunConfig:
        """``base`` (or a default ``RunConfig``) with :meth:`filter_model_input` as its
        ``call_model_input_filter``, run after the one ``base`` had."""
        from agents import RunConfig

        config = base if base is not None else RunConfig()
        earlier = config.call_model_input_filter

        async def call_model_input_filter(data: CallModelData[Any]) -> ModelInputData:
            if earlier is not None:
                found = earlier(data)
                data.model_data = await found if inspect.isawaitable(found) else found
            return await self.filter_model_input(data)

        return dataclasses.replace(config, call_model_input_filter=call_model_input_filter)

    async def filter_model_input(self, data: CallModelData[Any]) -> ModelInputData:
        """Before a model call inside a run: compact the session when it is over the threshold
        and send its surface (what ``get_items`` would return), followed by the run's items the
        session does not hold yet. The SDK keeps the run's items in memory and would send them
        all; this is what keeps a long run inside the window."""
        from agents.memory.session_settings import resolve_session_limit
        from agents.run_config import ModelInputData

        sent = list(data.model_data.input)
        wanted = resolve_session_limit(None, self.session_settings)

        def model_input(found: Compacted) -> list[Any]:  # in the worker thread
            given = [as_json(i) for i in sent]
            held = found.index.keys(PROVIDER, lambda m: [item_key(i) for i in to_items([m])])
            start = len(given)
            while start > 0 and item_key(given[start - 1]) not in held:
                start -= 1
            surface = to_items(found.after)
            surface = surface if wanted is None else surface[-wanted:] if wanted > 0 else []
            return [*surface, *given[start:]]

        async with self._serialized():
            items = await self.memory.view(self.session_id, model_input)
        return ModelInputData(input=items, instructions=data.model_data.instructions)


def command_text(input: Any) -> str | None:
    """The user's text when ``input`` is one user message (a string, or one message item)."""
    if isinstance(input, str):
        return input
    if isinstance(input, list) and len(input) == 1:
        item = as_json(input[0])
        if item.get("role") == "user" and isinstance(item.get("content"), str):
            return str(item["content"])
    return None


def _reply_model(text: str) -> Any:
    """An SDK ``Model`` whose one response is the assistant message ``text``."""
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import (
        Response,
        ResponseCompletedEvent,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    part = ResponseOutputText(type="output_text", text=text, annotations=[])
    message = ResponseOutputMessage(
        id="command-reply", type="message", role="assistant", status="completed", content=[part]
    )

    class CommandReply(Model):
        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            return ModelResponse(output=[message], usage=Usage(), response_id=None)

        async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            response = Response(
                id="command-reply", created_at=0, model="compaction", object="response",
                output=[message], parallel_tool_calls=False, tool_choice="none", tools=[],
            )  # fmt: skip
            yield ResponseCompletedEvent(type="response.completed", response=response, sequence_number=0)

    return CommandReply()


def item_key(item: JSON) -> tuple[str, ...]:
    """What identifies an SDK input item: its call id, its item id, else its role and content."""
    kind = str(item.get("type", "message"))
    if kind in ("function_call", "function_call_output") and "call_id" in item:
        return (kind, str(item["call_id"]))
    if item.get("id"):
        return ("id", str(item["id"]))
    return (kind, str(item.get("role", "")), json.dumps(item.get("content"), sort_keys=True))


# ---------------------------------------------------------------- SDK items -> events


def as_json(item: Any) -> JSON:
    """An SDK input item as plain JSON (TypedDicts are dicts; pydantic models are dumped)."""
    if isinstance(item, Mapping):
        return dict(item)
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        dumped = dump(exclude_unset=True)
        if isinstance(dumped, dict):
            return dumped
    raise IntegrationError(
        f"expected an SDK input item (a dict or a pydantic model); found {type(item).__name__}"
    )


def from_items(items: Sequence[JSON], origin: str) -> list[Item]:
    """Group the SDK items into user prompts, one assistant message per model response, results."""
    out: list[Item] = []
    group: list[tuple[str, Block]] = []
    for index, item in enumerate(items):
        where = f"{origin} item {index}"
        kind = item.get("type", "message")
        if (
            kind not in OWN_TYPES
            or kind in ASSISTANT_SIDE
            or (kind == "message" and item.get("role") == "assistant")
        ):
            group.extend(_assistant_blocks(item, where))
            continue
        if group:
            out.append(_assistant(group))
            group = []
        if kind == "function_call_output":
            out.append(_result(item, where))
        else:
            out.append(_user(item, where))
    if group:
        out.append(_assistant(group))
    return out


def _assistant_blocks(item: JSON, where: str) -> list[tuple[str, Block]]:
    item_id = str(item.get("id") or "")
    kind = item.get("type", "message")
    if kind == "reasoning":
        summary = item.get("summary") or []
        text = "\n".join(str(part.get("text", "")) for part in summary if isinstance(part, Mapping))
        if set(item) <= PLAIN_REASONING:
            return [(item_id, ReasoningBlock(text))]
        return [(item_id, _opaque(item, text))]  # encrypted content, raw content: back as it came
    if kind not in OWN_TYPES:
        return [(item_id, _opaque(item, _described(item)))]
    if kind == "function_call":
        call = ToolCallBlock(
            id=str(item["call_id"]), name=str(item["name"]), arguments=str(item["arguments"])
        )
        return [(item_id, call)]
    content = item.get("content")
    if isinstance(content, str):
        return [(item_id, TextBlock(content))]
    blocks: list[tuple[str, Block]] = []
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, Mapping) or part.get("type") not in ("output_text", "refusal"):
            raise IntegrationError(f"{where}: expected output_text or refusal parts; found {part!r}")
        blocks.append((item_id, TextBlock(str(part.get("text", part.get("refusal", ""))))))
    return blocks


def _opaque(item: JSON, text: str) -> OpaqueBlock:
    kind = str(item.get("type", "message"))
    return OpaqueBlock(framework=PROVIDER, kind=kind, payload=json.dumps(item, sort_keys=True), text=text)


def _described(item: JSON) -> str:
    """What a reader may see of an item this module does not interpret: its action or query."""
    action = item.get("action")
    if isinstance(action, Mapping):
        return " ".join(f"{k}={v}" for k, v in sorted(action.items()) if isinstance(v, str | int | float))
    return str(item.get("status", ""))


def _assistant(group: list[tuple[str, Block]]) -> AssistantItem:
    ids = json.dumps([item_id for item_id, _ in group])
    source = Source(kind="model", provider=PROVIDER, model="unknown")
    return AssistantItem(Message(id=ids, role="assistant", content=tuple(b for _, b in group), source=source))


def _user(item: JSON, where: str) -> UserItem | ContextItem:
    role = str(item.get("role", "user"))
    content = item.get("content")
    if isinstance(content, str):
        blocks: tuple[Block, ...] = (TextBlock(content),)
        shape = "text"
    elif isinstance(content, list):
        blocks = tuple(_user_part(part, where) for part in content)
        shape = "parts"
    else:
        raise IntegrationError(f"{where}: expected message content as text or parts; found {content!r}")
    if role not in {"user", *CONTEXT_ROLES}:
        raise IntegrationError(f"{where}: expected a user, system or developer message; found role {role!r}")
    message = Message(id=f"{role}:{shape}:{where}", role="user", content=blocks)
    return ContextItem(message) if role in CONTEXT_ROLES else UserItem(message)


def _user_part(part: Any, where: str) -> ResultPart:
    """An input part: text; an image (URL, ``data:`` URL or file id) as an image block; audio
    (``input_audio``) opaque, priced as audio; anything else (a file) opaque."""
    if not isinstance(part, Mapping):
        raise IntegrationError(f"{where}: expected content parts as objects; found {part!r}")
    kind = part.get("type")
    if kind == "input_text":
        return TextBlock(str(part.get("text", "")))
    if kind == "input_image" and (part.get("image_url") or part.get("file_id")):
        url = str(part.get("image_url") or "")
        reference = url or f"file:{part.get('file_id')}"
        media = url[5 : url.index(";")] if url.startswith("data:") and ";" in url else "image"
        digest = hashlib.sha256(reference.encode()).hexdigest()[:16]
        return ImageBlock(
            attachment_id=str(part.get("file_id") or f"sha256-{digest}"),
            media_type=media,
            bytes=len(url),
            url=url or None,
            detail=str(part["detail"]) if part.get("detail") else None,
        )
    audio = part.get("input_audio")
    if kind == "input_audio" and isinstance(audio, Mapping):
        data = str(audio.get("data", ""))
        payload = json.dumps(dict(part), sort_keys=True)
        media = format_media_type(audio.get("format"))
        return audio_block(PROVIDER, "input_audio", payload, media_type=media, size=base64_size(data))
    return _opaque(dict(part), str(part.get("filename", "")))


def _result(item: JSON, where: str) -> ResultItem:
    """A ``function_call_output``: text output as a text block; a list of content parts (the SDK's
    ``ToolOutputText`` / ``ToolOutputImage`` / ``ToolOutputFileContent``) part by part, as a
    user message's parts are (``parts`` in the message id)."""
    call_id = str(item.get("call_id", ""))
    output = item.get("output")
    if isinstance(output, list):
        parts = tuple(_result_part(part, where) for part in output)
        return ResultItem(call_id, parts, f"result-parts-{call_id}")
    text = output if isinstance(output, str) else json.dumps(output)
    return ResultItem(call_id, (TextBlock(text),), f"result-{call_id}")


def _result_part(part: Any, where: str) -> ResultPart:
    """A part of a tool's output; one that would not come back as it went in (an image with both
    a URL and a file id, extra keys) is kept opaque, whole."""
    block = _user_part(part, where)
    if isinstance(block, TextBlock | ImageBlock) and _input_part(block) != dict(part):
        return _opaque(dict(part), block.text if isinstance(block, TextBlock) else "")
    return block


# ---------------------------------------------------------------- events -> SDK items


def to_items(messages: Sequence[Message]) -> list[JSON]:
    """Surface messages as SDK input items."""
    items: list[JSON] = []
    for message in messages:
        if message.role == "assistant":
            items.extend(_assistant_items(message))
            continue
        result = next((b for b in message.content if isinstance(b, ToolResultBlock)), None)
        if result is not None:
            output: Any = text_of(result.content)
            if message.id.startswith("result-parts-"):
                output = [_input_part(b) for b in result.content]
            items.append({"call_id": result.tool_call_id, "output": output, "type": "function_call_output"})
        else:
            role, _, rest = message.id.partition(":")
            shape = rest.partition(":")[0]
            content: Any = text_of(message.content)
            if shape == "parts":
                content = [_input_part(b) for b in message.content]
            items.append({"content": content, "role": role if role in CONTEXT_ROLES else "user"})
    return items


def _input_part(block: Block) -> JSON:
    if isinstance(block, ImageBlock):
        part: JSON = {"type": "input_image"}
        if block.detail:
            part["detail"] = block.detail
        if block.url:
            part["image_url"] = block.url
        else:
            part["file_id"] = block.attachment_id
        return part
    if isinstance(block, OpaqueBlock):
        loaded: JSON = json.loads(block.payload)
        return loaded
    return {"type": "input_text", "text": block.text if isinstance(block, TextBlock) else ""}


def _item_ids(message: Message) -> list[str]:
    try:
        ids = json.loads(message.id)
    except ValueError:
        ids = None
    if isinstance(ids, list) and len(ids) == len(message.content):
        return [str(i) for i in ids]
    return [""] * len(message.content)


def _assistant_items(message: Message) -> list[JSON]:
    items: list[JSON] = []
    open_message: JSON | None = None
    for item_id, block in zip(_item_ids(message), message.content, strict=True):
        if isinstance(block, TextBlock):
            if open_message is not None and open_message.get("id", "") == item_id:
                open_message["content"].append({"annotations": [], "text": block.text, "type": "output_text"})
                continue
            open_message = {
                "content": [{"annotations": [], "text": block.text, "type": "output_text"}],
                "role": "assistant",
                "status": "completed",
                "type": "message",
            }
            if item_id:
                open_message["id"] = item_id
            items.append(open_message)
            continue
        open_message = None
        if isinstance(block, OpaqueBlock):
            items.append(json.loads(block.payload))
            continue
        if isinstance(block, ReasoningBlock):
            item: JSON = {"summary": [{"text": block.text, "type": "summary_text"}], "type": "reasoning"}
        elif isinstance(block, ToolCallBlock):
            item = {
                "arguments": block.arguments,
                "call_id": block.id,
                "name": block.name,
                "type": "function_call",
                "status": "completed",
            }
        else:
            continue
        if item_id:
            item["id"] = item_id
        items.append(item)
    return items
