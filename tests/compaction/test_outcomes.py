"""Failures read from what the tools printed (compaction.handover.outcomes): an OpenAI-style log, the
shape every framework adapter writes, carries no error flag; the checkpoint still keeps each failure
with its message, and no failed or unknown step is reported ok."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compaction.handover.facts import span_facts
from compaction.handover.outcomes import (
    BUILD_FAILURE_RE,
    DIAGNOSTIC_RE,
    FAILURE_RE,
    first_informative_line,
    may_name_a_failure,
    output_failed,
    output_succeeded,
)
from compaction.importers import import_path
from compaction.service import BasicCompactService
from compaction.sessions.blocks import text_of
from compaction.sessions.session import Session, project
from compaction.vocabulary.events import CompactSummary

PYTEST_RUN = (
    "============================= test session starts ==============================\n"
    "platform linux -- Python 3.11.9, pytest-8.2.0\ncollected 4 items\n\n"
    "tests/test_api.py .F..                                                   [100%]\n\n"
    "=================================== FAILURES ===================================\n"
    "__________________________________ test_login __________________________________\n\n"
    "    def test_login(client):\n        response = client.post('/login', json=CREDENTIALS)\n"
    ">       assert response.status_code == 200, f'expected 200, got {response.status_code}'\n"
    "E       AssertionError: expected 200, got 401\n\n"
    "tests/test_api.py:18: AssertionError\n"
    "=========================== short test summary info ============================\n"
    "FAILED tests/test_api.py::test_login - AssertionError: expected 200, got 401\n"
    "========================= 1 failed, 3 passed in 0.41s =========================="
)
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
    '  File "/repo/src/app/worker.py", line 3, in <module>\n'
    "    import redis\n"
    "ModuleNotFoundError: No module named 'redis'"
)
MAKE_RUN = (
    "gcc -O2 -Wall -Werror -c src/hash.c -o build/hash.o\n"
    "src/hash.c: In function 'digest':\n"
    "src/hash.c:14:12: error: implicit declaration of function 'fast_hash' "
    "[-Werror=implicit-function-declaration]\n"
    "   14 |     return fast_hash(buf, len);\n"
    "      |            ^~~~~~~~~\n"
    "cc1: all warnings being treated as errors\n"
    "make: *** [Makefile:12: build] Error 1"
)
ESLINT_RUN = (
    "\n/repo/src/static/app.js\n"
    "  12:7  error  'token' is assigned a value but never used  no-unused-vars\n\n"
    "✖ 1 problem (1 error, 0 warnings)\n"
)
MYPY_RUN = (
    'src/app/api.py:31: error: Incompatible return value type (got "int", expected "str")  '
    "[return-value]\nFound 1 error in 1 file (checked 12 source files)"
)
FAILURES = {
    "pytest tests/test_api.py": (
        "FAILED tests/test_api.py::test_login - AssertionError: expected 200, got 401"
    ),
    "python -m app.worker": "ModuleNotFoundError: No module named 'redis'",
    "make build": "src/hash.c:14:12: error: implicit declaration of function 'fast_hash'",
    "npx eslint src/static": "12:7 error 'token' is assigned a value but never used no-unused-vars",
    "mypy src": 'src/app/api.py:31: error: Incompatible return value type (got "int", expected "str")',
}


def openai_log(tmp_path: Path) -> Path:
    """A chat-completions log: one bash tool whose results are plain text (no error flag)."""
    steps = [
        ("pytest tests/test_api.py", PYTEST_RUN),
        ("python -m app.worker", TRACEBACK),
        ("pip install redis", "Collecting redis\nInstalling collected packages: redis\n"
         "Successfully installed redis-5.0.4"),
        ("python -m app.worker", "worker started successfully; listening on queue 'jobs'"),
        ("make build", MAKE_RUN),
        ("npx eslint src/static", ESLINT_RUN),
        ("mypy src", MYPY_RUN),
        ("git status --short", " M src/app/api.py\n M src/static/app.js"),
    ]  # fmt: skip
    messages: list[dict[str, object]] = [
        {"role": "system", "content": "You are a coding agent. Use the bash tool."},
        {"role": "user", "content": "Get the API tests, the worker, the C build and the linters green."},
    ]
    for index, (command, output) in enumerate(steps):
        call_id = f"call_{index}"
        messages.append({
            "role": "assistant",
            "content": f"Running `{command}` to check where things stand.",
            "tool_calls": [{
                "id": call_id, "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": command})},
            }],
        })  # fmt: skip
        messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
    messages.append({"role": "user", "content": "What is still failing?"})
    path = tmp_path / "agent.json"
    path.write_text(json.dumps(messages))
    return path


def spans_checkpoint(session: Session) -> tuple[str, list[str]]:
    result = asyncio.run(BasicCompactService().compact_now(session))
    assert result is not None
    summary = session.event(result.summary_seq)
    assert isinstance(summary, CompactSummary)
    messages = [m for m in (project(session.event(s)) for s in result.shadowed_seqs) if m]
    return text_of(summary.summary), [e.first_line for e in span_facts(messages).errors]


def test_every_failure_printed_by_a_tool_is_in_the_checkpoint_with_its_message(tmp_path: Path) -> None:
    (imported,) = import_path(openai_log(tmp_path))
    checkpoint, lines = spans_checkpoint(imported.session)
    flat = " ".join(checkpoint.split())
    for command, message in FAILURES.items():
        assert message in flat, (command, message)
        assert command in flat
    assert len(lines) == len(FAILURES)
    assert all(any(line.startswith(message) for line in lines) for message in FAILURES.values())
    # the worker's failure was fixed by the same call later succeeding; the others were not
    worker = next(line for line in flat.split("- ") if "No module named 'redis'" in line)
    assert "fixed" in worker and "unfixed" not in worker
    mypy = next(line for line in flat.split("- ") if "Incompatible return value type" in line)
    assert "unfixed" in mypy


def test_no_failed_or_unknown_step_is_reported_ok(tmp_path: Path) -> None:
    (imported,) = import_path(openai_log(tmp_path))
    checkpoint, _ = spans_checkpoint(imported.session)
    for command in ("npx eslint src/static", "mypy src", "make build", "git status --short"):
        assert f"`{command}` (ok)" not in checkpoint
    assert "`git status --short`" in checkpoint  # said, its outcome left unsaid
    messages = [m for m in map(project, imported.session.events()) if m]
    *_, eslint, mypy, status = span_facts(messages).last_steps
    assert eslint.startswith("bash `npx eslint src/static` (failed: 12:7 error 'token'")
    assert mypy.startswith("bash `mypy src` (failed: src/app/api.py:31: error: Incompatible")
    assert status == "bash `git status --short`"


@pytest.mark.parametrize(
    ("output", "line"),
    [
        (PYTEST_RUN, "FAILED tests/test_api.py::test_login - AssertionError: expected 200, got 401"),
        (TRACEBACK, "ModuleNotFoundError: No module named 'redis'"),
        (MAKE_RUN, "src/hash.c:14:12: error: implicit declaration of function 'fast_hash'"),
        (ESLINT_RUN, "12:7 error 'token' is assigned a value but never used no-unused-vars"),
        (MYPY_RUN, "src/app/api.py:31: error: Incompatible return value type"),
        ("FAIL src/auth.test.ts\n  ● login › rejects a bad token\n\nTests: 1 failed, 7 passed, 8 total",
         "FAIL src/auth.test.ts"),
        ("--- FAIL: TestParse (0.00s)\n    parse_test.go:21: got 3, want 4\nFAIL\texample.com/p\t0.004s",
         "--- FAIL: TestParse (0.00s)"),
        ("running 2 tests\ntest tests::adds ... FAILED\n\ntest result: FAILED. 1 passed; 1 failed",
         "test tests::adds ... FAILED"),
        ("  1) test greets (HelloTest)\n     Assertion with == failed\n\n3 tests, 1 failure",
         "Assertion with == failed"),
        ("src/index.ts(4,7): error TS2322: Type 'number' is not assignable to type 'string'.",
         "src/index.ts(4,7): error TS2322: Type 'number' is not assignable to type 'string'."),
        ("app.py:3:1: F401 [*] `os` imported but unused\nFound 1 error.", "Found 1 error."),
        ("┃ [F] ↗ Pipe chain should start with a raw value.\n┃       lib/app.ex:12:5 #(App.run)",
         "[F] ↗ Pipe chain should start with a raw value."),
        ("npm ERR! code ELIFECYCLE\nnpm ERR! errno 1\nnpm ERR! app@1.0.0 build: `tsc`",
         "npm ERR! code ELIFECYCLE"),
        ("Exit code: 2\nls: cannot access 'missing': No such file or directory",
         "ls: cannot access 'missing': No such file or directory"),
    ],
)  # fmt: skip
def test_each_format_is_read_as_a_failure_with_its_informative_line(output: str, line: str) -> None:
    assert output_failed(output)
    assert line in first_informative_line(output)


@pytest.mark.parametrize(
    "output",
    [
        "============ 4 passed in 0.20s ============",
        "Tests:       8 passed, 8 total",
        "test result: ok. 2 passed; 0 failed",
        "ok  \texample.com/p\t0.004s",
        "All checks passed!",
        "Success: no issues found in 12 source files",
        "Exit code: 0\nbuilt in 2.1s",
    ],
)
def test_a_passing_run_says_it_succeeded(output: str) -> None:
    assert not output_failed(output)
    assert output_succeeded(output)


def test_silence_and_a_file_view_are_neither_failure_nor_success() -> None:
    view = "\n".join(f"{n:>6}→    raise RuntimeError('error: never')" for n in range(1, 8))
    assert not output_failed(view)
    assert not output_failed(" M src/app/api.py")
    assert not output_succeeded(" M src/app/api.py")


_PIECES = (
    "FAILED tests/a.py::t - E",
    "src/a.c:12:3: error: x",
    "error[E0308]: y",
    "a.ts(1,2): error TS2322: z",
    "12:7  error  msg  rule",
    "--- FAIL: TestX",
    "[F] ↗ msg",
    "= 1 failed in 2s =",
    "FAIL src/x",
    "Tests: 1 failed",
    "test result: FAILED",
    "3 tests, 1 failure",
    "✖ 2 problems",
    "Found 3 errors",
    "[Command failed with exit code 1]",
    "Error: no",
    "ERROR: no",
    "fatal: no",
    "npm ERR! x",
    "make: *** [all] Error 2",
    "ok",
    "all good",
    "Fail",
    "err",
    "\n",
    " ",
    "12",
    ":",
    "x",
)


@given(st.lists(st.sampled_from(_PIECES), max_size=12).map("".join))
def test_the_fast_test_never_hides_a_failure_line(text: str) -> None:
    """``may_name_a_failure`` is only a shortcut: whatever the patterns find, it lets through."""
    if any(p.search(text) for p in (DIAGNOSTIC_RE, FAILURE_RE, BUILD_FAILURE_RE)):
        assert may_name_a_failure(text)
