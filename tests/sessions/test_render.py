"""Provider shapes: what to_openai / to_anthropic produce must be a request each provider accepts.

The checkers below state the providers' rules directly (not the renderer's code): OpenAI wants the
``tool`` messages right after the assistant message whose ``tool_calls`` they answer; Anthropic
wants alternating roles, every ``tool_use`` answered by a ``tool_result`` block at the front of the
very next (user) message, and no empty or whitespace-only text block anywhere.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pytest

from compaction.importers import import_path
from compaction.sessions.blocks import Message, Source, TextBlock, ToolCallBlock, ToolResultBlock
from compaction.sessions.render import to_anthropic, to_openai
from tests.conftest import PUBLIC_TRANSCRIPTS, TRANSCRIPTS

MODEL = Source(kind="model", provider="p", model="m")


def openai_problems(messages: list[dict[str, Any]]) -> list[str]:
    problems: list[str] = []
    expected: set[str] = set()
    for index, item in enumerate(messages):
        if item["role"] == "tool":
            if item["tool_call_id"] not in expected:
                problems.append(f"{index}: tool message {item['tool_call_id']} does not follow its call")
            expected.discard(item["tool_call_id"])
            continue
        if expected:
            problems.append(f"{index}: {item['role']} message before the results of {sorted(expected)}")
            expected = set()
        if item["role"] == "assistant":
            expected = {c["id"] for c in item.get("tool_calls", ())}
    if expected:
        problems.append(f"end: calls {sorted(expected)} never answered")
    return problems


def anthropic_problems(messages: list[dict[str, Any]]) -> list[str]:
    problems: list[str] = []
    for index, item in enumerate(messages):
        if index and item["role"] == messages[index - 1]["role"]:
            problems.append(f"{index}: two {item['role']} messages in a row")
        blocks = item["content"]
        for block in blocks:
            texts = [block] if block["type"] == "text" else block.get("content", ())
            if block["type"] in ("text", "tool_result") and any(not t["text"].strip() for t in texts):
                problems.append(f"{index}: empty text block in {block['type']}")
        calls = [b["id"] for b in blocks if b["type"] == "tool_use"]
        if not calls:
            continue
        following = messages[index + 1]["content"] if index + 1 < len(messages) else []
        lead: list[str] = []
        for block in following:
            if block["type"] != "tool_result":
                break
            lead.append(block["tool_use_id"])
        if sorted(lead) != sorted(calls):
            problems.append(f"{index}: calls {calls} answered by leading results {lead}")
    return problems


def assistant(message_id: str, *calls: str, text: str = "working") -> Message:
    blocks = (TextBlock(text), *(ToolCallBlock(c, "bash", '{"command": "ls"}') for c in calls))
    return Message(id=message_id, role="assistant", content=blocks, source=MODEL)


def result(call_id: str, text: str = "ok") -> Message:
    return Message(
        id=f"r-{call_id}",
        role="user",
        content=(ToolResultBlock(call_id, (TextBlock(text),)),),
        source=Source(kind="tool", call_id=call_id),
    )


def user(text: str) -> Message:
    return Message(id=f"u-{text}", role="user", content=(TextBlock(text),))


def test_a_user_message_between_a_call_and_its_result_renders_validly() -> None:
    # the pairing balance lets a neutral node (injected context, steering) sit between a call and
    # its result
    history = [user("task"), assistant("a1", "c1", "c2"), result("c1"), user("steer"), result("c2")]
    openai = to_openai(history)
    assert openai_problems(openai) == []
    assert [m["role"] for m in openai] == ["user", "assistant", "tool", "tool", "user"]
    assert openai[-1]["content"] == "steer"  # held back, not dropped
    anthropic = to_anthropic(history)
    assert anthropic_problems(anthropic) == []
    assert [b["type"] for b in anthropic[-1]["content"]] == ["tool_result", "tool_result", "text"]


def test_empty_texts_are_never_sent_to_anthropic() -> None:
    history = [user("task"), assistant("a1", "c1", text=""), result("c1", text=""), user("  ")]
    rendered = to_anthropic(history)
    assert anthropic_problems(rendered) == []
    assert rendered[-1]["content"] == [{"type": "tool_result", "tool_use_id": "c1"}]


@cache
def _histories(path: Path) -> list[list[Message]]:
    return [imported.session.derive_messages() for imported in import_path(path)]


@pytest.mark.parametrize("path", PUBLIC_TRANSCRIPTS, ids=lambda p: str(p.relative_to(TRANSCRIPTS)))
def test_every_public_transcript_renders_validly_for_both_providers(path: Path) -> None:
    for history in _histories(path):
        assert openai_problems(to_openai(history)) == []
        anthropic = to_anthropic(history)
        # Anthropic: a leading assistant turn is allowed by the checker (summarizers prepend a
        # user continuation themselves); everything else must hold
        assert anthropic_problems(anthropic) == []
