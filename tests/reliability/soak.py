"""``make soak``: the fuzzer and the race and crash loops for a set time, on SQLite and PostgreSQL.

    python -m tests.reliability.soak --minutes 10 [--backends sqlite,postgresql] [--seed 1]

Each backend gets a fresh store (a temporary SQLite file; a fresh PostgreSQL database on
``$COMPACTION_PG`` or postgresql://postgres@127.0.0.1:5432, dropped at the end) and the time is
shared between them. Rounds rotate: a batch of fuzz cases (seeds counting up from ``--seed``), a
race round, a crash round and, on PostgreSQL, a restart round (:mod:`tests.reliability.restart`:
PostgreSQL restarted under a writer; a private cluster the soak starts in a temporary folder, never
the shared server, or, where no private cluster can be started, the writer's own connections
ended). The store is replaced every few hundred cases so listing it stays
cheap. At the end it prints the counts per backend (runs, clean imports, clean refusals,
tracebacks, hangs, lost events, and the race, crash and restart figures) as a table and as one JSON line,
and exits 1 when anything was not clean.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.reliability import fuzz
from tests.reliability.crash import crash_round
from tests.reliability.pg_cluster import PrivateCluster, private_cluster
from tests.reliability.race import race_round
from tests.reliability.restart import restart_round

BATCH = 25
CASES_PER_STORE = 200
PG_BASE = os.environ.get("COMPACTION_PG", "postgresql://postgres@127.0.0.1:5432")


@dataclass
class Counts:
    backend: str
    fuzz: fuzz.Tally = field(default_factory=fuzz.Tally)
    race_rounds: int = 0
    race_saves: int = 0
    race_conflicts: int = 0
    crash_kills: int = 0
    crash_sessions: int = 0
    torn: int = 0
    restarts: int = 0
    restart_mode: str = ""
    restart_saves: int = 0
    restart_unacknowledged: int = 0
    lost_events: int = 0
    hangs: int = 0
    errors: list[str] = field(default_factory=list)
    harness_errors: list[str] = field(default_factory=list)  # the soak's own failures

    def row(self) -> dict[str, object]:
        c = self.fuzz.counts
        return {
            "backend": self.backend,
            "runs": self.fuzz.runs + self.race_rounds + self.crash_kills,
            "fuzz cases": self.fuzz.runs,
            "clean imports": c["clean-import"],
            "clean refusals": c["clean-refusal"],
            "tracebacks": c["traceback"] + len(self.errors),
            "hangs": c["hang"] + self.hangs,
            "lost events": c["lost-events"] + self.lost_events,
            "race rounds": self.race_rounds,
            "race saves": self.race_saves,
            "race conflicts": self.race_conflicts,
            "kills": self.crash_kills,
            "torn sessions": self.torn,
            "pg restarts": self.restarts,
            "restart saves": self.restart_saves,
            "restart unacked": self.restart_unacknowledged,
            "harness errors": len(self.harness_errors),
        }

    @property
    def clean(self) -> bool:
        row = self.row()
        return not (
            row["tracebacks"] or row["hangs"] or row["lost events"] or self.torn or self.harness_errors
        )


@contextmanager
def store_urls(backend: str, workdir: Path) -> Iterator[Iterator[str]]:
    """Fresh store URLs for ``backend``, cleaned up at the end."""
    made: list[str] = []

    def fresh() -> Iterator[str]:
        while True:
            sqlite = f"sqlite:///{workdir}/soak-{len(made)}.db"
            url = sqlite if backend == "sqlite" else _create_pg_database()
            made.append(url)
            yield url

    try:
        yield fresh()
    finally:
        if backend == "postgresql":
            for url in made:
                _drop_pg_database(url)


def _admin() -> object:
    import psycopg

    return psycopg.connect(f"{PG_BASE}/postgres", autocommit=True, connect_timeout=5)


def _create_pg_database() -> str:
    name = f"compaction_soak_{uuid.uuid4().hex[:12]}"
    connection = _admin()
    connection.execute(f'CREATE DATABASE "{name}"')  # type: ignore[attr-defined]
    connection.close()  # type: ignore[attr-defined]
    return f"{PG_BASE}/{name}"


def _drop_pg_database(url: str) -> None:
    connection = _admin()
    connection.execute(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')  # type: ignore[attr-defined]
    connection.close()  # type: ignore[attr-defined]


@dataclass
class RestartTarget:
    """Where the restart rounds write: a database on a private cluster (really restarted), or,
    without one, the soak's own database on the shared server (its writer's connections ended)."""

    cluster: PrivateCluster | None
    url: str | None
    mode: str


@contextmanager
def restart_target(backend: str) -> Iterator[RestartTarget]:
    if backend != "postgresql":
        yield RestartTarget(None, None, "")
        return
    with private_cluster() as (cluster, why):
        if cluster is None:
            url = _create_pg_database()
            try:
                yield RestartTarget(None, url, f"connections ended ({why})")
            finally:
                _drop_pg_database(url)
            return
        import psycopg

        with psycopg.connect(cluster.url(), autocommit=True) as admin:
            admin.execute('CREATE DATABASE "soak"')
        yield RestartTarget(cluster, cluster.url("soak"), f"private cluster on port {cluster.port}")


def soak(backend: str, seconds: float, seed: int, workdir: Path) -> Counts:
    counts = Counts(backend)
    rng = random.Random(seed)
    deadline = time.monotonic() + seconds
    next_seed = seed
    with store_urls(backend, workdir) as urls, restart_target(backend) as target:
        counts.restart_mode = target.mode
        url = next(urls)
        cases_here = 0
        while time.monotonic() < deadline:
            try:
                cases_here += _round(counts, url, next_seed, workdir, rng, target=target)
            except Exception as e:  # the harness itself failed: reported, and the soak goes on
                counts.harness_errors.append(f"seed {next_seed}: {type(e).__name__}: {e}")
            next_seed += 1
            if cases_here >= CASES_PER_STORE:
                url, cases_here = next(urls), 0
            _progress(counts)
    return counts


def _round(
    counts: Counts, url: str, seed: int, workdir: Path, rng: random.Random, *, target: RestartTarget
) -> int:
    """One fuzz batch, one race round, one crash round, one restart round (PostgreSQL); the
    number of fuzz cases run."""
    for case in fuzz.corpus(seed, BATCH):
        fuzz.run_case(case, url, workdir, counts.fuzz)
    race = race_round(url, writers=4, saves=10)
    counts.race_rounds += 1
    counts.race_saves += race.acknowledged
    counts.race_conflicts += race.conflicts
    counts.lost_events += race.lost + race.duplicated
    counts.hangs += race.hangs
    counts.errors += race.errors
    crash = crash_round(url, workdir, rng)
    counts.crash_kills += crash.kills
    counts.crash_sessions += crash.sessions
    counts.torn += crash.torn
    counts.lost_events += crash.lost
    counts.errors += crash.errors
    if target.url is not None:
        restart = restart_round(target.url, workdir, rng, target.cluster)
        counts.restarts += restart.restarts
        counts.restart_saves += restart.acknowledged
        counts.restart_unacknowledged += restart.unacknowledged
        counts.torn += restart.torn
        counts.lost_events += restart.lost
        counts.hangs += restart.hangs
        counts.errors += restart.errors
    return BATCH


def _progress(counts: Counts) -> None:
    row = counts.row()
    print(
        f"  {counts.backend}: {row['runs']} runs, {row['clean imports']} imports, "
        f"{row['clean refusals']} refusals, {row['tracebacks']} tracebacks, {row['hangs']} hangs, "
        f"{row['lost events']} lost",
        file=sys.stderr,
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.reliability.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = set(backends) - {"sqlite", "postgresql"}
    if unknown or not backends:
        parser.error(f"--backends: expected sqlite and/or postgresql, found {args.backends!r}")
    share = args.minutes * 60 / len(backends)
    results: list[Counts] = []
    with tempfile.TemporaryDirectory(prefix="compaction-soak-") as tmp:
        for index, backend in enumerate(backends):
            print(f"soak: {backend} for {share / 60:.1f} min", file=sys.stderr, flush=True)
            results.append(soak(backend, share, args.seed + 1000 * index, Path(tmp)))
    rows = [r.row() for r in results]
    columns = list(rows[0])
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in columns]
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True)))
    for r in rows:
        print("  ".join(str(r[c]).rjust(w) for c, w in zip(columns, widths, strict=True)))
    print(json.dumps({"minutes": args.minutes, "seed": args.seed, "results": rows}))
    for result in results:
        if result.restart_mode:
            print(f"{result.backend} restarts: {result.restart_mode}", file=sys.stderr)
    for result in results:
        for line in result.fuzz.failures + result.errors + result.harness_errors:
            print(f"{result.backend}: {line}", file=sys.stderr)
    return 0 if all(r.clean for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
