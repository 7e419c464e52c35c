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

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from compaction.errors import FrameworkMissingError, IntegrationError
from compaction.integrations.memory import (
    AssistantItem,
    CompactingMemory,
    ContextItem,
    Item,
    ResultItem,
    UserItem,
)
from compaction.service import BasicCompactService
from compaction.sessions.blocks import (
    Block,
    Message,
    ReasoningBlock,
    Source,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    text_of,
)
from compaction.sessions.store import SessionStore

if TYPE_CHECKING:
    from agents.memory.session_settings import SessionSettings

JSON = dict[str, Any]
PROVIDER = "openai-agents"
ASSISTANT_SIDE = frozenset({"reasoning", "function_call"})
CONTEXT_ROLES = frozenset({"system", "developer"})


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

    ``session_id`` is the SDK's key; the events live in the store at ``url`` (or ``store``), in the
    session :meth:`CompactingMemory.session_id` names. ``service`` (or ``context_window``) sets when
    ``get_items`` compacts."""

    def __init__(
        self,
        session_id: str,
        url: str | None = None,
        *,
        store: SessionStore | None = None,
        service: BasicCompactService | None = None,
        context_window: int | None = None,
        model: str = "unknown",
        session_settings: SessionSettings | None = None,
    ) -> None:
        settings_type = _settings_type()
        self.session_id = session_id
        self.session_settings: SessionSettings | None = session_settings or settings_type()
        self.memory = CompactingMemory(
            url, store=store, service=service, context_window=context_window, provider=PROVIDER, model=model
        )
        self._added = 0

    def close(self) -> None:
        self.memory.close()

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The surface as SDK input items (the newest ``limit`` of them), compacted first when the
        session is over its threshold."""
        from agents.memory.session_settings import resolve_session_limit

        items = to_items(await self.memory.surface(self.session_id))
        wanted = resolve_session_limit(limit, self.session_settings)
        return items if wanted is None else items[-wanted:] if wanted > 0 else []

    async def add_items(self, items: list[Any]) -> None:
        """Record ``items`` as events (one atomic save)."""
        if not items:
            return
        origin = f"add_items #{self._added}"
        self._added += 1
        self.memory.record(self.session_id, from_items([as_json(i) for i in items], origin), origin=origin)

    async def pop_item(self) -> Any | None:
        """Remove the newest item from the surface and return it.

        Append-only: the log keeps the item; an appended ``assistant/message`` without content
        replaces its node on the surface (see :meth:`CompactingMemory.pop`). When the newest node
        is an assistant message holding several items, the whole message leaves the surface and
        its last item is returned."""
        popped = self.memory.pop(self.session_id)
        if popped is None:
            return None
        items = to_items([popped])
        return items[-1] if items else None

    async def clear_session(self) -> None:
        """Start a new, empty surface generation under the same ``session_id``.

        Append-only: the earlier generations stay in the store as they were (``compaction
        sessions`` lists them); only ``get_items`` stops seeing them."""
        self.memory.clear(self.session_id)


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
        if kind in ASSISTANT_SIDE or (kind == "message" and item.get("role") == "assistant"):
            group.extend(_assistant_blocks(item, where))
            continue
        if group:
            out.append(_assistant(group))
            group = []
        if kind == "function_call_output":
            call_id = str(item.get("call_id", ""))
            out.append(
                ResultItem(call_id, (TextBlock(_output_text(item.get("output"))),), f"result-{call_id}")
            )
        elif kind == "message":
            out.append(_user(item, where))
        else:
            raise IntegrationError(
                f"{where}: expected a message, reasoning, function_call or function_call_output item; "
                f"found type {kind!r}"
            )
    if group:
        out.append(_assistant(group))
    return out


def _assistant_blocks(item: JSON, where: str) -> list[tuple[str, Block]]:
    item_id = str(item.get("id") or "")
    kind = item.get("type", "message")
    if kind == "reasoning":
        summary = item.get("summary") or []
        text = "\n".join(str(part.get("text", "")) for part in summary if isinstance(part, Mapping))
        return [(item_id, ReasoningBlock(text))]
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


def _assistant(group: list[tuple[str, Block]]) -> AssistantItem:
    ids = json.dumps([item_id for item_id, _ in group])
    source = Source(kind="model", provider=PROVIDER, model="unknown")
    return AssistantItem(Message(id=ids, role="assistant", content=tuple(b for _, b in group), source=source))


def _user(item: JSON, where: str) -> UserItem | ContextItem:
    role = str(item.get("role", "user"))
    content = item.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        text = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    else:
        raise IntegrationError(f"{where}: expected message content as text or parts; found {content!r}")
    if role not in {"user", *CONTEXT_ROLES}:
        raise IntegrationError(f"{where}: expected a user, system or developer message; found role {role!r}")
    message = Message(id=f"{role}:{where}", role="user", content=(TextBlock(text),))
    return ContextItem(message) if role in CONTEXT_ROLES else UserItem(message)


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "\n".join(str(p.get("text", "")) for p in output if isinstance(p, Mapping))
    return json.dumps(output)


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
            items.append(
                {
                    "call_id": result.tool_call_id,
                    "output": text_of(result.content),
                    "type": "function_call_output",
                }
            )
        else:
            role = message.id.split(":", 1)[0]
            items.append(
                {"content": text_of(message.content), "role": role if role in CONTEXT_ROLES else "user"}
            )
    return items


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
