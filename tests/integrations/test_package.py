"""The integrations package itself: the base install never loads a framework, a missing framework
is a clear error naming its extra, only the adapters may import the frameworks, and the shared
memory continues a stored session where its log ends."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from compaction.errors import IntegrationError
from compaction.integrations.memory import AssistantItem, CompactingMemory, ResultItem, UserItem
from compaction.sessions.blocks import Message, Source, TextBlock, ToolCallBlock
from compaction.sessions.events import ToolCall, ToolResult
from tests import test_layers
from tests.builders import run_python
from tests.conftest import ROOT

FRAMEWORKS = ("agents", "pydantic_ai", "langchain", "langchain_core", "langgraph")


def test_importing_the_package_loads_no_framework() -> None:
    loaded = run_python(
        f"""
        import sys
        import compaction, compaction.integrations, compaction.integrations.memory
        print(sorted(m for m in sys.modules if m.split(".")[0] in {FRAMEWORKS!r}))
        """
    )
    assert loaded.strip() == "[]"


@pytest.mark.parametrize(
    ("blocked", "code", "extra"),
    [
        ("agents", "from compaction.integrations.openai_agents import CompactingSession\n"
                   "CompactingSession('k', 'memory://')", "openai-agents"),
        ("pydantic_ai", "from compaction.integrations.pydantic_ai import CompactingHistory\n"
                        "CompactingHistory('memory://')", "pydantic-ai"),
        ("langchain", "import compaction.integrations.langchain", "langchain"),
    ],
)  # fmt: skip
def test_a_missing_framework_names_its_extra(blocked: str, code: str, extra: str) -> None:
    body = "".join(f"    {line}\n" for line in code.splitlines())
    out = run_python(
        "import sys\n"
        f"sys.modules[{blocked!r}] = None  # as if it were not installed\n"
        "from compaction.errors import FrameworkMissingError\n"
        f"try:\n{body}except FrameworkMissingError as e:\n    print(e)\n"
    )
    assert f"pip install 'event-compaction[{extra}]'" in out


def test_only_the_adapters_may_import_a_framework(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "compaction" / "sessions" / "bad.py"
    good = tmp_path / "compaction" / "integrations" / "good.py"
    for path in (bad, good):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("import langchain_core.messages\nfrom pydantic_ai import Agent\nimport agents\n")
    monkeypatch.setattr(test_layers, "ROOT", tmp_path)
    assert len(test_layers.violations(bad)) == 3
    assert test_layers.violations(good) == []


# ---------------------------------------------------------------- the shared memory


def call_message(call_id: str) -> Message:
    source = Source(kind="model", provider="test", model="m")
    return Message(id="a1", role="assistant", content=(ToolCallBlock(call_id, "read", "{}"),), source=source)


def test_a_result_recorded_later_answers_the_stored_pending_call(durable_store_url: str) -> None:
    """Across two memories (two processes would do the same), on SQLite and PostgreSQL."""
    url = durable_store_url
    first = CompactingMemory(url, context_window=10_000)
    task = Message(id="u1", role="user", content=(TextBlock("fix it"),))
    first.record_sync("k", [UserItem(task), AssistantItem(call_message("c1"))], origin="first")
    first.close()
    second = CompactingMemory(url, context_window=10_000)  # a new process would start like this
    second.record_sync("k", [ResultItem("c1", (TextBlock("ok"),), "r1")], origin="second")
    session = second.load_sync("k")
    [call] = [e for e in session.events() if isinstance(e, ToolCall)]
    [result] = [e for e in session.events() if isinstance(e, ToolResult)]
    assert not result.synthesized and result.source_event_seqs == (call.seq,)
    assert session.open_step is None, "the answered step is closed"


def test_a_result_for_no_pending_call_is_refused(tmp_path: Path) -> None:
    memory = CompactingMemory("memory://", context_window=10_000)
    memory.record_sync("k", [UserItem(Message(id="u1", role="user", content=(TextBlock("hi"),)))], origin="o")
    with pytest.raises(IntegrationError, match="expected it to answer a pending call"):
        memory.record_sync("k", [ResultItem("nope", (TextBlock("x"),), "r1")], origin="late")


def test_pop_on_an_empty_session_returns_none() -> None:
    assert CompactingMemory("memory://", context_window=10_000).pop_sync("nobody") is None


def test_a_uuid_key_is_its_own_first_generation() -> None:
    memory = CompactingMemory("memory://", context_window=10_000)
    key = "6b1f2c1e-9d1a-4c3e-8f47-0d6e1c2a9b30"
    memory.record_sync(key, [UserItem(Message(id="u1", role="user", content=(TextBlock("hi"),)))], origin="o")
    assert str(memory.session_id(key)) == key
    memory.clear_sync(key)
    assert str(memory.session_id(key)) != key


def test_url_and_store_together_are_refused() -> None:
    from compaction.sessions.store import SessionStore

    with SessionStore.open("memory://") as store, pytest.raises(IntegrationError, match="found both"):
        CompactingMemory("memory://", store=store)


def test_a_final_answer_ends_the_turn_a_tool_call_keeps_it_open() -> None:
    memory = CompactingMemory("memory://", context_window=10_000)
    source = Source(kind="model", provider="test", model="m")
    answer = Message(id="a2", role="assistant", content=(TextBlock("done"),), source=source)
    memory.record_sync("k", [UserItem(Message(id="u1", role="user", content=(TextBlock("hi"),)))], origin="o")
    memory.record_sync("k", [AssistantItem(call_message("c1"))], origin="call")
    assert memory.load_sync("k").open_turn == 1 and memory.load_sync("k").open_step == 1
    memory.record_sync("k", [ResultItem("c1", (TextBlock("ok"),), "r1"), AssistantItem(answer)], origin="end")
    session = memory.load_sync("k")
    assert session.open_turn is None and session.type_counts["turn/end"] == 1


def test_without_a_window_or_a_service_the_memory_is_refused() -> None:
    with pytest.raises(IntegrationError, match="expected context_window="):
        CompactingMemory("memory://")


@pytest.mark.parametrize(("ci", "outcome"), [("true", "1 error"), ("", "1 skipped")])
def test_a_missing_framework_fails_under_ci_skips_elsewhere(ci: str, outcome: str, tmp_path: Path) -> None:
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        "from tests.integrations.support import require_framework\n"
        "require_framework('compaction_no_such_framework', 'no-such-extra')\n"
        "def test_never_runs():\n    raise AssertionError('ran without its framework')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CI"} | ({"CI": ci} if ci else {})
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(ROOT / "pyproject.toml"),
         str(probe)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert outcome in done.stdout, done.stdout
    assert (done.returncode in (0, 5)) == (ci != "true"), "5: every test of the file skipped"
