"""Meter prices are cached by seq; forgetting events (rollback, adopting a fresher load) must not let a
reused seq keep the price of the event it used to hold."""

from __future__ import annotations

from compaction.meters import HeuristicMeter
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from tests.builders import user


def test_rollback_resets_cached_prices() -> None:
    session = Session()
    user(session, "task")
    meter = HeuristicMeter()
    mark = session.mark()
    seq = user(session, "a long message " * 200)
    expensive = meter.surface_tokens(session)
    session.rollback(mark)
    assert user(session, "short") == seq  # the same seq now holds a different event
    assert meter.node_price(session, seq) == meter.event(session.event(seq))
    assert meter.surface_tokens(session) < expensive


def test_adopting_a_fresher_load_resets_cached_prices() -> None:
    store = SessionStore.open("memory://")
    mine = store.create()
    user(mine, "task")
    store.save(mine)
    theirs = store.get(mine.id)
    meter = HeuristicMeter()
    local_seq = user(mine, "my unsaved long message " * 100)
    meter.surface_tokens(mine)
    user(theirs, "their short message")
    store.save(theirs)
    mine.adopt(store.get(mine.id))
    assert meter.node_price(mine, local_seq) == meter.event(mine.event(local_seq))
    assert meter.surface_tokens(mine) == sum(meter.event(mine.event(s)) for s in mine.nodes)
