"""A user's applications beside the session store in an eventsourcing ``System``: a
``ProcessApplication`` that reacts to every committed ``compact/end`` by recording a ``Reaction``
aggregate (with its tracking, in one transaction), and a plain application of the user's own
aggregates. Used by ``tests/sessions/test_system.py`` and its child process."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from eventsourcing.application import Application, ProcessingEvent
from eventsourcing.domain import Aggregate, event
from eventsourcing.system import NotificationLogReader, ProcessApplication

from compaction.sessions.mapper import EventEnvelope
from compaction.vocabulary.events import CompactEnd


class Reaction(Aggregate):
    @event("Reacted")
    def __init__(self, session_id: str, compaction_id: str) -> None:
        self.session_id = session_id
        self.compaction_id = compaction_id


class Reactor(ProcessApplication[Any]):
    """Records one ``Reaction`` per committed compaction. With ``$REACTOR_MARKERS`` it leaves a
    file per reaction it starts, and from the third on sleeps ``$REACTOR_SLOW`` seconds (a window
    to kill it in, after the compaction committed and before its reaction does)."""

    topics = ("compact/end",)

    def policy(self, domain_event: Any, processing_event: ProcessingEvent[Any]) -> None:
        if not isinstance(domain_event, EventEnvelope):
            return
        end = domain_event.event
        if isinstance(end, CompactEnd) and end.error is None:
            markers = os.environ.get("REACTOR_MARKERS")
            if markers:
                (Path(markers) / f"reacting-{end.compaction_id}").touch()
                if len(list(Path(markers).iterdir())) >= 3:
                    time.sleep(float(os.environ.get("REACTOR_SLOW", "0")))
            processing_event.collect_events(Reaction(str(domain_event.originator_id), end.compaction_id))


def reactions(reactor: Application[Any]) -> list[str]:
    """The compaction id of every reaction the reactor recorded, in order."""
    found: list[str] = []
    for notification in NotificationLogReader(reactor.notification_log).read(start=1):
        reacted = reactor.mapper.to_domain_event(notification)
        found.append(reacted.compaction_id)
    return found


class Account(Aggregate):
    """The user's own aggregate, stored in the same database as the sessions."""

    @event("Opened")
    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.credits = 0

    @event("Credited")
    def credit(self, amount: int) -> None:
        self.credits += amount


class Accounts(Application[Any]):
    pass
