"""Reads of a whole session hold a window of it, not the session: the peak memory of an export and
of a copy grows far less than the session does.

Each read is measured with ``tracemalloc`` (the peak of what Python allocated during it, the
session itself built and stored beforehand) on a session of N events and on one of 10 N (the
export on SQLite at 10,000 and 100,000 events; the copy, and the export on JetStream, a stream of
the test's own, at 4,000 and 40,000, to stay near half a minute in all): a read
that held the whole session would show a ratio near 10 (the export that loaded the session did:
5.9 MB at 10,000 events, 59.6 MB at 100,000); a windowed one shows the window and the fold state
(the surface's packed seqs, 8 bytes per message), about the same at both sizes.
"""

from __future__ import annotations

from collections.abc import Iterator
from uuid import UUID

import pytest

from benchmarks.common import Discarded, peak_bytes
from compaction.sessions.copy import copy_session
from compaction.sessions.native import StoredExport
from compaction.sessions.store import SessionStore
from tests.builders import user

RATIO = 3.0
"""Most the peak may grow when the session grows ten times."""


def stored_session(store: SessionStore, events: int) -> UUID:
    """A session of ``events`` user messages of about 100 characters, in saves of 1,000 (an agent
    saves a turn at a time; on JetStream each save is one commit, the unit a read decodes)."""
    session = store.create()
    for index in range(events):
        user(session, f"message {index}: " + "x" * 90)
        if len(session) % 1_000 == 0:
            store.save(session)
    store.save(session)
    return session.id


def export_peak(store: SessionStore, session_id: UUID) -> int:
    def export() -> None:
        assert StoredExport.of(store, session_id).write(Discarded()) == store.stream_length(session_id)

    return peak_bytes(export)


@pytest.fixture
def sqlite_store(sqlite_url: str) -> Iterator[SessionStore]:
    with SessionStore.open(sqlite_url) as store:
        yield store


def test_an_export_of_ten_times_the_events_peaks_at_far_less_than_ten_times(
    sqlite_store: SessionStore,
) -> None:
    small, large = stored_session(sqlite_store, 10_000), stored_session(sqlite_store, 100_000)
    ratio = export_peak(sqlite_store, large) / export_peak(sqlite_store, small)
    assert ratio < RATIO, f"the export's peak grew {ratio:.2f} times for ten times the events"


def test_a_copy_of_ten_times_the_events_peaks_at_far_less_than_ten_times(
    sqlite_store: SessionStore, tmp_path_factory: pytest.TempPathFactory
) -> None:
    small, large = stored_session(sqlite_store, 4_000), stored_session(sqlite_store, 40_000)
    target_url = f"sqlite:///{tmp_path_factory.mktemp('target') / 'copy.db'}"
    with SessionStore.open(target_url) as target:

        def copy_peak(session_id: UUID) -> int:
            def copy() -> None:
                assert copy_session(sqlite_store, target, session_id).verified

            return peak_bytes(copy)

        ratio = copy_peak(large) / copy_peak(small)
    assert ratio < RATIO, f"the copy's peak grew {ratio:.2f} times for ten times the events"


def test_a_jetstream_export_of_ten_times_the_events_peaks_at_far_less_than_ten_times(
    nats_url: str,
) -> None:
    with SessionStore.open(nats_url) as store:
        small, large = stored_session(store, 4_000), stored_session(store, 40_000)
        ratio = export_peak(store, large) / export_peak(store, small)
    assert ratio < RATIO, f"the export's peak grew {ratio:.2f} times for ten times the events"
