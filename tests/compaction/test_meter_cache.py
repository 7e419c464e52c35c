"""Meter prices are cached by seq; forgetting events (rollback, adopting a fresher load) must not let a
reused seq keep the price of the event it used to hold."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from compaction.engine.meters import HeuristicMeter
from compaction.sessions.events import Replace, SessionEvent
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from tests.builders import end_turn, start_turn, tool_step, turn, user, user_event
from tests.sessions.test_properties import PROPERTY_SETTINGS, valid_sessions


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


# ---------------------------------------------------------------- prices that travel with the session


def _long_session() -> Session:
    session = Session()
    turn(session, "Fix the failing tests in src/app/main.py", steps=30, n_calls=2)
    return session


class CountingMeter(HeuristicMeter):
    """Counts the nodes it prices (a subclass: it neither adopts nor publishes prices)."""

    def __init__(self) -> None:
        super().__init__()
        self.priced = 0

    def event_prices(self, events: list[SessionEvent]) -> list[int]:
        self.priced += len(events)
        return super().event_prices(events)


def _priced(meter: HeuristicMeter, session: Session) -> int:
    """Nodes ``meter`` prices while measuring ``session`` (counted on its batch pricer)."""
    counted: list[int] = []
    real = meter.event_prices

    def counting(events: list[SessionEvent]) -> list[int]:
        counted.append(len(events))
        return real(events)

    meter.event_prices = counting  # type: ignore[method-assign]
    meter.measure(session)
    return sum(counted)


def test_a_snapshot_carries_the_node_prices_and_a_fresh_meter_prices_nothing() -> None:
    """The first pressure check of a process that loaded a session from its snapshot
    sums the prices the snapshot carries; the figures are the ones pricing every node gives."""
    with SessionStore.open("memory://", snapshot_interval=1) as store:
        session = _long_session()
        before = HeuristicMeter().measure(session)  # a pressure check priced it before the save
        store.save(session)
        restored = store.get(session.id)
        assert "heuristic" in restored.price_columns
        meter = HeuristicMeter()
        assert _priced(meter, restored) == 0
        assert meter.measure(restored) == before
        assert meter.price_column(restored) == [meter.event(session.event(s)) for s in session.nodes]
        assert CountingMeter().measure(restored) == before  # priced from the events: the same


def test_restored_prices_stay_right_through_appends_and_a_replacement() -> None:
    with SessionStore.open("memory://", snapshot_interval=1) as store:
        session = _long_session()
        HeuristicMeter().measure(session)
        store.save(session)
        restored = store.get(session.id)
        meter = HeuristicMeter()
        meter.measure(restored)
        start_turn(restored)
        tool_step(restored, n_calls=1)
        end_turn(restored)
        nodes = list(restored.nodes)
        replacement = user_event(
            "summary of the early steps", op=Replace(nodes[1], nodes[20]), sources=tuple(nodes[1:21])
        )
        restored.append(replacement)
        assert _priced(meter, restored) == 3  # the new step (call, result) and the replacement only
        assert meter.measure(restored) == CountingMeter().measure(restored)
        assert meter.price_column(restored) == [meter.event(restored.event(s)) for s in restored.nodes]


def test_a_meter_of_another_kind_or_a_subclass_does_not_take_published_prices() -> None:
    session = _long_session()
    HeuristicMeter().measure(session)
    assert set(session.price_columns) == {"heuristic"}
    assert _priced(HeuristicMeter(3.5), session) == len(session.nodes)  # another price per token
    counting = CountingMeter()
    counting.measure(session)
    assert counting.priced == len(session.nodes)  # may price its own way: shares nothing
    assert set(session.price_columns) == {"heuristic", "heuristic:3.5"}


def test_a_rollback_forgets_the_published_prices() -> None:
    session = _long_session()
    mark = session.mark()
    user(session, "a message that will be rolled back " * 50)
    HeuristicMeter().measure(session)
    session.rollback(mark)
    assert session.price_columns == {}
    user(session, "short")
    assert HeuristicMeter().measure(session) == CountingMeter().measure(session)


def test_a_snapshot_from_before_prices_were_stored_still_loads() -> None:
    import msgspec

    from compaction.sessions.session import SessionSnapshot

    session = _long_session()
    old = msgspec.structs.asdict(session.snapshot())
    del old["prices"]
    decoded = msgspec.msgpack.decode(msgspec.msgpack.encode(old), type=SessionSnapshot)
    assert decoded.prices == {}
    restored = Session.from_snapshot(session.id, decoded, lambda lo, hi: list(session.events())[lo:hi])
    assert restored.price_columns == {}
    assert (
        HeuristicMeter().measure(restored).surface_tokens == HeuristicMeter().measure(session).surface_tokens
    )


@PROPERTY_SETTINGS
@given(session=valid_sessions(), data=st.data())
def test_any_restored_session_measures_as_pricing_every_node_does(
    session: Session, data: st.DataObject
) -> None:
    """Property: whatever the log (appends, steps, replacements), wherever it was saved and
    snapshotted, a meter starting from the prices the snapshot carries measures what pricing every
    node gives, and keeps doing so as the rest of the log is appended."""
    events = list(session.events())
    interval = data.draw(st.integers(1, 9), label="snapshot interval")
    cut = data.draw(st.integers(1, len(events)), label="saved up to")
    with SessionStore.open("memory://", snapshot_interval=interval) as store:
        writer = store.create(session.id)
        writer.append_all(events[:cut])
        HeuristicMeter().measure(writer)  # a pressure check priced it before the save
        store.save(writer)
        restored = store.get(session.id)
        meter = HeuristicMeter()
        assert meter.measure(restored) == CountingMeter().measure(restored)
        restored.append_all(events[cut:])
        assert meter.measure(restored) == CountingMeter().measure(restored)
        assert meter.price_column(restored) == [meter.event(restored.event(s)) for s in restored.nodes]
