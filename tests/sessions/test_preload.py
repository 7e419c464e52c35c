"""A restored session preloads a compaction's span in a few store reads that decode only the span's
events (``Session.preload``, ``SessionStore.load_events(only=)``): the same events as fetching
each on demand."""

from __future__ import annotations

from pathlib import Path

import pytest

from compaction.sessions import mapper
from compaction.sessions.events import SessionEvent
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from tests.builders import turn


def worked(session: Session, turns: int) -> Session:
    for index in range(turns):
        turn(session, f"prompt {index}", n_calls=2)
    return session


def test_load_events_decodes_only_the_seqs_asked_for(tmp_path: Path) -> None:
    with SessionStore.open(f"sqlite:///{tmp_path / 's.db'}") as store:
        session = worked(store.create(), 3)
        store.save(session)
        everything = list(session.events())
        only = {1, 4, 5, 11}
        assert store.load_events(session.id, 2, 12, only) == [e for e in everything[2:12] if e.seq in only]
        assert store.load_events(session.id, only=set()) == []


def test_preload_fetches_the_span_and_decodes_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with SessionStore.open(f"sqlite:///{tmp_path / 's.db'}", snapshot_interval=1) as store:
        session = worked(store.create(), 4)
        store.save(session)
        restored = store.get(session.id)
        decoded: list[int] = []
        real = mapper.SessionMapper.decode_row

        def counting(
            self: mapper.SessionMapper, origin: object, version: int, topic: str, state: bytes
        ) -> SessionEvent:
            decoded.append(version)
            return real(self, origin, version, topic, state)

        monkeypatch.setattr(mapper.SessionMapper, "decode_row", counting)
        span = tuple(restored.nodes[1:-1])
        restored.preload(span)
        assert sorted(decoded) == sorted(span)
        decoded.clear()
        assert [restored.event(seq) for seq in span] == [session.event(seq) for seq in span]
        assert decoded == []  # nothing fetched again
        restored.preload(span)
        assert decoded == []


def test_a_session_without_a_picker_preloads_nothing() -> None:
    session = worked(Session(), 2)
    stored = list(session.events())
    calls: list[tuple[int, int]] = []

    def loader(lo: int, hi: int) -> list[SessionEvent]:
        calls.append((lo, hi))
        return stored[lo:hi]

    restored = Session.from_snapshot(session.id, session.snapshot(), loader)
    restored.preload(restored.nodes)
    assert calls == []
    assert [restored.event(seq) for seq in restored.nodes] == [session.event(seq) for seq in session.nodes]
