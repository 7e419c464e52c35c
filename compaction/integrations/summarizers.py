"""A framework's own model as the summarizer: :class:`LangChainSummarizer` (a chat model),
:class:`PydanticAISummarizer` (a pydantic-ai model) and :class:`AgentsModelSummarizer` (an Agents
SDK ``Model``), each a :class:`~compaction.vocabulary.summarizer.Summarizer`.

Pass one as ``summarizer=`` to an adapter: the compaction engine gets it like any summarizer, so the
summary goes through completion and the fidelity gate, and the log records its provider and model.
Each sends the conversation's system prompt, then one user message: the shadowed span as text
(:func:`~compaction.sessions.render.to_text`) followed by the instruction; the tools are not sent
(``SummaryOutput.header`` is False). An empty answer is an
:class:`~compaction.errors.EmptySummaryError`; a failing model call a
:class:`~compaction.errors.SummarizerError` naming the framework. The framework is imported when a
summary is asked for.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from compaction.errors import EmptySummaryError, SummarizerError
from compaction.sessions.events import Usage
from compaction.sessions.render import to_text
from compaction.vocabulary.summarizer import Summarizer, SummaryOutput, SummaryRequest


def summary_prompt(request: SummaryRequest) -> str:
    """The one user message a framework model is sent: the span as text, then the instruction."""
    return f"{to_text(list(request.messages))}\n\n{request.instruction}"


class FrameworkSummarizer(Summarizer):
    """The shared part: the prompt, the checks, the output; a subclass calls its framework."""

    provider = "framework"

    def __init__(self, model: Any, name: str | None = None) -> None:
        self.client = model
        self.model = name or _model_name(model)

    async def summarize(self, request: SummaryRequest) -> SummaryOutput:
        try:
            text, usage = await self.complete(request.system, summary_prompt(request), request.max_tokens)
        except SummarizerError:
            raise
        except Exception as e:
            raise SummarizerError(
                f"{self.provider} summarizer ({self.model}): the model call failed for compaction "
                f"{request.compaction_id} of session {request.session_id}: {type(e).__name__}: {e}",
                retryable=True,
            ) from e
        if not text.strip():
            raise EmptySummaryError(
                f"{self.provider} summarizer ({self.model}): expected a summary for compaction "
                f"{request.compaction_id}; the model answered with no text"
            )
        return SummaryOutput(
            text=text, provider=self.provider, model=self.model, max_tokens=request.max_tokens, usage=usage,
            header=False,
        )  # fmt: skip

    @abstractmethod
    async def complete(self, system: str | None, prompt: str, max_tokens: int) -> tuple[str, Usage | None]:
        """The model's text answer to ``system`` + ``prompt``, and its usage when reported."""


class LangChainSummarizer(FrameworkSummarizer):
    """A LangChain chat model (``BaseChatModel``) as the summarizer."""

    provider = "langchain"

    async def complete(self, system: str | None, prompt: str, max_tokens: int) -> tuple[str, Usage | None]:
        from langchain_core.messages import HumanMessage, SystemMessage

        messages: list[Any] = [SystemMessage(content=system)] if system else []
        answer = await self.client.ainvoke([*messages, HumanMessage(content=prompt)])
        usage = getattr(answer, "usage_metadata", None) or {}
        return str(answer.text), _usage(usage.get("input_tokens"), usage.get("output_tokens"))


class PydanticAISummarizer(FrameworkSummarizer):
    """A pydantic-ai model (a ``Model`` or a known model name) as the summarizer."""

    provider = "pydantic-ai"

    async def complete(self, system: str | None, prompt: str, max_tokens: int) -> tuple[str, Usage | None]:
        from pydantic_ai.direct import model_request
        from pydantic_ai.messages import ModelRequest, SystemPromptPart, UserPromptPart

        parts: list[Any] = [SystemPromptPart(system)] if system else []
        request = ModelRequest(parts=[*parts, UserPromptPart(prompt)])
        answer = await model_request(self.client, [request], model_settings={"max_tokens": max_tokens})
        return answer.text or "", _usage(answer.usage.input_tokens, answer.usage.output_tokens)


class AgentsModelSummarizer(FrameworkSummarizer):
    """An Agents SDK ``Model`` as the summarizer."""

    provider = "openai-agents"

    async def complete(self, system: str | None, prompt: str, max_tokens: int) -> tuple[str, Usage | None]:
        from agents import ModelSettings
        from agents.models.interface import ModelTracing

        answer = await self.client.get_response(
            system,
            [{"role": "user", "content": prompt}],
            ModelSettings(max_tokens=max_tokens),
            [],
            None,
            [],
            ModelTracing.DISABLED,
            previous_response_id=None,
            conversation_id=None,
            prompt=None,
        )
        texts = [
            str(getattr(part, "text", ""))
            for item in answer.output
            if getattr(item, "type", None) == "message"
            for part in getattr(item, "content", [])
        ]
        reported = answer.usage
        return "\n".join(texts), _usage(reported.input_tokens, reported.output_tokens)


def _model_name(model: Any) -> str:
    for attribute in ("model_name", "model", "name"):
        found = getattr(model, attribute, None)
        if isinstance(found, str) and found:
            return found
    return type(model).__name__


def _usage(input_tokens: Any, output_tokens: Any) -> Usage | None:
    if not isinstance(input_tokens, int) or not isinstance(output_tokens, int):
        return None
    return Usage(input_tokens=input_tokens, output_tokens=output_tokens)
