"""Session: stamping, atomic batches, marks and rollback, folds, snapshots, surface history."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from compaction.errors import (
    EventRuleError,
    SessionStateError,
    StoreError,
    StructureRuleError,
    SurfaceRuleError,
)
from compaction.sessions.blocks import text_of
from compaction.sessions.events import (
    Replace,
    SessionEvent,
    StepStart,
    TurnStart,
    UserMessage,
)
from compaction.sessions.session import Session
from tests.builders import start_turn, state_of, ticking_clock, tool_step, turn, user, user_event


def texts_of(session: Session) -> list[str]:
    return [text_of(m.content) for m in session.derive_messages()]


def worked_session() -> Session:
    session = Session()
    turn(session, n_calls=2)
    return session


# ---------------------------------------------------------------- appending


def test_append_stamps_seq_and_timezone_aware_utc_time() -> None:
    session = Session()
    event = session.append(user_event("a"))
    assert event.seq == 0
    assert event.time.tzinfo is not None and event.time.utcoffset() == timedelta(0)
    assert session.event(0) is event
    assert session.append(user_event("b")).seq == 1


def test_append_uses_the_session_clock_and_keeps_explicit_times() -> None:
    clock = ticking_clock()
    session = Session(clock=clock)
    first = session.append(user_event("a"))
    assert first.time == datetime(2025, 1, 1, tzinfo=UTC)
    given = datetime(2020, 5, 5, tzinfo=UTC)
    second = session.append(msgspec.structs.replace(user_event("b"), time=given))
    assert second.time == given


def test_events_are_immutable() -> None:
    event = Session().append(user_event("a"))
    with pytest.raises(AttributeError):
        event.seq = 5  # type: ignore[misc]


def test_pending_events_until_saved() -> None:
    session = Session()
    user(session, "a")
    user(session, "b")
    assert [e.seq for e in session.pending] == [0, 1]
    session.mark_saved()
    assert session.pending == []
    user(session, "c")
    assert [e.seq for e in session.pending] == [2]


def test_bookkeeping_counters() -> None:
    session = worked_session()
    assert session.first_user_seq == 0
    assert session.type_counts["tool/result"] == 2
    assert session.type_counts["step/start"] == 2
    assert session.last_of("turn/end") == len(session) - 1
    assert session.last_of("compact/start") is None
    assert session.open_turn is None and session.open_step is None


def test_a_replacement_user_message_is_not_the_first_user_message() -> None:
    session = Session()
    session.append(TurnStart(turn=1))
    assert session.first_user_seq is None
    user(session, "a")
    session.append(user_event("s", op=Replace(1, 1), sources=(1,)))
    assert session.first_user_seq == 1


def test_event_index_errors_name_the_session() -> None:
    session = Session()
    with pytest.raises(IndexError, match=f"session {session.id} has no event at seq 0"):
        session.event(0)
    with pytest.raises(IndexError):
        session.surface_at(0)


# ---------------------------------------------------------------- atomic batches


def test_append_all_appends_a_valid_batch_in_order() -> None:
    session = Session()
    events = session.append_all([user_event("a"), TurnStart(turn=1), user_event("b")])
    assert [e.seq for e in events] == [0, 1, 2]
    assert session.nodes == [0, 2]


@pytest.mark.parametrize("bad_at", [0, 1, 3])
def test_append_all_with_one_bad_event_appends_nothing(bad_at: int) -> None:
    session = worked_session()
    before = state_of(session)
    batch: list[SessionEvent] = [
        user_event("x"),
        user_event("y", op=Replace(0, 0), sources=(0,)),
        TurnStart(turn=2),
        StepStart(turn=2, step=1),
    ]
    batch.insert(bad_at, StepStart(turn=9, step=1))
    with pytest.raises(StructureRuleError, match="step/start in turn 9"):
        session.append_all(batch)
    assert state_of(session) == before
    session.append_all([user_event("x"), TurnStart(turn=2)])  # the session still works
    assert session.structure.open_turn == 2


def test_append_all_validates_each_event_against_the_batch_before_it() -> None:
    session = Session()
    user(session, "a")
    events = session.append_all([user_event("b"), user_event("ab", op=Replace(0, 1), sources=(0, 1))])
    assert session.nodes == [events[1].seq]


def test_validators_see_the_batch_state() -> None:
    seen: list[tuple[int, int]] = []

    def record(session: Session, event: SessionEvent) -> None:
        seen.append((event.seq, len(session)))
        if isinstance(event, UserMessage) and event.message.id == "m-veto":
            raise SurfaceRuleError("veto", event.seq, "vetoed by a test validator")

    session = Session(validators=[record])
    session.append_all([user_event("a"), user_event("b")])
    assert seen == [(0, 0), (1, 1)]
    with pytest.raises(SurfaceRuleError, match="vetoed"):
        session.append_all([user_event("c"), user_event("veto")])
    assert len(session) == 2
    other = Session()
    other.append(user_event("veto"))  # another session's rules do not leak into this one
    assert seen == [(0, 0), (1, 1), (2, 2), (3, 3)]


def test_a_rolled_back_replacement_leaves_no_stale_message_cache() -> None:
    """A batch's replacement is rolled back after derive_messages ran mid-batch; a later
    replacement reaching the same generation must not reuse that cache."""

    def peek(session: Session, event: SessionEvent) -> None:
        session.derive_messages()
        if isinstance(event, TurnStart) and event.turn == 99:
            raise StructureRuleError("veto", event.seq, "vetoed")

    session = Session()
    for text in "abc":
        user(session, text)
    session.validators = (peek,)
    with pytest.raises(StructureRuleError):
        session.append_all([user_event("first", op=Replace(0, 1), sources=(0, 1)), TurnStart(turn=99)])
    session.append(user_event("second", op=Replace(1, 2), sources=(1, 2)))
    session.validators = ()
    assert texts_of(session) == ["a", "second"]
    assert texts_of(Session.replay(session.id, session.events())) == ["a", "second"]


def test_mark_and_rollback_restore_every_fold() -> None:
    session = worked_session()
    session.mark_saved()
    before = (state_of(session), session.saved_length)
    mark = session.mark()
    user(session, "later")
    start_turn(session)
    tool_step(session)
    replace_seq = session.append(
        user_event("sum", op=Replace(session.nodes[0], session.nodes[2]), sources=tuple(session.nodes[:3]))
    ).seq
    assert replace_seq in session.nodes
    session.rollback(mark)
    assert (state_of(session), session.saved_length) == before
    session.rollback(mark)  # idempotent
    assert (state_of(session), session.saved_length) == before
    user(session, "again")
    assert session.type_counts["user/message"] == 2


def test_rollback_refuses_to_forget_saved_events() -> None:
    session = worked_session()
    mark = session.mark()
    user(session, "saved")
    session.mark_saved()
    with pytest.raises(ValueError, match="already saved"):
        session.rollback(mark)


def test_discard_pending_returns_to_the_saved_prefix_and_keeps_the_clock() -> None:
    clock = ticking_clock()
    session = Session(clock=clock)
    user(session, "a")
    session.mark_saved()
    user(session, "b")
    session.discard_pending()
    assert len(session) == 1 and session.nodes == [0]
    assert session.clock is clock


# ---------------------------------------------------------------- replay, history, snapshots


def test_replay_refolds_stored_events_and_rechecks_rules() -> None:
    session = worked_session()
    again = Session.replay(session.id, session.events())
    assert state_of(again) == state_of(session)
    assert again.saved_length == len(session)  # replayed events are stored events
    broken = [*session.events()]
    broken[3] = msgspec.structs.replace(broken[3], seq=7)
    with pytest.raises(EventRuleError, match="not contiguous"):
        Session.replay(session.id, broken)


def test_surface_at_is_the_surface_right_after_each_event() -> None:
    session = Session()
    history: list[list[int]] = []
    for text in "abc":
        user(session, text)
        history.append(list(session.nodes))
    session.append(TurnStart(turn=1))
    history.append(list(session.nodes))
    session.append(user_event("ab", op=Replace(0, 1), sources=(0, 1)))
    history.append(list(session.nodes))
    assert [session.surface_at(k) for k in range(len(session))] == history


def test_snapshot_restores_the_fold_and_fetches_events_lazily() -> None:
    session = worked_session()
    user(session, "x")
    session.append(user_event("sum", op=Replace(0, session.nodes[-2]), sources=tuple(session.nodes[:-1])))
    stored = list(session.events())
    calls: list[tuple[int, int]] = []

    def loader(lo: int, hi: int) -> list[SessionEvent]:
        calls.append((lo, hi))
        return stored[lo:hi]

    restored = Session.from_snapshot(session.id, session.snapshot(), loader)
    assert calls == []
    assert restored.nodes == session.nodes
    assert restored.structure.state() == session.structure.state()
    assert restored.derive_messages() == session.derive_messages()
    assert calls  # payloads were fetched on demand, only from before the snapshot
    assert all(0 <= lo < hi <= len(stored) for lo, hi in calls)
    assert restored.event(1) == session.event(1)
    assert list(restored.events()) == stored
    assert restored.pending == []
    assert restored.surface_at(len(session) - 2) == session.surface_at(len(session) - 2)
    start_turn(restored)
    start_turn(session)
    assert state_of(restored) == state_of(session)


def test_snapshot_round_trips_through_msgspec() -> None:
    session = worked_session()
    snapshot = session.snapshot()
    decoded = msgspec.json.decode(msgspec.json.encode(snapshot), type=type(snapshot))
    assert decoded == snapshot


def test_a_loader_that_misses_an_event_is_a_store_error() -> None:
    session = worked_session()

    def nothing(lo: int, hi: int) -> list[SessionEvent]:
        return []

    restored = Session.from_snapshot(session.id, session.snapshot(), nothing)
    user(restored, "saved later")
    restored.mark_saved()
    with pytest.raises(
        StoreError, match=f"returned no event at seq 0 although the snapshot counts {len(session)} "
    ):
        restored.event(0)


def test_a_restored_session_appends_rolls_back_and_reads_across_the_snapshot() -> None:
    session = worked_session()
    stored = list(session.events())

    def loader(lo: int, hi: int) -> list[SessionEvent]:
        return stored[lo:hi]

    restored = Session.from_snapshot(session.id, session.snapshot(), loader)
    base = len(restored)
    mark = restored.mark()
    user(restored, "after the snapshot")
    assert restored.event(base).seq == base
    assert restored.event(base - 1) == stored[-1]
    with pytest.raises(StructureRuleError):
        restored.append_all([user_event("x"), StepStart(turn=5, step=1)])
    assert len(restored) == base + 1
    restored.rollback(mark)
    assert len(restored) == base
    assert restored.nodes == session.nodes
    assert [e.seq for e in restored.events(base - 2)] == [base - 2, base - 1]


def test_a_released_session_keeps_its_state_and_fetches_its_events_again() -> None:
    session = Session()
    turn(session, "first", n_calls=2)
    session.mark_saved()
    stored = list(session.events())
    user(session, "pending")
    with pytest.raises(SessionStateError, match="pending"):
        session.release(lambda lo, hi: stored[lo:hi])
    session.discard_pending()
    before = state_of(session)
    fetched: list[tuple[int, int]] = []

    def loader(lo: int, hi: int) -> list[SessionEvent]:
        fetched.append((lo, hi))
        return stored[lo:hi]

    session.release(loader)
    assert state_of(session) == before and fetched  # the messages were fetched again
    assert list(session.events()) == stored
    turn(session, "second")  # and it goes on as a session restored from a snapshot does
    assert Session.replay(session.id, session.events()).nodes == session.nodes
