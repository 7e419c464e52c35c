"""What only the JetStream store has: commit messages, chunks, the private event loop, the URL form.

The abstract store suites run on JetStream too (the ``nats`` parameter of ``store_url``); these tests
look at the messages themselves, through a plain nats-py connection, to check the layout the
recorders promise: one commit per save, a reader never sees part of a save, a losing writer leaves
nothing behind, large saves and events are chunked and joined, notification ids follow the stream sequence.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest

from compaction.errors import ConcurrencyError, ConfigurationError
from compaction.sessions.nats.acks import PublishAcks
from compaction.sessions.nats.client import WRONG_LAST_SEQUENCE
from compaction.sessions.nats.frames import ID_SPACE, save_ids
from compaction.sessions.nats.loop import LoopThread
from compaction.sessions.nats.shared import CONNECTIONS
from compaction.sessions.nats.url import nats_settings
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore, parse_store_url
from tests.builders import end_turn, start_turn, tool_step, turn, user
from tests.conftest import NATS_BASE, require_nats

MEGABYTE = 1024 * 1024
T = TypeVar("T")


@pytest.fixture
def store(nats_url: str) -> Iterator[SessionStore]:
    with SessionStore.open(nats_url) as opened:
        yield opened


def _plainly(action: Callable[[Any], Awaitable[T]]) -> T:
    """``action(js)`` on a JetStream context of a plain connection (not the store's), closed after."""
    import nats

    async def run() -> T:
        nc = await nats.connect(NATS_BASE)
        try:
            return await action(nc.jetstream())
        finally:
            await nc.close()

    return asyncio.run(run())


def _messages(store: SessionStore, stream: str) -> list[tuple[str, dict[str, str] | None]]:
    """(subject, headers) of every message of ``stream``, read with a plain connection."""

    async def read(js: Any) -> list[tuple[str, dict[str, str] | None]]:
        info = await js.stream_info(stream)
        found = []
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            if info.state.messages == 0:
                break
            message = await js.get_msg(stream, seq)
            found.append((str(message.subject), message.headers))
        return found

    return _plainly(read)


def _stream(store: SessionStore) -> str:
    return store.settings["NATS_STREAM"]


def _big_session(output_bytes: int) -> Session:
    session = Session()
    user(session, "read the log")
    start_turn(session)
    tool_step(session, output="x" * output_bytes)
    end_turn(session)
    return session


# ---------------------------------------------------------------- one commit message per save


def test_a_save_is_one_commit_message_on_the_sessions_subject(store: SessionStore) -> None:
    session = store.create()
    turn(session, steps=3)
    store.save(session)
    user(session, "more")
    store.save(session)
    messages = _messages(store, _stream(store))
    assert [subject for subject, _ in messages] == [f"{_stream(store)}.s.{session.id.hex}"] * 2
    first, second = (headers or {} for _, headers in messages)
    assert (first["Compaction-First"], first["Compaction-Count"]) == ("0", str(len(session) - 1))
    assert (second["Compaction-First"], second["Compaction-Count"]) == (str(len(session) - 1), "1")
    assert "Compaction-Position" not in first  # the id comes from the stream sequence
    assert [n.notification_id for n in store.notifications(0, 100)] == [
        *(ID_SPACE + index for index in range(len(session) - 1)),
        2 * ID_SPACE,
    ]


def test_notification_ids_follow_the_stream_sequence_across_sessions(nats_url: str) -> None:
    with SessionStore.open(nats_url) as one, SessionStore.open(nats_url) as two:
        a, b = one.create(), two.create()
        for index in range(3):
            user(a, f"a{index}")
            one.save(a)
            user(b, f"b{index}")
            user(b, f"b{index}-again")
            two.save(b)  # no expected stream sequence: the other session's save is no conflict
        found = one.notifications(0, 100)
        expected = [seq * ID_SPACE + index for seq in range(1, 7) for index in range(1 if seq % 2 else 2)]
        assert one.max_notification_id() == expected[-1]
        # from inside a commit, and from an id between two commits (the next commit's first)
        assert [n.notification_id for n in one.notifications(expected[1], 2)] == expected[2:4]
        assert [n.notification_id for n in one.notifications(expected[2] + 5, 1)] == expected[3:4]
        assert one.count_notifications(expected[0], expected[-1]) == len(expected) - 1
    assert [n.notification_id for n in found] == expected
    assert [(n.session_id, n.event.seq) for n in found][:3] == [(a.id, 0), (b.id, 0), (b.id, 1)]


def test_a_concurrent_writer_gets_the_conflict_and_stores_nothing(nats_url: str) -> None:
    with SessionStore.open(nats_url) as one, SessionStore.open(nats_url) as two:
        session = one.create()
        turn(session)
        one.save(session)
        mine, theirs = one.get(session.id), two.get(session.id)
        user(mine, "mine")
        user(theirs, "theirs")
        one.save(mine)
        with pytest.raises(ConcurrencyError):
            two.save(theirs)
        stored = two.load_events(session.id)
    assert len(stored) == len(mine)
    assert stored[-1].message.content[0].text == "mine"  # type: ignore[attr-defined]


# ---------------------------------------------------------------- chunks


def test_a_save_above_the_max_payload_is_chunked_and_joined(store: SessionStore) -> None:
    session = _big_session(3 * MEGABYTE)  # one tool output of 3 MB: above the 1 MB max payload
    store.save(session)
    chunks = _messages(store, f"{_stream(store)}_chunks")
    assert len(chunks) >= 3
    commits = _messages(store, _stream(store))
    assert len(commits) == 1 and (commits[0][1] or {}).get("Compaction-Chunked") == "1"
    assert store.load_events(session.id) == list(session.events())
    assert [n.event for n in store.notifications(0, 100)] == list(session.events())
    everything = list(session.events())
    for window in (1, 2, len(everything)):  # windows inside the one chunked commit
        assert list(store.iter_events(session.id, window=window)) == everything
        assert list(store.iter_events(session.id, 1, len(everything) - 1, window=window)) == everything[1:-1]


def test_a_reader_never_sees_part_of_a_chunked_save(nats_url: str) -> None:
    sizes: list[int] = []
    with SessionStore.open(nats_url) as writer, SessionStore.open(nats_url) as reader:
        session = _big_session(4 * MEGABYTE)
        done = threading.Event()

        def watch() -> None:
            while not done.is_set():
                sizes.append(reader.stream_length(session.id))
                sizes.append(len(reader.load_events(session.id)))

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            writer.save(session)
        finally:
            done.set()
            watcher.join()
        sizes.append(len(reader.load_events(session.id)))
    assert set(sizes) <= {0, len(session)}
    assert sizes[-1] == len(session)


def test_a_losing_chunked_save_leaves_no_chunks_and_no_events(nats_url: str) -> None:
    with SessionStore.open(nats_url) as one, SessionStore.open(nats_url) as two:
        session = one.create()
        user(session, "start")
        one.save(session)
        mine, theirs = one.get(session.id), two.get(session.id)
        user(mine, "small")
        one.save(mine)
        start_turn(theirs)
        tool_step(theirs, output="y" * (3 * MEGABYTE))
        with pytest.raises(ConcurrencyError):
            two.save(theirs)
        assert _messages(one, f"{_stream(one)}_chunks") == []
        assert len(two.load_events(session.id)) == 2


# ---------------------------------------------------------------- snapshots, tracking


def test_snapshots_are_stored_in_their_bucket_and_used(nats_url: str) -> None:
    with SessionStore.open(nats_url, snapshot_interval=10) as store:
        session = store.create()
        for index in range(4):
            turn(session, f"task {index}", steps=2)
            store.save(session)
        bucket = _messages(store, f"KV_{_stream(store)}_snapshots")
        assert [subject for subject, _ in bucket][-1] == f"$KV.{_stream(store)}_snapshots.{session.id.hex}"
        loaded = store.get(session.id)
        assert list(loaded.events()) == list(session.events())
        assert store.snapshot_fallbacks == []


def test_the_tracking_recorder_keeps_the_highest_position_per_application(nats_url: str) -> None:
    from eventsourcing.persistence import IntegrityError, Tracking

    with SessionStore.open(nats_url) as store:
        factory: Any = store.application.factory
        tracking = factory.tracking_recorder()
        assert tracking.max_tracking_id("view") is None
        tracking.insert_tracking(Tracking("view", 3))
        tracking.insert_tracking(Tracking("view", 7))
        with pytest.raises(IntegrityError):
            tracking.insert_tracking(Tracking("view", 7))
        assert tracking.max_tracking_id("view") == 7
        assert tracking.has_tracking_id("view", 5)
        assert tracking.max_tracking_id("other") is None


# ---------------------------------------------------------------- the private event loop


def test_the_loop_thread_serves_many_threads_and_refuses_its_own() -> None:
    runner = LoopThread()
    try:
        loops: list[object] = []

        async def which() -> object:
            await asyncio.sleep(0.001)
            return asyncio.get_running_loop()

        threads = [threading.Thread(target=lambda: loops.append(runner.run(which()))) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert loops == [runner.loop] * 8

        async def nested() -> object:
            return runner.run(which())

        with pytest.raises(RuntimeError, match="own thread"):
            runner.run(nested())

        async def fails() -> None:
            raise ValueError("from the loop")

        with pytest.raises(ValueError, match="from the loop"):
            runner.run(fails())
    finally:
        runner.close()
    assert not runner.running
    with pytest.raises(RuntimeError, match="closed"):
        runner.run(asyncio.sleep(0))


def test_the_stores_calls_from_many_threads_share_one_connection(store: SessionStore) -> None:
    sessions = [store.create() for _ in range(8)]
    errors: list[BaseException] = []

    def write(session: Session) -> None:
        try:
            for index in range(3):
                user(session, f"m{index}")
                store.save(session)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=write, args=(s,)) for s in sessions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    ids = [n.notification_id for n in store.notifications(0, 100)]
    assert ids == sorted(ids) and [i // ID_SPACE for i in ids] == list(range(1, 25))
    assert set(store.session_ids()) == {s.id for s in sessions}


def test_handles_of_one_stream_share_a_connection_until_the_last_closes(nats_url: str) -> None:
    first, second = SessionStore.open(nats_url), SessionStore.open(nats_url)
    connection = _connection(first)
    assert _connection(second) is connection
    key = first.application.factory._key  # type: ignore[attr-defined]
    assert CONNECTIONS.users(key) == 2
    session = first.create()
    user(session, "written by the first handle")
    first.save(session)
    first.close()
    first.close()  # a second close of the same handle releases nothing more
    assert CONNECTIONS.users(key) == 1 and connection.open
    user(session, "written by the second handle once the first closed")
    second.save(session)
    assert len(second.get(session.id)) == len(session)
    second.close()
    assert CONNECTIONS.users(key) == 0 and not connection.open
    with SessionStore.open(nats_url) as third:  # a new connection once the last one closed
        assert _connection(third) is not connection and len(third.get(session.id)) == len(session)


def _connection(store: SessionStore) -> Any:
    return store.application.factory.connection  # type: ignore[attr-defined]


def test_the_loop_is_uvloops_when_it_is_installed() -> None:
    pytest.importorskip("uvloop", reason="the nats extra installs uvloop; without it asyncio's loop runs")
    runner = LoopThread()
    try:
        assert type(runner.loop).__module__.startswith("uvloop")
        assert runner.run(asyncio.sleep(0, result="served")) == "served"
    finally:
        runner.close()


def test_a_coroutine_cancelled_on_the_loop_raises_cancelled_in_the_caller() -> None:
    runner = LoopThread()
    try:

        async def cancelled() -> None:
            asyncio.current_task().cancel()  # type: ignore[union-attr]
            await asyncio.sleep(1)

        with pytest.raises(concurrent.futures.CancelledError, match="cancelled on the loop"):
            runner.run(cancelled())
        assert runner.run(asyncio.sleep(0, result="still serving")) == "still serving"
    finally:
        runner.close()


def test_publish_acks_answer_with_the_servers_acknowledgement_and_errors() -> None:
    import nats
    import nats.errors
    import nats.js.errors

    stream = f"acks_{uuid.uuid4().hex[:10]}"

    async def check() -> None:
        nc = await nats.connect(NATS_BASE)
        try:
            await nc.jetstream().add_stream(name=stream, subjects=[f"{stream}.>"])
            acks = PublishAcks(nc)
            await acks.start()
            first = await acks.publish(f"{stream}.a", b"one", {"Nats-Msg-Id": "m1"}, 2.0)
            assert (first.stream, first.seq, first.duplicate) == (stream, 1, False)
            again = await acks.publish(f"{stream}.a", b"one", {"Nats-Msg-Id": "m1"}, 2.0)
            assert (again.seq, again.duplicate) == (1, True)  # the de-duplication window's answer
            with pytest.raises(nats.js.errors.BadRequestError) as wrong:
                expected = {"Nats-Expected-Last-Subject-Sequence": "7"}
                await acks.publish(f"{stream}.a", b"two", expected, 2.0)
            assert wrong.value.err_code == WRONG_LAST_SEQUENCE
            with pytest.raises(nats.js.errors.NoStreamResponseError):
                await acks.publish(f"no_stream_{stream}.a", b"lost", {}, 2.0)
            silent = f"silent_{stream}"
            await nc.subscribe(silent)  # a responder that never answers
            with pytest.raises(nats.errors.TimeoutError):
                await acks.publish(silent, b"unanswered", {}, 0.2)
            assert acks.waiting == 0  # nothing left behind by the answered or the timed out
        finally:
            await nc.jetstream().delete_stream(stream)
            await nc.close()

    asyncio.run(check())


def test_save_ids_are_unique_within_and_across_writers() -> None:
    first, second = save_ids(), save_ids()
    ids = [next(first) for _ in range(1000)] + [next(second) for _ in range(1000)]
    assert len(set(ids)) == 2000


# ---------------------------------------------------------------- URLs


def test_nats_urls_name_servers_stream_and_replicas() -> None:
    settings = nats_settings("nats://a:4222,b:5222,[::1]:6222?stream=S_1&replicas=3")
    assert settings["NATS_SERVERS"] == "nats://a:4222,nats://b:5222,nats://[::1]:6222"
    assert (settings["NATS_STREAM"], settings["NATS_REPLICAS"]) == ("S_1", "3")
    defaults = parse_store_url("nats://127.0.0.1")
    assert defaults.kind == "nats"
    assert defaults.env["NATS_STREAM"] == "compaction"
    assert defaults.env["NATS_SERVERS"] == "nats://127.0.0.1:4222"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("nats://h:99999", "not a HOST:PORT"),
        ("nats://h:4222,,h:4223", "not a HOST:PORT"),
        ("nats://h?stream=a.b", "not a stream name"),
        ("nats://h?replicas=7", "1..5"),
        ("nats://h?timeout=0", "seconds"),
        ("nats://h?partitions=2", "unknown parameter 'partitions'"),
    ],
)
def test_bad_nats_urls_say_what_was_expected(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        parse_store_url(url)


def test_an_unreachable_server_fails_the_open_at_once() -> None:
    require_nats()  # the client must be installed to try
    from compaction.errors import StoreError

    with pytest.raises(StoreError, match="no servers available"):
        SessionStore.open(f"nats://127.0.0.1:1?stream=x{uuid.uuid4().hex[:6]}&timeout=1")


# ---------------------------------------------------------------- reads that stop where they can


def _saved_in_commits(store: SessionStore, commits: int, per_commit: int) -> Session:
    session = store.create()
    for index in range(commits):
        for part in range(per_commit):
            user(session, f"message {index}.{part}")
        store.save(session)
    return session


def _counting_passes(store: SessionStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Patch the store's log to count the messages its consumer passes hand out; the count."""
    log = store._recorder.log  # type: ignore[attr-defined]
    passing = log._pass
    handed: list[int] = [0]

    async def counted(*args: Any, **kwargs: Any) -> Any:
        async for record in passing(*args, **kwargs):
            handed[0] += 1
            yield record

    monkeypatch.setattr(log, "_pass", counted)
    return handed


def test_a_page_of_the_notification_log_reads_the_commits_it_needs(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _saved_in_commits(store, 60, 5)
    everything = store.notifications(0, 1000)
    assert len(everything) == 300
    handed = _counting_passes(store, monkeypatch)
    page = store.notifications(0, 10)
    assert page == everything[:10] and handed[0] == 2  # two commits of five, not ten commits
    handed[0] = 0
    page = store.notifications(everything[99].notification_id, 150)
    assert page == everything[100:250] and handed[0] == 30
    handed[0] = 0
    assert store.count_notifications(0, everything[49].notification_id) == 50
    assert handed[0] <= 11  # up to the first commit past the last id asked about, not the log


def test_the_durable_follower_decodes_one_commit_at_a_time(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _saved_in_commits(store, 40, 3)
    everything = store.notifications(0, 1000)
    recorder: Any = store._recorder
    decode = recorder.rows_of
    decoded: list[int] = []

    async def counted(record: Any) -> Any:
        decoded.append(record.seq)
        return await decode(record)

    monkeypatch.setattr(recorder, "rows_of", counted)
    with store.follow(0, durable="one-at-a-time") as feed:
        first = next(feed)
        assert decoded == [1]  # every commit of the log was fetched; one was decoded
        read = [first, *(next(feed) for _ in range(len(everything) - 1))]
        feed.stop()
    assert read == everything and decoded == list(range(1, 41))


# ---------------------------------------------------------------- listing the sessions


def _interleaved(store: SessionStore, sessions: int, commits: int) -> list[uuid.UUID]:
    """``sessions`` sessions saved ``commits`` times each, their saves interleaved; their ids in
    the order of their first commit (the last created is saved first)."""
    made = [store.create() for _ in range(sessions)]
    order = list(reversed(made))
    for index in range(commits):
        for session in order:
            user(session, f"message {index}")
            store.save(session)
    return [s.id for s in order]


def _raw_commit(stream: str, session: uuid.UUID, first: int) -> None:
    """A commit on the session's subject that starts at version ``first`` (as a store whose
    earlier rows were deleted holds), published with a plain connection."""
    from compaction.sessions.nats import frames

    rows = [(first, "compaction.sessions.events:UserMessage", b"{}")]
    headers = frames.commit_headers(first, 1, False)
    _plainly(lambda js: js.publish(f"{stream}.s.{session.hex}", frames.encode_rows(rows), headers=headers))


def test_sessions_of_many_commits_are_listed_from_the_subjects_without_reading_every_commit(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past a few commits per session the listing asks the stream's leader for its subjects and
    gets each one's first commit: the same ids in the same order (of their first commit) as the
    pass over every commit's headers, which it does not make."""
    ids = _interleaved(store, 3, 12)
    log = store._recorder.log  # type: ignore[attr-defined]
    scans: list[str] = []
    scanning = log.scan

    async def counted(subject: str, *args: Any, **kwargs: Any) -> Any:
        scans.append(subject)
        return await scanning(subject, *args, **kwargs)

    monkeypatch.setattr(log, "scan", counted)
    assert store.session_ids() == ids and store.all_session_ids() == ids
    assert scans == []
    monkeypatch.setattr("compaction.sessions.nats.recorders.SCAN_BELOW", 10**9)  # the pass
    assert store.session_ids() == ids and store.all_session_ids() == ids
    assert len(scans) == 2


def test_a_session_whose_first_commit_lacks_version_0_is_listed_as_the_pass_lists_it(
    store: SessionStore,
) -> None:
    """``session_ids`` lists the sessions whose version 0 is stored, ``all_session_ids`` every
    one: a subject whose first commit starts later (rows deleted) is only in the second, from
    either way of listing."""
    ids = _interleaved(store, 2, 12)
    damaged = uuid.uuid4()
    for version in range(3, 30):
        _raw_commit(_stream(store), damaged, version)
    assert store.session_ids() == ids
    assert store.all_session_ids() == [*ids, damaged]


def test_the_subjects_are_read_page_after_page(store: SessionStore) -> None:
    """The leader answers at most a page of subjects (100,000 on nats-server 2.9); the next page
    is asked from the count read so far. Checked on the real server with a page starting at 1."""
    from compaction.sessions.nats.subjects import _page, subject_counts

    ids = _interleaved(store, 3, 1)
    log, stream = store._recorder.log, _stream(store)  # type: ignore[attr-defined]
    counts = store._recorder.connection.call(subject_counts(log, f"{stream}.s.>", stream))  # type: ignore[attr-defined]
    assert counts == {f"{stream}.s.{i.hex}": 1 for i in ids}
    rest = store._recorder.connection.call(_page(log, stream, f"{stream}.s.>", 1))  # type: ignore[attr-defined]
    assert rest.total == 3 and rest.state is not None and rest.state.subjects is not None
    assert sorted(rest.state.subjects) == sorted(counts)[1:]


# ---------------------------------------------------------------- long sessions from a new handle


def _delete_message(stream: str, seq: int) -> None:
    _plainly(lambda js: js.delete_msg(stream, seq))


def _snapshotted(store: SessionStore, commits: int, tail: int) -> Session:
    """A session saved in ``commits`` commits, snapshotted, then ``tail`` commits more."""
    session = _saved_in_commits(store, commits, 2)
    store.take_session_snapshot(session)
    for index in range(tail):
        user(session, f"after the snapshot {index}")
        store.save(session)
    return session


def test_a_long_session_opens_from_its_snapshot_reading_only_the_commits_after_it(
    nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From a new handle, a session saved in 300 commits opens from its snapshot reading the
    commits after it (found by bisection) and nothing below: the coverage check is answered from
    the stream's state (nothing was ever removed from it) and the session's first and last
    commit. Every event read afterwards, below the snapshot or above, is what was saved."""
    with SessionStore.open(nats_url) as store:
        session = _snapshotted(store, 300, 10)
    with SessionStore.open(nats_url) as other:
        handed = _counting_passes(other, monkeypatch)
        opened = other.get(session.id)
        assert other.snapshot_fallbacks == [] and len(opened) == len(session)
        assert handed[0] <= 12  # the 10 commits after the snapshot (and its own), not 310
        assert opened.derive_messages() == session.derive_messages()
        assert list(opened.events()) == list(session.events())


def test_old_spans_are_read_below_where_the_index_starts_then_the_whole_session(
    nats_url: str,
) -> None:
    """After a read of the tail (an index started late), a read of an old span finds its commits
    by bisection without completing the index, and a read of everything completes it."""
    with SessionStore.open(nats_url) as store:
        session = _saved_in_commits(store, 120, 3)
    expected = list(session.events())
    with SessionStore.open(nats_url) as other:
        assert other.load_events(session.id, 300, None) == expected[300:]
        assert other.load_events(session.id, 10, 20) == expected[10:20]
        assert other.load_events(session.id, 0, 1) == expected[:1]
        assert other.load_events(session.id, 295, 305) == expected[295:305]  # across the start
        assert other.load_events(session.id, 0, None) == expected


def test_a_removed_commit_below_the_snapshot_still_fails_the_open(nats_url: str) -> None:
    """Once a message was removed from the stream, the coverage check reads the commits' headers
    again, and a session missing rows below its snapshot fails to open as a replay would."""
    from compaction.errors import StoreError

    with SessionStore.open(nats_url) as store:
        session = _snapshotted(store, 40, 2)
        heads = store._recorder.connection.call(  # type: ignore[attr-defined]
            store._recorder.index.of(store._recorder.subject(session.id))  # type: ignore[attr-defined]
        ).heads
    _delete_message(_stream(store), heads[5].seq)
    with SessionStore.open(nats_url) as other, pytest.raises(StoreError, match="rows deleted or moved"):
        other.get(session.id)


def test_a_new_handle_appends_to_a_long_session_without_reading_its_old_commits(
    nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer in a new process learns the session's last commit from the leader (an index
    started there), so its first save reads none of the 200 commits before it."""
    with SessionStore.open(nats_url) as store:
        session = _snapshotted(store, 200, 0)
    with SessionStore.open(nats_url) as other:
        handed = _counting_passes(other, monkeypatch)
        resumed = other.get(session.id)
        user(resumed, "one more")
        other.save(resumed)
        assert handed[0] <= 3
        expected = [*session.events(), resumed.event(len(session))]
        assert list(resumed.events()) == expected
    with SessionStore.open(nats_url) as third:
        assert list(third.get(session.id).events()) == expected
        assert third.load_events(session.id, 0, None) == expected
