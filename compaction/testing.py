"""Scripted models for tests of your own agent loops.

:class:`ScriptedModel` plays back a fixed list of responses (or callables, or exceptions to raise)
and records every request it receives; :func:`reply` and :func:`tool_call` build the responses.
Drive :class:`~compaction.sessions.loop.AgentLoop` with it to test a loop, a pre-step hook or a
compaction policy without a model server. The demo's deterministic coding agent lives in
:mod:`compaction.cli.demo`.
"""

from __future__ import annotations

import inspect
import json
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from compaction.errors import ScriptExhaustedError
from compaction.sessions.blocks import Message, Source, TextBlock, ToolCallBlock
from compaction.sessions.events import Usage
from compaction.sessions.loop import (
    ModelRequest,
    ModelResponse,
)

if TYPE_CHECKING:
    pass

ScriptItem = (
    ModelResponse | Callable[[ModelRequest], ModelResponse | Awaitable[ModelResponse]] | BaseException
)


# ---------------------------------------------------------------- the scripted model


class ScriptedModel:
    """Plays back ``responses`` in order; an exception item is raised, a callable is called."""

    def __init__(self, responses: Iterable[ScriptItem]) -> None:
        self._script: deque[ScriptItem] = deque(responses)
        self.requests: list[ModelRequest] = []

    @property
    def remaining(self) -> int:
        return len(self._script)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        if not self._script:
            raise ScriptExhaustedError(
                f"scripted model: expected at most {len(self.requests) - 1} calls, got call "
                f"{len(self.requests)} with {len(request.messages)} messages"
            )
        item = self._script.popleft()
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, ModelResponse):
            return item
        result = item(request)
        return await result if inspect.isawaitable(result) else result


def tool_call(name: str, arguments: dict[str, object] | str, call_id: str) -> ToolCallBlock:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments, sort_keys=True)
    return ToolCallBlock(id=call_id, name=name, arguments=raw)


def reply(
    text: str = "",
    *calls: ToolCallBlock,
    message_id: str,
    chunks: Sequence[str] | None = None,
    usage: Usage | None = None,
    provider: str = "scripted",
    model: str = "scripted-1",
    stop_reason: str = "stop",
) -> ModelResponse:
    """An assistant response: optional text then tool calls; ``chunks`` default to the text."""
    content = ((TextBlock(text),) if text else ()) + calls
    source = Source(kind="model", provider=provider, model=model)
    streamed = tuple(chunks) if chunks is not None else ((text,) if text else ())
    return ModelResponse(
        Message(id=message_id, role="assistant", content=content, source=source),
        usage=usage,
        chunks=streamed,
        stop_reason=stop_reason,
    )
