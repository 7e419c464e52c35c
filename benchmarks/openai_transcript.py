"""A generated OpenAI-style chat transcript of any length: one tool call and a ~100-character
result per step, the shape of a long coding-agent session.

    write_transcript(path, messages=100_000)

The file is JSONL, one chat message per line (``compaction import --format openai`` reads it): a
system prompt, the user's task, then steps of an ``assistant`` message with one ``tool_calls``
entry and the ``tool`` message that answers it. Every tenth result is a failure, so the handover
has errors to carry; every step names its own file and command, so the checkpoint has tens of
thousands of identifiers to keep (the hardest case for the completion and the fidelity gate).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

TOOLS = ("bash", "read_file", "edit_file")


def chat_messages(messages: int) -> Iterator[dict[str, object]]:
    """``messages`` chat messages (at least 3; a step is never cut in half, so one fewer when the
    count would end on a call)."""
    yield {"role": "system", "content": "You are a coding agent. Use the tools to change the repository."}
    yield {"role": "user", "content": "Make the test suite pass on the service package."}
    for step in range((messages - 2) // 2):
        yield from _step(step)


def _step(step: int) -> Iterator[dict[str, object]]:
    tool = TOOLS[step % len(TOOLS)]
    path = f"src/service/module_{step}.py"
    arguments = {"command": f"pytest -q tests/test_module_{step}.py"} if tool == "bash" else {"path": path}
    call_id = f"call_{step:07d}"
    yield {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": tool, "arguments": json.dumps(arguments)},
            }
        ],
    }
    yield {"role": "tool", "tool_call_id": call_id, "content": _result(step, tool, path)}


def _result(step: int, tool: str, path: str) -> str:
    if step % 10 == 9:
        return (f"Traceback (most recent call last):\n  File \"{path}\", line {step % 300 + 1}\n"
                f"ValueError: step {step} expected 3 items")  # fmt: skip
    if tool == "bash":
        return f"{step % 50 + 1} passed, 0 failed in {step % 7}.{step % 100:02d}s; {step % 40}% of {path}"
    if tool == "read_file":
        return f"def handler_{step}(request):\n    return respond(request, {200 + step % 5})  # {path}"
    return f"Edited {path}: replaced handler_{step - 1} with handler_{step} (line {step % 300 + 1})"


def write_transcript(path: Path, messages: int) -> Path:
    """Write ``messages`` chat messages to ``path`` (JSONL) and return it."""
    with path.open("w", encoding="utf-8") as out:
        for message in chat_messages(messages):
            out.write(json.dumps(message))
            out.write("\n")
    return path
