"""The pydantic-ai 2 capability of :class:`~compaction.integrations.pydantic_ai.CompactingHistory`
(imports pydantic-ai; :meth:`CompactingHistory.capability` imports this module on first use).

``Agent(model, capabilities=[history.capability()])`` is the whole adoption: before every model
request of a run, the run's messages the log does not hold yet are recorded and the model is sent
the conversation's compacted surface; after the run, its last messages (the final answer) are
recorded. A run whose prompt is ``/compact`` runs the command instead of calling the model and
answers its one line. Only the request is changed: the run's own history (``result.new_messages()``,
``all_messages()``) is pydantic-ai's, as without the capability. Runs of one conversation in this
process follow each other (the conversation's run lock).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import SkipModelRequest
from pydantic_ai.tools import RunContext

from compaction.errors import IntegrationError

if TYPE_CHECKING:
    from pydantic_ai.capabilities.abstract import WrapRunHandler
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.run import AgentRunResult

    from compaction.integrations.pydantic_ai import CompactingHistory


@dataclass
class CompactionCapability(AbstractCapability[Any]):
    """Records every message of every run and hands the model the compacted conversation.

    The conversation is ``key`` when given, else the run's ``conversation_id``
    (``agent.run(..., conversation_id="user-42")``)."""

    history: CompactingHistory
    key: str | None = None

    def conversation(self, ctx: RunContext[Any]) -> str:
        found = self.key or ctx.conversation_id
        if not found:
            raise IntegrationError(
                "pydantic-ai capability: expected a key (history.capability('user-42')) or the run's "
                "conversation_id (agent.run(..., conversation_id=...)); found neither"
            )
        return found

    async def wrap_run(self, ctx: RunContext[Any], *, handler: WrapRunHandler) -> AgentRunResult[Any]:
        async with self.history.memory.run_lock(self.conversation(ctx)):
            return await handler()

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        key = self.conversation(ctx)
        await self._command(key, request_context)
        await self.history.arecord(key, list(request_context.messages))
        request_context.messages = await self.history.load(key)
        return request_context

    async def _command(self, key: str, request_context: ModelRequestContext) -> None:
        """A run whose prompt is ``/compact`` runs the command; its one-line answer is the
        model's response (the model is not called) and neither joins the conversation."""
        from compaction.integrations.pydantic_ai import command_of, command_reply

        messages = request_context.messages
        text = command_of(messages[-1]) if messages else None
        if text is None:
            return
        await self.history.arecord(key, list(messages[:-1]))
        result = await self.history.memory.command(key, text)
        if result is not None:
            raise SkipModelRequest(command_reply(result.text))

    async def after_run(self, ctx: RunContext[Any], *, result: AgentRunResult[Any]) -> AgentRunResult[Any]:
        await self.history.arecord(self.conversation(ctx), result.all_messages())
        return result

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # not spec-serializable: it holds a live store
