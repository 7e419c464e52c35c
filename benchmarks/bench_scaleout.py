"""Scale-out on PostgreSQL: N agent worker processes, one store or K partitions, projections following.

Each worker is a real process with its own sessions and its own store handle. After a warm-up (every
session's first step saved, connections open), all workers start together and each saves
``--saves`` agent steps (about five events each: ``step/start``, ``assistant/message``,
``tool/call``, ``tool/result``, ``step/end``), round-robin over its sessions. A follower process runs
one surface-projection runner per partition, following each partition's notification log while the
workers write; when they finish it reports how long the views took to catch up and checks that they
hold every session and every event.

Four layouts, each N in 1, 2, 4, 8, each configuration in a fresh database, all in the same run:

- ``store``: one SessionStore (eventsourcing's recorder: ``LOCK TABLE`` + ``NOTIFY`` per append);
- ``partitioned``: K partitions (``?partitions=K``), still a ``NOTIFY`` per append;
- ``partitioned-quiet``: K partitions without ``NOTIFY`` (``&notify=off``; runners poll);
- ``quiet``: one partition without ``NOTIFY``: the table lock alone.

Reported per configuration: aggregate saves per second (all saves / wall time from the start signal
to the last worker's last save), p50 and p99 step-save latency (fold + atomic insert), and the
projection catch-up; then, per N, each layout's throughput as a ratio of ``store``'s.

    .venv/bin/python -m benchmarks.bench_scaleout                  # N = 1, 2, 4, 8; K = 4
    .venv/bin/python benchmarks/bench_scaleout.py --partitions 8 --saves 500 --rounds 3

PostgreSQL: ``--pg URL`` or ``$COMPACTION_BENCH_PG`` (default ``postgresql://postgres@127.0.0.1:5432``),
a server URL without the database; the benchmark creates and drops its own databases.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier, Event
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.workload import agent_batches
from compaction.sessions.events import SessionEvent
from compaction.sessions.partitioned import PartitionedSessionStore, open_store
from compaction.sessions.store import SessionStore

PG_BASE = os.environ.get("COMPACTION_BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
WORKERS = (1, 2, 4, 8)
PARTITIONS = 4
SAVES = 150
SESSIONS_PER_WORKER = 4
START_TIMEOUT = 120.0


@dataclass(frozen=True)
class Layout:
    name: str
    partitions: int  # 0: the plain SessionStore
    notify: bool

    def url(self, database: str) -> str:
        if self.partitions == 0:
            return database
        return f"{database}?partitions={self.partitions}" + ("" if self.notify else "&notify=off")


def layouts(partitions: int) -> tuple[Layout, ...]:
    return (
        Layout("store", 0, True),
        Layout("partitioned", partitions, True),
        Layout("partitioned-quiet", partitions, False),
        Layout("quiet", 1, False),
    )


@dataclass(frozen=True)
class Figures:
    layout: Layout
    workers: int
    saves: int
    events: int
    seconds: float
    p50: float
    p99: float
    catch_up: float | None  # seconds for the views to reach the last notification; None: no follower
    projected: bool | None  # the views hold every session and every event
    waits: dict[str, float]  # share of sampled active backends by what they waited on

    @property
    def saves_per_second(self) -> float:
        return self.saves / self.seconds


# ---------------------------------------------------------------- the worker process


def _step_batches(steps: int) -> Iterator[list[SessionEvent]]:
    """Agent steps for one session (enough for ``steps`` saves, plus the warm-up one)."""
    return agent_batches(7 * (steps + 2))


def worker(url: str, saves: int, sessions: int, ready: Barrier, out: Queue[Any]) -> None:
    """Warm up, wait for everyone, then save ``saves`` steps; report (start, end, latencies)."""
    with open_store(url) as store:
        own = [store.create(uuid.uuid4()) for _ in range(sessions)]
        feeds = [_step_batches(saves // sessions + 1) for _ in own]
        for session, feed in zip(own, feeds, strict=True):
            for event in next(feed):
                session.append(event)
            store.save(session)
        ready.wait(START_TIMEOUT)
        latencies: list[float] = []
        events = 0
        begin = time.perf_counter()
        for n in range(saves):
            session, feed = own[n % sessions], feeds[n % sessions]
            t0 = time.perf_counter()
            for event in next(feed):
                session.append(event)
            events += store.save(session)
            latencies.append(time.perf_counter() - t0)
        end = time.perf_counter()
    out.put((begin, end, events, latencies))


# ---------------------------------------------------------------- the follower process


def follower(url: str, ready: Barrier, done: Event, out: Queue[Any]) -> None:
    """One surface-projection runner per partition, following until the workers are done."""
    from projections import ProjectionRunner, surfaces

    with open_store(url) as store:
        parts: Sequence[SessionStore] = store.parts if isinstance(store, PartitionedSessionStore) else [store]
        runners = [ProjectionRunner(part, ["surface"], poll_interval=0.05) for part in parts]
        stop = threading.Event()
        threads = [threading.Thread(target=r.run_forever, args=(stop,)) for r in runners]
        for thread in threads:
            thread.start()
        try:
            ready.wait(START_TIMEOUT)
            done.wait()
            begin = time.perf_counter()
            targets = [part.max_notification_id() for part in parts]
            while any(r.position < t for r, t in zip(runners, targets, strict=True)):
                time.sleep(0.005)
            catch_up = time.perf_counter() - begin
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        records = surfaces(runners[0].views["surface"])
        stored = {sid for part in parts for sid in part.session_ids()}
        events = sum(len(part.get(sid)) for part in parts for sid in part.session_ids())
        projected = {r.session_id for r in records} == stored and sum(r.events for r in records) == events
        for runner in runners:
            runner.close()
    out.put((catch_up, projected))


# ---------------------------------------------------------------- what the database waits on

WAIT_LABELS = {
    None: "running",
    ("Lock", "relation"): "table lock",
    ("Lock", "object"): "NOTIFY lock",
    ("IO", "WALSync"): "WAL flush",
    ("IO", "WALWrite"): "WAL flush",
    ("LWLock", "WALWrite"): "WAL flush",
}


class WaitSampler(threading.Thread):
    """Samples ``pg_stat_activity`` every few ms while the workers write: what the database's active
    client backends are waiting on (the table lock, the NOTIFY commit lock, the WAL flush, ...)."""

    def __init__(self, database: str) -> None:
        super().__init__(daemon=True)
        self.database = database
        self.stop = threading.Event()
        self.counts: dict[str, int] = {}

    def run(self) -> None:
        import psycopg

        query = (
            "SELECT wait_event_type, wait_event FROM pg_stat_activity WHERE datname = "
            "current_database() AND state = 'active' AND backend_type = 'client backend' "
            "AND pid <> pg_backend_pid()"
        )
        with psycopg.connect(self.database, autocommit=True) as connection:
            while not self.stop.is_set():
                for kind, event in connection.execute(query).fetchall():
                    key = None if kind is None else (kind, event)
                    label = WAIT_LABELS.get(key, f"{kind}:{event}")
                    self.counts[label] = self.counts.get(label, 0) + 1
                time.sleep(0.003)

    def shares(self) -> dict[str, float]:
        total = sum(self.counts.values()) or 1
        ranked = sorted(self.counts.items(), key=lambda kv: -kv[1])
        return {label: count / total for label, count in ranked}


# ---------------------------------------------------------------- one configuration


def run_configuration(
    database: str, layout: Layout, workers: int, saves: int, *, follow: bool = True
) -> Figures:
    context = (  # fork: fast to start; the parent holds no connection or thread at this point
        multiprocessing.get_context("fork")
        if sys.platform == "linux"
        else multiprocessing.get_context("spawn")
    )
    store_url = layout.url(database)
    with open_store(store_url):
        pass  # create the tables once, before processes race to create them
    ready = context.Barrier(workers + (2 if follow else 1))
    done = context.Event()
    results: Queue[Any] = context.Queue()
    followed: Queue[Any] = context.Queue()
    processes = [
        context.Process(target=worker, args=(store_url, saves, SESSIONS_PER_WORKER, ready, results))
        for _ in range(workers)
    ]
    if follow:
        processes.append(context.Process(target=follower, args=(store_url, ready, done, followed)))
    for process in processes:
        process.start()
    try:
        ready.wait(START_TIMEOUT)
        start = time.perf_counter()
        sampler = WaitSampler(database)
        sampler.start()
        reports = [results.get(timeout=START_TIMEOUT) for _ in range(workers)]
        sampler.stop.set()
        done.set()
        sampler.join()
        catch_up, projected = followed.get(timeout=START_TIMEOUT) if follow else (None, None)
    finally:
        for process in processes:
            process.join(timeout=START_TIMEOUT)
            if process.is_alive():
                process.kill()
    latencies = sorted(x for _, _, _, lat in reports for x in lat)
    return Figures(
        layout=layout,
        workers=workers,
        saves=len(latencies),
        events=sum(r[2] for r in reports),
        seconds=max(r[1] for r in reports) - start,
        p50=statistics.median(latencies),
        p99=latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
        catch_up=catch_up,
        projected=projected,
        waits=sampler.shares(),
    )


@contextmanager
def scratch_database(base: str) -> Iterator[str]:
    import psycopg

    name = f"bench_scaleout_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(f"{base}/postgres", autocommit=True, connect_timeout=5) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(f"{base}/postgres", autocommit=True, connect_timeout=5) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def measure(
    base: str,
    partitions: int,
    workers: Sequence[int],
    saves: int,
    *,
    rounds: int = 1,
    follow: bool = True,
) -> dict[tuple[str, int], list[Figures]]:
    """Every layout for every N, alternating, each in a fresh database, ``rounds`` times:
    ``(layout name, N) -> figures of each round``."""
    runs: dict[tuple[str, int], list[Figures]] = {}
    for round_number in range(1, rounds + 1):
        for n in workers:
            for layout in layouts(partitions):
                with scratch_database(base) as database:
                    figures = run_configuration(database, layout, n, saves, follow=follow)
                runs.setdefault((layout.name, n), []).append(figures)
                print(f"  round {round_number}: {layout.name} workers={n}: "
                      f"{figures.saves_per_second:,.0f} saves/s", file=sys.stderr, flush=True)  # fmt: skip
    return runs


def representative(runs: dict[tuple[str, int], list[Figures]]) -> list[Figures]:
    """Per configuration, the round of median throughput."""
    return [_median(found) for found in runs.values()]


def _median(runs: list[Figures]) -> Figures:
    ordered = sorted(runs, key=lambda f: f.saves_per_second)
    return ordered[(len(ordered) - 1) // 2]


# ---------------------------------------------------------------- the report


def table(figures: list[Figures]) -> str:
    lines = [
        "| layout | partitions | NOTIFY | workers | saves | saves/s | p50 ms | p99 ms "
        "| views catch up | views complete | active backends were |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for f in sorted(figures, key=lambda f: (f.workers, f.layout.name != "store", f.layout.name)):
        catch_up = "-" if f.catch_up is None else f"{f.catch_up * 1e3:.0f} ms"
        complete = "-" if f.projected is None else ("yes" if f.projected else "NO")
        lines.append(
            f"| {f.layout.name} | {f.layout.partitions or 1} | {'on' if f.layout.notify else 'off'} "
            f"| {f.workers} | {f.saves} | {f.saves_per_second:,.0f} | {f.p50 * 1e3:.2f} "
            f"| {f.p99 * 1e3:.2f} | {catch_up} | {complete} | {_waits(f.waits)} |"
        )
    return "\n".join(lines)


def _waits(shares: dict[str, float]) -> str:
    return ", ".join(f"{label} {share:.0%}" for label, share in list(shares.items())[:3])


def ratios(runs: dict[tuple[str, int], list[Figures]]) -> dict[int, dict[str, list[float]]]:
    """Per N and layout: its saves/s divided by the plain store's *of the same round* (measured
    seconds apart, so a load change on the machine hits both), one ratio per round, sorted."""
    found: dict[int, dict[str, list[float]]] = {}
    for (name, n), figures in runs.items():
        base = runs.get(("store", n))
        if name == "store" or base is None:
            continue
        pairs = zip(figures, base, strict=True)
        found.setdefault(n, {})[name] = sorted(f.saves_per_second / b.saves_per_second for f, b in pairs)
    return found


def _ratio_text(values: list[float]) -> str:
    middle = statistics.median(values)
    return f"{middle:.2f}x" if len(values) == 1 else f"{middle:.2f}x ({values[0]:.2f}-{values[-1]:.2f})"


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench_scaleout", description=__doc__.split("\n")[0])
    parser.add_argument("--pg", default=PG_BASE, help="PostgreSQL server URL without a database")
    parser.add_argument("--partitions", type=int, default=PARTITIONS, help="K (default 4)")
    parser.add_argument("--workers", default=",".join(map(str, WORKERS)), help="N values (1,2,4,8)")
    parser.add_argument("--saves", type=int, default=SAVES, help="agent steps saved per worker")
    parser.add_argument("--rounds", type=int, default=1, help="repeat; report the median round")
    parser.add_argument("--no-follow", action="store_true", help="no projection runners")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    workers = [int(n) for n in args.workers.split(",")]
    print(f"scale-out: K={args.partitions}, N={workers}, {args.saves} saves per worker",
          file=sys.stderr)  # fmt: skip
    runs = measure(
        args.pg, args.partitions, workers, args.saves, rounds=args.rounds, follow=not args.no_follow
    )
    figures = representative(runs)
    print(
        f"Python {platform.python_version()} on {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} CPUs; {args.saves} saves per worker, "
        f"{SESSIONS_PER_WORKER} sessions per worker; median of {args.rounds} round(s)\n"
    )
    print(table(figures))
    print()
    print("saves/s relative to one store in the same round (median of rounds, and range):")
    for n, by_layout in sorted(ratios(runs).items()):
        shown = ", ".join(f"{name} {_ratio_text(values)}" for name, values in by_layout.items())
        print(f"N={n}: {shown}")
    complete = all(f.projected in (None, True) for f in figures)
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())
