"""The handover facts of a span (compaction.handover.facts): user asks apart from harness wrappers, errors
with their first informative line and fix, the agent's todo state, files by tool input, intent, and
what a summary misses."""

from __future__ import annotations

from compaction.handover.facts import span_facts
from compaction.handover.failures import HARNESS_TOOL, ErrorFact
from compaction.handover.harness_text import clean_user_text
from compaction.handover.outcomes import first_informative_line
from compaction.handover.retention import missing_from, retention
from compaction.importers import import_path
from compaction.sessions.blocks import (
    text_of,
)
from compaction.sessions.interrupted import NOT_STARTED_TEXT
from tests.compaction.spans import agent, step, user
from tests.conftest import TRANSCRIPTS

OPENHANDS = TRANSCRIPTS / "openhands" / "multi_swe_bench" / "output.jsonl"
REJECTED_ARGUMENT = (
    "Parameter 'command' is expected to be one of ['view', 'create', 'str_replace', 'insert', 'undo_edit']."
)

# ---------------------------------------------------------------- user asks


def test_harness_wrappers_and_interruptions_are_not_user_asks() -> None:
    slash = (
        "<command-message>review is running…</command-message>\n<command-name>/review</command-name>\n"
        "<command-args>the auth module</command-args>"
    )
    messages = [
        user(slash),
        user("<local-command-stdout>\x1b[2mCompacted\x1b[22m</local-command-stdout>"),
        user("[Request interrupted by user for tool use]"),
        user(
            "<task-notification>\n<task-id>b0be39e</task-id>\n<status>completed</status>\n"
            "</task-notification>\nRead the output file to retrieve the result: /tmp/x.output"
        ),
        user("<system-reminder>The user opened foo.py</system-reminder>please fix \x1b[31mthe bug\x1b[0m"),
        user("/mode"),
        user("/var/folders/49/x/Screenshot.png what is wrong here?"),
    ]
    facts = span_facts(messages)
    assert facts.user_asks == ("please fix the bug", "/var/folders/49/x/Screenshot.png what is wrong here?")
    assert facts.slash_commands == ("/review the auth module", "/mode")
    assert facts.interruptions == 1


def test_clean_user_text_keeps_what_the_user_typed_around_a_wrapper() -> None:
    cleaned = clean_user_text(
        "<ide_opened_file>The user opened the file a.py in the IDE.</ide_opened_file>"
        "Why does this fail?\n[Request interrupted by user]"
    )
    assert cleaned.ask == "Why does this fail?" and cleaned.interrupted


def test_tool_results_are_not_user_asks_but_a_rejection_with_feedback_is() -> None:
    rejected = (
        "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it was a "
        "file edit, the new_string was NOT written to the file). To tell you how to proceed, the user "
        "said:\nuse the staging database instead"
    )
    messages = [
        user("migrate the schema"),
        *step("c1", "Bash", "ok: 3 tables", command="ls"),
        *step("c2", "Bash", rejected, error=True, command="psql prod"),
    ]
    facts = span_facts(messages)
    assert facts.user_asks == ("migrate the schema", "use the staging database instead")
    assert facts.errors == () and facts.interruptions == 1


def test_in_a_text_harness_the_answer_to_a_fenced_command_is_an_observation() -> None:
    messages = [
        user("Please solve this issue: the script crashes"),
        agent("Let me look.\n\n```bash\ncat app.py\n```"),
        user("<returncode>1</returncode>\n<output>\ncat: app.py: No such file or directory\n</output>"),
        agent("Try the other path.\n\n```bash\ncat src/app.py\n```"),
        user("<returncode>0</returncode>\n<output>\nprint(1)\n</output>"),
    ]
    facts = span_facts(messages)
    assert facts.user_asks == ("Please solve this issue: the script crashes",)
    assert facts.errors == (
        ErrorFact("shell", "cat app.py", "cat: app.py: No such file or directory", False),
    )


def test_openhands_error_observations_are_errors_not_user_asks() -> None:
    """OpenHands reports a rejected tool argument as an error observation no call answers; the
    importer makes it a user-role context message. On the public runs it is not an ask: each run's
    only ask is its task statement, and the feedback is an error the next call fixed."""
    runs = [item.session.derive_messages() for item in import_path(OPENHANDS)]
    with_feedback = 0
    for messages in runs:
        facts = span_facts(messages)
        task = clean_user_text(text_of(messages[0].content)).ask
        assert facts.user_asks == (task,)
        texts = [text_of(m.content) for m in messages if m.role == "user" and m.source.kind == "user"]
        if REJECTED_ARGUMENT in texts:
            with_feedback += 1
            feedback = [e for e in facts.errors if e.tool == HARNESS_TOOL]
            assert feedback == [ErrorFact(HARNESS_TOOL, "", REJECTED_ARGUMENT, fixed=True)]
    assert with_feedback == 2  # runs 2 and 3


def test_harness_feedback_is_told_apart_by_its_shape_while_the_agent_works() -> None:
    messages = [
        user("port the parser"),
        *step("c1", "str_replace_editor", "ok", command="view", path="/w/p.py"),
        user(REJECTED_ARGUMENT),
        *step("c2", "str_replace_editor", "ERROR: no such file /w/q.py", command="view", path="/w/q.py"),
        user('Missing required argument "command" in tool call str_replace_editor'),
        agent("Which parser do you mean?"),
        user("Parameter 'mode' is expected to be one of the documented values, I think: use strict"),
        *step("c3", "Bash", "done", command="make"),
        user("also run the linter"),  # the user's own words, typed while the agent works
    ]
    facts = span_facts(messages)
    assert facts.user_asks == (
        "port the parser",
        "Parameter 'mode' is expected to be one of the documented values, I think: use strict",
        "also run the linter",
    )
    assert [(e.tool, e.first_line, e.fixed) for e in facts.errors] == [
        (HARNESS_TOOL, REJECTED_ARGUMENT, False),  # the next call failed
        ("str_replace_editor", "ERROR: no such file /w/q.py", False),
        (HARNESS_TOOL, 'Missing required argument "command" in tool call str_replace_editor', True),
    ]


# ---------------------------------------------------------------- errors


def test_an_error_keeps_its_command_its_first_informative_line_and_its_later_fix() -> None:
    output = (
        "Exit code 2\nCompiling 41 files (.ex)\nGenerated spotter app\n\n  1) test mount (ReviewLiveTest)\n"
        "     ** (RuntimeError) Phoenix LiveView requires lazy_html as a test dependency.\n"
    )
    messages = [
        user("add the review page"),
        *step("c1", "Bash", output, error=True, command="mix test test/review_test.exs"),
        *step("c2", "Edit", "The file /p/mix.exs has been updated.", file_path="/p/mix.exs", old_string="a"),
        *step("c3", "Bash", "5 tests, 0 failures", command="mix test test/review_test.exs"),
        *step("c4", "Bash", "Exit code 128\nfatal: no upstream branch", error=True, command="git push"),
    ]
    facts = span_facts(messages)
    lazy, push = facts.errors
    assert lazy == ErrorFact(
        "Bash",
        "mix test test/review_test.exs",
        "** (RuntimeError) Phoenix LiveView requires lazy_html as a test dependency.",
        fixed=True,
    )
    assert push == ErrorFact("Bash", "git push", "fatal: no upstream branch", fixed=False)


def test_a_later_read_of_the_same_file_does_not_fix_a_failed_edit() -> None:
    messages = [
        *step(
            "c1",
            "Edit",
            "<tool_use_error>String to replace not found in file.</tool_use_error>",
            error=True,
            file_path="/p/a.py",
            old_string="x",
        ),
        *step("c2", "Read", "1 x = 1", file_path="/p/a.py"),
    ]
    (error,) = span_facts(messages).errors
    assert error.first_line == "String to replace not found in file." and not error.fixed


def test_synthesized_results_of_interrupted_calls_are_not_errors() -> None:
    messages = step("c1", "Bash", NOT_STARTED_TEXT, error=True, command="make")
    assert span_facts(messages).errors == ()


def test_first_informative_line() -> None:
    traceback = (
        "Traceback (most recent call last):\n"
        '  File "<string>", line 5, in <module>\n'
        "ImportError: cannot import x"
    )
    assert first_informative_line(traceback) == "ImportError: cannot import x"
    pytest_run = (
        "===== test session starts =====\nplatform linux\ncollected 2 items\n\n"
        "t.py::test_exception_handling PASSED [ 50%]\n===== 205 deselected in 0.58s ====="
    )
    assert first_informative_line(pytest_run) == "205 deselected in 0.58s"
    assert first_informative_line("Command exited with code 1") == "Command exited with code 1"
    assert (
        first_informative_line("ERROR:\nParameter `old_str` is required.")
        == "Parameter `old_str` is required."
    )


# ---------------------------------------------------------------- todo / plan state


def test_open_tasks_are_the_unfinished_items_of_the_latest_todo_list() -> None:
    first = [
        {"content": "read the code", "status": "in_progress"},
        {"content": "fix it", "status": "pending"},
    ]
    latest = [
        {"content": "read the code", "status": "completed"},
        {"content": "fix it", "status": "in_progress"},
        {"content": "write a test", "status": "pending"},
    ]
    messages = [
        *step("t1", "TodoWrite", "Todos have been modified successfully.", todos=first),
        *step("t2", "TodoWrite", "Todos have been modified successfully.", todos=latest),
    ]
    facts = span_facts(messages)
    assert facts.open_tasks == ("fix it", "write a test") and facts.active_task == "fix it"


def test_codex_plans_and_task_tools_count_too() -> None:
    plan = [
        {"step": "port the parser", "status": "completed"},
        {"step": "run the suite", "status": "pending"},
    ]
    codex = step("p1", "update_plan", "Plan updated", plan=plan, explanation="x")
    assert span_facts(codex).open_tasks == ("run the suite",)
    tasks = [
        *step("k1", "TaskCreate", "Task #1 created successfully: add the flag", subject="add the flag"),
        *step("k2", "TaskCreate", "Task #2 created successfully: document it", subject="document it"),
        *step("k3", "TaskUpdate", "Updated task #1 status", taskId="1", status="completed"),
    ]
    assert span_facts(tasks).open_tasks == ("document it",)


# ---------------------------------------------------------------- files


def test_files_come_from_tool_inputs_and_tool_reports_only() -> None:
    fixture = "path = '/usr/bin/env'\nOTHER = 'src/not_touched.py'\n"
    messages = [
        *step("f1", "Read", "1 import os", file_path="/p/src/app.py"),
        *step(
            "f2",
            "Edit",
            "The file /p/src/app.py has been updated.",
            file_path="/p/src/app.py",
            old_string="a",
        ),
        *step(
            "f3",
            "Write",
            "File created successfully at: /p/tests/test_app.py",
            file_path="/p/tests/test_app.py",
            content=fixture,
        ),
        *step(
            "f4", "Write", "The file /p/README.md has been updated.", file_path="/p/README.md", content="# x"
        ),
        *step("f5", "Read", "1 [tool]", file_path="/p/pyproject.toml"),
        *step(
            "f6",
            "Edit",
            "<tool_use_error>File has not been read yet.</tool_use_error>",
            error=True,
            file_path="/p/setup.cfg",
            old_string="a",
        ),
        *step(
            "f7",
            "str_replace_editor",
            "File created successfully at: /w/new.c",
            command="create",
            path="/w/new.c",
        ),
        *step(
            "f8",
            "str_replace_editor",
            "Here's the result of running `cat -n`",
            command="view",
            path="/w/old.c",
        ),
        *step("f9", "Bash", "/usr/bin/env python3", command="which python3"),
    ]
    facts = span_facts(messages)
    assert facts.files_edited == ("/p/src/app.py", "/p/README.md")
    assert facts.files_created == ("/p/tests/test_app.py", "/w/new.c")
    assert facts.files_read == ("/p/pyproject.toml", "/w/old.c")


# ---------------------------------------------------------------- intent


def test_intent_is_the_agents_latest_statement_of_what_it_does_next() -> None:
    messages = [
        user("make the build green"),
        agent("The build fails on the linker. Let me check the Makefile first."),
        *step("c1", "Read", "all: link", file_path="Makefile"),
        agent("The flag is missing. Next, I will add -lm to LDFLAGS and rerun make."),
    ]
    assert span_facts(messages).intent == "Next, I will add -lm to LDFLAGS and rerun make."
    asked = [*messages, user("also update the docs")]
    facts = span_facts(asked)
    assert facts.intent is None and facts.ends_with_ask  # the statement predates the newest ask


# ---------------------------------------------------------------- what a summary lacks


def test_missing_from_and_retention_use_the_tolerant_match() -> None:
    messages = [
        user("Please   rename the\nconfig loader and keep the old name as an alias"),
        user("check again"),
        *step("c1", "Bash", "Exit code 1\nfatal: not a git repository", error=True, command="git status"),
        *step("t1", "TodoWrite", "ok", todos=[{"content": "add the alias", "status": "pending"}]),
    ]
    facts = span_facts(messages)
    summary = "- please rename the config loader and keep the old name as an alias\n- `git status`\n"
    missing = missing_from(summary, facts)
    assert missing.user_asks == ("check again",)
    assert [e.first_line for e in missing.errors] == ["fatal: not a git repository"]
    assert missing.open_tasks == ("add the alias",)
    assert missing.identifiers == ()
    score = retention(summary, facts)
    assert score.user_asks == (1, 2) and score.errors == (0, 1) and score.open_tasks == (0, 1)
    complete = summary + "check again; fatal: not a git repository; [ ] add the alias"
    assert not missing_from(complete, facts)
