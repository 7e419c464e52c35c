"""The template checkpoint is handover-grade: on every public transcript it keeps the identifiers,
the user's messages, the errors and the open tasks of the span it replaces, at >= 10x compression
on spans over 20k tokens; and section by section it renders what an engineer resumes from."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from compaction.engine.meters import HeuristicMeter
from compaction.handover.facts import span_facts
from compaction.handover.fidelity import section_bodies
from compaction.handover.repeats import occurs
from compaction.handover.retention import Retention, retention
from compaction.importers import import_path
from compaction.service import BasicCompactService
from compaction.sessions.blocks import Message, Source, TextBlock, ToolCallBlock, ToolResultBlock, text_of
from compaction.sessions.session import Session, project
from compaction.summarizers.template import ASK_CHARS, render_summary
from compaction.vocabulary.checkpoint import checkpoint_message
from compaction.vocabulary.events import CompactSummary
from tests.compaction.spans import agent, step, user
from tests.conftest import PUBLIC_TRANSCRIPTS, TRANSCRIPTS

TARGETS = {"identifiers": 0.9, "user messages": 0.9, "errors": 0.8, "open tasks": 1.0}
LARGE_SPAN = 20_000
TODO_TOOLS = {"TodoWrite", "update_plan", "task_tracker", "TaskCreate", "TaskUpdate"}
SPOTTER = TRANSCRIPTS / "spotter" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"


def ratios(score: Retention) -> dict[str, float]:
    return {
        "identifiers": Retention.ratio(score.identifiers),
        "user messages": Retention.ratio(score.user_asks),
        "errors": Retention.ratio(score.errors),
        "open tasks": Retention.ratio(score.open_tasks),
    }


def misses(score: Retention) -> list[str]:
    return [f"{kind} {value:.0%}" for kind, value in ratios(score).items() if value < TARGETS[kind]]


def sessions(path: Path) -> Iterator[Session]:
    for item in import_path(path):
        yield item.session


def span_messages(session: Session, seqs: tuple[int, ...]) -> list[Message]:
    return [m for m in (project(session.event(s)) for s in seqs) if m]


# ---------------------------------------------------------------- the targets on real sessions


@pytest.mark.parametrize("path", PUBLIC_TRANSCRIPTS, ids=lambda p: p.name[:24])
def test_the_template_checkpoint_meets_every_target_on_the_public_transcripts(path: Path) -> None:
    """One manual compaction per imported session with the default gate (identifiers >= 0.9)."""
    for session in sessions(path):
        result = asyncio.run(BasicCompactService().compact_now(session))
        assert result is not None
        summary = session.event(result.summary_seq)
        assert isinstance(summary, CompactSummary)
        facts = span_facts(span_messages(session, result.shadowed_seqs))
        score = retention(text_of(summary.summary), facts)
        assert not misses(score), (path.name, score)
        if result.shadowed_token_count > LARGE_SPAN:
            compression = result.shadowed_token_count / result.summary_token_count
            assert compression >= 10, (path.name, compression)


LISTING = re.compile(r"^- (?:Command: )?`` ?(.+?) ?``$|^- (?:Command: )?`([^`]+)`$")
LISTS = ("- Identifiers: ", "- Error names seen: ")


def listed_for_their_own_sake(text: str) -> Iterator[tuple[str, str]]:
    """``(identifier, line)`` of every bullet that only lists identifiers: a named path, a command,
    the ids, the error names."""
    for line in text.splitlines():
        found = LISTING.match(line)
        if found:
            yield found.group(1) or found.group(2), line
        for lead in LISTS:
            if line.startswith(lead):
                yield from ((i.strip("`"), line) for i in line[len(lead) :].split(", "))


@pytest.mark.parametrize("path", PUBLIC_TRANSCRIPTS, ids=lambda p: p.name[:24])
def test_an_identifier_the_checkpoint_quotes_whole_is_not_listed_again(path: Path) -> None:
    """A path, command, id or error name is listed for its own sake only when nothing else in the
    checkpoint (a longer path, a failing call, a last step, another listed command) quotes it."""
    for session in sessions(path):
        messages = session.derive_messages()
        text = render_summary(messages)
        listed = list(listed_for_their_own_sake(text))
        for ident, line in listed:
            rest = text.replace(line, "", 1)
            others = [i for i, _ in listed if i != ident]
            assert not occurs(ident, rest) and not any(occurs(ident, o) for o in others), (path.name, ident)
        kept, total = retention(text, span_facts(messages)).identifiers
        assert total and kept == total, (path.name, kept, total)  # every one still in it, verbatim


def test_a_failed_last_step_points_to_errors_and_fixes_without_repeating_the_line() -> None:
    line = "FAILED tests/test_api.py::test_login - AssertionError: expected 200, got 401"
    span = [
        user("Make the login test pass"),
        *step("c1", "Bash", f"==== 1 failed ====\n{line}\nExit code 1", error=True, command="pytest -q"),
        agent("The login test still fails; let me look at the handler."),
    ]
    text = render_summary(span)
    body = sections(text)
    assert body["Errors and Fixes"].splitlines()[0] == f"- Bash `pytest -q`: {line} (unfixed)"
    assert "Bash `pytest -q` (failed)" in body["Current Work"]  # a last step, the line said once
    assert text.count(line) == 1
    assert "Command: `pytest -q`" not in text  # the failing call already names it


def test_on_the_span_claude_code_compacted_the_template_keeps_what_claude_codes_summary_keeps() -> None:
    (session,) = sessions(SPOTTER)
    (event,) = [e for e in session.events() if isinstance(e, CompactSummary) and e.provider == "claude-code"]
    messages = span_messages(session, event.shadowed_seqs)
    facts = span_facts(messages)
    ours = render_summary(messages)
    theirs = text_of(event.summary)
    assert "check again" in facts.user_asks  # a message typed while the agent worked (queue-operation)
    ours_score, theirs_score = retention(ours, facts), retention(theirs, facts)
    assert not misses(ours_score), ours_score
    assert Retention.ratio(ours_score.user_asks) >= Retention.ratio(theirs_score.user_asks)
    meter = HeuristicMeter()
    span_tokens = sum(meter.node_price(session, s) for s in event.shadowed_seqs)
    ours_tokens = meter.messages([checkpoint_message("t", (TextBlock(ours),))])
    assert span_tokens > LARGE_SPAN and span_tokens / ours_tokens >= 10
    assert ours_tokens < (event.summary_token_count or 0)  # smaller than Claude Code's own


def test_every_span_ending_at_an_unfinished_todo_list_keeps_its_open_tasks() -> None:
    checked = 0
    for path in PUBLIC_TRANSCRIPTS:
        for session in sessions(path):
            messages = session.derive_messages()
            todo = {
                c.id
                for m in messages
                for c in m.content
                if isinstance(c, ToolCallBlock) and c.name in TODO_TOOLS
            }
            for index, message in enumerate(messages):
                block = next((b for b in message.content if isinstance(b, ToolResultBlock)), None)
                if block is None or block.tool_call_id not in todo:
                    continue
                span = messages[1 : index + 1]
                facts = span_facts(span)
                if facts.open_tasks:
                    checked += 1
                    score = retention(render_summary(span), facts)
                    assert score.open_tasks == (len(facts.open_tasks), len(facts.open_tasks)), score
    assert checked >= 5  # the danieldemmel.me session's TodoWrite lists


# ---------------------------------------------------------------- the sections, on hand-made spans


def sections(text: str) -> dict[str, str]:
    return section_bodies(text)


def work_span() -> list[Message]:
    todos = [
        {"content": "add the lazy_html dependency", "status": "completed"},
        {"content": "write the close-session test", "status": "in_progress"},
        {"content": "commit and push", "status": "pending"},
    ]
    return [
        user("<command-name>/clear</command-name>\n<command-message>clear</command-message>"),
        user("Implement the project review page"),
        *step("c1", "Read", "1 defmodule", file_path="/p/lib/review_live.ex"),
        *step(
            "c2", "Bash", "Exit code 2\n** (RuntimeError) requires lazy_html", error=True, command="mix test"
        ),
        *step("c3", "Edit", "The file /p/mix.exs has been updated.", file_path="/p/mix.exs", old_string="x"),
        *step(
            "c4",
            "Write",
            "File created successfully at: /p/test/review_test.exs",
            file_path="/p/test/review_test.exs",
            content="assert File.exists?('/usr/bin/env')",
        ),
        *step("c5", "Bash", "5 tests, 0 failures", command="mix test"),
        user("[Request interrupted by user for tool use]"),
        user("new beads for the epic were added. tackle them"),
        *step("t1", "TodoWrite", "Todos have been modified successfully.", todos=todos),
        agent("The dependency is in. Now I'll write the close-session test in test/review_test.exs."),
    ]


def test_primary_request_lists_every_ask_and_keeps_slash_commands_and_interruptions_apart() -> None:
    body = sections(render_summary(work_span()))["Primary Request and Intent"]
    assert body.splitlines()[:2] == [
        "- Original request: Implement the project review page",
        "- User: new beads for the epic were added. tackle them",
    ]
    assert "- Slash commands run: `/clear`" in body
    assert "interrupted or rejected 1 agent action" in body
    assert "<command-name>" not in body and "[Request interrupted" not in body


def test_a_long_ask_keeps_its_head_and_tail_with_the_elision_marked() -> None:
    long_ask = "START " + "lorem ipsum " * 400 + " END"
    body = sections(render_summary([user(long_ask), *step("c1", "Bash", "ok", command="ls")]))
    line = body["Primary Request and Intent"].splitlines()[0]
    assert line.startswith("- Original request: START lorem ipsum") and line.endswith("ipsum END")
    assert "characters elided…]" in line and len(line) < ASK_CHARS + 80


def test_errors_name_the_command_the_first_line_and_the_fix() -> None:
    body = sections(render_summary(work_span()))["Errors and Fixes"]
    assert body.splitlines()[0] == ("- Bash `mix test`: ** (RuntimeError) requires lazy_html (fixed later)")


def test_pending_jobs_current_work_and_next_step_come_from_the_agents_own_state() -> None:
    text = sections(render_summary(work_span()))
    assert text["Pending Jobs"].splitlines() == [
        "- [ ] write the close-session test (in progress)",
        "- [ ] commit and push",
    ]
    assert "- Task in progress: write the close-session test" in text["Current Work"]
    assert "- Latest user request: new beads for the epic were added. tackle them" in text["Current Work"]
    assert text["Next Step"] == (
        "- As the agent last stated: Now I'll write the close-session test in test/review_test.exs."
    )


def test_a_span_ending_with_an_unanswered_ask_says_to_answer_it() -> None:
    span = [*work_span(), user("did you push?")]
    assert sections(render_summary(span))["Next Step"] == "- Answer the user's latest message: did you push?"


def test_files_are_split_by_what_the_tools_did() -> None:
    body = sections(render_summary(work_span()))["Files and Code"]
    lines = body.splitlines()
    assert "- Edited `/p/mix.exs`" in lines
    assert "- Created `/p/test/review_test.exs`" in lines
    assert "- Read `/p/lib/review_live.ex`" in lines
    assert "Edited `/usr/bin/env`" not in body  # a path inside written content is not an edit


def test_a_prior_checkpoint_is_merged_not_copied() -> None:
    first = render_summary(work_span())
    prior = checkpoint_message("c-1", (TextBlock(first),))
    later = [
        prior,
        user("now add the docs"),
        *step("t2", "TodoWrite", "ok", todos=[{"content": "write docs/review.md", "status": "in_progress"}]),
        agent("Let me draft docs/review.md next."),
    ]
    merged = sections(render_summary(later))
    assert "Original request: Implement the project review page" in merged["Primary Request and Intent"]
    assert "- User: now add the docs" in merged["Primary Request and Intent"]
    assert merged["Pending Jobs"] == "- [ ] write docs/review.md (in progress)"  # the old list is superseded
    assert merged["Next Step"] == "- As the agent last stated: Let me draft docs/review.md next."
    assert "Bash `mix test`: ** (RuntimeError) requires lazy_html" in merged["Errors and Fixes"]
    assert "Tools used: Bash x2, TodoWrite x2, Read x1, Edit x1, Write x1" in merged["Key Technical Concepts"]
    assert render_summary(later).count("## Primary Request and Intent") == 1


def test_the_checkpoint_fits_max_tokens_and_still_names_every_ask() -> None:
    """A chunk summary must fit the summarizer's output budget: asks shrink to head and tail."""
    notes = [
        user(f"step {i}: read src/app/module_{i}.py, " + "found nothing unusual; " * 40) for i in range(12)
    ]
    full = render_summary(notes)
    text = render_summary(notes, max_tokens=450)
    assert len(full) > 1800 >= len(text)
    facts = span_facts(notes)
    assert retention(text, facts).user_asks == (12, 12)


def test_another_harness_checkpoint_in_the_span_is_merged() -> None:
    """Claude Code's summary, imported as a checkpoint (unframed, from the compact plugin): its
    numbered sections' items join ours, and the span's own ask is not taken for the original."""
    claude = (
        "Summary:\n1. Primary Request and Intent:\n   The user asked for the review page.\n\n"
        "3. Files and Code Sections:\n   - **`lib/review_live.ex`** — New LiveView\n\n"
        '6. All user messages:\n   - "Implement spotter-gqc"\n   - "check again"\n\n'
        "7. Pending Tasks:\n   - **spotter-gqc.7** (open): launch the review conversation\n"
    )
    imported = Message(
        id="cc-summary",
        role="user",
        content=(TextBlock(claude),),
        source=Source(kind="plugin", plugin="compact", compaction_id="cc-1"),
    )
    span = [imported, user("did you push?"), *step("c1", "Bash", "Everything up-to-date", command="git push")]
    text = sections(render_summary(span))
    request = text["Primary Request and Intent"].splitlines()
    assert request == ['- "Implement spotter-gqc"', '- "check again"', "- User: did you push?"]
    assert "- **`lib/review_live.ex`** — New LiveView" in text["Files and Code"]
    assert "- **spotter-gqc.7** (open): launch the review conversation" in text["Pending Jobs"]
