"""``compaction rebuild --follow`` on JetStream follows through a durable consumer (a real process).

The follower is named by its projections and its views (:attr:`ProjectionRunner.follower_name`);
the durable consumer of that name exists on the server and acknowledges only what the views have
tracked. Killed with SIGKILL while events keep coming, then restarted, the follower resumes from
its tracked position and applies every event exactly once. In process: a feed started at a
position delivers exactly the events after it, acknowledgements move the consumer's floor, and a
second follower pulling from the same consumer is refused instead of skipping events. A JetStream
server of its own, SIGKILLed under a following process and restarted on its store directory: the
follower rides it out, its durable consumer survives, and it applies what comes after.
"""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from compaction.errors import StoreError
from compaction.sessions.nats.follow import consumer_name
from compaction.sessions.store import SessionStore
from projections import ALL, PROJECTIONS, ProjectionRunner, ViewDatabase, ViewRecorder
from tests.builders import wait_until
from tests.conftest import require_nats
from tests.projections.test_crash import finish, grow, positions, run_cli
from tests.projections.test_projections import Writer, check_against_aggregate
from tests.sessions.nats_cluster import SERVER, free_port


@pytest.fixture
def store(nats_url: str) -> Iterator[SessionStore]:
    with SessionStore.open(nats_url) as opened:
        yield opened


def consumer(store: SessionStore, name: str) -> Any:
    """The consumer's info, read with a plain connection on a thread of its own; None if none."""
    import nats
    import nats.js.errors

    async def read() -> Any:
        nc = await nats.connect(store.settings["NATS_SERVERS"].split(","))
        try:
            return await nc.jetstream().consumer_info(store.settings["NATS_STREAM"], name)
        except nats.js.errors.NotFoundError:
            return None
        finally:
            await nc.close()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, read()).result()


def last_commit(store: SessionStore) -> int:
    import nats

    async def read() -> int:
        nc = await nats.connect(store.settings["NATS_SERVERS"].split(","))
        try:
            info = await nc.jetstream().stream_info(store.settings["NATS_STREAM"])
            return int(info.state.last_seq)
        finally:
            await nc.close()

    with ThreadPoolExecutor(1) as pool:
        return int(pool.submit(asyncio.run, read()).result())


def test_a_killed_follower_resumes_from_its_tracked_position_on_its_durable_consumer(
    store: SessionStore, nats_url: str, probe: dict[str, ViewRecorder]
) -> None:
    with ProjectionRunner(store) as runner:
        name = runner.follower_name
    assert name.startswith("views_surface-ledger-usage_") and consumer(store, name) is None
    grow(store, seed=51, sessions=2, operations=8)
    writer = Writer(store, random.Random(52))
    session = writer.new_session()
    first = store.max_notification_id()

    child = run_cli(nats_url, "rebuild", "--follow", "--poll", "0.05")
    try:
        wait_until(lambda: set(positions(store, probe).values()) == {first}, 60, "the catch-up")
        follow_through_the_consumer(store, probe, writer, session, name)
        for _ in range(2):  # and killed right after these, perhaps in the middle of their batch
            writer.step(session)
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    at_kill = positions(store, probe)
    for _ in range(5):  # appended while no follower runs
        writer.step(session)
    third = store.max_notification_id()
    assert third is not None and all(p < third for p in at_kill.values())

    restarted = run_cli(nats_url, "rebuild", "--follow", "--poll", "0.05")
    try:
        wait_until(lambda: set(positions(store, probe).values()) == {third}, 60, "the restart")
        fourth = follow_through_the_consumer(store, probe, writer, session, name)
        restarted.send_signal(signal.SIGTERM)
        document = finish(restarted)
    finally:
        if restarted.poll() is None:
            restarted.kill()
            restarted.communicate()
    # Exactly the events after each view's tracked position, each once; the views equal a fold.
    assert [(p["name"], p["events"], p["position"]) for p in document["projections"]] == [
        (view, len(store.notifications(at_kill[view], 100_000, upto=fourth)), fourth) for view in ALL
    ]  # ids follow the stream sequence, not dense: the events between are counted
    check_against_aggregate(store, probe)
    info = consumer(store, name)
    assert info is not None and info.name == info.config.durable_name == name


def follow_through_the_consumer(
    store: SessionStore, probe: dict[str, ViewRecorder], writer: Writer, session: Any, name: str
) -> int:
    """Append until events appended while the follower follows came through its consumer and were
    acknowledged once tracked; the last notification id."""
    for _ in range(20):
        writer.step(session)
        latest = store.max_notification_id()
        wait_until(lambda: set(positions(store, probe).values()) == {latest}, 60, "new events")  # noqa: B023
        if acknowledged_by_follower(store, name):
            assert latest is not None
            return latest
    raise AssertionError(f"the consumer {name} never acknowledged what the follower tracked")


def acknowledged_by_follower(store: SessionStore, name: str) -> bool:
    """The consumer delivered commits itself and its floor is the last commit (a consumer just
    created past the end has a floor there too, but has delivered nothing)."""
    info = consumer(store, name)
    return bool(
        info is not None
        and info.delivered.consumer_seq > 0
        and info.ack_floor.consumer_seq == info.delivered.consumer_seq
        and info.ack_floor.stream_seq == last_commit(store)
    )


def test_a_durable_feed_delivers_what_follows_its_position_and_is_acknowledged(
    store: SessionStore,
) -> None:
    grow(store, seed=61, sessions=2, operations=10)
    latest = store.max_notification_id()
    middle = latest // 2
    stored = [n.notification_id for n in store.notifications(middle, 100_000)]  # ids not dense
    with store.follow(middle, durable="probe.feed") as feed:
        got = [next(feed).notification_id for _ in stored]
        assert got == stored and stored[-1] == latest
        before = consumer(store, "probe_feed")
        assert before is not None and before.num_ack_pending > 0
        feed.processed(latest)
        after = consumer(store, "probe_feed")
        assert after.num_ack_pending == 0 and after.ack_floor.stream_seq == last_commit(store)
    # Started again at the same place: the consumer is kept and delivers the next commit.
    writer = Writer(store, random.Random(62))
    writer.new_session()
    with store.follow(latest, durable="probe.feed") as feed:
        assert next(feed).notification_id == store.notifications(latest, 1)[0].notification_id
    assert consumer_name("probe.feed") == "probe_feed"


def test_a_second_follower_on_the_same_consumer_is_refused(store: SessionStore) -> None:
    grow(store, seed=71, sessions=1, operations=4)
    with store.follow(0, durable="shared") as one, store.follow(0, durable="shared") as two:
        assert next(one).notification_id == store.notifications(0, 1)[0].notification_id
        Writer(store, random.Random(72)).new_session()
        with pytest.raises(StoreError, match="another follower pulls from the same consumer"):
            next(two)


# ---------------------------------------------------------------- a server restart


class PrivateServer:
    """One JetStream server of this test's own (its port, its store directory)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        log = (self.folder / "server.log").open("ab")
        self.process = subprocess.Popen(
            [SERVER, "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", str(self.folder / "js")],
            stdout=log,
            stderr=log,
        )
        log.close()
        wait_until(self._answers, 30, "the JetStream server")

    def _answers(self) -> bool:
        import socket

        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                return sock.recv(4096).startswith(b"INFO ")
        except OSError:
            return False

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None


@pytest.fixture
def private_server(tmp_path: Path) -> Iterator[PrivateServer]:
    require_nats()
    if not Path(SERVER).exists():
        pytest.fail(f"nats-server is not installed ({SERVER}); .ci/run installs it")
    server = PrivateServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_a_follower_rides_out_a_server_restart_on_its_durable_consumer(
    private_server: PrivateServer, tmp_path: Path
) -> None:
    url = f"{private_server.url}?stream=restarts"
    views = str(tmp_path / "views.db")
    with SessionStore.open(url) as store:
        database = ViewDatabase(store, views)
        try:
            probe = {name: database.recorder(name, PROJECTIONS[name].tables) for name in ALL}
            with ProjectionRunner(store, views_path=views) as runner:
                name = runner.follower_name
            grow(store, seed=81, sessions=2, operations=6)
            writer = Writer(store, random.Random(82))
            session = writer.new_session()
            first = store.max_notification_id()
            child = run_cli(url, "rebuild", "--follow", "--poll", "0.05", "--views", views)
            try:
                wait_until(lambda: set(positions(store, probe).values()) == {first}, 60, "catch-up")
                follow_through_the_consumer(store, probe, writer, session, name)
                private_server.kill()
                time.sleep(2.0)
                assert child.poll() is None, child.communicate()
                private_server.start()
                latest = follow_through_the_consumer(store, probe, writer, session, name)
                child.send_signal(signal.SIGTERM)
                document = finish(child)
            finally:
                if child.poll() is None:
                    child.kill()
                    child.communicate()
            assert [(p["name"], p["position"]) for p in document["projections"]] == [
                (view, latest) for view in ALL
            ]
            check_against_aggregate(store, probe)
        finally:
            database.close()
