"""A process running the session store and the user's ``Reactor`` in an eventsourcing ``System``:
it catches the reactor up, then writes COUNT sessions and compacts each (printing each compaction
id once committed), waits until the reactor has reacted to every committed compaction, and stops.

    python -m tests.sessions.system_child RUNNER COUNT ENV_JSON
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from eventsourcing.system import MultiThreadedRunner, SingleThreadedRunner, System

from compaction.service import BasicCompactService
from compaction.sessions.store import SessionApplication, SessionStore
from tests.builders import turn
from tests.sessions.system_apps import Reactor, reactions


def committed_ends(store: SessionStore) -> list[str]:
    ends = store.notifications(0, 100_000, topics=["compact/end"])
    return [n.event.compaction_id for n in ends if getattr(n.event, "error", None) is None]  # type: ignore[attr-defined]


def main(kind: str, count: int, env: dict[str, str]) -> None:
    runners: dict[str, Any] = {"single": SingleThreadedRunner, "multi": MultiThreadedRunner}
    runner = runners[kind](System([[SessionApplication, Reactor]]), env=env)
    runner.start()
    leader = runner.get(SessionApplication)
    store = SessionStore.of(leader)
    leader.prompt_followers()  # catch up with what was committed while no reactor ran
    service = BasicCompactService()
    for _ in range(count):
        session = store.create()
        for step in range(6):
            turn(session, f"task {step} " + "x" * 300, output="y" * 1500)
        store.save(session)
        result = asyncio.run(service.compact_now(session, store=store))
        assert result is not None
        print(result.compaction_id, flush=True)
    reactor = runner.get(Reactor)
    deadline = time.monotonic() + 60
    while sorted(reactions(reactor)) != sorted(committed_ends(store)):
        assert time.monotonic() < deadline, "the reactor did not catch up"
        time.sleep(0.05)
    runner.stop()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]))
