"""The store is the only way to stored rows: tolerant row reads, stream lengths, the decoded
notification log, and the recorder's eventsourcing subscription, on every backend."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime

import msgspec
import pytest
from eventsourcing.application import Application
from eventsourcing.persistence import StoredEvent
from eventsourcing.popo import POPOSubscription
from eventsourcing.postgres import PostgresSubscription

from compaction.errors import ConcurrencyError, UnreadableRowError
from compaction.sessions.mapper import UnreadableRow, encode_event
from compaction.sessions.partitioned import AnyStore, PartitionedSessionStore
from compaction.sessions.polling import PollingSubscription
from compaction.sessions.store import SessionStore
from tests.builders import answer_step, end_turn, start_turn, user, user_event


def _saved(store: AnyStore) -> uuid.UUID:
    session = store.create()
    user(session, "hello")
    start_turn(session)
    answer_step(session)
    end_turn(session)
    store.save(session)
    return session.id


def _tamper(store: SessionStore, session_id: uuid.UUID, seq: int, topic: str, state: bytes) -> None:
    """Insert a raw row behind the store's back (what a damaged or foreign log looks like)."""
    store.application.recorder.insert_events([StoredEvent(session_id, seq, topic, state)])


def test_the_store_holds_its_application_instead_of_being_one(store: SessionStore) -> None:
    assert isinstance(store.application, Application)
    assert not isinstance(store, Application)
    assert not hasattr(store, "repository") and not hasattr(store, "recorder")
    assert store.backend == store.location.kind


def test_read_rows_names_each_unreadable_row_and_keeps_the_rest(store: SessionStore) -> None:
    session_id = _saved(store)
    length = store.stream_length(session_id)
    stray = msgspec.structs.replace(user_event("x"), seq=99, time=datetime.now(UTC))
    _tamper(store, session_id, length, "martian/event", b"{}")
    _tamper(store, session_id, length + 1, "turn/start", b"{")
    _tamper(store, session_id, length + 2, "user/message", encode_event(stray))
    rows = store.read_rows(session_id)
    assert rows[:length] == store.load_events(session_id, 0, length)
    bad = rows[length:]
    assert all(isinstance(r, UnreadableRow) for r in bad)
    assert [(r.seq, r.type) for r in bad] == [
        (length, "martian/event"),
        (length + 1, "turn/start"),
        (length + 2, "user/message"),
    ]
    reasons = [r.reason for r in bad]  # type: ignore[union-attr]
    assert "unknown event type 'martian/event'" in reasons[0]
    assert f"cannot decode turn/start payload at session {session_id} seq {length + 1}" in reasons[1]
    assert "carries seq 99" in reasons[2]
    assert store.read_rows(session_id, length + 1, length + 2) == [bad[1]]
    assert store.stream_length(session_id) == length + 3


def test_stream_length_of_a_missing_session_is_zero(store: SessionStore) -> None:
    assert store.stream_length(uuid.uuid4()) == 0
    assert store.read_rows(uuid.uuid4()) == []


def test_notifications_are_decoded_with_their_id_and_session(store: SessionStore) -> None:
    first, second = _saved(store), _saved(store)
    notes = store.notifications(0, 1000)
    assert [n.notification_id for n in notes] == sorted({n.notification_id for n in notes})
    assert notes[-1].notification_id == store.max_notification_id()
    by_session = {sid: [n.event for n in notes if n.session_id == sid] for sid in (first, second)}
    assert by_session == {sid: store.load_events(sid) for sid in (first, second)}
    after = store.notifications(notes[1].notification_id, 2)
    assert after == notes[2:4]
    starts = store.notifications(0, 1000, topics=("turn/start",), upto=notes[-2].notification_id)
    assert [(n.session_id, n.event.TYPE) for n in starts] == [(first, "turn/start"), (second, "turn/start")]


def test_a_notification_that_does_not_decode_names_session_seq_and_id(store: SessionStore) -> None:
    session_id = _saved(store)
    length = store.stream_length(session_id)
    _tamper(store, session_id, length, "martian/event", b"{}")
    top = store.max_notification_id()
    with pytest.raises(UnreadableRowError) as caught:
        store.notifications(0, 1000)
    error = caught.value
    assert (error.session_id, error.seq, error.notification_id) == (session_id, length, top)
    assert f"session {session_id} seq {length} (notification {top})" in str(error)
    assert "martian/event" in str(error)


def test_append_events_refuses_a_taken_seq(store: SessionStore) -> None:
    session_id = _saved(store)
    events = store.load_events(session_id)
    with pytest.raises(ConcurrencyError, match=f"session {session_id}: another writer"):
        store.append_events(session_id, events[-1:])
    copy = uuid.uuid4()
    store.append_events(copy, events)
    assert store.load_events(copy) == events


def test_each_backend_subscribes_through_its_recorder(store: SessionStore) -> None:
    expected: type = {
        "memory": POPOSubscription,
        "sqlite": PollingSubscription,
        "postgresql": PostgresSubscription,
    }.get(store.backend, object)
    if store.backend == "nats":  # imports nats-py: only when the store is on JetStream
        from compaction.sessions.nats.recorders import JetStreamSubscription

        expected = JetStreamSubscription
    with store.follow() as feed:
        assert isinstance(feed.subscription, expected)


def test_follow_blocks_until_an_append_and_ends_when_stopped(store: SessionStore) -> None:
    session_id = _saved(store)
    top = store.max_notification_id()
    seen: list[object] = []
    reading, arrived = threading.Event(), threading.Event()

    def read() -> None:
        reading.set()
        for notification in feed:  # blocks between notifications
            seen.append(notification)
            arrived.set()

    with store.follow(top, poll_interval=0.05) as feed:
        reader = threading.Thread(target=read)
        reader.start()
        assert reading.wait(timeout=5)
        assert not seen and reader.is_alive()  # nothing after ``top`` yet: the reader waits
        later = store.get(session_id)
        user(later, "again")
        store.save(later)
        assert arrived.wait(timeout=10), "the append never reached the follower"
        feed.stop()
        reader.join(timeout=10)
    assert not reader.is_alive()
    assert [n.event for n in seen] == store.load_events(session_id, len(later) - 1)  # type: ignore[attr-defined]


def test_unannounced_partitions_poll_and_the_wrapper_routes_row_reads(pg_url: str) -> None:
    with PartitionedSessionStore.open(f"{pg_url}?partitions=2&notify=off") as store:
        for part in store.parts:
            with part.follow() as feed:
                assert isinstance(feed.subscription, PollingSubscription)
        session_id = _saved(store)
        assert store.stream_length(session_id) == len(store.load_events(session_id)) > 0
        assert store.read_rows(session_id) == store.load_events(session_id)
        text = str(session_id)  # routed to the same partition as the UUID
        assert store.exists(text) and store.load_events(text) == store.load_events(session_id)
        assert list(store.get(text).events()) == store.load_events(session_id)


def test_a_listening_follower_with_a_poll_interval_never_misses_an_unannounced_append(pg_url: str) -> None:
    """A NOTIFY lost between the subscription's first select and its LISTEN (or never sent, as
    here: a second handle appends with notify=off) is caught by the re-check every poll interval;
    the LISTEN-only subscription would wait for the next notification forever."""
    with (
        PartitionedSessionStore.open(f"{pg_url}?partitions=1") as listening,
        PartitionedSessionStore.open(f"{pg_url}?partitions=1&notify=off") as silent,
    ):
        (part,) = listening.parts
        seen: list[int] = []
        arrived = threading.Event()
        with part.follow(0, poll_interval=0.1) as feed:
            assert isinstance(feed.subscription, PostgresSubscription)

            def read() -> None:
                for notification in feed:
                    seen.append(notification.notification_id)
                    arrived.set()

            reader = threading.Thread(target=read)
            reader.start()
            _saved(silent)
            assert arrived.wait(timeout=10), "the unannounced append never reached the follower"
            feed.stop()
            reader.join(timeout=10)
        assert not reader.is_alive() and seen
