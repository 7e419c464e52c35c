"""Store-to-store copy (``compaction copy``) and the partitioned store it can write to.

The copy that matters is SQLite to PostgreSQL: a real child process copies every public transcript,
is SIGKILLed half-way through a session, and a second run completes the copy, verified by surface
hash and event count, with no duplicate rows.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest

from compaction.cli.main import main
from compaction.errors import ConfigurationError
from compaction.importers import import_path
from compaction.sessions.copy import copy_session
from compaction.sessions.events import SessionEvent
from compaction.sessions.hashing import surface_hash
from compaction.sessions.partitioned import (
    PartitionedSessionStore,
    UnannouncedPostgresRecorder,
    open_store,
    partition_of,
    split_options,
    split_partitions,
)
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from projections import ProjectionRunner, surfaces
from tests.builders import answer_step, end_turn, run_json, start_turn, tool_step, turn, user, wait_until
from tests.conftest import PUBLIC_TRANSCRIPTS

CHILD = Path(__file__).with_name("copy_child.py")
BATCH = 200


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A SQLite store holding every public transcript."""
    url = f"sqlite:///{tmp_path_factory.mktemp('copy') / 'source.db'}"
    with SessionStore.open(url) as store:
        for transcript in PUBLIC_TRANSCRIPTS:
            for imported in import_path(transcript):
                store.save(imported.session)
    return url


def source_sessions(url: str) -> dict[UUID, tuple[int, str]]:
    """Session id -> (events, surface hash), in the store's order."""
    with SessionStore.open(url) as store:
        return {sid: (len(s), surface_hash(s)) for sid in store.session_ids() for s in [store.get(sid)]}


def event_tables(pg_url: str) -> list[str]:
    _, partitions = split_partitions(pg_url)
    if partitions == 1:
        return ["sessionstore_events"]
    return [f"sessionstore_p{i}_events" for i in range(partitions)]


def stored_rows(pg_url: str) -> dict[UUID, tuple[int, int, int]]:
    """Session id -> (rows, distinct seqs, max seq + 1) over every events table of the target."""
    base, _ = split_partitions(pg_url)
    found: dict[UUID, tuple[int, int, int]] = {}
    with psycopg.connect(base) as connection:
        for table in event_tables(pg_url):
            rows = connection.execute(
                f"SELECT originator_id, count(*), count(DISTINCT originator_version), "
                f"max(originator_version) + 1 FROM {table} GROUP BY originator_id"
            ).fetchall()
            for sid, count, distinct, length in rows:
                assert UUID(str(sid)) not in found, f"session {sid} stored in two partitions"
                found[UUID(str(sid))] = (count, distinct, length)
    return found


def hang_point(sessions: dict[UUID, tuple[int, str]]) -> tuple[int, UUID]:
    """The first batch of the first multi-batch session after a complete one: (batch number, id)."""
    done = 0
    for position, (sid, (events, _)) in enumerate(sessions.items()):
        if position > 0 and events > 2 * BATCH:
            return done + 1, sid
        done += -(-events // BATCH)
    raise AssertionError("no session long enough to be killed half-way")


# ---------------------------------------------------------------- SIGKILL half-way, then resume


@pytest.fixture(params=[1, 3], ids=["postgresql", "postgresql-3-partitions"])
def pg_target(request: pytest.FixtureRequest, pg_url: str) -> str:
    return pg_url if request.param == 1 else f"{pg_url}?partitions={request.param}"


def test_copy_killed_half_way_then_resumed(source: str, pg_target: str, tmp_path: Path) -> None:
    sessions = source_sessions(source)
    hang_after, partial_id = hang_point(sessions)
    marker = tmp_path / "hung"
    process = subprocess.Popen(
        [sys.executable, str(CHILD), source, pg_target, str(marker), "--batch", str(BATCH),
         "--hang-after", str(hang_after)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        wait_until(lambda: marker.exists() or process.poll() is not None, 120, "the kill point")
        assert marker.exists(), process.stderr.read() if process.stderr else ""
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
        if process.stderr:
            process.stderr.close()
    assert process.returncode == -signal.SIGKILL
    assert marker.read_text().split()[:2] == [str(partial_id), str(BATCH)]

    order = list(sessions)
    cut = order.index(partial_id)
    before = stored_rows(pg_target)
    assert set(before) == set(order[: cut + 1])  # complete ones, the partial one, nothing after
    assert before[partial_id] == (BATCH, BATCH, BATCH)  # a contiguous prefix
    for sid in order[:cut]:
        assert before[sid][0] == sessions[sid][0]

    code, document = run_json("--store", source, "copy", "--to", pg_target, "--all")
    assert code == 0, document
    rows = {UUID(r["session_id"]): r for r in document["sessions"]}
    assert list(rows) == order
    statuses = Counter(r["status"] for r in rows.values())
    assert statuses == {"already-copied": cut, "resumed": 1, "copied": len(order) - cut - 1}
    assert rows[partial_id]["copied"] == sessions[partial_id][0] - BATCH
    assert document["copied_events"] == sum(n for n, _ in sessions.values()) - sum(
        count for count, _, _ in before.values()
    )
    for sid, (events, digest) in sessions.items():
        assert rows[sid]["verified"] is True
        assert (rows[sid]["events"], rows[sid]["surface_hash"]) == (events, digest)

    after = stored_rows(pg_target)  # no duplicates, nothing missing
    assert after == {sid: (events, events, events) for sid, (events, _) in sessions.items()}
    with open_store(pg_target) as target:
        for sid, (_, digest) in sessions.items():
            assert surface_hash(target.get(sid)) == digest

    code, again = run_json("--store", source, "copy", "--to", pg_target, "--all")
    assert code == 0
    assert {r["status"] for r in again["sessions"]} == {"already-copied"}
    assert again["copied_events"] == 0


# ---------------------------------------------------------------- the command


def test_copy_one_session_by_prefix_shows_progress(
    source: str, sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sessions = source_sessions(source)
    sid, (events, digest) = next(iter(sessions.items()))
    assert main(["--store", source, "copy", "--to", sqlite_url, "--session", str(sid)[:10]]) == 0
    captured = capsys.readouterr()
    assert f"[1/1] {sid}: copied, {events} of {events} events written, verified" in captured.err
    assert "1 session, 1 verified" in captured.out
    with SessionStore.open(sqlite_url) as target:
        assert target.session_ids() == [sid]
        assert surface_hash(target.get(sid)) == digest


def test_copy_json_rows(source: str, sqlite_url: str) -> None:
    first, second = list(source_sessions(source))[:2]
    code, document = run_json("--store", source, "copy", "--to", sqlite_url, "--session", str(first),
                              "--session", str(second), "--batch", "50")  # fmt: skip
    assert code == 0
    assert set(document) >= {"sessions", "source", "target", "copied_events", "verified"}
    for row in document["sessions"]:
        assert set(row) == {"session_id", "events", "copied", "surface_hash", "verified", "status", "detail"}
        assert (row["status"], row["verified"], row["copied"]) == ("copied", True, row["events"])


def test_copy_refuses_to_overwrite_a_different_session(source: str, sqlite_url: str) -> None:
    sid = next(iter(source_sessions(source)))
    with SessionStore.open(sqlite_url) as target:
        impostor = target.create(sid)
        user(impostor, "an unrelated session that happens to have the same id")
        target.save(impostor)
        impostor_hash = surface_hash(impostor)
    code, document = run_json("--store", source, "copy", "--to", sqlite_url, "--session", str(sid))
    assert code == 1
    (row,) = document["sessions"]
    assert (row["status"], row["verified"], row["copied"]) == ("conflict", False, 0)
    assert "different events" in row["detail"]
    assert document["verified"] is False
    with SessionStore.open(sqlite_url) as target:
        assert surface_hash(target.get(sid)) == impostor_hash


def test_copy_needs_a_selection(source: str, sqlite_url: str) -> None:
    code, document = run_json("--store", source, "copy", "--to", sqlite_url)
    assert code == 2
    assert document["error"]["type"] == "UsageError"


def test_copy_from_a_partitioned_store(source: str, pg_url: str, sqlite_url: str) -> None:
    """Re-partitioning works both ways: SQLite -> 3 partitions -> a plain SQLite store."""
    partitioned = f"{pg_url}?partitions=3"
    assert run_json("--store", source, "copy", "--to", partitioned, "--all")[0] == 0
    code, document = run_json("--store", partitioned, "copy", "--to", sqlite_url, "--all")
    assert code == 0, document
    assert document["source"].endswith("?partitions=3")
    sessions = source_sessions(source)
    assert {UUID(r["session_id"]) for r in document["sessions"]} == set(sessions)
    assert source_sessions(sqlite_url) == sessions


# ---------------------------------------------------------------- the partitioned store


def make_session(turns: int = 1) -> Session:
    session = Session(uuid.uuid4())
    for n in range(turns):
        turn(session, f"task {n}")
    return session


def test_partition_of_is_stable_and_spreads() -> None:
    # Pinned: a session's partition is part of the stored layout; changing the hash would strand
    # every session of every partitioned database.
    first = UUID("00000000-0000-4000-8000-000000000001")
    second = UUID("6f1c2e7a-9b3d-4c5e-8f10-2a4b6c8d0e1f")
    assert [partition_of(first, k) for k in (1, 2, 3, 4, 8)] == [0, 1, 2, 3, 3]
    assert [partition_of(second, k) for k in (1, 2, 3, 4, 8)] == [0, 0, 2, 2, 6]
    ids = [uuid.uuid5(uuid.NAMESPACE_URL, f"session-{n}") for n in range(4000)]
    counts = Counter(partition_of(sid, 4) for sid in ids)
    assert set(counts) == {0, 1, 2, 3}
    assert all(800 <= c <= 1200 for c in counts.values()), counts


def test_split_partitions() -> None:
    assert split_partitions("postgresql://u@h:5432/db") == ("postgresql://u@h:5432/db", 1)
    assert split_partitions("postgresql://u@h:5432/db?partitions=4") == ("postgresql://u@h:5432/db", 4)
    assert split_partitions("memory://?x=1&partitions=2") == ("memory://?x=1", 2)
    assert split_partitions("sqlite:///./a.db?partitions=1") == ("sqlite:///./a.db", 1)
    for bad in ("0", "65", "two", "2&partitions=3"):
        with pytest.raises(ConfigurationError, match="partitions=K"):
            split_partitions(f"memory://?partitions={bad}")
    assert split_options("postgresql://u@h/db") == ("postgresql://u@h/db", None, True)
    assert split_options("postgresql://u@h/db?partitions=2&notify=off") == ("postgresql://u@h/db", 2, False)
    assert split_options("postgresql://u@h/db?notify=on&partitions=1") == ("postgresql://u@h/db", 1, True)
    with pytest.raises(ConfigurationError, match="notify=off is an option of partitioned stores"):
        split_options("postgresql://u@h/db?notify=off")
    with pytest.raises(ConfigurationError, match="expected notify=on or notify=off"):
        split_options("postgresql://u@h/db?partitions=2&notify=maybe")


def test_partitioned_store_routes_each_session_to_one_partition() -> None:
    with PartitionedSessionStore.open("memory://?partitions=3") as store:
        sessions = [make_session() for _ in range(12)]
        for session in sessions:
            store.save(session)
        assert set(store.session_ids()) == {s.id for s in sessions}
        for session in sessions:
            home = store.partition_for(session.id)
            assert home.index == partition_of(session.id, 3)
            assert [p.exists(session.id) for p in store.parts].count(True) == 1
            assert store.exists(session.id)
            assert store.load_events(session.id, 2, 4) == list(session.events(2, 4))
            assert surface_hash(store.get(session.id)) == surface_hash(session)
            assert len(store.get(session.id, at=3)) == 4
        assert not store.exists(uuid.uuid4())
        assert {p.name for p in store.parts} == {"SessionStore_p0", "SessionStore_p1", "SessionStore_p2"}


def test_open_store_and_the_single_store_guard(tmp_path: Path) -> None:
    with open_store("memory://") as plain:
        assert isinstance(plain, SessionStore)
    with open_store("memory://?partitions=1") as plain:
        assert isinstance(plain, SessionStore)
    with open_store("memory://?partitions=2") as split:
        assert isinstance(split, PartitionedSessionStore)
    with open_store("memory://?partitions=1&notify=off") as quiet:
        assert isinstance(quiet, PartitionedSessionStore)
        assert (quiet.partitions, quiet.notify) == (1, False)
        assert quiet.location.display == "memory://?partitions=1&notify=off"
    for options in ("partitions=2", "partitions=1", "partitions=1&notify=off"):
        with pytest.raises(ConfigurationError, match="partitioned-store options"):
            SessionStore.open(f"memory://?{options}")
    with pytest.raises(ConfigurationError, match="partitions need PostgreSQL"):
        open_store(f"sqlite:///{tmp_path / 's.db'}?partitions=2")


def test_partitioned_postgres_tables_and_layout_guard(pg_url: str) -> None:
    with open_store(f"{pg_url}?partitions=3") as store:
        session = make_session()
        store.save(session)
    with psycopg.connect(pg_url) as connection:
        found = connection.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        tables = {row[0] for row in found}
    assert {"sessionstore_p0_events", "sessionstore_p1_events", "sessionstore_p2_events"} <= tables
    assert "sessionstore_events" not in tables
    with pytest.raises(ConfigurationError, match="holds partitions p0, p1, p2 but the URL asks for 2"):
        open_store(f"{pg_url}?partitions=2")
    with open_store(f"{pg_url}?partitions=3") as again:
        assert again.session_ids() == [session.id]


def announcements(pg_url: str, store: PartitionedSessionStore, session: Session) -> int:
    """How many NOTIFYs saving ``session`` sends on the partitions' channels."""
    with psycopg.connect(pg_url, autocommit=True) as listener:
        for part in store.parts:
            listener.execute(f"LISTEN {part.name.lower()}_events")  # the recorder's channel
        store.save(session)
        return len(list(listener.notifies(timeout=0.5)))


@pytest.mark.parametrize("notify", ["on", "off"])
def test_projection_runners_follow_each_partition(pg_url: str, notify: str) -> None:
    """One runner per partition, each on its own notification log and tracking record; together
    they project every session exactly as the store folds it, following live appends (woken by
    NOTIFY, or polling when the partitions do not announce their appends)."""
    with PartitionedSessionStore.open(f"{pg_url}?partitions=3&notify={notify}") as store:
        quiet = [isinstance(p.application.recorder, UnannouncedPostgresRecorder) for p in store.parts]
        assert quiet == [notify == "off"] * 3
        sessions = [make_session(turns=2) for _ in range(9)]
        assert announcements(pg_url, store, sessions[0]) == (1 if notify == "on" else 0)
        for session in sessions[1:]:
            store.save(session)
        runners = [ProjectionRunner(part, ["surface"], poll_interval=0.05) for part in store.parts]
        stop = threading.Event()
        threads = [threading.Thread(target=r.run_forever, args=(stop,)) for r in runners]
        try:
            for thread in threads:
                thread.start()
            for session in sessions[:4]:  # appended while the runners follow
                user(session, "one more")
                start_turn(session)
                answer_step(session)
                end_turn(session)
                store.save(session)
            for runner in runners:
                top = runner.store.max_notification_id()
                if top:  # a partition no session hashed to has nothing to wait for
                    runner.wait(top, timeout=10)
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        expected = {s.id: tuple(store.get(s.id).nodes) for s in sessions}
        try:
            assert {r.session_id: r.nodes for r in surfaces(runners[0].views["surface"])} == expected
            # Rebuilding shared views: drop every partition's view first, then catch each up.
            for runner in runners:
                for projection in runner.projections:
                    projection.drop()
            for runner in runners:
                runner.catch_up()
            assert {r.session_id: r.nodes for r in surfaces(runners[-1].views["surface"])} == expected
        finally:
            for runner in runners:
                runner.close()


def test_a_source_written_during_the_copy_still_verifies_what_was_copied() -> None:
    with SessionStore.open("memory://") as source_store, SessionStore.open("memory://") as target:
        session = source_store.create()
        user(session, "task")
        start_turn(session)
        tool_step(session)
        source_store.save(session)

        read = source_store.iter_events

        def written_meanwhile(session_id: UUID, *args: Any, **kwargs: Any) -> Iterator[SessionEvent]:
            """The source as a live agent keeps writing to it right after the copy read it."""
            yield from read(session_id, *args, **kwargs)
            if session.open_turn is not None:  # after the first read
                tool_step(session)
                end_turn(session)
                source_store.save(session)

        source_store.iter_events = written_meanwhile  # type: ignore[method-assign]
        report = copy_session(source_store, target, session.id)
        assert report.verified, report.detail
        assert report.events == len(target.get(session.id)) < len(session)
