"""LangChain after a tool call that never returned: the model request is the log's surface, every
call answered. A process killed (SIGKILL) inside a tool, then a new process on the same thread; and
a tool that raises in-process, then the next run of the same agent. Both times the log answers
the call (``The tool call was interrupted``) and the model must be sent that answer too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import ROOT
from tests.integrations.support import require_framework

require_framework("langchain.agents", "langchain")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

from compaction.integrations.langchain import CompactionMiddleware  # noqa: E402
from tests.integrations.test_langchain_runs import ReadingModel  # noqa: E402

THREAD = {"configurable": {"thread_id": "crash-1"}}


def unanswered(messages: list[BaseMessage]) -> list[str]:
    """The tool calls of ``messages`` that no ToolMessage answers before the next model or user
    message (what a provider rejects)."""
    missing: list[str] = []
    open_calls: list[str] = []
    for message in messages:
        if isinstance(message, ToolMessage):
            if message.tool_call_id in open_calls:
                open_calls.remove(message.tool_call_id)
            continue
        missing.extend(open_calls)
        open_calls = [c["id"] for c in message.tool_calls] if isinstance(message, AIMessage) else []
    return missing + open_calls


CHILD = """
import pathlib, sys, time
from langchain.agents import create_agent
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from compaction.integrations.langchain import CompactionMiddleware
from tests.integrations.test_langchain_interrupted import THREAD
from tests.integrations.test_langchain_runs import ReadingModel

url, marker = sys.argv[1], pathlib.Path(sys.argv[2])

@tool
def read_file(path: str) -> str:
    "Read a file (hangs: the parent kills this process here)."
    marker.write_text("in the tool")
    time.sleep(120)
    return "never"

agent = create_agent(
    ReadingModel(messages=iter(()), sent=[]), tools=[read_file],
    middleware=[CompactionMiddleware(url, context_window=100_000)], checkpointer=InMemorySaver(),
)
agent.invoke({"messages": [{"role": "user", "content": "task 1: read the file"}]}, THREAD)
"""


def test_a_process_killed_inside_a_tool_leaves_a_request_with_every_call_answered(
    url: str, tmp_path: Path
) -> None:
    marker, errors = tmp_path / "in-tool", tmp_path / "child.err"
    with errors.open("wb") as stderr:
        child = subprocess.Popen([sys.executable, "-c", CHILD, url, str(marker)], cwd=ROOT, stderr=stderr)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert child.poll() is None, errors.read_text()
            assert time.monotonic() < deadline, "the child never reached its tool"
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL

    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        return f"{path}: 80 lines"

    model = ReadingModel(messages=iter(()), sent=[], call_prefix="call_restarted")
    middleware = CompactionMiddleware(url, context_window=100_000)
    agent = create_agent(model, tools=[read_file], middleware=[middleware], checkpointer=InMemorySaver())
    try:
        state = agent.invoke({"messages": [{"role": "user", "content": "task 2: go on"}]}, THREAD)
    finally:
        middleware.close()
    assert model.sent and all(unanswered(request) == [] for request in model.sent), [
        unanswered(r) for r in model.sent
    ]
    interrupted = [m for m in model.sent[0] if isinstance(m, ToolMessage) and m.tool_call_id == "call_1"]
    assert len(interrupted) == 1 and "interrupted" in str(interrupted[0].content)
    assert unanswered(state["messages"]) == []


async def test_a_tool_that_raised_is_answered_in_the_next_request(url: str) -> None:
    calls: list[str] = []

    @tool
    def read_file(path: str) -> str:
        """Read a file (the first read fails)."""
        calls.append(path)
        if len(calls) == 1:
            raise RuntimeError("the disk is gone (the test)")
        return f"{path}: 80 lines"

    model = ReadingModel(messages=iter(()), sent=[])
    middleware = CompactionMiddleware(url, context_window=100_000)
    agent = create_agent(model, tools=[read_file], middleware=[middleware], checkpointer=InMemorySaver())
    try:
        try:
            await agent.ainvoke({"messages": [{"role": "user", "content": "task 1: read"}]}, THREAD)
        except RuntimeError as e:
            assert "the disk is gone" in str(e)
        state = await agent.ainvoke({"messages": [{"role": "user", "content": "task 2: read again"}]}, THREAD)
    finally:
        middleware.close()
    assert all(unanswered(request) == [] for request in model.sent), [unanswered(r) for r in model.sent]
    assert unanswered(state["messages"]) == []
    assert str(state["messages"][-1].content).startswith("answer")
