"""The JetStream store against PostgreSQL, same run: appends per second and a 100k-event load.

    .venv/bin/python -m benchmarks.bench_nats [--events N] [--load-events N]

Three stores, each measured the same way in one run: PostgreSQL (a fresh database on
127.0.0.1:5432), JetStream R1 (a fresh stream on the server at 127.0.0.1:4222) and JetStream R3 (a
3-node cluster on loopback started here, ``tests/sessions/nats_cluster.py``). For each:

- **1 writer**: one session saved one agent step at a time (``agent_batches``): saves per second;
- **8 writers**: eight threads, each with its own store handle and session, saving steps at once:
  saves per second of all of them together;
- **load**: one session of 100,000 events (saved in batches of 1,000), then ``load_events`` of
  all of it: seconds;
- **snapshot load**: the same session opened by another store handle (``get``: its latest
  snapshot, taken at 100,000 events, and nothing after it): seconds. On JetStream the snapshot is
  the ``<stream>_snapshots`` key's pointer and its chunks.

Ratios are JetStream / PostgreSQL of the same run (throughput: higher is better; load time: lower is
better). Informational: no targets. Not in the default set of ``benchmarks.run`` (it needs both
servers and starts three more).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import Result, fmt_seconds, scratch_dir
from benchmarks.workload import agent_batches, agent_events
from compaction.sessions.store import SessionStore

PG_BASE = "postgresql://postgres@127.0.0.1:5432"
NATS_BASE = "nats://127.0.0.1:4222"
WRITERS = 8


@contextmanager
def postgres_url() -> Iterator[str]:
    import psycopg

    name = f"bench_nats_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(f"{PG_BASE}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{PG_BASE}/{name}"
    finally:
        with psycopg.connect(f"{PG_BASE}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def jetstream_url(base: str, replicas: int) -> Iterator[str]:
    from tests.conftest import delete_nats_streams

    stream = f"bench_{uuid.uuid4().hex[:10]}"
    try:
        yield f"{base}?stream={stream}&replicas={replicas}"
    finally:
        delete_nats_streams(base, stream)


def saves_per_second(url: str, events: int) -> float:
    batches = list(agent_batches(events))
    with SessionStore.open(url) as store:
        session = store.create()
        start = time.perf_counter()
        for batch in batches:
            for event in batch:
                session.append(event)
            store.save(session)
        return len(batches) / (time.perf_counter() - start)


def concurrent_saves_per_second(url: str, events: int) -> float:
    batches = list(agent_batches(events))
    stores = [SessionStore.open(url) for _ in range(WRITERS)]
    ready = threading.Barrier(WRITERS + 1)
    failures: list[BaseException] = []

    def write(store: SessionStore) -> None:
        session = store.create()
        ready.wait()
        try:
            for batch in batches:
                for event in batch:
                    session.append(event)
                store.save(session)
        except BaseException as e:
            failures.append(e)

    threads = [threading.Thread(target=write, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    ready.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - start
    for store in stores:
        store.close()
    if failures:
        raise failures[0]
    return WRITERS * len(batches) / seconds


def load_seconds(url: str, events: int) -> tuple[float, float]:
    """Seconds to read every event of an ``events``-long session, and to open it from its snapshot."""
    with SessionStore.open(url) as store:
        session = store.create()
        for index, event in enumerate(agent_events(events), 1):
            session.append(event)
            if index % 1000 == 0:
                store.save(session)
        store.save(session)
        store.take_session_snapshot(session)  # at its full length, whatever the interval
        start = time.perf_counter()
        loaded = store.load_events(session.id)
        seconds = time.perf_counter() - start
        assert len(loaded) == len(session)
    with SessionStore.open(url) as other:
        start = time.perf_counter()
        opened = other.get(session.id)
        from_snapshot = time.perf_counter() - start
        assert len(opened) == len(session) and other.snapshot_fallbacks == []
    return seconds, from_snapshot


def measure(url: str, events: int, load_events: int) -> tuple[float, float, float, float]:
    return (
        saves_per_second(url, events),
        concurrent_saves_per_second(url, events),
        *load_seconds(url, load_events),
    )


def run(events: int = 2000, load_events: int = 100_000) -> list[Result]:
    from tests.sessions.nats_cluster import LoopbackCluster

    figures: dict[str, tuple[float, float, float, float]] = {}
    with postgres_url() as url:
        figures["PostgreSQL"] = measure(url, events, load_events)
    with jetstream_url(NATS_BASE, 1) as url:
        figures["JetStream R1"] = measure(url, events, load_events)
    with scratch_dir("nats-cluster") as folder:
        cluster = LoopbackCluster(folder, name="bench")
        cluster.start_all()
        try:
            with jetstream_url(cluster.url, 3) as url:
                figures["JetStream R3"] = measure(url, events, load_events)
        finally:
            cluster.stop_all()
    pg = figures["PostgreSQL"]
    results: list[Result] = []
    for name in ("JetStream R1", "JetStream R3"):
        one, many, load, snapshot = figures[name]
        results += [
            Result(f"{name}: saves/s, 1 writer", f"{one:,.0f}/s", f"PostgreSQL {pg[0]:,.0f}/s",
                   one / pg[0], None, True),
            Result(f"{name}: saves/s, {WRITERS} writers", f"{many:,.0f}/s",
                   f"PostgreSQL {pg[1]:,.0f}/s", many / pg[1], None, True),
            Result(f"{name}: load {load_events:,} events", fmt_seconds(load),
                   f"PostgreSQL {fmt_seconds(pg[2])}", load / pg[2], None, False),
            Result(f"{name}: open {load_events:,} events from the snapshot", fmt_seconds(snapshot),
                   f"PostgreSQL {fmt_seconds(pg[3])}", snapshot / pg[3], None, False),
        ]  # fmt: skip
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=2000, help="events per writer (default 2000)")
    parser.add_argument("--load-events", type=int, default=100_000)
    args = parser.parse_args(argv)
    results = run(args.events, args.load_events)
    print("| benchmark | measured | baseline (same run) | ratio |")
    print("|---|---|---|---|")
    for result in results:
        print(f"| {result.name} | {result.measured} | {result.baseline} | {result.ratio:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
