"""The OpenAI Agents SDK's Session protocol over the event log, run by the SDK's own Runner with an
offline ``Model``: the same items as the SDK's SQLiteSession until compaction starts, then a
compacted, provider-valid input with the task first; pop and clear append; the audit passes; another
process reads the same surface."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integrations.support import (
    FILE,
    audit_passes,
    every_call_answered_in_order,
    prompt,
    require_framework,
    surface_here,
    surface_in_another_process,
)

require_framework("agents", "openai-agents")

from agents import Agent, Runner, SQLiteSession, function_tool  # noqa: E402
from agents.items import ModelResponse  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from agents.usage import Usage  # noqa: E402
from openai.types.responses import (  # noqa: E402
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Summary  # noqa: E402

from compaction.errors import BracketRuleError, IntegrationError  # noqa: E402
from compaction.integrations.openai_agents import CompactingSession, from_items  # noqa: E402
from compaction.sessions.events import SessionResume  # noqa: E402
from compaction.sessions.invariants import DEFAULT_INVARIANTS  # noqa: E402
from compaction.sessions.store import SessionStore  # noqa: E402
from compaction.vocabulary.events import CompactEnd  # noqa: E402
from tests.builders import run_json  # noqa: E402


class ScriptedModel(Model):
    """Odd calls read a file (reasoning + a function call), even calls answer; every input kept."""

    def __init__(self, calls: str = "call") -> None:
        self.inputs: list[list[dict[str, Any]]] = []
        self.calls = calls  # the call ids' prefix: another for a later run of one conversation

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        self.inputs.append(json.loads(json.dumps(input)) if isinstance(input, list) else [input])
        n = len(self.inputs)
        if n % 2:
            output: list[Any] = [
                ResponseReasoningItem(
                    id=f"rs_{n}",
                    type="reasoning",
                    summary=[Summary(type="summary_text", text=f"read {FILE} again ({n})")],
                ),
                ResponseFunctionToolCall(
                    id=f"fc_{n}",
                    call_id=f"{self.calls}_{n}",
                    type="function_call",
                    name="read_file",
                    arguments=json.dumps({"path": FILE}),
                    status="completed",
                ),
            ]
        else:
            text = ResponseOutputText(
                type="output_text", text=f"answer {n}: apply_discount lacks rounding", annotations=[]
            )
            output = [
                ResponseOutputMessage(
                    id=f"msg_{n}", type="message", role="assistant", status="completed", content=[text]
                )
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the tests run the SDK without streaming")


@function_tool
def read_file(path: str) -> str:
    """Read a file of the workspace."""
    return f"{path}:\n" + "\n".join(f"{i:4}  total += price * qty  # line {i}" for i in range(60))


def agent(model: ScriptedModel) -> Agent[Any]:
    return Agent(name="fixer", instructions="You fix bugs.", model=model, tools=[read_file])


async def test_same_items_as_sqlite_session_until_compaction_starts(url: str, tmp_path: Path) -> None:
    theirs, ours = (
        SQLiteSession("fixer", str(tmp_path / "sdk.db")),
        CompactingSession("fixer", url, context_window=6000),
    )
    their_model, our_model = ScriptedModel(), ScriptedModel()
    compared = 0
    for k in range(10):
        await Runner.run(agent(their_model), prompt(k), session=theirs)
        await Runner.run(agent(our_model), prompt(k), session=ours)
        expected, found = await theirs.get_items(), await ours.get_items()
        if ours.memory.compactions:
            assert len(found) < len(expected)
            break
        assert found == expected, f"run {k}"
        assert our_model.inputs == their_model.inputs
        compared += 1
    assert compared >= 3 and ours.memory.compactions, "the run never reached the compaction threshold"
    assert found[0] == {"content": prompt(0), "role": "user"}


async def test_a_multi_turn_run_is_compacted_kept_and_audited(url: str, tmp_path: Path) -> None:
    reference, ours = (
        SQLiteSession("fixer", str(tmp_path / "sdk.db")),
        CompactingSession("fixer", url, context_window=5000),
    )
    model = ScriptedModel()
    for k in range(9):
        await Runner.run(agent(model), prompt(k), session=ours)
        await Runner.run(agent(ScriptedModel()), prompt(k), session=reference)
    assert len(ours.memory.compactions) >= 1
    sent = model.inputs[-1]
    assert sent[0] == {"content": prompt(0), "role": "user"}, "the task statement is sent first"
    assert any("checkpoint" in str(item.get("content", "")) for item in sent), "a compaction summary is sent"
    assert len(sent) < len(await reference.get_items())
    _calls_paired(sent)
    session = await ours.memory.load("fixer")
    logged = _facts_of_log(session)
    for item in from_items(await reference.get_items(), "reference"):
        assert _facts_of_item(item) <= logged, f"the log lost {item}"
    compactions = audit_passes(url)
    assert compactions and all(c["outcome"] == "committed" for c in compactions)
    assert surface_in_another_process(url, session.id) == surface_here(url, session.id)
    every_call_answered_in_order(surface_here(url, session.id))
    code, shown = run_json("--store", url, "show", str(session.id))
    assert code == 0
    assert [(m["role"], m.get("content")) for m in shown["messages"]] == [
        (m["role"], m.get("content")) for m in surface_here(url, session.id)
    ]


async def test_pop_item_appends_an_event_and_the_log_keeps_the_item(url: str) -> None:
    ours = CompactingSession("fixer", url, context_window=100_000)
    await Runner.run(agent(ScriptedModel()), prompt(0), session=ours)
    before = await ours.get_items()
    logged = list((await ours.memory.load("fixer")).events())
    popped = await ours.pop_item()
    assert popped == before[-1]
    assert await ours.get_items() == before[:-1]
    session = await ours.memory.load("fixer")
    assert list(session.events(0, len(logged))) == logged, "pop appends; nothing stored changes"
    assert len(session) > len(logged)
    assert any(getattr(e, "message", None) and "answer 2" in str(e.message) for e in session.events())
    assert await ours.pop_item() == before[-2], "a second pop takes the next item, not the first pop"
    assert await ours.get_items() == before[:-2]
    # a provider's call ids are unique across runs (a repeat on the surface fails the audit)
    await Runner.run(agent(ScriptedModel(calls="call_again")), prompt(1), session=ours)
    assert (await ours.get_items())[0] == {"content": prompt(0), "role": "user"}
    audit_passes(url)


async def test_clear_session_starts_a_new_generation_and_keeps_the_old(url: str) -> None:
    ours = CompactingSession("fixer", url, context_window=100_000)
    await Runner.run(agent(ScriptedModel()), prompt(0), session=ours)
    first = ours.memory.session_id("fixer")
    await ours.clear_session()
    assert await ours.get_items() == []
    second = ours.memory.session_id("fixer")
    assert second != first
    await Runner.run(agent(ScriptedModel()), prompt(1), session=ours)
    assert (await ours.get_items())[0] == {"content": prompt(1), "role": "user"}
    code, listed = run_json("--store", url, "sessions")
    assert code == 0 and {s["session_id"] for s in listed["sessions"]} == {str(first), str(second)}
    with SessionStore.open(url) as store:
        assert store.get(first).derive_messages(), "the old generation is untouched"
        assert isinstance(store.get(second).event(0), SessionResume)


async def test_get_items_limit_returns_the_newest_items(url: str) -> None:
    ours = CompactingSession("fixer", url, context_window=100_000)
    await Runner.run(agent(ScriptedModel()), prompt(0), session=ours)
    everything = await ours.get_items()
    assert await ours.get_items(limit=2) == everything[-2:]
    assert await ours.get_items(limit=0) == []


async def test_developer_messages_are_context_and_come_back_as_they_went_in(url: str) -> None:
    ours = CompactingSession("fixer", url, context_window=100_000)
    items = [{"content": "Answer briefly.", "role": "developer"}, {"content": prompt(0), "role": "user"}]
    await ours.add_items(items)
    assert await ours.get_items() == items
    session = await ours.memory.load("fixer")
    # seq 0 is the session/invariants marker, seq 1 the developer message as context
    assert session.type_counts.get("context/message") == 1 and session.first_user_seq == 2


async def test_a_message_of_an_unknown_role_is_refused_naming_it(url: str) -> None:
    """(An unknown item *type* is kept opaquely: tests/integrations/test_content.py.)"""
    ours = CompactingSession("fixer", url, context_window=100_000)
    with pytest.raises(IntegrationError, match="found role 'critic'"):
        await ours.add_items([{"type": "message", "role": "critic", "content": "no"}])


# ---------------------------------------------------------------- helpers


def _calls_paired(items: list[dict[str, Any]]) -> None:
    calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
    assert calls == outputs, "every call sent with its output, in order"
    for item in items:
        if item.get("type") == "function_call_output":
            assert item["call_id"] in calls[: calls.index(item["call_id"]) + 1]


def _facts_of_item(item: Any) -> set[tuple[str, ...]]:
    from compaction.integrations.memory import AssistantItem, ResultItem

    if isinstance(item, ResultItem):
        return {("result", item.call_id, item.content[0].text)}  # type: ignore[union-attr]
    message = item.message
    if isinstance(item, AssistantItem):
        return {("block", _block_key(b)) for b in message.content}
    return {("user", message.content[0].text)}


def _block_key(block: Any) -> str:
    return json.dumps(
        [type(block).__name__, *[getattr(block, f, "") for f in ("text", "id", "name", "arguments")]]
    )


def _facts_of_log(session: Any) -> set[tuple[str, ...]]:
    from compaction.sessions.blocks import TextBlock, ToolResultBlock

    found: set[tuple[str, ...]] = set()
    for event in session.events():
        message = getattr(event, "message", None)
        if message is None:
            continue
        for block in message.content:
            if isinstance(block, ToolResultBlock):
                found.add(("result", block.tool_call_id, block.content[0].text))
            elif message.role == "assistant":
                found.add(("block", _block_key(block)))
            elif isinstance(block, TextBlock):
                found.add(("user", block.text))
    return found


async def test_a_session_the_adapter_writes_is_under_the_bracket_invariant(url: str) -> None:
    ours = CompactingSession("fixer", url, context_window=100_000)
    await Runner.run(agent(ScriptedModel()), prompt(0), session=ours)
    with SessionStore.open(url) as store:
        session = store.get(ours.memory.session_id("fixer"))
        assert session.invariants == DEFAULT_INVARIANTS
        with pytest.raises(BracketRuleError, match="compact/end"):
            session.append(CompactEnd(compaction_id="never-started", turn=None, error=None))
