"""Race loops: writers appending to one session at once, a reader listing the store meanwhile.

Each writer has its own :class:`SessionStore` (its own connection) and appends one tagged user
message per save, reloading and retrying when another writer got there first
(:class:`ConcurrencyError`). A round then checks that every acknowledged save is stored exactly once
(``lost`` and ``duplicated`` count the others) and that the seqs are contiguous. A writer or reader
still running after the round's time limit counts as a hang; an exception other than the expected
conflict counts as an error.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from uuid import UUID

from compaction.errors import ConcurrencyError
from compaction.sessions.blocks import Message, TextBlock
from compaction.sessions.events import UserMessage
from compaction.sessions.store import SessionStore

ROUND_SECONDS = 60.0


@dataclass
class RaceResult:
    acknowledged: int = 0
    stored: int = 0
    conflicts: int = 0
    lost: int = 0
    duplicated: int = 0
    hangs: int = 0
    errors: list[str] = field(default_factory=list)


def _message(tag: str) -> UserMessage:
    return UserMessage(message=Message(id=tag, role="user", content=(TextBlock(tag),)), surface_op="append")


@dataclass
class _Shared:
    result: RaceResult
    acked: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _writer(url: str, session_id: UUID, name: str, saves: int, shared: _Shared) -> None:
    result, acked, lock = shared.result, shared.acked, shared.lock
    try:
        with SessionStore.open(url) as store:
            done = 0
            while done < saves:
                session = store.get(session_id, strict_structure=False)
                tag = f"{name}-{done}"
                session.append(_message(tag))
                try:
                    store.save(session)
                except ConcurrencyError:
                    with lock:
                        result.conflicts += 1
                    continue
                with lock:
                    acked.append(tag)
                done += 1
    except Exception as e:  # any other failure is a finding
        with lock:
            result.errors.append(f"{name}: {type(e).__name__}: {e}")


def _reader(url: str, stop: threading.Event, result: RaceResult, lock: threading.Lock) -> None:
    try:
        with SessionStore.open(url) as store:
            while not stop.is_set():
                for session_id in store.all_session_ids():
                    store.get(session_id, strict_structure=False)
    except Exception as e:
        with lock:
            result.errors.append(f"reader: {type(e).__name__}: {e}")


def race_round(url: str, *, writers: int = 4, saves: int = 15) -> RaceResult:
    """One round on a fresh session of the store at ``url``."""
    result = RaceResult()
    shared = _Shared(result)
    lock, acked = shared.lock, shared.acked
    with SessionStore.open(url) as store:
        session = store.create(strict_structure=False)
        session.append(_message("seed"))
        store.save(session)
    stop = threading.Event()
    threads = [
        threading.Thread(target=_writer, args=(url, session.id, f"w{i}", saves, shared), daemon=True)
        for i in range(writers)
    ]
    reader = threading.Thread(target=_reader, args=(url, stop, result, lock), daemon=True)
    for thread in (*threads, reader):
        thread.start()
    for thread in threads:
        thread.join(ROUND_SECONDS)
    stop.set()
    reader.join(ROUND_SECONDS)
    result.hangs = sum(t.is_alive() for t in (*threads, reader))
    with SessionStore.open(url) as store:
        events = store.load_events(session.id)
    tags = [e.message.id for e in events[1:] if isinstance(e, UserMessage)]
    result.acknowledged = len(acked)
    result.stored = len(tags)
    result.lost = len(set(acked) - set(tags))
    result.duplicated = len(tags) - len(set(tags))
    if [e.seq for e in events] != list(range(len(events))):
        result.errors.append(f"session {session.id}: seqs are not contiguous")
    return result
