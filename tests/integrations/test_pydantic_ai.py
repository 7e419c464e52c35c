"""pydantic-ai over the event log, with its offline ``FunctionModel``: the history processor records
every message and hands the model the compacted surface (task first, tool calls and returns paired);
``load``/``record`` round-trip; the audit passes; another process reads the same surface."""

from __future__ import annotations

import asyncio

from tests.integrations.support import (
    FILE,
    audit_passes,
    every_call_answered_in_order,
    prompt,
    require_framework,
    surface_here,
    surface_in_another_process,
)

require_framework("pydantic_ai", "pydantic-ai")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

from compaction.integrations.pydantic_ai import CompactingHistory  # noqa: E402
from compaction.sessions.blocks import text_of  # noqa: E402


class Recorded:
    """A FunctionModel script: read the file, then answer; every history it was sent is kept."""

    def __init__(self) -> None:
        self.sent: list[list[ModelMessage]] = []
        self.answers: list[str] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.sent.append(list(messages))
        last = messages[-1]
        if any(isinstance(p, ToolReturnPart) for p in last.parts):
            self.answers.append(f"answer {len(self.sent)}: apply_discount lacks rounding")
            return ModelResponse(parts=[TextPart(self.answers[-1])])
        return ModelResponse(parts=[ToolCallPart("read_file", {"path": FILE})])


def make_agent(history: CompactingHistory | None, key: str, model: Recorded) -> Agent[None, str]:
    capabilities = [history.capability(key)] if history is not None else []
    agent = Agent(FunctionModel(model), instructions="You fix bugs.", capabilities=capabilities)

    @agent.tool_plain
    def read_file(path: str) -> str:
        """Read a file of the workspace."""
        return f"{path}:\n" + "\n".join(f"{i:4}  total += price * qty  # line {i}" for i in range(60))

    return agent


async def test_a_multi_turn_run_is_compacted_kept_and_audited(url: str) -> None:
    history = CompactingHistory(url, context_window=5000)
    model = Recorded()
    agent = make_agent(history, "fixer", model)
    for k in range(9):
        result = await agent.run(prompt(k), message_history=await history.load("fixer"))
        assert history.record("fixer", result.new_messages()) == 0, "the capability recorded the whole run"
    assert history.memory.compactions
    sent = model.sent[-1]
    first = sent[0].parts[0]
    assert isinstance(first, UserPromptPart) and first.content == prompt(0), "the task statement first"
    assert any(
        isinstance(p, UserPromptPart) and "checkpoint" in str(p.content) for m in sent for p in m.parts
    )
    assert len(sent) < 4 * 9, "the history sent is compacted"
    _calls_paired(sent)
    session = history.memory.load_sync("fixer")
    logged = {text_of(m.content) for m in (getattr(e, "message", None) for e in session.events()) if m}
    assert {prompt(k) for k in range(9)} | set(model.answers) <= logged, "the log keeps every message"
    assert len(model.answers) == 9
    compactions = audit_passes(url)
    assert compactions and all(c["outcome"] == "committed" for c in compactions)
    assert surface_in_another_process(url, session.id) == surface_here(url, session.id)
    every_call_answered_in_order(surface_here(url, session.id))


async def test_load_returns_requests_and_responses_with_tool_pairs(url: str) -> None:
    history = CompactingHistory(url, context_window=100_000)
    agent = make_agent(None, "fixer", Recorded())
    result = await agent.run(prompt(0))
    assert history.record("fixer", result.all_messages()) == 4
    assert history.record("fixer", result.all_messages()) == 0, "recording twice adds nothing"
    loaded = await history.load("fixer")
    assert [m.kind for m in loaded] == ["request", "response", "request", "response"]
    call, answer = loaded[1].parts[0], loaded[2].parts[0]
    assert isinstance(call, ToolCallPart) and isinstance(answer, ToolReturnPart)
    assert (answer.tool_call_id, answer.tool_name) == (call.tool_call_id, "read_file")
    assert call.args_as_dict() == {"path": FILE}
    again = await agent.run("and now?", message_history=loaded)
    assert again.output.startswith("answer"), "pydantic-ai accepts the loaded history"


def _calls_paired(messages: list[ModelMessage]) -> None:
    calls = [
        p.tool_call_id
        for m in messages
        if isinstance(m, ModelResponse)
        for p in m.parts
        if isinstance(p, ToolCallPart)
    ]
    returns = [
        p.tool_call_id
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    ]
    assert calls == returns, f"every call sent with its return, in order: {calls} vs {returns}"
    seen: set[str] = set()
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                seen.add(part.tool_call_id)
            elif isinstance(part, ToolReturnPart):
                assert part.tool_call_id in seen, "a return follows its call"


def test_system_prompts_and_failed_returns_round_trip(url: str) -> None:
    history = CompactingHistory(url, context_window=100_000)
    call = ToolCallPart("read_file", {"path": FILE}, tool_call_id="c1")
    messages: list[ModelMessage] = [
        ModelRequest(parts=[SystemPromptPart("Answer briefly."), UserPromptPart(prompt(0))]),
        ModelResponse(parts=[call]),
        ModelRequest(
            parts=[ToolReturnPart("read_file", "path must exist", tool_call_id="c1", outcome="retried")]
        ),
        ModelResponse(parts=[TextPart("sorry")]),
    ]
    assert history.record("fixer", messages) == 4
    session = history.memory.load_sync("fixer")
    assert session.type_counts["context/message"] == 1 and session.first_user_seq is not None
    loaded = asyncio.run(history.load("fixer"))
    first, retry = loaded[0].parts, loaded[2].parts[0]
    assert isinstance(first[0], SystemPromptPart) and first[0].content == "Answer briefly."
    assert isinstance(first[1], UserPromptPart) and first[1].content == prompt(0)
    assert isinstance(retry, ToolReturnPart) and (retry.tool_call_id, retry.tool_name) == ("c1", "read_file")
    assert retry.outcome == "failed" and retry.content == "path must exist"
    tool_result = next(e for e in session.events() if e.type == "tool/result")
    assert tool_result.message.content[0].is_error, "a retried or failed return is an error result"
    assert history.record("fixer", loaded) == 0, "what load handed out is known"
