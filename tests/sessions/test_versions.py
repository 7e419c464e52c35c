"""Versioned events, eventsourcing's convention: ``class_version`` and ``upcast_vN_vN+1`` static
methods, applied to every stored row read (load, the notification log, a follower's feed, export)
and to native import. ``session/resume`` is at version 2; its version 1 rows read as ``"unknown"``.
Run on every backend."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any, ClassVar

import msgspec
import pytest
from eventsourcing.persistence import StoredEvent

from compaction.errors import EventVersionError, UnknownEventTypeError
from compaction.sessions.events import SessionEvent, SessionResume, register_event_type, upcast_state
from compaction.sessions.mapper import decode_event, stored_state
from compaction.sessions.native import export_lines, export_session, import_session
from compaction.sessions.store import SessionStore
from tests.builders import turn

V1_RESUME = b'{"seq":%d,"time":"2026-01-01T00:00:00Z","host":"old-host","pid":7}'


def _with_v1_resume(store: SessionStore) -> tuple[Any, int]:
    """A session whose last row is a version 1 ``session/resume``, written as raw bytes."""
    session = store.create()
    turn(session, "hello")
    store.save(session)
    seq = len(session)
    store.application.recorder.insert_events(
        [StoredEvent(session.id, seq, "session/resume", V1_RESUME % seq)]
    )
    return session.id, seq


def test_a_version_1_row_loads_as_version_2(store: SessionStore) -> None:
    session_id, seq = _with_v1_resume(store)
    session = store.get(session_id)
    resumed = session.event(seq)
    assert isinstance(resumed, SessionResume)
    assert (resumed.host, resumed.pid, resumed.reason) == ("old-host", 7, "unknown")
    (read,) = store.read_rows(session_id, seq)
    assert read == resumed
    # a new event of the class is stored at version 2 and reads back as written
    session.append(SessionResume(host="new-host"))
    store.save(session)
    (row,) = store.application.recorder.select_events(session_id, gt=seq, limit=1)
    assert bytes(row.state).startswith(b'{"class_version":2,')
    assert store.get(session_id).event(seq + 1).reason == "restart"


def test_the_notification_log_and_a_follower_read_it_upcast(store: SessionStore) -> None:
    before = store.max_notification_id()
    _, seq = _with_v1_resume(store)
    found = store.notifications(before, 100)
    assert [n.event.reason for n in found if isinstance(n.event, SessionResume)] == ["unknown"]
    seen: list[SessionEvent] = []
    feed = store.follow(before, poll_interval=0.05)
    with feed:
        stopper = threading.Timer(10, feed.stop)
        stopper.start()
        for notification in feed:
            seen.append(notification.event)
            if notification.event.seq == seq:
                break
        stopper.cancel()
    assert isinstance(seen[-1], SessionResume) and seen[-1].reason == "unknown"
    # eventsourcing's own decoding of the same notification (what a follower's mapper does)
    (last,) = store.application.notification_log.select(start=found[-1].notification_id, limit=1)
    assert store.application.mapper.to_domain_event(last).event.reason == "unknown"


def test_export_writes_it_upcast_and_import_reads_it(store: SessionStore, tmp_path: Path) -> None:
    session_id, seq = _with_v1_resume(store)
    lines = list(export_lines(store.get(session_id)))
    line = json.loads(lines[1 + seq])
    assert line["type"] == "session/resume" and line["class_version"] == 2
    assert line["payload"]["reason"] == "unknown"
    path = tmp_path / "export.jsonl"
    export_session(store.get(session_id), path)
    assert import_session(path).event(seq).reason == "unknown"


def test_an_old_export_line_is_upcast_on_import(tmp_path: Path) -> None:
    """An export written before the class changed (no class_version on the line) imports upcast;
    its content hash is checked against the line as written."""
    with SessionStore.open("memory://") as store:
        session_id, seq = _with_v1_resume(store)
        lines = list(export_lines(store.get(session_id)))
    line = json.loads(lines[1 + seq])
    del line["class_version"], line["payload"]["reason"]
    old = {"seq": line["seq"], "time": line["time"], **line["payload"]}

    line["hash"] = hashlib.sha256(msgspec.json.encode(old)).hexdigest()
    lines[1 + seq] = json.dumps(line, separators=(",", ":"))
    path = tmp_path / "old.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert import_session(path).event(seq).reason == "unknown"
    line["payload"]["host"] = "edited"
    lines[1 + seq] = json.dumps(line, separators=(",", ":"))
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(Exception, match="content hash"):
        import_session(path)


@register_event_type
class Rated(SessionEvent, frozen=True, kw_only=True):
    """A user's type at version 3: v1 ``stars`` (0..5), v2 renamed it ``score``, v3 made it 0..100."""

    TYPE: ClassVar[str] = "test/rated"
    class_version: ClassVar[int] = 3
    score: int

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        state["score"] = state.pop("stars")

    @staticmethod
    def upcast_v2_v3(state: dict[str, Any]) -> None:
        state["score"] *= 20


def test_upcasters_chain_from_any_stored_version() -> None:
    v1 = b'{"seq":0,"time":"2026-01-01T00:00:00Z","stars":4}'
    v2 = b'{"class_version":2,"seq":0,"time":"2026-01-01T00:00:00Z","score":4}'
    v3 = b'{"class_version":3,"seq":0,"time":"2026-01-01T00:00:00Z","score":80}'
    assert [decode_event("test/rated", raw).score for raw in (v1, v2, v3)] == [80, 80, 80]  # type: ignore[attr-defined]
    assert stored_state(decode_event("test/rated", v1))[1] == v3
    with pytest.raises(EventVersionError, match="class_version 4 but Rated is version 3"):
        decode_event("test/rated", b'{"class_version":4,"seq":0,"score":1}')


def test_a_missing_upcaster_is_named() -> None:
    class Skipped(SessionEvent, frozen=True, kw_only=True):
        TYPE: ClassVar[str] = "test/skipped"
        class_version: ClassVar[int] = 2

    with pytest.raises(EventVersionError, match="no upcast_v1_v2 on") as raised:
        upcast_state(Skipped, {"seq": 0})
    assert isinstance(raised.value, UnknownEventTypeError)


def test_copy_keeps_unknown_and_old_rows_readable(store: SessionStore, sqlite_url: str) -> None:
    """A copy writes a row of an unknown type back byte for byte; an old row (copied as stored,
    or re-encoded at the current version) reads upcast in the target."""
    from compaction.sessions.copy import copy_session

    session_id, seq = _with_v1_resume(store)
    unknown = b'{"seq":%d,"time":"2026-01-01T00:00:00Z","mood":"fine"}' % (seq + 1)
    store.application.recorder.insert_events([StoredEvent(session_id, seq + 1, "nobody/knows", unknown)])
    with SessionStore.open(sqlite_url) as target:
        copy_session(store, target, session_id)
        rows = target.application.recorder.select_events(session_id, gt=seq - 1)
        assert [r.topic for r in rows] == ["session/resume", "nobody/knows"]
        assert bytes(rows[1].state) == unknown
        assert target.get(session_id).event(seq).reason == "unknown"
