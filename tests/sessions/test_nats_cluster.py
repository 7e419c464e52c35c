"""The JetStream store on a 3-node cluster (loopback, started here), its stream replicated 3 ways.

One node is SIGKILLed in the middle of an import and in the middle of a compaction: every save the
store acknowledged is there, the audit passes, the compaction commits with the node down, and the
node, restarted, rejoins and catches up (every replica current, no lag). Then five more kills while
a writer appends: nothing acknowledged is lost.

A long session: a 100,000-message OpenAI-style transcript (250,000 events, the size a long agent run
reaches) is loaded whole by a cold store handle while the node leading every stream of the store is
SIGKILLed and restarted; the SHA-256 digest of every event read back equals the digest of the event
written (0 lost, 0 duplicated). ``compaction compact SID --window 200000``, a process of its own,
compacts it while another leading node is SIGKILLed and restarted, and the audit passes. Each kill
is checked to have happened while the operation ran. Then 1,000 ``get``/``exists`` calls of
existing sessions run across another leader kill: none of them says the session is missing (a read
that cannot be answered in time says :class:`StoreUnavailableError`, and is counted).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from uuid import UUID

import pytest

from compaction.errors import SessionNotFoundError, StoreUnavailableError
from compaction.importers import import_path
from compaction.sessions.events import SessionEvent
from compaction.sessions.mapper import encode_event
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from compaction.vocabulary.events import CompactEnd
from tests.builders import run_json, user, wait_until
from tests.conftest import PUBLIC_TRANSCRIPTS, delete_nats_streams, require_nats
from tests.sessions.long_transcript import write_transcript
from tests.sessions.nats_cluster import SERVER, KillAndRestart, LoopbackCluster, store_streams

pytestmark = pytest.mark.slow
MESSAGES = 100_000
WINDOW = 200_000
CALLS = 1000


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
        killed_at: list[float] = []
        killer = _after(0.05, lambda: (cluster.kill(2), killed_at.append(time.monotonic())))
        started = time.monotonic()
        code, compacted = run_json("--store", url, "compact", str(second.id), "--window", "32000", "--manual")
        finished = time.monotonic()
        killer.join()
        assert killed_at and started < killed_at[0] < finished, (
            "node 2 was not killed while the compact command ran"
        )
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


def _digests(events: Iterable[SessionEvent]) -> list[str]:
    return [hashlib.sha256(encode_event(e)).hexdigest() for e in events]


def _lost_and_duplicated(written: list[str], read: list[str]) -> tuple[int, int]:
    """Events written and not read back, and events read back more often than written."""
    wanted, got = Counter(written), Counter(read)
    return sum((wanted - got).values()), sum((got - wanted).values())


def _lead(cluster: LoopbackCluster, stream: str, node: int) -> None:
    """``node`` leads every stream of the store (the one kill then hits each leader)."""
    led = cluster.lead_together(store_streams(stream), node)
    assert stream in led and f"{stream}_chunks" in led, led


def _compact_command(url: str, session_id: UUID) -> subprocess.Popen[str]:
    """``compaction compact SID --window 200000`` in a process of its own (nothing cached)."""
    return subprocess.Popen(
        [sys.executable, "-m", "compaction.cli.main", "--store", url, "compact", str(session_id),
         "--window", str(WINDOW), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_a_long_session_is_read_whole_compacted_and_audited_across_node_kills(
    cluster: LoopbackCluster, stream: str, tmp_path: Path
) -> None:
    url = f"{cluster.url}?stream={stream}&replicas=3"
    (imported,) = import_path(write_transcript(tmp_path / "long.json", MESSAGES))
    written = _digests(imported.session.events())
    assert len(written) >= 2.5 * MESSAGES
    with SessionStore.open(url) as store:
        store.save(imported.session)
    session_id = imported.session.id

    # A cold load (a new handle, no snapshot) while the node leading every stream of the store is
    # killed, and started again before the load ends.
    _lead(cluster, stream, 0)
    with SessionStore.open(url) as cold:
        # Killed and back early: a quiet machine reads the 250,000 events in about a second.
        kill = KillAndRestart(cluster, 0, after=0.2, down=0.3)
        started = time.monotonic()
        loaded = cold.load_events(session_id)
        finished = time.monotonic()
    kill.check_inside(started, finished)
    read = _digests(loaded)
    assert _lost_and_duplicated(written, read) == (0, 0)
    assert read == written
    del loaded, read
    kill.wait_back(stream)

    # The compaction the command line runs in a process of its own, the leader killed again.
    _lead(cluster, stream, 1)
    started = time.monotonic()
    command = _compact_command(url, session_id)
    kill = KillAndRestart(cluster, 1, after=2.0)
    out, err = command.communicate(timeout=600)
    finished = time.monotonic()
    kill.check_inside(started, finished)
    assert command.returncode == 0, err[-3000:]
    compacted = json.loads(out)
    tokens = {k: compacted[k] for k in ("tokens_before", "tokens_after", "threshold", "status")}
    assert compacted["tokens_before"] > WINDOW > compacted["threshold"] > compacted["tokens_after"], tokens
    assert compacted["compactions"] and compacted["status"] == "under_threshold", tokens
    kill.wait_back(stream)

    code, audit = run_json("--store", url, "audit", str(session_id))
    assert code == 0 and audit["passed"], json.dumps(audit)[-3000:]
    with SessionStore.open(url) as store:
        after = store.load_events(session_id, len(written))
    ends = {e.seq: e for e in after if isinstance(e, CompactEnd)}
    for compaction in compacted["compactions"]:
        end = ends[compaction["end_seq"]]
        assert (end.compaction_id, end.error) == (compaction["compaction_id"], None)


def test_existing_sessions_are_never_missing_across_a_leader_kill(
    cluster: LoopbackCluster, stream: str
) -> None:
    url = f"{cluster.url}?stream={stream}&replicas=3"
    with SessionStore.open(url) as store:
        sessions = [store.create() for _ in range(5)]
        for index, session in enumerate(sessions):
            for step in range(index + 2):
                user(session, f"message {step}")
            store.save(session)
        lengths = {s.id: len(s) for s in sessions}
        missing: list[BaseException] = []
        unavailable = 0
        node = cluster.leader(stream)
        _lead(cluster, stream, node)
        kill = KillAndRestart(cluster, node, after=0.3)
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
    kill.check_inside(started, finished, restarted=False)
    kill.wait_back(stream)
    assert missing == []
    assert unavailable < CALLS // 10, f"{unavailable} of {CALLS} calls found the store unavailable"
