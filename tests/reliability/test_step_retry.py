"""A transient store error during an agent step is retried once; the step's events are stored once.

PostgreSQL: a tool of the step ends the loop's database connections (``pg_terminate_backend``, what
a restart or a failover does to them) before the step's save. The save fails, the loop retries it
once a second later on a fresh connection, and the turn ends normally; the store holds every event
of the session exactly once. The helper itself (:mod:`compaction.sessions.retry`) is checked on the
case that makes doubling possible: a failed save whose events did land.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import Counter

import pytest

from compaction.errors import SaveError
from compaction.sessions.hashing import surface_hash
from compaction.sessions.loop import AgentLoop, ToolOutput
from compaction.sessions.retry import save_retrying
from compaction.sessions.store import SessionStore
from compaction.testing import ScriptedModel, reply, tool_call
from tests.builders import turn
from tests.reliability.test_lock_faults import terminate_backends


async def test_a_step_whose_save_loses_its_connection_is_saved_once(pg_url: str) -> None:
    ended: list[int] = []

    async def restart(arguments: str) -> ToolOutput:
        ended.append(terminate_backends(pg_url))
        return ToolOutput("the database restarted")

    with SessionStore.open(pg_url) as store:
        session = store.create()
        model = ScriptedModel(
            [
                reply("restarting", tool_call("restart", {}, "c1"), message_id="a1"),
                reply("done", message_id="a2"),
            ]
        )
        loop = AgentLoop(
            session, model, {"restart": restart}, store=store, provider="scripted",
            model_name="scripted-1", save_retry_delay=0.2,
        )  # fmt: skip
        outcome = await loop.run_turn("restart the database, then finish")
        loaded = store.get(session.id)
        rows = store.read_rows(session.id)
    assert ended and ended[0] >= 1, "the tool ended no connection"
    assert outcome.reason.kind == "completed" and outcome.steps == 2
    assert session.pending == []
    assert len(rows) == len(session) and [r.seq for r in rows] == list(range(len(session)))
    assert surface_hash(loaded) == surface_hash(session)
    counts = Counter(event.type for event in loaded.events())
    assert counts["step/end"] == 2 and counts["tool/result"] == 1 and counts["turn/end"] == 1


def test_a_failed_save_whose_events_landed_is_not_saved_again(sqlite_url: str) -> None:
    """The first attempt fails (a trigger refuses the insert) and, while the helper waits, the
    same events land at their seqs through another handle, as a commit whose answer was lost
    would have stored them: the retry marks them saved and writes nothing again."""
    database = sqlite_url.removeprefix("sqlite:///")
    with SessionStore.open(sqlite_url) as store, SessionStore.open(sqlite_url) as other:
        session = store.create()
        turn(session)
        store.save(session)
        turn(session, "second task")
        pending = session.pending
        with sqlite3.connect(database) as connection:
            connection.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON stored_events "
                "BEGIN SELECT RAISE(ABORT, 'connection lost (the test)'); END"
            )

        def land() -> None:
            with sqlite3.connect(database) as connection:
                connection.execute("DROP TRIGGER refuse")
            other.append_events(session.id, pending)

        lander = threading.Timer(0.1, land)
        lander.start()
        try:
            saved = save_retrying(store, session, delay=1.0)
        finally:
            lander.join()
        rows = store.read_rows(session.id)
    assert saved == len(pending) and session.pending == []
    assert [r.seq for r in rows] == list(range(len(session)))


def test_a_save_refused_twice_raises_the_save_error(sqlite_url: str) -> None:
    database = sqlite_url.removeprefix("sqlite:///")
    with SessionStore.open(sqlite_url) as store:
        session = store.create()
        turn(session)
        with sqlite3.connect(database) as connection:
            connection.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON stored_events "
                "BEGIN SELECT RAISE(ABORT, 'disk full (the test)'); END"
            )
        with pytest.raises(SaveError, match="none of them were stored") as raised:
            save_retrying(store, session, delay=0.01)
        length = store.stream_length(session.id)
    assert raised.value.stored is False and length == 0 and session.pending
