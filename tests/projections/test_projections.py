"""Projections: the surface view, the compaction ledger and token usage, on every backend.

The property at the heart of it: for random sessions with compactions, pruning, failed and orphaned
brackets, the view maintained incrementally (caught up at random moments) equals a view rebuilt from
scratch, and both equal what the aggregate folds live.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import pytest
from eventsourcing.persistence import StoredEvent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compaction.engine.meters import HeuristicMeter, Meter
from compaction.engine.prune import PruneConfig, prune_session
from compaction.sessions.blocks import Message, Source, TextBlock
from compaction.sessions.events import Replace, StepEnd, UserMessage
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from compaction.vocabulary.events import (
    COMPACT_PLUGIN,
    CompactEnd,
    CompactStart,
    CompactSummary,
    Fidelity,
    Lease,
    ShadowedRange,
)
from projections import (
    ALL,
    ProjectionConfigError,
    ProjectionFoldError,
    ProjectionRunner,
    ProjectionTimeoutError,
    TrackingConflictError,
    compactions,
    steps_of,
    surface_at,
    surface_of,
    surfaces,
    usage_of,
)
from projections.views.base import ViewRecorder
from tests.builders import answer_step, end_turn, run_human, run_json, start_turn, tool_step, turn, user

LEASE = Lease(host="test", pid=1, expires_at=datetime(2030, 1, 1, tzinfo=UTC))
PRUNE = PruneConfig(threshold_chars=300, head_chars=100, tail_chars=50)


# ---------------------------------------------------------------- random sessions


class Writer:
    """Grows sessions with random but legal activity and saves after every operation."""

    def __init__(self, store: SessionStore, rng: random.Random, *, autosave: bool = True) -> None:
        self.store = store
        self.rng = rng
        self.autosave = autosave
        self.orphans: dict[UUID, list[CompactStart]] = {}

    def new_session(self) -> Session:
        session = self.store.create()
        user(session, "fix the failing tests in src/app")
        if self.autosave:
            self.store.save(session)
        return session

    def step(self, session: Session) -> None:
        operation = self.rng.choice(
            ["turn"] * 4 + ["compact", "compact", "prune", "prune", "fail", "orphan", "close"]
        )
        getattr(self, f"_{operation}")(session)
        if self.autosave:
            self.store.save(session)

    def _turn(self, session: Session) -> None:
        start_turn(session)
        for _ in range(self.rng.randint(0, 3)):
            size = self.rng.choice([20, 700, 700])
            tool_step(session, n_calls=self.rng.randint(0, 2), output="output line\n" * (size // 12))
        answer_step(session, "done for now")
        end_turn(session)
        if self.rng.random() < 0.3:
            user(session, "next: also check the docs")
        if self.rng.random() < 0.5:
            self._prune(session)

    def _compact(self, session: Session) -> None:
        nodes, cuts = session.nodes, session.surface.cuts()
        starts = [i for i in range(len(nodes)) if cuts[i] == 0]
        if len(nodes) < 2 or not starts:
            return
        first = self.rng.choice(starts)
        ends = [j for j in range(first, len(nodes)) if cuts[j + 1] == 0]
        last = self.rng.choice(ends)
        shadowed = tuple(nodes[first : last + 1])
        compaction_id = f"c{len(session)}"
        start = session.append(CompactStart(compaction_id=compaction_id, turn=None, lease=LEASE))
        summary = (TextBlock(f"## Goal\nsummary of {len(shadowed)} nodes"),)
        summary_event = session.append(
            CompactSummary(
                compaction_id=compaction_id,
                summary=summary,
                shadowed_range=ShadowedRange(shadowed[0], shadowed[-1]),
                shadowed_seqs=shadowed,
                shadowed_token_count=10 * len(shadowed),
                summary_token_count=7,
                provider="test",
                model="test-model",
                fidelity=Fidelity(identifiers_total=3, identifiers_kept=2),
            )
        )
        checkpoint = Message(
            id=f"checkpoint-{compaction_id}",
            role="user",
            content=summary,
            source=Source(kind="plugin", plugin=COMPACT_PLUGIN, compaction_id=compaction_id),
        )
        session.append(
            UserMessage(
                message=checkpoint,
                surface_op=Replace(shadowed[0], shadowed[-1]),
                source_event_seqs=(start.seq, summary_event.seq, *shadowed),
            )
        )
        session.append(CompactEnd(compaction_id=compaction_id, turn=None))

    def _prune(self, session: Session) -> None:
        prune_session(session, HeuristicMeter(), PRUNE)

    def _fail(self, session: Session) -> None:
        compaction_id = f"f{len(session)}"
        session.append(CompactStart(compaction_id=compaction_id, turn=None, lease=LEASE))
        session.append(CompactEnd(compaction_id=compaction_id, turn=None, error="summarizer: boom"))

    def _orphan(self, session: Session) -> None:
        start = CompactStart(compaction_id=f"o{len(session)}", turn=None, lease=LEASE)
        stamped = session.append(start)
        assert isinstance(stamped, CompactStart)
        self.orphans.setdefault(session.id, []).append(stamped)

    def _close(self, session: Session) -> None:
        """Recovery releasing an orphaned start, as a later compact/end with an error."""
        pending = self.orphans.get(session.id)
        if pending:
            start = pending.pop(0)
            session.append(
                CompactEnd(compaction_id=start.compaction_id, turn=None, error="released by recovery")
            )


# ---------------------------------------------------------------- oracles from the aggregate


def expected_ledger(session: Session) -> list[dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for event in session.events():
        if isinstance(event, CompactStart):
            rows[event.compaction_id] = {
                "compaction_id": event.compaction_id,
                "start_seq": event.seq,
                "outcome": "orphaned",
                "summary_seq": None,
                "replacement_seq": None,
                "end_seq": None,
                "error": None,
                "shadowed_seqs": None,
                "summary_tokens": None,
            }
        elif isinstance(event, CompactSummary):
            rows[event.compaction_id] |= {
                "summary_seq": event.seq,
                "shadowed_seqs": list(event.shadowed_seqs),
                "summary_tokens": event.summary_token_count,
            }
        elif isinstance(event, CompactEnd):
            rows[event.compaction_id] |= {
                "end_seq": event.seq,
                "error": event.error,
                "outcome": "committed" if event.error is None else "failed",
            }
        elif isinstance(event.surface_op, Replace) and isinstance(event, UserMessage):
            source = event.message.source
            if source is not None and source.compaction_id in rows:
                rows[source.compaction_id]["replacement_seq"] = event.seq
    return sorted(rows.values(), key=lambda r: r["start_seq"])


def priced_surface(session: Session, meter: Meter, seqs: list[int]) -> int:
    return sum(meter.event(session.event(s)) for s in seqs)


def check_against_aggregate(store: SessionStore, views: dict[str, ViewRecorder]) -> None:
    meter = HeuristicMeter()
    for session_id in store.session_ids():
        session = store.get(session_id, use_snapshots=False)
        record = surface_of(views["surface"], session_id)
        assert record is not None
        assert record.nodes == tuple(session.nodes)
        assert record.generation == session.surface.generation
        assert record.events == len(session)
        for seq in range(0, len(session), max(1, len(session) // 7)):
            assert surface_at(views["surface"], session_id, seq) == session.surface_at(seq)
        ledger = (
            [
                {k: row[k] for k in expected_ledger(session)[0]}
                for row in compactions(views["ledger"], session_id)
            ]
            if expected_ledger(session)
            else compactions(views["ledger"], session_id)
        )
        assert ledger == expected_ledger(session)
        usage = usage_of(views["usage"], session_id)
        assert usage is not None
        assert usage["surface_tokens"] == priced_surface(session, meter, session.nodes)
        assert (usage["events"], usage["nodes"]) == (len(session), len(session.nodes))
        step_ends = [e for e in session.events() if isinstance(e, StepEnd)]
        steps = steps_of(views["usage"], session_id)
        assert [s["seq"] for s in steps] == [e.seq for e in step_ends]
        for row in steps:
            assert row["surface_tokens"] == priced_surface(session, meter, session.surface_at(row["seq"]))


def dump(views: dict[str, ViewRecorder]) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every view table (in key order)."""
    return {t.name: view.select(t.name, t.column_names) for view in views.values() for t in view.tables}


# ---------------------------------------------------------------- the property


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_incremental_equals_rebuilt_equals_aggregate(store: SessionStore, seed: int) -> None:
    rng = random.Random(seed)
    writer = Writer(store, rng)
    sessions = [writer.new_session() for _ in range(rng.randint(1, 3))]
    with ProjectionRunner(store, batch_size=rng.choice([1, 7, 50, 2000])) as runner:
        for _ in range(rng.randint(6, 16)):
            writer.step(rng.choice(sessions))
            if rng.random() < 0.4:
                runner.catch_up()
        runner.catch_up()
        check_against_aggregate(store, runner.views)
        incremental = dump(runner.views)
    with ProjectionRunner(store, batch_size=rng.choice([3, 1000])) as rebuilt:
        reports = rebuilt.rebuild()
        assert dump(rebuilt.views) == incremental
        latest = store.max_notification_id()
        counted = store.count_notifications(0, latest)  # ids have gaps on JetStream
        assert all(r.events == counted and r.position == latest for r in reports)


# ---------------------------------------------------------------- resuming, never twice


def test_resume_applies_only_new_notifications(store: SessionStore) -> None:
    writer = Writer(store, random.Random(7))
    session = writer.new_session()
    for _ in range(6):
        writer.step(session)
    with ProjectionRunner(store) as runner:
        first = runner.catch_up()
    latest = store.max_notification_id()
    assert [r.events for r in first] == [store.count_notifications(0, latest)] * len(ALL)
    with ProjectionRunner(store) as again:
        assert [r.events for r in again.catch_up()] == [0] * len(ALL)
    before = len(session)
    for _ in range(5):
        writer.step(session)
    with ProjectionRunner(store, max_cached_sessions=1) as later:
        assert later.behind() == len(session) - before  # counted, though ids have gaps on JetStream
        reports = later.catch_up()
        assert [r.events for r in reports] == [len(session) - before] * len(ALL)
        assert later.behind() == 0
        check_against_aggregate(store, later.views)


def test_states_reload_after_eviction(store: SessionStore) -> None:
    """With one cached session and batches of 3, every batch reloads states from the view."""
    writer = Writer(store, random.Random(11))
    sessions = [writer.new_session() for _ in range(3)]
    with ProjectionRunner(store, batch_size=3, max_cached_sessions=1) as runner:
        for round_ in range(12):
            writer.step(sessions[round_ % 3])
            runner.catch_up()
        check_against_aggregate(store, runner.views)


def test_a_second_writer_of_the_same_view_is_refused(store: SessionStore) -> None:
    writer = Writer(store, random.Random(3))
    session = writer.new_session()
    writer.step(session)
    with ProjectionRunner(store, ["surface"]) as one, ProjectionRunner(store, ["surface"]) as two:
        one.catch_up()
        with pytest.raises(TrackingConflictError, match="another runner"):
            two.catch_up()
        assert two.projections[0].position == 0
        two.close()
    with ProjectionRunner(store, ["surface"]) as three:
        assert three.catch_up()[0].events == 0


def test_rebuild_of_one_view_leaves_the_others(store: SessionStore) -> None:
    writer = Writer(store, random.Random(5))
    session = writer.new_session()
    for _ in range(4):
        writer.step(session)
    with ProjectionRunner(store) as runner:
        runner.catch_up()
        ledger_rows = dump({"ledger": runner.views["ledger"]})
    with ProjectionRunner(store, ["surface"]) as surface_only:
        assert surface_only.rebuild()[0].events == store.count_notifications(0, store.max_notification_id())
    with ProjectionRunner(store) as runner:
        assert [r.events for r in runner.catch_up()] == [0, 0, 0]
        assert dump({"ledger": runner.views["ledger"]}) == ledger_rows


# ---------------------------------------------------------------- the ledger


def test_ledger_reevaluates_an_orphan_when_its_end_arrives(store: SessionStore) -> None:
    writer = Writer(store, random.Random(1))
    session = writer.new_session()
    writer._turn(session)
    writer._orphan(session)
    writer._turn(session)
    store.save(session)
    with ProjectionRunner(store, ["ledger"]) as runner:
        runner.catch_up()
        (row,) = compactions(runner.views["ledger"], session.id)
        assert (row["outcome"], row["end_seq"]) == ("orphaned", None)
        writer._close(session)
        writer._compact(session)
        store.save(session)
        runner.catch_up()
        rows = compactions(runner.views["ledger"], session.id)
    assert [r["outcome"] for r in rows] == ["failed", "committed"]
    assert rows[0]["error"] == "released by recovery"
    committed = rows[1]
    assert committed["replacement_seq"] == committed["summary_seq"] + 1
    assert committed["end_seq"] == committed["summary_seq"] + 2
    assert committed["fidelity"] == {"identifiers_total": 3, "identifiers_kept": 2}
    assert (committed["provider"], committed["model"], committed["meter"]) == (
        "test",
        "test-model",
        "heuristic",
    )
    assert committed["shadowed_tokens"] == 10 * len(committed["shadowed_seqs"])
    assert committed["shadowed_start"] == committed["shadowed_seqs"][0]


# ---------------------------------------------------------------- reading and waiting


def test_surfaces_lists_every_session(store: SessionStore) -> None:
    writer = Writer(store, random.Random(2))
    sessions = [writer.new_session() for _ in range(3)]
    for session in sessions:
        writer.step(session)
    with ProjectionRunner(store, ["surface"]) as runner:
        runner.catch_up()
        listed = {r.session_id: r.nodes for r in surfaces(runner.views["surface"])}
    assert listed == {s.id: tuple(store.get(s.id).nodes) for s in sessions}


def test_wait_blocks_until_the_view_has_the_notification(store: SessionStore) -> None:
    writer = Writer(store, random.Random(4))
    writer.new_session()
    latest = store.max_notification_id()
    assert latest is not None
    with ProjectionRunner(store, ["surface"]) as runner:
        with pytest.raises(ProjectionTimeoutError, match=f"notification {latest}"):
            runner.wait(latest, timeout=0.05)
        runner.catch_up()
        runner.wait(latest, timeout=0.05)


def test_the_store_follows_notifications_after_a_position(store: SessionStore) -> None:
    writer = Writer(store, random.Random(6))
    session = writer.new_session()
    writer._turn(session)
    store.save(session)
    with store.follow(store.notifications(0, 1)[0].notification_id) as feed:
        seen = [next(feed) for _ in range(len(session) - 1)]
        feed.stop()
        with pytest.raises(StopIteration):
            next(feed)
    assert [n.event for n in seen] == store.load_events(session.id, 1)
    assert {n.session_id for n in seen} == {session.id}
    assert [n.notification_id for n in seen] == sorted(n.notification_id for n in seen)


# ---------------------------------------------------------------- errors


def test_a_stored_event_of_unknown_type_folds_as_an_opaque_event(store: SessionStore) -> None:
    writer = Writer(store, random.Random(8))
    session = writer.new_session()
    store.application.recorder.insert_events([StoredEvent(session.id, 1, "martian/event", b'{"seq": 1}')])
    with ProjectionRunner(store, ["surface", "ledger", "usage"]) as runner:
        runner.catch_up()
        assert runner.position == store.max_notification_id()
        assert surface_of(runner.views["surface"], session.id) is not None


def test_a_strict_store_stops_the_batch_at_an_unknown_type(store: SessionStore) -> None:
    writer = Writer(store, random.Random(8))
    session = writer.new_session()
    store.application.recorder.insert_events([StoredEvent(session.id, 1, "martian/event", b'{"seq": 1}')])
    store.application.mapper.strict_types = True  # type: ignore[attr-defined]
    with ProjectionRunner(store, ["surface"]) as runner:
        with pytest.raises(ProjectionFoldError, match=f"session {session.id} seq 1") as raised:
            runner.catch_up()
        assert "martian/event" in str(raised.value)
        assert runner.projections[0].position == 0
        assert runner.views["surface"].count("surface_nodes") == 0


def test_a_stored_event_that_breaks_a_surface_rule_names_it(store: SessionStore) -> None:
    writer = Writer(store, random.Random(9))
    session = writer.new_session()
    bad = b'{"seq":1,"time":"2026-01-01T00:00:00Z","message":{"id":"x","role":"user","content":[]}}'
    store.application.recorder.insert_events([StoredEvent(session.id, 1, "user/message", bad)])
    with (
        ProjectionRunner(store, ["surface", "usage"]) as runner,
        pytest.raises(ProjectionFoldError, match=r"seq 1 .*requires a surfaceOp"),
    ):
        runner.catch_up()


def test_configuration_errors(store: SessionStore, tmp_path: Any) -> None:
    with pytest.raises(ProjectionConfigError, match="unknown projection 'bogus'"):
        ProjectionRunner(store, ["bogus"])
    with pytest.raises(ProjectionConfigError, match="batch_size must be positive"):
        ProjectionRunner(store, batch_size=0)
    if store.location.kind not in ("sqlite", "nats"):  # both keep their views in SQLite files
        with pytest.raises(ProjectionConfigError, match="applies to SQLite stores only"):
            ProjectionRunner(store, views_path=str(tmp_path / "v.db"))


def test_usage_refuses_to_resume_with_another_meter(store: SessionStore) -> None:
    writer = Writer(store, random.Random(10))
    session = writer.new_session()
    with ProjectionRunner(store, ["usage"]) as runner:
        runner.catch_up()
    writer.step(session)
    with ProjectionRunner(store, ["usage"], meter=HeuristicMeter(3)) as runner:
        with pytest.raises(
            ProjectionConfigError, match="built with meter 'heuristic' but this runner prices with"
        ):
            runner.catch_up()
        assert runner.projections[0].position == store.notifications(0, 1)[0].notification_id


# ---------------------------------------------------------------- SQLite views file


def test_sqlite_views_live_next_to_the_store(sqlite_url: str, tmp_path: Any) -> None:
    with SessionStore.open(sqlite_url) as store:
        Writer(store, random.Random(0)).new_session()
        with ProjectionRunner(store) as runner:
            runner.catch_up()
            assert runner.database.location == str(tmp_path / "sessions.views.db")
        elsewhere = tmp_path / "other" / "views.db"
        with ProjectionRunner(store, views_path=str(elsewhere)) as runner:
            assert runner.catch_up()[0].events == 1
    assert (tmp_path / "sessions.views.db").exists()
    assert elsewhere.exists()


# ---------------------------------------------------------------- the command line


def test_cli_rebuild_json(sqlite_url: str) -> None:
    with SessionStore.open(sqlite_url) as store:
        writer = Writer(store, random.Random(12))
        session = writer.new_session()
        for _ in range(5):
            writer.step(session)
        latest = store.max_notification_id()
    code, document = run_json("--store", sqlite_url, "rebuild")
    assert code == 0
    assert document["mode"] == "rebuild"
    assert [p["name"] for p in document["projections"]] == list(ALL)
    assert all(p["events"] == latest == p["position"] for p in document["projections"])
    with SessionStore.open(sqlite_url) as store, ProjectionRunner(store) as runner:
        rows = {name: view.rows() for name, view in runner.views.items()}
    assert {p["name"]: p["rows"] for p in document["projections"]} == rows
    code, resumed = run_json("--store", sqlite_url, "rebuild", "--projection", "ledger", "--resume")
    assert code == 0
    assert resumed["mode"] == "resume"
    assert resumed["projections"] == [
        {"name": "ledger", "events": 0, "rows": rows["ledger"], "position": latest}
    ]


def test_cli_rebuild_for_people_and_errors(sqlite_url: str) -> None:
    with SessionStore.open(sqlite_url) as store:
        Writer(store, random.Random(13)).new_session()
    code, out, _ = run_human("--store", sqlite_url, "rebuild", "--projection", "surface")
    assert code == 0
    assert "surface" in out and "rebuilt 1 view(s): 1 notifications applied" in out
    code, document = run_json("--store", sqlite_url, "rebuild", "--meter", "abacus")
    assert code == 1
    error = document["error"]
    assert error["type"] == "CompactionConfigError" and "unknown meter 'abacus'" in error["message"]
    code, document = run_json("--store", "memory://", "rebuild", "--views", "x.db")
    assert code == 1 and document["error"]["type"] == "ProjectionConfigError"


def test_public_surface_is_pinned() -> None:
    import projections

    assert sorted(projections.__all__) == sorted(
        [
            "ALL",
            "PROJECTIONS",
            "FoldProjection",
            "FollowerGaveUpError",
            "LedgerProjection",
            "ProjectionConfigError",
            "ProjectionError",
            "ProjectionFoldError",
            "ProjectionReport",
            "ProjectionRunner",
            "ProjectionTimeoutError",
            "Reconnect",
            "SurfaceProjection",
            "SurfaceRecord",
            "TrackingConflictError",
            "UsageProjection",
            "ViewDatabase",
            "ViewRecorder",
            "ViewStoreError",
            "compactions",
            "default_views_path",
            "load_projections",
            "projection_names",
            "resolve_names",
            "steps_of",
            "stop_on_signals",
            "surface_at",
            "surface_of",
            "surfaces",
            "usage_of",
        ]
    )
    for name in projections.__all__:
        assert getattr(projections, name) is not None


def test_one_event_at_a_time_through_eventsourcings_projection_api(store: SessionStore) -> None:
    from eventsourcing.persistence import Tracking

    from compaction.sessions.mapper import EventEnvelope
    from projections import SurfaceProjection, ViewDatabase

    writer = Writer(store, random.Random(14))
    session = writer.new_session()
    for _ in range(4):
        writer.step(session)
    with ViewDatabase(store) as database:
        view = database.recorder("surface", SurfaceProjection.tables)
        view.drop(store.name)
        projection = SurfaceProjection(view, store)
        notifications = store.notifications(0, 10_000)
        for n in notifications:
            envelope = EventEnvelope(n.session_id, n.event.seq, n.event)
            projection.process_event(envelope, Tracking(store.name, n.notification_id))
        record = surface_of(view, session.id)
        assert record is not None and record.nodes == tuple(store.get(session.id).nodes)
        last = notifications[-1]
        with pytest.raises(TrackingConflictError):
            projection.process_event(
                EventEnvelope(last.session_id, last.event.seq, last.event),
                Tracking(store.name, last.notification_id),
            )
        assert view.max_tracking_id(store.name) == last.notification_id


def test_a_follower_wakes_on_appends_and_stops_when_asked(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL LISTENs and the in-memory store notifies: both wake long before a 30 s poll;
    SQLite has nothing to listen to, so it polls (here every 50 ms)."""
    import threading
    import time

    waiting = threading.Event()
    follow = store.follow

    class WatchedFeed:
        """The follower's feed, telling the test when the follower blocks for the next notification."""

        def __init__(self, feed: Any) -> None:
            self.feed = feed

        def __iter__(self) -> WatchedFeed:
            return self

        def __next__(self) -> Any:
            waiting.set()
            return next(self.feed)

        def __enter__(self) -> WatchedFeed:
            self.feed.__enter__()
            return self

        def __exit__(self, *exc: object) -> None:
            self.feed.__exit__(*exc)

        def stop(self) -> None:
            self.feed.stop()

        def processed(self, notification_id: int) -> None:
            self.feed.processed(notification_id)

    monkeypatch.setattr(store, "follow", lambda *args, **kwargs: WatchedFeed(follow(*args, **kwargs)))
    writer = Writer(store, random.Random(15))
    session = writer.new_session()
    poll = 0.05 if store.location.kind == "sqlite" else 30.0
    with ProjectionRunner(store, ["surface"], poll_interval=poll) as runner:
        stop = threading.Event()
        follower = threading.Thread(target=runner.run_forever, args=(stop,))
        follower.start()
        try:
            runner.wait(1, timeout=5)
            # Caught up and blocked on its feed: the append below must wake it (not the 30 s poll).
            assert waiting.wait(timeout=5), "the follower never asked its feed for a notification"
            writer.step(session)
            latest = store.max_notification_id()
            assert latest is not None
            started = time.monotonic()
            runner.wait(latest, timeout=5)
            assert time.monotonic() - started < 5
        finally:
            stop.set()
            follower.join(timeout=10)
        assert not follower.is_alive()
        record = surface_of(runner.views["surface"], session.id)
        assert record is not None and record.nodes == tuple(store.get(session.id).nodes)


def test_rebuilding_one_partitions_shared_views_leaves_no_partition_silently_behind(
    pg_url: str,
) -> None:
    """PostgreSQL partitions share the view tables: a rebuild of one partition's views empties them
    for every partition, so every partition's tracking must start over too (a stale runner fails
    loudly; a fresh one catches up from the start) instead of resuming over rows that are gone."""
    from uuid import uuid4

    from compaction.sessions.partitioned import PartitionedSessionStore, partition_of

    with PartitionedSessionStore.open(f"{pg_url}?partitions=2") as store:
        ids = [uuid4() for _ in range(40)]
        chosen = [next(i for i in ids if partition_of(i, 2) == p) for p in (0, 1)]
        for session_id in chosen:
            session = Session(session_id)
            turn(session)
            store.save(session)
        expected = {i: tuple(store.get(i).nodes) for i in chosen}
        stale = ProjectionRunner(store.parts[1], ["surface"])
        try:
            stale.catch_up()
            with ProjectionRunner(store.parts[0], ["surface"]) as first:
                first.rebuild()  # drops the shared tables
            later = store.get(chosen[1])
            user(later, "one more")
            store.save(later)
            expected[chosen[1]] = tuple(later.nodes)
            with pytest.raises(TrackingConflictError):
                stale.catch_up()  # its rows are gone: it must not resume over them
        finally:
            stale.close()
        with ProjectionRunner(store.parts[1], ["surface"]) as second:
            second.catch_up()
            assert {r.session_id: r.nodes for r in surfaces(second.views["surface"])} == expected
