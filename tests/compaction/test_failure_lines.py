"""Each failure's own message in the checkpoint (compaction.handover.outcomes.first_informative_line):
a harness's error wrapper says it on its first line; text echoed back (an Edit's ``String:``,
dialyzer's ``Pattern:``, ExUnit's ``left:``, data dumps) is never chosen over a sentence that says
what failed, and a failure line is never a bare token (``error``, ``:error``, ``[do: ...``). The
walk, the facts fold, the last steps and the template checkpoint all read the same line."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from compaction.handover.calls import describe, failed, result_text
from compaction.handover.facts import span_facts
from compaction.handover.outcomes import ECHO_LABEL_RE, WRAPPER_RE, bare, first_informative_line
from compaction.handover.readahead import ReadAhead
from compaction.importers import import_path
from compaction.service import BasicCompactService
from compaction.sessions.blocks import Message, Source, TextBlock, ToolCallBlock, ToolResultBlock, text_of
from compaction.sessions.events import AssistantMessage, StepEnd, StepStart, ToolCall, ToolResult
from compaction.sessions.session import Session, project
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.events import CompactSummary
from tests.builders import MODEL, end_turn, start_turn, user
from tests.compaction.test_facts_fold import check_every_cut
from tests.compaction.test_identifier_fold import transcript_id
from tests.conftest import PUBLIC_TRANSCRIPTS

EDIT_NOT_FOUND = (
    "<tool_use_error>String to replace not found in file.\n"
    "String:   defp do_setup do\n"
    "    case OpentelemetryExporter.setup() do\n"
    "      :ok -> :ok\n"
    '      :error -> Logger.warning("otel exporter: setup failed")\n'
    "    end\n"
    "  end</tool_use_error>"
)
DIALYZER = """Finding suitable PLTs
Checking PLT...
[:compiler, :elixir, :kernel, :logger, :stdlib]
PLT is up to date!
No :ignore_warnings opt specified in mix.exs and default does not exist.

Starting Dialyzer
[
  check_plt: false,
  init_plt: ~c"/repo/_build/dev/dialyxir_erlang-26.2_elixir-1.16.1_deps-dev.plt",
  warnings: [:unknown]
]
Total errors: 1, Skipped: 0, Unnecessary Skips: 0
done in 0m1.92s
lib/spotter/otel.ex:23:pattern_match
The pattern can never match the type.

Pattern:
:error

Type:
{:ok, pid()}

________________________________________________________________________________
done (warnings were emitted)
Halting VM with exit status 2"""
EXUNIT_ASSERTION = """Running ExUnit with seed: 482017, max_cases: 16

.....

  1) test the plug records a span per request (Spotter.OtelPlugTest)
     test/spotter/otel_plug_test.exs:18
     Assertion with == failed
     code:  assert Otel.Plug.call(conn, []) == conn
     left:  [do: %Plug.Conn{adapter: {Plug.Adapters.Test.Conn, :...}, assigns: %{error: :no_tracer}}]
     right: %Plug.Conn{adapter: {Plug.Adapters.Test.Conn, :...}, assigns: %{}, halted: false}
     stacktrace:
       test/spotter/otel_plug_test.exs:21: (test)

Finished in 0.08 seconds (0.03s async, 0.05s sync)
6 tests, 1 failure"""
EXUNIT_RAISED = """
  1) test call/2 sets the trace id (Spotter.OtelTest)
     test/spotter/otel_test.exs:14
     ** (FunctionClauseError) no function clause matching in Spotter.Otel.call/2

     The following arguments were given to Spotter.Otel.call/2:

         # 1
         [do: %Plug.Conn{adapter: {Plug.Adapters.Test.Conn, :...}, assigns: %{error: nil}}]

         # 2
         []

     code: Otel.call(conn, [])
     stacktrace:
       (spotter 0.1.0) lib/spotter/otel.ex:12: Spotter.Otel.call/2

Finished in 0.05 seconds (0.00s async, 0.05s sync)
3 tests, 1 failure"""

CASES = {  # (tool, arguments, output) -> the line a reader needs
    (
        "Edit",
        '{"file_path": "/repo/lib/spotter/otel.ex", "old_string": "defp do_setup do"}',
        EDIT_NOT_FOUND,
    ): ("String to replace not found in file."),
    ("Bash", '{"command": "mix dialyzer"}', DIALYZER): (
        "lib/spotter/otel.ex:23:pattern_match: The pattern can never match the type."
    ),
    ("Bash", '{"command": "mix test test/spotter/otel_plug_test.exs"}', EXUNIT_ASSERTION): (
        "Assertion with == failed"
    ),
    ("Bash", '{"command": "mix test test/spotter/otel_test.exs"}', EXUNIT_RAISED): (
        "** (FunctionClauseError) no function clause matching in Spotter.Otel.call/2"
    ),
}
WRONG = (":error", "error", "[do: %Plug.Conn{", "left:", "defp do_setup", ":error ->")


@pytest.mark.parametrize("case", list(CASES), ids=["edit", "dialyzer", "exunit-assertion", "exunit-raised"])
def test_the_line_a_reader_needs(case: tuple[str, str, str]) -> None:
    line = first_informative_line(case[2])
    assert line == CASES[case]
    assert not bare(line) and line not in echoed(case[2])


def failing_session() -> Session:
    """The task, then one step per case (each result flagged ``is_error``, as Claude Code flags
    them), then a last user message."""
    session = Session()
    user(session, "Wire OpenTelemetry into the Spotter plug and keep mix test and dialyzer green.")
    turn = start_turn(session)
    for number, (tool, arguments, output) in enumerate(CASES):
        step = session.structure.next_step
        session.append(StepStart(turn=turn, step=step))
        call = ToolCallBlock(f"toolu_{number}", tool, arguments)
        message = Message(f"a{number}", "assistant", (TextBlock("Trying it."), call), source=MODEL)
        session.append(AssistantMessage(turn=turn, step=step, message=message, surface_op="append"))
        made = session.append(
            ToolCall(turn=turn, step=step, call_id=call.id, name=tool, arguments=call.arguments)
        )
        block = ToolResultBlock(call.id, (TextBlock(output),), is_error=True)
        result = Message(f"r{number}", "user", (block,), source=Source(kind="tool", call_id=call.id))
        session.append(
            ToolResult(
                turn=turn,
                step=step,
                message=result,
                surface_op="append",
                source_event_seqs=(made.seq,),
            )
        )
        session.append(StepEnd(turn=turn, step=step))
    end_turn(session)
    user(session, "What is still failing?")
    return session


def test_the_checkpoint_the_fold_and_the_last_steps_name_each_failure_by_its_message() -> None:
    session = failing_session()
    ReadAhead().observe(session)
    check_every_cut(session, every=True)  # the fold reads the same line as the walk
    steps = [(m, b) for m in session_messages(session) for b in m.content]
    calls = {b.id: b for _, b in steps if isinstance(b, ToolCallBlock)}
    for _, block in steps:
        if isinstance(block, ToolResultBlock):
            call = calls[block.tool_call_id]
            wanted = CASES[(call.name, call.arguments, result_text(block))]
            assert describe(call, block, failed(block)).endswith(f"(failed: {wanted})")
    config = BasicConfig(min_identifier_ratio=0)
    result = asyncio.run(BasicCompactService(config).compact_now(session))
    assert result is not None
    summary = session.event(result.summary_seq)
    assert isinstance(summary, CompactSummary)
    checkpoint = text_of(summary.summary)
    for wanted in CASES.values():
        assert wanted in checkpoint, wanted
    for line in error_lines(checkpoint):
        assert not any(line.startswith(w) or f"-> {w}" in line for w in WRONG), line


def session_messages(session: Session) -> list[Message]:
    return [m for m in (project(session.event(s)) for s in session.nodes) if m is not None]


def error_lines(checkpoint: str) -> list[str]:
    """The checkpoint's lines under its errors section and its appendix's errors."""
    section = re.search(r"## Errors and Fixes\n(.*?)(?=\n## |\Z)", checkpoint, re.S)
    return [ln.strip() for ln in (section.group(1) if section else "").splitlines() if ln.strip()]


def echoed(text: str) -> set[str]:
    """The lines an output echoes back: after a wrapper's first line, and under an echo label up
    to the next blank line."""
    lines = [ln.strip() for ln in re.sub(r"</?tool_use_error>", "\n", text).splitlines()]
    found: set[str] = set()
    if WRAPPER_RE.match(text):
        found.update(ln for ln in lines[2:] if ln)
    echoing = False
    for line in lines:
        echoing = bool(line) and (echoing or ECHO_LABEL_RE.match(line) is not None)
        if echoing:
            found.add(line)
    return found


@pytest.mark.parametrize("path", PUBLIC_TRANSCRIPTS, ids=transcript_id)
def test_no_failure_line_of_a_public_transcript_is_echoed_input_or_a_bare_token(path: Path) -> None:
    for item in import_path(path):
        messages = session_messages(item.session)
        wrapped: list[str] = []
        for message in messages:
            for block in message.content:
                if not isinstance(block, ToolResultBlock) or not failed(block):
                    continue
                text = result_text(block)
                line = first_informative_line(text)
                assert not bare(line), (path.name, line)
                assert line not in echoed(text), (path.name, line)
                if WRAPPER_RE.match(text):
                    message_line = re.sub(r"</?tool_use_error>", "\n", text).strip().splitlines()[0]
                    assert line == message_line.strip(), (path.name, line)
                    wrapped.append(line)
        facts = span_facts(messages)
        assert all(not bare(e.first_line) for e in facts.errors), path.name
        assert set(wrapped) <= {e.first_line for e in facts.errors}, path.name


@pytest.mark.parametrize(
    "path", [p for p in PUBLIC_TRANSCRIPTS if "tool_use_error" in p.read_text()], ids=transcript_id
)
def test_each_tool_use_error_of_a_compacted_span_is_in_the_checkpoint_by_its_message(path: Path) -> None:
    checked = 0
    for item in import_path(path):
        session = item.session
        result = asyncio.run(BasicCompactService(BasicConfig(min_identifier_ratio=0)).compact_now(session))
        assert result is not None
        summary = session.event(result.summary_seq)
        assert isinstance(summary, CompactSummary)
        checkpoint = " ".join(text_of(summary.summary).split())
        shadowed = [m for m in (project(session.event(s)) for s in result.shadowed_seqs) if m]
        for block in (b for m in shadowed for b in m.content if isinstance(b, ToolResultBlock)):
            text = result_text(block)
            if failed(block) and WRAPPER_RE.match(text):
                message_line = re.sub(r"</?tool_use_error>", "\n", text).strip().splitlines()[0]
                assert message_line.strip() in checkpoint, (path.name, message_line)
                checked += 1
    assert checked, path.name
