"""A transient store error during an adapter's run is retried; the run's events are stored once.

PostgreSQL: once a tool of the run has run, the adapter's next save first ends the database's
connections (``pg_terminate_backend``, what a restart or a failover does to them), so the save
meets a dead connection (a real one: the store reads just before it saves, on a live one). It fails;
the memory retries it once, in its worker thread, on the same session object, after checking
whether the events were stored after all; the run completes and the store holds every event of
the conversation exactly once.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from tests.integrations.support import audit_passes, require_framework
from tests.reliability.test_lock_faults import terminate_backends

require_framework("agents", "openai-agents")
require_framework("langchain.agents", "langchain")

from agents import Agent, function_tool  # noqa: E402
from langchain.agents import create_agent  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

from compaction.integrations.langchain import CompactionMiddleware  # noqa: E402
from compaction.integrations.openai_agents import CompactingSession  # noqa: E402
from compaction.sessions.session import Session  # noqa: E402
from compaction.sessions.store import SessionStore  # noqa: E402
from tests.integrations import test_agents_runs as agents_runs  # noqa: E402
from tests.integrations import test_langchain_runs as langchain_runs  # noqa: E402


def restarting_before_the_next_save(store: SessionStore, url: str, ended: list[int]) -> list[bool]:
    """Make ``store``'s next save after ``armed[0]`` is set end every connection first."""
    armed = [False]
    save = store.save

    def save_after_a_restart(session: Session) -> int:
        if armed[0]:
            armed[0] = False
            ended.append(terminate_backends(url))
        return save(session)

    store.save = save_after_a_restart  # type: ignore[method-assign]
    return armed


def stored_once(url: str, session: Session) -> Counter[str]:
    """The conversation as stored: seqs 0..n-1 without a gap or a double; its event counts."""
    with SessionStore.open(url) as store:
        rows = store.read_rows(session.id)
        loaded = store.get(session.id, use_snapshots=False)
    assert [r.seq for r in rows] == list(range(len(rows))) == list(range(len(loaded)))
    return Counter(event.type for event in loaded.events())


async def test_an_agents_sdk_run_rides_out_dropped_connections(pg_url: str) -> None:
    ended: list[int] = []

    store = SessionStore.open(pg_url)
    armed = restarting_before_the_next_save(store, pg_url, ended)

    @function_tool
    def read_file(path: str) -> str:
        """Read a file (the database restarts before the next save)."""
        armed[0] = True
        return f"{path}: total += price * qty"

    session = CompactingSession("fixer", store=store, context_window=100_000)
    for k in range(2):
        model = agents_runs.LongRunModel(reads=1)
        agent = Agent(name="fixer", instructions="You fix bugs.", model=model, tools=[read_file])
        result = await session.run(agent, f"task {k}: fix the cart")
        assert str(result.final_output) == f"done with task {k}: fix the cart"
    assert len(ended) == 2 and all(n >= 1 for n in ended), f"no connection ended before a save: {ended}"
    logged = await session.memory.load("fixer")
    store.close()
    counts = stored_once(pg_url, logged)
    assert counts["user/message"] == 2 and counts["tool/call"] == 2 and counts["tool/result"] == 2
    assert counts["turn/end"] == 2
    audit_passes(pg_url)


async def test_a_langchain_run_rides_out_dropped_connections(pg_url: str) -> None:
    ended: list[int] = []

    store = SessionStore.open(pg_url)
    armed = restarting_before_the_next_save(store, pg_url, ended)

    @tool
    def read_file(path: str) -> str:
        """Read a file (the database restarts before the next save)."""
        armed[0] = True
        return f"{path}: total += price * qty"

    middleware = CompactionMiddleware(store=store, context_window=100_000)
    model = langchain_runs.ReadingModel(messages=iter(()), sent=[])
    agent = create_agent(model, tools=[read_file], middleware=[middleware], checkpointer=InMemorySaver())
    thread: Any = {"configurable": {"thread_id": "support-1"}}
    for k in range(2):
        asked = {"role": "user", "content": f"task {k}: fix the cart"}
        state = await agent.ainvoke({"messages": [asked]}, thread)
        assert str(state["messages"][-1].content).startswith("answer")
    assert len(ended) == 2 and all(n >= 1 for n in ended), f"no connection ended before a save: {ended}"
    logged = await middleware.memory.load("support-1")
    store.close()
    counts = stored_once(pg_url, logged)
    assert counts["user/message"] == 2 and counts["tool/call"] == 2 and counts["tool/result"] == 2
    assert counts["turn/end"] == 2
    audit_passes(pg_url)
