"""A long session on a 3-replica stream, read while the stream's leader is killed.

A long OpenAI-style transcript (20,000 messages, 50,000 events: the benchmark imports the full
100,000) is imported into a 3-node loopback cluster, then loaded by a cold store handle while the
stream's leader is SIGKILLed, and compacted cold by the command line while the new leader is
SIGKILLed; each node is restarted after. Every event read back hashes as it was written, the
compaction commits and the audit passes. Then 1,000 ``get``/``exists`` calls of existing sessions
run across another leader kill: none of them says the session is missing (a read that cannot be
answered in time says :class:`StoreUnavailableError`, and is counted).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from compaction.errors import SessionNotFoundError, StoreUnavailableError
from compaction.sessions.importers import import_path
from compaction.sessions.mapper import encode_event
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from tests.builders import run_json, user
from tests.conftest import delete_nats_streams, require_nats
from tests.sessions.long_transcript import write_transcript
from tests.sessions.nats_cluster import SERVER, LoopbackCluster

pytestmark = pytest.mark.slow
MESSAGES = 20_000
CALLS = 1000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackCluster]:
    require_nats()
    if not Path(SERVER).exists():
        pytest.fail(f"nats-server is not installed ({SERVER}); .ci/run installs it")
    started = LoopbackCluster(tmp_path_factory.mktemp("jetstream-large"), name="large")
    started.start_all()
    try:
        yield started
    finally:
        started.stop_all()


@pytest.fixture
def url(cluster: LoopbackCluster) -> Iterator[str]:
    stream = f"large_{uuid.uuid4().hex[:10]}"
    yield f"{cluster.url}?stream={stream}&replicas=3"
    for index in range(3):
        if cluster.processes[index] is None:
            cluster.start(index)
    cluster.wait_ready()
    delete_nats_streams(cluster.url, stream)


class LeaderKill:
    """Kill the stream's leader ``after`` seconds from now (on a thread); when it happened."""

    def __init__(self, cluster: LoopbackCluster, stream: str, after: float) -> None:
        self.cluster = cluster
        self.node = cluster.leader(stream)
        self.at = 0.0
        self._thread = threading.Thread(target=self._kill, args=(after,))
        self._thread.start()

    def _kill(self, after: float) -> None:
        time.sleep(after)
        self.cluster.kill(self.node)
        self.at = time.monotonic()

    def restart(self, stream: str) -> None:
        self._thread.join()
        self.cluster.start(self.node)
        self.cluster.wait_ready()
        self.cluster.wait_current(stream)


def _digests(session: Session) -> list[str]:
    return [hashlib.sha256(encode_event(e)).hexdigest() for e in session.events()]


def _stream(url: str) -> str:
    return url.split("stream=")[1].split("&", maxsplit=1)[0]


def test_a_long_session_is_read_whole_and_compacted_across_leader_kills(
    cluster: LoopbackCluster, url: str, tmp_path: Path
) -> None:
    stream = _stream(url)
    (imported,) = import_path(write_transcript(tmp_path / "long.json", MESSAGES))
    written = _digests(imported.session)
    with SessionStore.open(url) as store:
        store.save(imported.session)
    session_id = imported.session.id

    kill = LeaderKill(cluster, stream, after=0.2)
    with SessionStore.open(url) as cold:  # a new handle: nothing of the session cached
        loaded = cold.load_events(session_id)
        finished = time.monotonic()
    kill.restart(stream)
    assert 0 < kill.at < finished, "the leader was not killed during the load"
    assert [hashlib.sha256(encode_event(e)).hexdigest() for e in loaded] == written

    kill = LeaderKill(cluster, stream, after=1.0)
    code, compacted = run_json("--store", url, "compact", str(session_id), "--window", "200000", "--manual")
    finished = time.monotonic()
    kill.restart(stream)
    assert 0 < kill.at < finished, "the leader was not killed during the compaction"
    assert code == 0 and compacted["compactions"], json.dumps(compacted)[-3000:]
    code, audit = run_json("--store", url, "audit", str(session_id))
    assert code == 0, audit
    with SessionStore.open(url) as store:
        after = store.get(session_id, use_snapshots=False)
        assert len(after) > len(written)
        assert _digests(after)[: len(written)] == written


def test_existing_sessions_are_never_missing_across_a_leader_kill(cluster: LoopbackCluster, url: str) -> None:
    stream = _stream(url)
    with SessionStore.open(url) as store:
        sessions = [store.create() for _ in range(5)]
        for index, session in enumerate(sessions):
            for step in range(index + 2):
                user(session, f"message {step}")
            store.save(session)
        lengths = {s.id: len(s) for s in sessions}
        missing: list[BaseException] = []
        unavailable = 0
        kill = LeaderKill(cluster, stream, after=0.3)
        started = time.monotonic()
        for call in range(CALLS):
            session_id = sessions[call % len(sessions)].id
            try:
                if call % 2:
                    assert store.exists(session_id), f"call {call}: exists() said False"
                else:
                    assert len(store.get(session_id)) == lengths[session_id]
            except SessionNotFoundError as e:
                missing.append(e)
            except StoreUnavailableError:
                unavailable += 1
        finished = time.monotonic()
    kill.restart(stream)
    assert started < kill.at < finished, "the leader was not killed during the calls"
    assert missing == []
    assert unavailable < CALLS // 10, f"{unavailable} of {CALLS} calls found the store unavailable"
