"""The JetStream store against PostgreSQL (and SQLite for the CLI), same run.

    .venv/bin/python -m benchmarks.bench_nats [--events N] [--sizes 50000,250000] [--messages N]
        [--layout 2x4]

Three stores, each measured the same way in one run: PostgreSQL (a fresh database on
127.0.0.1:5432), JetStream R1 (a fresh stream on the server at 127.0.0.1:4222) and JetStream R3 (a
3-node cluster on loopback started here, ``tests/sessions/nats_cluster.py``). For each:

- **1 writer**: one session saved one agent step at a time (``agent_batches``): saves per second;
- **8 writers**: eight writers, each with its own store handle and session, saving steps at once,
  spread as ``--layout PROCESSESxTHREADS`` (default ``2x4``: two processes of four threads, as an
  agent backend runs several workers): saves per second of all of them together (from a barrier
  across the processes to the last save), against PostgreSQL and against the same store's one
  writer; and, for information, the same eight writers as threads of one process, where one
  interpreter's lock bounds them whatever the store does;
- **CPU per save** (JetStream, information): the writing processes' CPU (every thread: the
  writers' work and the store's loop) and the servers' (``/proc`` of the processes listening on the
  URL's ports, :mod:`benchmarks.cpu`) per save, with one writer and with eight, how many cores were
  busy, and the ratio of eight writers to one that the machine's cores allow at that cost: what
  tells a limit of the store from a limit of the machine;
- **load**: a session of each of ``--sizes`` events (saved in batches of 1,000), then
  ``load_events`` of all of it by a new store handle with no snapshot: seconds; the growth per
  event from the smallest to the largest (1.0 is linear);
- **snapshot load**: the largest session opened by another store handle (``get``: its snapshot,
  taken at its full length, and nothing after it): seconds. On JetStream the snapshot is the
  ``<stream>_snapshots`` key's pointer and its chunks;
- **CLI compaction**: a ``--messages`` OpenAI-style transcript (one tool call and a ~100-character
  result per step, ``tests/sessions/long_transcript.py``) imported, then
  ``compaction --store URL compact SID --window 200000`` run as a subprocess: wall time from process
  start, against the same command on SQLite.

Ratios are of the same run (throughput: higher is better; times: lower is better). Not in the
default set of ``benchmarks.run`` (it needs both servers and starts three more).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import Result, fmt_seconds, scratch_dir
from benchmarks.cpu import CpuUse, ServerClock, ports_of, server_pids
from benchmarks.workload import agent_batches, agent_events
from compaction.sessions.store import SessionStore

PG_BASE = "postgresql://postgres@127.0.0.1:5432"
NATS_BASE = "nats://127.0.0.1:4222"
BARRIER_SECONDS = 120.0
CLI_WINDOW = 200_000


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


def saves_per_second(url: str, events: int) -> tuple[float, CpuUse | None]:
    """Saves per second of one writer, and (JetStream) the CPU its saves cost."""
    batches = list(agent_batches(events))
    with SessionStore.open(url) as store:
        session = store.create()
        servers = ServerClock(_servers(url))
        start, cpu = time.perf_counter(), time.process_time()
        for batch in batches:
            for event in batch:
                session.append(event)
            store.save(session)
        seconds = time.perf_counter() - start
        use = CpuUse(len(batches), time.process_time() - cpu, servers.spent(), seconds)
        return len(batches) / seconds, use if servers.pids else None


def _servers(url: str) -> list[int]:
    """The JetStream servers' processes of ``url`` (none for another store)."""
    return server_pids(ports_of(url)) if url.startswith("nats://") else []


@dataclass(frozen=True)
class Layout:
    """How the concurrent writers are spread: ``processes`` interpreters of ``threads`` writers
    each, every writer with its own store handle and session (``2x4``: two processes of four)."""

    processes: int
    threads: int

    @classmethod
    def parse(cls, text: str) -> Layout:
        processes, _, threads = text.lower().partition("x")
        try:
            layout = cls(int(processes), int(threads))
        except ValueError:
            raise ValueError(f"a writer layout is PROCESSESxTHREADS, like 2x4; found {text!r}") from None
        if layout.processes < 1 or layout.threads < 1:
            raise ValueError(f"a writer layout needs at least 1x1; found {text!r}")
        return layout

    @property
    def writers(self) -> int:
        return self.processes * self.threads

    def __str__(self) -> str:
        return f"{self.processes}x{self.threads}"


LAYOUT = Layout(2, 4)
"""The default spread of the concurrent writers: two processes of four."""


@dataclass(frozen=True)
class WriterOutcome:
    """What one writer process reports: its writers' saves, when the last ended (monotonic), the
    process's CPU seconds from the barrier to then, and the writers' errors."""

    saves: int
    end: float
    cpu: float
    errors: tuple[str, ...]


def concurrent_saves_per_second(url: str, events: int, layout: Layout) -> tuple[float, CpuUse | None]:
    """Saves per second of ``layout.writers`` writers on different sessions of one store, all
    started together (a barrier across the processes), timed from the barrier to the last save;
    and (JetStream) the CPU their saves cost."""
    context = multiprocessing.get_context("spawn")
    ready = context.Barrier(layout.writers + layout.processes + 1, timeout=BARRIER_SECONDS)
    finished: multiprocessing.Queue[WriterOutcome] = context.Queue()
    processes = [
        context.Process(target=_write_sessions, args=(url, events, layout.threads, ready, finished))
        for _ in range(layout.processes)
    ]
    for process in processes:
        process.start()
    try:
        ready.wait()
        servers = ServerClock(_servers(url))
        start = time.monotonic()
        outcomes = [finished.get(timeout=BARRIER_SECONDS) for _ in range(layout.processes)]
        spent = servers.spent()
    finally:
        for process in processes:
            process.join(BARRIER_SECONDS)
    failures = [error for outcome in outcomes for error in outcome.errors]
    if failures:
        raise RuntimeError(f"{len(failures)} of {layout.writers} writers failed; first: {failures[0]}")
    saves, seconds = sum(o.saves for o in outcomes), max(o.end for o in outcomes) - start
    use = CpuUse(saves, sum(o.cpu for o in outcomes), spent, seconds)
    return saves / seconds, use if servers.pids else None


def _write_sessions(
    url: str,
    events: int,
    threads: int,
    ready: threading.Barrier,
    finished: multiprocessing.Queue[WriterOutcome],
) -> None:
    """One writer process: ``threads`` writers, each saving a session step by step after the
    barrier (which this process's main thread waits at too, to start its CPU clock); puts one
    :class:`WriterOutcome` on ``finished``."""
    batches = list(agent_batches(events))
    stores = [SessionStore.open(url) for _ in range(threads)]
    errors: list[str] = []

    def write(store: SessionStore) -> None:
        session = store.create()
        ready.wait()
        try:
            for batch in batches:
                for event in batch:
                    session.append(event)
                store.save(session)
        except Exception as e:  # reported to the parent, which raises it
            errors.append(f"{type(e).__name__}: {e}")

    workers = [threading.Thread(target=write, args=(store,)) for store in stores]
    for worker in workers:
        worker.start()
    ready.wait()
    cpu = time.process_time()
    for worker in workers:
        worker.join()
    cpu = time.process_time() - cpu
    finished.put(WriterOutcome(len(batches) * threads, time.monotonic(), cpu, tuple(errors)))
    for store in stores:
        store.close()


def load_seconds(url: str, events: int, *, snapshot: bool) -> tuple[float, float]:
    """Seconds to read every event of an ``events``-long session (saved 1,000 events at a time)
    with no snapshot, and (``snapshot``) to open it from a snapshot taken at its full length from
    another store handle (0 when not measured)."""
    with SessionStore.open(url) as store:
        session = store.create()
        for index, event in enumerate(agent_events(events), 1):
            session.append(event)
            if index % 1000 == 0:
                store.save(session)
        store.save(session)
    with SessionStore.open(url) as cold:  # a new handle: nothing of the session cached
        start = time.perf_counter()
        loaded = cold.load_events(session.id)
        seconds = time.perf_counter() - start
        assert len(loaded) == len(session)
    if not snapshot:
        return seconds, 0.0
    with SessionStore.open(url) as store:
        store.take_session_snapshot(session)  # at its full length, whatever the interval
    with SessionStore.open(url) as other:
        start = time.perf_counter()
        opened = other.get(session.id)
        from_snapshot = time.perf_counter() - start
        assert len(opened) == len(session) and other.snapshot_fallbacks == []
    return seconds, from_snapshot


def cli_compact_seconds(url: str, transcript: Path) -> float:
    """Wall time of ``compaction --store URL compact SID --window 200000``, from process start,
    of the session imported from ``transcript`` (a subprocess: imports, start-up and all)."""
    from compaction.importers import import_path

    (imported,) = import_path(transcript)
    with SessionStore.open(url) as store:
        store.save(imported.session)
    command = [str(Path(sys.executable).parent / "compaction"), "--store", url, "compact",
               str(imported.session.id), "--window", str(CLI_WINDOW), "--json"]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: {done.stderr[-2000:]}")
    return seconds


@dataclass
class Figures:
    """What one store measured."""

    one: float = 0.0
    many: float = 0.0
    one_process: float = 0.0
    """The same number of writers as threads of one process (info: they share one interpreter)."""
    one_cpu: CpuUse | None = None
    many_cpu: CpuUse | None = None
    loads: dict[int, float] = field(default_factory=dict)
    from_snapshot: float = 0.0
    cli: float = 0.0


def measure(url: str, events: int, sizes: Sequence[int], transcript: Path | None, layout: Layout) -> Figures:
    one, one_cpu = saves_per_second(url, events)
    many, many_cpu = concurrent_saves_per_second(url, events, layout)
    one_process, _ = concurrent_saves_per_second(url, events, Layout(1, layout.writers))
    figures = Figures(one, many, one_process, one_cpu=one_cpu, many_cpu=many_cpu)
    for size in sizes:
        figures.loads[size], snapshot = load_seconds(url, size, snapshot=size == max(sizes))
        figures.from_snapshot = snapshot or figures.from_snapshot
    if transcript is not None:
        figures.cli = cli_compact_seconds(url, transcript)
    return figures


def run(
    events: int = 8000,
    sizes: Sequence[int] = (50_000, 250_000),
    messages: int = 100_000,
    layout: Layout | None = None,
) -> list[Result]:
    from tests.sessions.long_transcript import write_transcript
    from tests.sessions.nats_cluster import LoopbackCluster

    layout = layout or LAYOUT

    figures: dict[str, Figures] = {}
    with scratch_dir("nats-bench") as folder:
        transcript = write_transcript(folder / "long.json", messages) if messages else None
        with postgres_url() as url:
            figures["PostgreSQL"] = measure(url, events, sizes, transcript, layout)
        with jetstream_url(NATS_BASE, 1) as url:
            figures["JetStream R1"] = measure(url, events, sizes, transcript, layout)
        cluster = LoopbackCluster(folder / "cluster", name="bench")
        (folder / "cluster").mkdir()
        cluster.start_all()
        try:
            with jetstream_url(cluster.url, 3) as url:
                figures["JetStream R3"] = measure(url, events, sizes, transcript, layout)
        finally:
            cluster.stop_all()
        sqlite = 0.0
        if transcript is not None:
            sqlite = cli_compact_seconds(f"sqlite:///{folder / 'cli.db'}", transcript)
    return _rows(figures, sizes, messages, sqlite, layout)


def _rows(
    figures: dict[str, Figures], sizes: Sequence[int], messages: int, sqlite: float, layout: Layout
) -> list[Result]:
    pg = figures["PostgreSQL"]
    big, small = max(sizes), min(sizes)
    results: list[Result] = []
    n = layout.writers
    for name, r3 in (("JetStream R1", False), ("JetStream R3", True)):
        f = figures[name]
        results += [
            Result(f"{name}: saves/s, 1 writer", f"{f.one:,.0f}/s", f"PostgreSQL {pg.one:,.0f}/s",
                   f.one / pg.one, None, True),
            Result(f"{name}: saves/s, {n} writers on different sessions ({layout})", f"{f.many:,.0f}/s",
                   f"PostgreSQL {pg.many:,.0f}/s", f.many / pg.many, 0.6 if r3 else 0.9, True),
            Result(f"{name}: {n} writers ({layout}) / 1 writer, same store", f"{f.many:,.0f}/s",
                   f"1 writer {f.one:,.0f}/s", f.many / f.one, 3.0, True),
            Result(f"{name}: {n} writers in one process / 1 writer", f"{f.one_process:,.0f}/s",
                   f"1 writer {f.one:,.0f}/s", f.one_process / f.one, None, True),
        ]  # fmt: skip
        results += _cpu_rows(name, f, layout)
        for size in sizes:
            results.append(
                Result(f"{name}: load {size:,} events, no snapshot", fmt_seconds(f.loads[size]),
                       f"PostgreSQL {fmt_seconds(pg.loads[size])}", f.loads[size] / pg.loads[size],
                       (3.0 if r3 else 2.0) if size == big else None, False)
            )  # fmt: skip
        growth = (f.loads[big] / big) / (f.loads[small] / small)
        results += [
            Result(f"{name}: load per event, {big:,} / {small:,} events", fmt_seconds(f.loads[big]),
                   f"{small:,} events {fmt_seconds(f.loads[small])}", growth, 1.5, False),
            Result(f"{name}: open {big:,} events from the snapshot", fmt_seconds(f.from_snapshot),
                   f"1 s (PostgreSQL {fmt_seconds(pg.from_snapshot)})", f.from_snapshot,
                   1.0 if r3 else None, False),
        ]  # fmt: skip
    if messages:
        for name in ("PostgreSQL", "JetStream R1", "JetStream R3"):
            cli = figures[name].cli
            results.append(
                Result(f"{name}: CLI compact of {messages:,} messages --window {CLI_WINDOW}, from "
                       "process start", fmt_seconds(cli), f"SQLite {fmt_seconds(sqlite)}",
                       cli / sqlite, 2.0 if name != "PostgreSQL" else None, False)
            )  # fmt: skip
    return results


def _cpu_rows(name: str, f: Figures, layout: Layout) -> list[Result]:
    """What the saves cost in CPU (client and servers), and the ratio of many writers to one that
    the machine's cores allow at that cost (info: it tells a store's limit from the machine's)."""
    one, many = f.one_cpu, f.many_cpu
    if one is None or many is None:
        return []
    cores = os.cpu_count() or 1
    n = layout.writers
    return [
        Result(f"{name}: CPU per save, {n} writers ({layout}) / 1 writer", many.describe(),
               one.describe(), many.per_save / one.per_save, None, False),
        Result(f"{name}: {n} writers / 1 writer at most, every one of {cores} cores busy at that CPU "
               "per save", f"{many.ceiling(f.one, cores):.2f}x", f"measured {f.many / f.one:.2f}x",
               many.ceiling(f.one, cores), None, True),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=8000, help="events per writer (default 8000)")
    parser.add_argument("--sizes", default="50000,250000", help="session sizes loaded (events)")
    parser.add_argument("--messages", type=int, default=100_000,
                        help="messages of the session the CLI compacts (0: no CLI rows)")  # fmt: skip
    parser.add_argument("--layout", default=LAYOUT, type=Layout.parse,
                        help=f"the concurrent writers as PROCESSESxTHREADS (default {LAYOUT})")  # fmt: skip
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    results = run(args.events, sizes, args.messages, args.layout)
    print("| benchmark | measured | baseline (same run) | ratio | target | result |")
    print("|---|---|---|---|---|---|")
    for result in results:
        verdict = "info" if result.target is None else ("pass" if result.passed else "FAIL")
        print(
            f"| {result.name} | {result.measured} | {result.baseline} | {result.ratio:.2f} "
            f"| {result.target_text} | {verdict} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
