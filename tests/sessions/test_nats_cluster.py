"""The JetStream store on a 3-node cluster (loopback, started here), its stream replicated 3 ways.

One node is SIGKILLed in the middle of an import and in the middle of a compaction: every save the
store acknowledged is there, the audit passes, the compaction commits with the node down, and the
node, restarted, rejoins and catches up (every replica current, no lag). Then five more kills while
a writer appends: nothing acknowledged is lost.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import pytest

from compaction.importers import import_path
from compaction.sessions.mapper import encode_event
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from tests.builders import run_json, user, wait_until
from tests.conftest import PUBLIC_TRANSCRIPTS, delete_nats_streams, require_nats
from tests.sessions.nats_cluster import SERVER, LoopbackCluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackCluster]:
    require_nats()
    if not Path(SERVER).exists():
        pytest.fail(f"nats-server is not installed ({SERVER}); .ci/run installs it")
    started = LoopbackCluster(tmp_path_factory.mktemp("jetstream-cluster"))
    started.start_all()
    try:
        yield started
    finally:
        started.stop_all()


@pytest.fixture
def stream(cluster: LoopbackCluster) -> Iterator[str]:
    name = f"r3_{uuid.uuid4().hex[:10]}"
    yield name
    for index in range(3):  # nodes a test left down come back before the stream is deleted
        if cluster.processes[index] is None:
            cluster.start(index)
    cluster.wait_ready()
    delete_nats_streams(cluster.url, name)


def _after(seconds: float, action: object) -> threading.Thread:
    def later() -> None:
        time.sleep(seconds)
        action()  # type: ignore[operator]

    thread = threading.Thread(target=later)
    thread.start()
    return thread


def _restart(cluster: LoopbackCluster, index: int, stream: str) -> None:
    cluster.start(index)
    cluster.wait_ready()
    cluster.wait_current(stream)


def test_a_node_killed_during_an_import_and_a_compaction_loses_nothing(
    cluster: LoopbackCluster, stream: str
) -> None:
    url = f"{cluster.url}?stream={stream}&replicas=3"
    acknowledged: dict[UUID, Session] = {}
    with SessionStore.open(url) as store:
        killer = _after(0.2, lambda: cluster.kill(1))
        for transcript in PUBLIC_TRANSCRIPTS:
            for imported in import_path(transcript):
                store.save(imported.session)
                acknowledged[imported.session.id] = imported.session
        killer.join()
        assert cluster.processes[1] is None, "the node was not killed during the import"
        for session_id, session in acknowledged.items():
            stored = [encode_event(e) for e in store.load_events(session_id)]
            assert stored == [encode_event(e) for e in session.events()], session_id
        assert set(store.session_ids()) == set(acknowledged)
        longest = max(acknowledged.values(), key=len)
    code, audit = run_json("--store", url, "audit", "--all")
    assert code == 0, audit
    # A compaction with node 1 down commits (two of three replicas are a quorum).
    code, compacted = run_json("--store", url, "compact", str(longest.id), "--window", "32000", "--manual")
    assert code == 0 and compacted["compactions"], compacted
    _restart(cluster, 1, stream)  # node 1 rejoins and catches up
    # And a node killed in the middle of a compaction: the compaction still commits.
    with SessionStore.open(url) as store:
        second = max((s for s in acknowledged.values() if s.id != longest.id), key=len)
        killer = _after(0.05, lambda: cluster.kill(2))
        code, compacted = run_json("--store", url, "compact", str(second.id), "--window", "32000", "--manual")
        killer.join()
        assert code == 0 and compacted["compactions"], compacted
        assert len(store.load_events(second.id)) > len(second)
    code, audit = run_json("--store", url, "audit", "--all")
    assert code == 0, audit
    _restart(cluster, 2, stream)
    code, after = run_json("--store", url, "audit", "--all")
    assert (code, after) == (0, audit)


def test_nothing_acknowledged_is_lost_across_five_node_kills(cluster: LoopbackCluster, stream: str) -> None:
    url = f"{cluster.url}?stream={stream}&replicas=3"
    stop = threading.Event()
    failures: list[BaseException] = []
    sessions: list[Session] = []
    acked: dict[UUID, int] = {}

    def write() -> None:
        with SessionStore.open(url) as store:
            sessions.extend(store.create() for _ in range(4))
            count = 0
            while not stop.is_set():
                session = sessions[count % len(sessions)]
                user(session, f"message {count}")
                try:
                    store.save(session)
                except BaseException as e:
                    failures.append(e)
                    return
                acked[session.id] = len(session)
                count += 1

    writer = threading.Thread(target=write)
    writer.start()
    try:
        wait_until(lambda: len(acked) == 4, 30, "the writer's first saves")
        for kill in range(5):
            node = kill % 3
            cluster.kill(node)
            time.sleep(1.0)  # the writer keeps appending with the node down
            _restart(cluster, node, stream)
    finally:
        stop.set()
        writer.join(timeout=120)
    assert failures == []
    assert sum(acked.values()) > 20
    with SessionStore.open(url) as store:
        for session in sessions:
            stored = [encode_event(e) for e in store.load_events(session.id)]
            assert len(stored) == acked[session.id]
            assert stored == [encode_event(e) for e in session.events(0, acked[session.id])]
    cluster.wait_current(stream)
