"""Gemini CLI chat checkpoints (tests/data/transcripts/gemini-cli, written by hand from the
documented format): detected by ``auto``, calls paired with their responses by id or else by name,
the unanswered call given a synthesized result, every event with its origin."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from compaction.importers import detect_format, import_path
from compaction.sessions import render
from compaction.sessions.blocks import ReasoningBlock, TextBlock, ToolResultBlock, text_of
from compaction.sessions.events import AssistantMessage, ContextMessage, ToolResult, UserMessage
from tests.conftest import TRANSCRIPTS

CHECKPOINT = TRANSCRIPTS / "gemini-cli" / "checkpoint-discount-fix.json"


def count_parts(path: Path) -> tuple[int, int]:
    """Calls and responses, counted from the raw file: an independent count."""
    parts = [part for content in json.loads(path.read_text()) for part in content["parts"]]
    return sum("functionCall" in p for p in parts), sum("functionResponse" in p for p in parts)


def results_by_call(path: Path) -> dict[str, ToolResult]:
    [imported] = import_path(path)
    return {
        e.message.content[0].tool_call_id: e
        for e in imported.session.events()
        if isinstance(e, ToolResult) and isinstance(e.message.content[0], ToolResultBlock)
    }


def block_of(result: ToolResult) -> ToolResultBlock:
    block = result.message.content[0]
    assert isinstance(block, ToolResultBlock)
    return block


def result_text(result: ToolResult) -> str:
    return "".join(part.text for part in block_of(result).content if isinstance(part, TextBlock))


def test_auto_detects_the_checkpoint_and_pairs_every_call() -> None:
    assert detect_format(CHECKPOINT) == "gemini"
    [imported] = import_path(CHECKPOINT, "auto")
    assert imported.format == "gemini"
    calls, responses = count_parts(CHECKPOINT)
    assert (imported.tool_calls, imported.tool_results, imported.synthesized_results) == (calls, responses, 1)
    session = imported.session
    assert session.surface.is_balanced() and render.pairing_problems(session.derive_messages()) == []
    assert [e.seq for e in session.events() if not e.origin] == []
    assert imported.skipped == []


def test_responses_answer_their_call_by_id_else_by_name() -> None:
    results = results_by_call(CHECKPOINT)
    # answered in the other order, paired by id
    assert "def total" in result_text(results["read_file-1764851000002-b2"])
    assert "def test_discount" in result_text(results["read_file-1764851000001-a1"])
    # no ids in the file: the call gets its origin's id, the response pairs by name
    assert "1 failed" in result_text(results["content[5]-call-0"])
    assert "1 passed" in result_text(results["content[11]-call-0"])
    assert block_of(results["replace-1764851000003-c3"]).is_error
    assert results["run_shell_command-1764851000005-e5"].synthesized


def test_thoughts_prompts_and_the_setup_context() -> None:
    [imported] = import_path(CHECKPOINT)
    events = list(imported.session.events())
    [setup] = [e for e in events if isinstance(e, ContextMessage)]
    assert text_of(setup.message.content).startswith("This is the Gemini CLI")
    prompts = [e.origin for e in events if isinstance(e, UserMessage)]
    assert prompts == ["content[2]", "content[14]"]
    first_call = next(e for e in events if isinstance(e, AssistantMessage) and e.origin == "content[3]")
    assert isinstance(first_call.message.content[0], ReasoningBlock)
    assert first_call.message.source.provider == "google"


def _write(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value))
    return path


def test_the_wrapped_checkpoint_imports_the_same_session(tmp_path: Path) -> None:
    """Newer versions write ``{"history": [...], "authType": ...}``."""
    history = json.loads(CHECKPOINT.read_text())
    wrapped = _write(tmp_path / "checkpoint-wrapped.json", {"history": history, "authType": "oauth-personal"})
    assert detect_format(wrapped) == "gemini"
    [plain] = import_path(CHECKPOINT)
    [again] = import_path(wrapped)
    assert again.session.derive_messages() == plain.session.derive_messages()


def test_gemini_and_openai_do_not_claim_each_other(tmp_path: Path) -> None:
    gemini = _write(tmp_path / "g.json", [{"role": "user", "parts": [{"text": "hi"}]}])
    openai = _write(tmp_path / "o.json", [{"role": "user", "content": "hi"}])
    assert (detect_format(gemini), detect_format(openai)) == ("gemini", "openai")
