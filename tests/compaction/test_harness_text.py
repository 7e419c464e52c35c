"""The user's words only: what the harness writes in the user's role (a skill's body, a slash
command's expansion, a meta message) is context in the checkpoint, never an ask nor the latest
request; a tool error wrapped in ``<tool_use_error>`` keeps its message."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from compaction.handover.facts import span_facts
from compaction.handover.harness_text import clean_user_text
from compaction.importers import import_path
from compaction.service import BasicCompactService
from compaction.sessions.blocks import text_of
from compaction.sessions.session import Session, project
from compaction.summarizers.template import render_summary
from compaction.vocabulary.events import CompactSummary

SKILL_BODY = (
    "Base directory for this skill: /home/USER/.claude/plugins/cache/elixir/skills/hex-docs-search\n\n"
    "# Hex docs search\n\nSearch the documentation of a Hex package before answering questions "
    "about its API. Use `mix hex.docs fetch PACKAGE` and read the module pages under doc/.\n\n"
    "## Steps\n1. Fetch the docs.\n2. Grep them for the function.\n3. Quote the signature.\n\n"
    "ARGUMENTS: opentelemetry_bandit setup"
)
ASK = "Add OpenTelemetry tracing to the Bandit endpoint; use the hex docs skill to find the setup."
FOLLOW_UP = "Also export the spans to the local collector on port 4318."
EDIT_ERROR = "<tool_use_error>String to replace not found in file.\nString: config :bandit</tool_use_error>"


def _cc(kind: str, uid: str, content: Any, **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": kind, "content": content}
    if kind == "assistant":
        message |= {"id": extra.pop("mid"), "model": "claude-test"}
    return {"type": kind, "uuid": uid, "sessionId": "s", "message": message, **extra}


def _tool(uid: str, mid: str, call_id: str, name: str, args: dict[str, Any], *, text: str = "") -> list[Any]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    blocks.append({"type": "tool_use", "id": call_id, "name": name, "input": args})
    return [_cc("assistant", uid, blocks, mid=mid)]


def _result(uid: str, call_id: str, content: str, *, error: bool = False) -> dict[str, Any]:
    block = {"type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": error}
    return _cc("user", uid, [block])


def skill_session(tmp_path: Path) -> Path:
    """A Claude Code session: an ask, the Skill tool, the skill's body as a meta user line, a
    slash command and its expansion, a failed Edit wrapped in ``<tool_use_error>``, a follow-up."""
    config = "/home/USER/projects/shop/config/runtime.exs"
    lines: list[Any] = [
        _cc("user", "u1", ASK),
        *_tool("a1", "m1", "t1", "Skill", {"skill": "hex-docs-search", "args": "opentelemetry_bandit setup"}),
        _result("r1", "t1", "Launching skill: hex-docs-search"),
        _cc("user", "u2", [{"type": "text", "text": SKILL_BODY}], isMeta=True),
        *_tool("a2", "m2", "t2", "Bash", {"command": "mix hex.docs fetch opentelemetry_bandit"},
               text="Let me fetch the docs."),
        _result("r2", "t2", "Docs fetched to doc/opentelemetry_bandit\n" + "module Bandit\n" * 30),
        *_tool("a3", "m3", "t3", "Edit", {"file_path": config, "old_string": "config :bandit",
                                          "new_string": "config :opentelemetry"}),
        _result("r3", "t3", EDIT_ERROR, error=True),
        *_tool("a4", "m4", "t4", "Read", {"file_path": config}),
        _result("r4", "t4", "\n".join(f"{n:>6}→config :shop, key: {n}" for n in range(1, 40))),
        _cc("user", "u3", "<command-message>review is running…</command-message>\n"
            "<command-name>/review</command-name>\n<command-args>config</command-args>"),
        _cc("user", "u4", [{"type": "text", "text": "Review the configuration changes of this branch for "
                            "mistakes: list each file, the risk, and a fix."}], isMeta=True),
        *_tool("a5", "m5", "t5", "Bash", {"command": "git diff --stat"}, text="Reviewing the diff."),
        _result("r5", "t5", " config/runtime.exs | 4 ++--\n 1 file changed"),
        _cc("user", "u5", FOLLOW_UP),
        *_tool("a6", "m6", "t6", "Bash", {"command": "mix test"}, text="Now I will run the tests."),
        _result("r6", "t6", "Finished in 0.4 seconds\n12 tests, 0 failures"),
    ]  # fmt: skip
    path = tmp_path / "skill.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def messages_of(session: Session) -> list[Any]:
    return [m for m in map(project, session.events()) if m]


def test_a_skills_body_is_context_not_an_ask_nor_the_latest_request(tmp_path: Path) -> None:
    (imported,) = import_path(skill_session(tmp_path))
    facts = span_facts(messages_of(imported.session))
    assert facts.user_asks == (ASK, FOLLOW_UP)
    assert "skill hex-docs-search loaded with: opentelemetry_bandit setup" in facts.context
    assert any(note.startswith("harness message: Review the configuration") for note in facts.context)
    assert "/review config" in facts.slash_commands
    text = render_summary(messages_of(imported.session))
    assert "Base directory for this skill" not in text and "Fetch the docs" not in text
    assert "skill hex-docs-search loaded with: opentelemetry_bandit setup" in text
    assert f"Latest user request: {FOLLOW_UP}" in text


def test_the_committed_checkpoint_keeps_the_skill_as_context_and_the_wrapped_error(tmp_path: Path) -> None:
    (imported,) = import_path(skill_session(tmp_path))
    session = imported.session
    result = asyncio.run(BasicCompactService().compact_now(session))
    assert result is not None
    summary = session.event(result.summary_seq)
    assert isinstance(summary, CompactSummary)
    text = text_of(summary.summary)
    assert "Base directory for this skill" not in text
    assert "User: Review the configuration" not in text
    assert "skill hex-docs-search loaded with: opentelemetry_bandit setup" in text
    assert "String to replace not found in file." in text
    (error,) = span_facts([m for m in (project(session.event(s)) for s in result.shadowed_seqs) if m]).errors
    assert error.tool == "Edit" and error.first_line == "String to replace not found in file."


def test_a_skill_body_typed_without_a_meta_flag_is_context_too() -> None:
    cleaned = clean_user_text(SKILL_BODY)
    assert cleaned.ask == ""
    assert cleaned.context == ("skill hex-docs-search loaded with: opentelemetry_bandit setup",)
    plain = clean_user_text("Base directory for this skill: /x/skills/pdf\n\nRead PDFs.")
    assert plain.context == ("skill pdf loaded",)
