"""Codex CLI rollouts (tests/data/codex, built to the ``RolloutLine`` types of codex-rs/protocol, one
file per item kind): detected by ``auto``, imported with their tool calls paired, and Codex's own
``compacted`` items imported as compaction brackets that ``compaction audit`` passes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compaction.importers import import_path
from compaction.importers.detect import detect_format
from compaction.sessions.blocks import ReasoningBlock, TextBlock, ToolCallBlock, text_of, tool_calls_of
from compaction.sessions.events import AssistantMessage, ContextMessage, RequestHeader, UserMessage
from compaction.sessions.render import to_openai
from compaction.vocabulary.events import CompactEnd, CompactStart, CompactSummary
from tests.builders import run_json
from tests.conftest import ROOT
from tests.sessions.test_importers import count_codex

CODEX = ROOT / "tests" / "data" / "codex"
ROLLOUTS = sorted(CODEX.glob("*.jsonl"))
TASK = "The discount test in tests/test_cart.py fails; find out why and fix src/shop/cart.py."


def test_there_is_one_rollout_per_item_kind() -> None:
    assert {p.stem for p in ROLLOUTS} == {
        "function_call", "local_shell_call", "custom_tool_call", "compacted", "compacted_message_only",
    }  # fmt: skip


@pytest.mark.parametrize("path", ROLLOUTS, ids=lambda p: p.stem)
def test_auto_detects_codex_and_every_call_has_its_result(path: Path) -> None:
    assert detect_format(path) == "codex"
    [imported] = import_path(path, "auto")
    assert imported.format == "codex"
    assert imported.tool_calls == imported.tool_results and imported.synthesized_results == 0
    assert (imported.tool_calls, imported.tool_results) == count_codex(path)
    session = imported.session
    assert session.surface.is_balanced()
    header = session.latest_header()
    assert isinstance(header, RequestHeader)
    assert (header.provider, header.model) == ("openai", "gpt-5-codex")
    assert header.system == "You are Codex, a coding agent running in the Codex CLI."
    assert any("event_msg 'user_message': UI telemetry" in s for s in imported.skipped)


def test_function_call_reasoning_and_call_are_one_model_call_despite_event_lines() -> None:
    [imported] = import_path(CODEX / "function_call.jsonl", "codex")
    steps = [e for e in imported.session.events() if isinstance(e, AssistantMessage)]
    first = steps[0].message
    assert [type(b) for b in first.content] == [ReasoningBlock, ToolCallBlock]
    call = tool_calls_of(first)[0]
    assert (call.id, call.name) == ("call_Kx1c9TtUeY0aWm3rBq7d2Lf4", "shell")
    assert '"python -m pytest tests/test_cart.py -q"' in call.arguments
    assert len(steps) == 3 and isinstance(steps[-1].message.content[-1], TextBlock)
    context = [e for e in imported.session.events() if isinstance(e, ContextMessage)]
    assert text_of(context[0].message.content).startswith("<environment_context>")
    prompts = [e for e in imported.session.events() if isinstance(e, UserMessage)]
    assert [text_of(p.message.content) for p in prompts] == [TASK]
    messages = to_openai(imported.session.derive_messages())
    assert "AssertionError: assert Decimal('16.9915')" in messages[3]["content"]


def test_local_shell_call_becomes_a_local_shell_tool_call() -> None:
    [imported] = import_path(CODEX / "local_shell_call.jsonl", "codex")
    [call] = [
        c
        for e in imported.session.events()
        if isinstance(e, AssistantMessage)
        for c in tool_calls_of(e.message)
    ]
    assert call.name == "local_shell" and '"command":["bash","-lc","ls src/shop"]' in call.arguments


def test_custom_tool_call_keeps_its_free_form_input() -> None:
    [imported] = import_path(CODEX / "custom_tool_call.jsonl", "codex")
    [call] = [
        c
        for e in imported.session.events()
        if isinstance(e, AssistantMessage)
        for c in tool_calls_of(e.message)
    ]
    assert call.name == "apply_patch" and call.arguments.startswith(
        "*** Begin Patch\n*** Update File: src/shop/cart.py"
    )
    assert imported.tool_results == 1


@pytest.mark.parametrize("name", ["compacted", "compacted_message_only"])
def test_compacted_items_become_brackets_the_audit_passes(name: str, tmp_path: Path) -> None:
    [imported] = import_path(CODEX / f"{name}.jsonl", "codex")
    session = imported.session
    types = [type(e) for e in session.events()]
    assert imported.compactions == 1 and types.count(CompactStart) == types.count(CompactEnd) == 1
    [summary] = [e for e in session.events() if isinstance(e, CompactSummary)]
    assert summary.provider == "codex" and summary.model == "gpt-5-codex"
    assert summary.shadowed_token_count > summary.summary_token_count
    first = text_of(session.derive_messages()[0].content)
    assert first.count("test_discount_rounding fails with AssertionError") == 1, "the summary once"
    assert (TASK in first) == (name == "compacted"), "replacement_history keeps the task statement"
    assert text_of(session.derive_messages()[1].content) == "Go ahead and patch it, then run the tests."
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    code, done = run_json("--store", url, "import", str(CODEX / f"{name}.jsonl"), "--format", "codex")
    assert code == 0 and done["sessions"][0]["compactions"] == 1
    code, audit = run_json("--store", url, "audit", "--all")
    assert code == 0 and audit["passed"] is True
    [checked] = audit["sessions"][0]["compactions"]
    assert checked["outcome"] == "committed" and all(c["passed"] for c in checked["checks"])


def test_a_trimmed_rollout_without_timestamps_is_still_codex(tmp_path: Path) -> None:
    lines = (CODEX / "local_shell_call.jsonl").read_text().splitlines()
    trimmed = [json.dumps({k: v for k, v in json.loads(line).items() if k != "timestamp"}) for line in lines]
    path = tmp_path / "rollout-trimmed.jsonl"
    path.write_text("\n".join(trimmed) + "\n")
    assert detect_format(path) == "codex"
    [imported] = import_path(path, "auto")
    assert imported.tool_calls == imported.tool_results == 1
