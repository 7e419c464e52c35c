"""Tampered stores: one damaged session never takes the others down.

Each case damages one session of a store that holds a healthy one too, straight through the
database driver (:mod:`tests.reliability.tamper`). ``compaction sessions`` lists both, the damaged
one with ``unreadable`` and the reason, or (a corrupt snapshot over intact events) loaded by
replaying its events, with a warning saying so. A deleted event row that a snapshot covers is
noticed by the load itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from uuid import UUID

import pytest

from compaction.errors import StoreError
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from tests.builders import answer_step, end_turn, run_json, start_turn, user
from tests.reliability import tamper

LENGTH = 13
SNAPSHOT_AT = 10  # the snapshot covers seqs 0..9; seqs 10..12 are replayed after it


def _session(store: SessionStore) -> Session:
    session = store.create()
    user(session, "Please fix the failing tests in src/mod.py")
    start_turn(session)
    for _ in range(3):
        answer_step(session, "working on it")
    end_turn(session)
    store.save(session)
    return session


def _two_sessions(url: str) -> tuple[Session, Session]:
    with SessionStore.open(url, snapshot_interval=0) as store:
        healthy, damaged = _session(store), _session(store)
        for session in (healthy, damaged):
            store.take_session_snapshot(store.get(session.id, at=SNAPSHOT_AT - 1))
    return healthy, damaged


Damage = Callable[[str, UUID, int], None]


def _move_into_gap(url: str, session_id: UUID, length: int) -> None:
    tamper.delete_row(url, session_id, length - 1)
    tamper.move_row(url, session_id, length - 3, length - 1)


UNREADABLE: dict[str, Damage] = {
    "first row deleted": lambda url, sid, n: tamper.delete_row(url, sid, 0),
    "middle row deleted": lambda url, sid, n: tamper.delete_row(url, sid, n // 2),
    "row deleted past the snapshot": lambda url, sid, n: tamper.delete_row(url, sid, n - 2),
    "payload not JSON": lambda url, sid, n: tamper.set_state(url, sid, 3, b"{not json"),
    "payload of another shape": lambda url, sid, n: tamper.set_state(url, sid, 3, b"[1,2]"),
    "unknown event type": lambda url, sid, n: tamper.set_topic(url, sid, 3, "from/the-future"),
    "row moved past the end": lambda url, sid, n: tamper.move_row(url, sid, 2, n + 5),
    "row moved into a gap": _move_into_gap,
}


STRICT_ONLY = {"unknown event type"}
"""Damage that only a strict reader refuses: a row of a type no installed package defines reads
as an opaque ``UnknownEvent`` unless ``--strict-types`` asks otherwise."""


def _listing(url: str, *, strict: bool = False) -> dict[str, dict[str, object]]:
    flags = ("--strict-types",) if strict else ()
    code, document = run_json("--store", url, *flags, "sessions")
    assert code == 0, document
    return {row["session_id"]: row for row in document["sessions"]}


@pytest.mark.parametrize("case", sorted(UNREADABLE))
@pytest.mark.parametrize(
    "durable_store_url",
    ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)],
    indirect=True,
)
def test_sessions_lists_every_session_and_marks_the_damaged_one(durable_store_url: str, case: str) -> None:
    url = durable_store_url
    healthy, damaged = _two_sessions(url)
    assert len(damaged) == LENGTH
    UNREADABLE[case](url, damaged.id, len(damaged))
    rows = _listing(url, strict=case in STRICT_ONLY)
    assert set(rows) == {str(healthy.id), str(damaged.id)}
    assert "unreadable" not in rows[str(healthy.id)]
    assert rows[str(healthy.id)]["events"] == LENGTH
    reason = rows[str(damaged.id)].get("unreadable")
    assert isinstance(reason, str) and reason, rows
    assert rows[str(damaged.id)]["surface_nodes"] is None


@pytest.mark.parametrize(
    "durable_store_url",
    ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)],
    indirect=True,
)
def test_a_row_of_a_type_nobody_defines_is_listed_as_readable(durable_store_url: str) -> None:
    url = durable_store_url
    healthy, damaged = _two_sessions(url)
    tamper.set_topic(url, damaged.id, 3, "from/the-future")
    rows = _listing(url)
    assert set(rows) == {str(healthy.id), str(damaged.id)}
    assert "unreadable" not in rows[str(damaged.id)], rows
    assert rows[str(damaged.id)]["events"] == LENGTH


@pytest.mark.parametrize(
    "durable_store_url",
    ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)],
    indirect=True,
)
@pytest.mark.parametrize(
    "snapshot",
    [b"\xc1not msgpack", b"", b"\x80", b"\x93\x01\x02\x03"],
    ids=["garbage", "empty", "empty-map", "wrong-shape"],
)
def test_a_corrupt_snapshot_falls_back_to_the_events_and_says_so(
    durable_store_url: str, snapshot: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    url = durable_store_url
    healthy, damaged = _two_sessions(url)
    assert tamper.corrupt_snapshots(url, damaged.id, snapshot) >= 1
    with caplog.at_level(logging.WARNING, logger="compaction.store"), SessionStore.open(url) as store:
        loaded = store.get(damaged.id)
        assert [e.seq for e in loaded.events()] == list(range(LENGTH))
        assert loaded.derive_messages() == damaged.derive_messages()
        assert len(store.snapshot_fallbacks) == 1
        assert "replaying the events instead" in store.snapshot_fallbacks[0]
    assert any("replaying the events instead" in r.getMessage() for r in caplog.records)
    rows = _listing(url)
    assert set(rows) == {str(healthy.id), str(damaged.id)}
    assert all("unreadable" not in row for row in rows.values())
    assert rows[str(damaged.id)]["events"] == LENGTH


def test_a_snapshot_that_claims_another_length_is_not_trusted(sqlite_url: str) -> None:
    healthy, damaged = _two_sessions(sqlite_url)
    with SessionStore.open(sqlite_url) as store:
        real = store.application.snapshots
        assert real is not None
        stored = real.recorder.select_events(healthy.id, desc=True, limit=1)[0]
    tamper.corrupt_snapshots(sqlite_url, damaged.id, stored.state)  # the other session's state
    with SessionStore.open(sqlite_url) as store:
        loaded = store.get(damaged.id)
        assert loaded.derive_messages() == damaged.derive_messages()


def test_a_deleted_row_under_a_snapshot_is_noticed_by_the_load(sqlite_url: str) -> None:
    """The snapshot covers seqs 0..9; deleting seq 2 used to go unnoticed by `show`."""
    _, damaged = _two_sessions(sqlite_url)
    tamper.delete_row(sqlite_url, damaged.id, 2)
    with (
        SessionStore.open(sqlite_url) as store,
        pytest.raises(StoreError, match=r"covers seqs 0\.\.9 but 9 of those 10 rows"),
    ):
        store.get(damaged.id)
    code, document = run_json("--store", sqlite_url, "show", str(damaged.id))
    assert code == 1
    assert "rows deleted or moved" in document["error"]["message"]
