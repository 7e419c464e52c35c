"""The JetStream store's key-value buckets: snapshots in ``<stream>_snapshots``, compaction leases
in ``<stream>_leases``.

Snapshots: one key per session, a pointer holding the body when it fits and the chunk list when it
does not; a pointer is only ever written after its chunks, the digest is checked on every read, so
a reader gets a whole snapshot or none (and replays). Leases: claimed by compare-and-set before a
``compact/start`` is stored, refused while held (the holder named), taken over when expired, when
closed in the log, or by the process's own failed compaction; released when the bracket closes;
kept by a compaction whose end could not be stored (the stream refusing writes, a real server-side
refusal), exactly as the log keeps its lock.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
from eventsourcing.persistence import IntegrityError, StoredEvent

from compaction.engine.lock import inspect_lock
from compaction.errors import BusyError, LeaseTakenError, LockHeldError
from compaction.service import BasicCompactService
from compaction.sessions.events import now_utc
from compaction.sessions.leases import LeaseClaim
from compaction.sessions.nats.snapshots import JetStreamSnapshotRecorder, Pointer
from compaction.sessions.store import SessionStore
from compaction.vocabulary.config import BasicConfig
from recovery import RecoveryConfig, recover
from tests.compaction.test_transaction import RELAXED, working_session
from tests.conftest import NATS_BASE

MEGABYTE = 1024 * 1024


@pytest.fixture
def store(nats_url: str) -> Iterator[SessionStore]:
    with SessionStore.open(nats_url) as opened:
        yield opened


@pytest.fixture(autouse=True)
def failure_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "failures"
    monkeypatch.setenv("COMPACTION_FAILURE_DIR", str(folder))
    return folder


def _stream(store: SessionStore) -> str:
    return store.settings["NATS_STREAM"]


def _run(operation: Any) -> Any:
    """``operation(js)`` on a plain nats-py connection of its own, on a thread of its own (the
    async tests call it from their running event loop)."""
    import nats

    async def run() -> Any:
        nc = await nats.connect(NATS_BASE)
        try:
            return await operation(nc.jetstream())
        finally:
            await nc.close()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, run()).result()


def _key(store: SessionStore, bucket: str, key: str) -> bytes | None:
    import nats.js.errors

    async def read(js: Any) -> bytes | None:
        kv = await js.key_value(f"{_stream(store)}_{bucket}")
        try:
            return bytes((await kv.get(key)).value or b"")
        except nats.js.errors.KeyNotFoundError:
            return None

    found: bytes | None = _run(read)
    return found


def _pointer(store: SessionStore, session_id: uuid.UUID) -> Pointer:
    value = _key(store, "snapshots", session_id.hex)
    assert value is not None, "no snapshot key"
    return msgspec.msgpack.decode(value, type=Pointer)


def _recorder(store: SessionStore) -> JetStreamSnapshotRecorder:
    snapshots = store.application.snapshots
    assert snapshots is not None
    recorder = snapshots.recorder
    assert isinstance(recorder, JetStreamSnapshotRecorder)
    return recorder


# ---------------------------------------------------------------- snapshots


def test_a_session_snapshot_is_one_key_whose_value_holds_the_body(nats_url: str) -> None:
    with SessionStore.open(nats_url, snapshot_interval=10) as store:
        session = working_session(steps=8, close_turn=True)
        store.save(session)
        pointer = _pointer(store, session.id)
        assert pointer.version == len(session) and pointer.body is not None
        assert pointer.chunks is None and pointer.size == len(pointer.body)
        loaded = store.get(session.id)
        assert list(loaded.events()) == list(session.events())
        assert store.snapshot_fallbacks == []
        with SessionStore.open(nats_url) as other:  # another handle loads from the snapshot
            assert other.get(session.id).nodes == session.nodes
            assert other.snapshot_fallbacks == []


def test_a_snapshot_above_the_max_payload_is_chunked_behind_its_pointer(store: SessionStore) -> None:
    recorder = _recorder(store)
    session_id = uuid.uuid4()
    big = os.urandom(3 * MEGABYTE)
    recorder.insert_events([StoredEvent(session_id, 40, "topic:big", big)])
    pointer = _pointer(store, session_id)
    assert pointer.body is None and pointer.chunks is not None and len(pointer.chunks) >= 3
    (found,) = recorder.select_events(session_id, desc=True, limit=1)
    assert (found.originator_version, found.state) == (40, big)
    assert recorder.select_events(session_id, lte=39, desc=True, limit=1) == []

    newer = os.urandom(2 * MEGABYTE)
    recorder.insert_events([StoredEvent(session_id, 80, "topic:big", newer)])
    (found,) = recorder.select_events(session_id, desc=True, limit=1)
    assert (found.originator_version, found.state) == (80, newer)
    # The first snapshot's chunks are purged once the new pointer is in place.
    stream = f"{_stream(store)}_chunks"
    gone = _run(lambda js: _missing(js, stream, pointer.chunks or []))
    assert gone == len(pointer.chunks)


async def _missing(js: Any, stream: str, seqs: list[int]) -> int:
    import nats.js.errors

    missing = 0
    for seq in seqs:
        try:
            await js.get_msg(stream, seq)
        except nats.js.errors.NotFoundError:
            missing += 1
    return missing


def test_a_snapshot_with_a_lost_chunk_is_never_read_in_part(store: SessionStore) -> None:
    recorder = _recorder(store)
    session_id = uuid.uuid4()
    recorder.insert_events([StoredEvent(session_id, 12, "topic:big", os.urandom(2 * MEGABYTE))])
    pointer = _pointer(store, session_id)
    assert pointer.chunks

    async def lose(js: Any) -> None:
        await js.delete_msg(f"{_stream(store)}_chunks", pointer.chunks[-1])  # type: ignore[index]

    _run(lose)
    assert recorder.select_events(session_id, desc=True, limit=1) == []


def test_a_session_whose_snapshot_body_is_lost_loads_by_replaying(nats_url: str) -> None:
    with SessionStore.open(nats_url, snapshot_interval=10) as store:
        session = working_session(steps=8, close_turn=True)
        store.save(session)
        pointer = _pointer(store, session.id)
        damaged = msgspec.structs.replace(pointer, digest="0" * 64)

        async def damage(js: Any) -> None:
            kv = await js.key_value(f"{_stream(store)}_snapshots")
            await kv.put(session.id.hex, msgspec.msgpack.encode(damaged))

        _run(damage)
        with SessionStore.open(nats_url) as other:
            loaded = other.get(session.id)
        assert list(loaded.events()) == list(session.events())


def test_an_older_snapshot_is_dropped_and_the_same_version_refused(store: SessionStore) -> None:
    recorder = _recorder(store)
    session_id = uuid.uuid4()
    recorder.insert_events([StoredEvent(session_id, 20, "topic:s", b"twenty")])
    recorder.insert_events([StoredEvent(session_id, 10, "topic:s", b"ten")])
    (found,) = recorder.select_events(session_id, desc=True, limit=1)
    assert (found.originator_version, found.state) == (20, b"twenty")
    with pytest.raises(IntegrityError, match="already has its snapshot at version 20"):
        recorder.insert_events([StoredEvent(session_id, 20, "topic:s", b"again")])
    assert recorder.select_events(session_id, gt=20) == []


# ---------------------------------------------------------------- leases


def _claim(session_id: uuid.UUID, *, pid: int = 1, seconds: float = 600) -> LeaseClaim:
    return LeaseClaim(session_id, uuid.uuid4().hex, "elsewhere", pid, now_utc() + timedelta(seconds=seconds))


def _never(claim: LeaseClaim) -> bool:
    return False


def test_a_lease_is_refused_while_held_and_taken_over_when_it_may_be(store: SessionStore) -> None:
    leases = store.compaction_leases
    session_id = uuid.uuid4()
    first = leases.acquire(_claim(session_id), replaces=None, closed=_never)
    assert first is not None
    with pytest.raises(LeaseTakenError) as raised:
        leases.acquire(_claim(session_id, pid=2), replaces=None, closed=_never)
    assert raised.value.compaction_id == first.claim.compaction_id
    assert "held by elsewhere pid 1 until" in str(raised.value)
    # the holder's own failed compaction, taken over
    second = leases.acquire(_claim(session_id, pid=1), replaces=first.claim.compaction_id, closed=_never)
    assert second is not None
    # a claim the log shows closed
    confirmed = leases.confirm(second, 7)
    assert confirmed.claim.start_seq == 7 and confirmed.revision > second.revision
    seen: list[LeaseClaim] = []
    third = leases.acquire(
        _claim(session_id, pid=3), replaces=None, closed=lambda held: seen.append(held) or True
    )
    assert third is not None and [c.start_seq for c in seen] == [7]
    # an expired claim
    leases.release(third)
    expired = leases.acquire(_claim(session_id, seconds=-1), replaces=None, closed=_never)
    assert expired is not None
    assert leases.acquire(_claim(session_id, pid=4), replaces=None, closed=_never) is not None


def test_a_release_by_a_stale_holder_leaves_the_new_claim(store: SessionStore) -> None:
    leases = store.compaction_leases
    session_id = uuid.uuid4()
    old = leases.acquire(_claim(session_id, seconds=-1), replaces=None, closed=_never)
    new = leases.acquire(_claim(session_id), replaces=None, closed=_never)
    assert old is not None and new is not None
    leases.release(old)  # compare-and-set on the old revision: refused, quietly
    with pytest.raises(LeaseTakenError):
        leases.acquire(_claim(session_id, pid=9), replaces=None, closed=_never)


async def test_a_compaction_claims_the_lease_and_releases_it_when_it_commits(
    store: SessionStore,
) -> None:
    session = working_session(close_turn=True)
    store.save(session)
    stages: list[bytes | None] = []

    def look(stage: str) -> None:
        if stage == "summarized":
            stages.append(_key(store, "leases", session.id.hex))

    engine = BasicCompactService(BasicConfig(**RELAXED), on_progress=look)
    result = await engine.compact_now(session, store=store)
    assert result is not None
    (held,) = stages
    assert held is not None
    value = msgspec.json.decode(held)
    assert value["compaction_id"] == result.compaction_id and value["start_seq"] == result.start_seq
    assert value["host"] == socket.gethostname() and value["pid"] == os.getpid()
    assert _key(store, "leases", session.id.hex) is None


async def test_a_claim_held_elsewhere_makes_the_compaction_busy_and_stores_nothing(
    store: SessionStore,
) -> None:
    session = working_session(close_turn=True)
    store.save(session)
    length = len(session)
    held = store.compaction_leases.acquire(_claim(session.id, pid=4242), replaces=None, closed=_never)
    assert held is not None
    with pytest.raises(BusyError, match=r"holds the compaction lease .* pid 4242"):
        await BasicCompactService(BasicConfig(**RELAXED)).compact_now(session, store=store)
    assert len(store.get(session.id)) == length == len(session)


def _refuse_writes(store: SessionStore, refuse: bool) -> None:
    """The session stream refuses every new message (its message limit reached, discard new): a
    real refusal by the server, as a full disk is one."""
    from nats.js.api import DiscardPolicy

    async def update(js: Any) -> None:
        info = await js.stream_info(_stream(store))
        config = info.config
        config.max_msgs = info.state.messages if refuse else -1
        config.discard = DiscardPolicy.NEW if refuse else DiscardPolicy.OLD
        await js.update_stream(config)

    _run(update)


async def test_a_compaction_whose_end_cannot_be_stored_keeps_its_lease_until_taken_over(
    store: SessionStore, failure_reports: Path
) -> None:
    def refuse(stage: str) -> None:
        if stage == "before-commit":
            _refuse_writes(store, True)

    engine = BasicCompactService(BasicConfig(**RELAXED), on_progress=refuse)
    engine.close_budget = 0.5
    session = working_session(close_turn=True)
    store.save(session)
    with pytest.raises(LockHeldError) as raised:
        await engine.compact_now(session, store=store)
    _refuse_writes(store, False)
    lock = inspect_lock(store.get(session.id))
    assert lock.live and lock.start is not None
    assert lock.start.compaction_id in str(raised.value)
    value = _key(store, "leases", session.id.hex)
    assert value is not None and msgspec.json.decode(value)["start_seq"] == lock.start_seq

    with pytest.raises(BusyError):  # another engine does not own the failure
        await BasicCompactService(BasicConfig(**RELAXED)).compact_now(store.get(session.id), store=store)
    engine.on_progress = None
    result = await engine.compact_now(store.get(session.id), store=store)  # its own, at once
    assert result is not None
    assert _key(store, "leases", session.id.hex) is None
    assert not inspect_lock(store.get(session.id)).live


async def test_a_lease_whose_compaction_recovery_closed_is_taken_over(
    store: SessionStore, failure_reports: Path
) -> None:
    def refuse(stage: str) -> None:
        if stage == "before-commit":
            _refuse_writes(store, True)

    failing = BasicCompactService(BasicConfig(**RELAXED), on_progress=refuse)
    failing.close_budget = 0.5
    session = working_session(close_turn=True)
    store.save(session)
    with pytest.raises(LockHeldError):
        await failing.compact_now(session, store=store)
    _refuse_writes(store, False)
    report = recover(store, RecoveryConfig(repair=True))  # owner-failed: repaired on this host
    assert [o.rule for o in report.orphans] == ["owner-failed"]
    assert _key(store, "leases", session.id.hex) is not None  # still there, and closed in the log
    result = await BasicCompactService(BasicConfig(**RELAXED)).compact_now(store.get(session.id), store=store)
    assert result is not None
    assert _key(store, "leases", session.id.hex) is None
