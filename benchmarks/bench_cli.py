"""The ``compaction compact`` command on a long imported session, timed from process start.

    .venv/bin/python -m benchmarks.bench_cli [--messages N] [--small N] [--stores sqlite,postgresql]
    .venv/bin/python -m benchmarks.run cli

The session is a generated OpenAI-style transcript (``benchmarks/openai_transcript.py``: one tool
call and a ~100-character result per step, every step naming its own file), imported with
``compaction import`` into a fresh store. Each store is then copied (a SQLite file copy, a
PostgreSQL ``CREATE DATABASE ... TEMPLATE``) before each compaction, so every run compacts the same
imported, never compacted session, from its snapshot:

- **CLI**: ``python -m compaction.cli.main compact SID --window 200000`` in a new process, wall
  time from the process's start to its exit (imports, store open, load, compaction, save, output),
  and the CPU it used (user + system: what a machine shared with other work does not inflate);
- **in-process**: the same compaction (the same configuration) as a library call in this process,
  the session loaded from a fresh store handle: the baseline that shows what the process costs;
- **small**: the CLI on the same transcript at ``--small`` messages (default 10,000), so the ratio
  shows how the command grows (10x the messages: at most 10x the time is linear).

Targets: the CLI at 100,000 messages within 10 s on SQLite (the row's ratio is the time over 10 s)
and within 2x that on PostgreSQL; the growth from the small session at most linear. The
compaction's audit is run after each timed CLI run (not timed) and must pass.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import Result, fmt_seconds, scratch_dir
from benchmarks.openai_transcript import write_transcript

ROOT = Path(__file__).resolve().parents[1]
PG_BASE = os.environ.get("COMPACTION_BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
WINDOW = 200_000
SQLITE_TARGET = 10.0
"""Seconds: the CLI compaction of the 100,000-message session on SQLite, from process start."""
PG_FACTOR = 2.0
"""PostgreSQL's target is this multiple of SQLite's."""


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``compaction ARGS`` in a new process (the repository's code, this interpreter)."""
    return subprocess.run(
        [sys.executable, "-m", "compaction.cli.main", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )


def measure_cli_compact(store_url: str, session_id: str, window: int = WINDOW) -> float:
    """Seconds from the start of a ``compaction compact SESSION --window W`` process to its exit.
    Raises when the command fails or leaves the session above its window."""
    return cli_compact_times(store_url, session_id, window)[0]


def cli_compact_times(store_url: str, session_id: str, window: int = WINDOW) -> tuple[float, float]:
    """``(wall, cpu)`` seconds of a ``compaction compact`` process: wall from its start to its
    exit, and the CPU it used (user + system; what a busy machine does not inflate)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = cli("compact", session_id, "--window", str(window), "--store", store_url, "--json")
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    if done.returncode != 0:
        raise RuntimeError(f"compact exited {done.returncode}: {done.stderr[-2000:] or done.stdout[-2000:]}")
    if not json.loads(done.stdout)["compactions"]:
        raise RuntimeError(f"compact committed nothing: {done.stdout[-2000:]}")
    return seconds, cpu


def audited(store_url: str, session_id: str) -> None:
    """Run ``compaction audit`` of the session; raise unless every check passes."""
    done = cli("audit", session_id, "--store", store_url, "--json")
    if done.returncode != 0 or not json.loads(done.stdout)["sessions"][0]["passed"]:
        raise RuntimeError(f"the audit failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")


def imported(store_url: str, transcript: Path) -> str:
    """Import ``transcript`` with the CLI; the session's id."""
    done = cli("import", str(transcript), "--format", "openai", "--store", store_url, "--json")
    if done.returncode != 0:
        raise RuntimeError(f"import exited {done.returncode}: {done.stderr[-2000:]}")
    return str(json.loads(done.stdout)["sessions"][0]["session_id"])


def in_process_compact(store_url: str, session_id: str, window: int = WINDOW) -> float:
    """Seconds of the same compaction as a library call: a fresh store handle, the session loaded
    from its snapshot, ``compact_to_fit`` with the command's defaults."""
    from compaction.service import BasicCompactService
    from compaction.sessions.store import SessionStore
    from compaction.vocabulary.config import BasicConfig

    config = BasicConfig(context_window=window, threshold_ratio=0.8, min_identifier_ratio=0.9)
    start = time.perf_counter()
    with SessionStore.open(store_url) as store:
        session = store.get(uuid.UUID(session_id))
        fit = asyncio.run(BasicCompactService(config).compact_to_fit(session, store=store))
    seconds = time.perf_counter() - start
    if not fit.compactions:
        raise RuntimeError("the in-process compaction committed nothing")
    return seconds


class Stores:
    """A store per kind holding the imported session, and fresh copies of it to compact."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.databases: list[str] = []

    def template(self, kind: str, name: str) -> str:
        if kind == "sqlite":
            return f"sqlite:///{self.folder / name}.db"
        return self._database(name)

    def copy(self, kind: str, url: str) -> str:
        """A fresh store holding what ``url`` holds."""
        name = f"copy_{uuid.uuid4().hex[:8]}"
        if kind == "sqlite":
            target = self.folder / f"{name}.db"
            shutil.copyfile(url.removeprefix("sqlite:///"), target)
            return f"sqlite:///{target}"
        return self._database(name, template=url.rsplit("/", 1)[1])

    def _database(self, name: str, template: str | None = None) -> str:
        import psycopg

        name = f"bench_cli_{name}_{uuid.uuid4().hex[:6]}"
        with psycopg.connect(f"{PG_BASE}/postgres", autocommit=True) as admin:
            suffix = f' TEMPLATE "{template}"' if template else ""
            admin.execute(f'CREATE DATABASE "{name}"{suffix}')
        self.databases.append(name)
        return f"{PG_BASE}/{name}"

    def drop(self) -> None:
        if not self.databases:
            return
        import psycopg

        with psycopg.connect(f"{PG_BASE}/postgres", autocommit=True) as admin:
            for name in reversed(self.databases):
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def stores() -> Iterator[Stores]:
    with scratch_dir("cli") as folder:
        held = Stores(folder)
        try:
            yield held
        finally:
            held.drop()


Figures = tuple[tuple[float, float], float, tuple[float, float]]
"""``((wall, cpu) of the CLI at messages, in-process seconds, (wall, cpu) of the CLI at small)``."""


def measure(kind: str, messages: int, small: int, held: Stores) -> Figures:
    """The figures of one kind of store."""
    figures: dict[int, tuple[str, str]] = {}
    for count in (small, messages):
        transcript = write_transcript(held.folder / f"session-{count}.jsonl", count)
        url = held.template(kind, f"imported_{count}")
        figures[count] = (url, imported(url, transcript))
    url, sid = figures[messages]
    copy = held.copy(kind, url)
    large = cli_compact_times(copy, sid)
    audited(copy, sid)
    library = in_process_compact(held.copy(kind, url), sid)
    small_url, small_sid = figures[small]
    copy = held.copy(kind, small_url)
    little = cli_compact_times(copy, small_sid)
    audited(copy, small_sid)
    return large, library, little


NAMES = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}


def results(kind: str, messages: int, small: int, figures: Figures) -> list[Result]:
    (large, large_cpu), library, (little, little_cpu) = figures
    name = NAMES[kind]
    target = SQLITE_TARGET * (PG_FACTOR if kind == "postgresql" else 1.0)
    what = f"CLI compact --window {WINDOW:,} of {messages:,} messages ({name}), from process start"
    return [
        Result(what, f"{fmt_seconds(large)} (CPU {fmt_seconds(large_cpu)})", f"target {target:g} s",
               large / target, 1.0, False),
        Result(f"{what}, CPU (user + system)", fmt_seconds(large_cpu), f"target {target:g} s",
               large_cpu / target, None, False),
        Result(f"{what} / in-process compaction", fmt_seconds(large),
               f"in-process {fmt_seconds(library)}", large / library, None, False),
        Result(f"{what} / the same at {small:,} messages", fmt_seconds(large),
               f"{small:,} messages {fmt_seconds(little)}", large / little, messages / small, False),
        Result(f"{what}, CPU / the same at {small:,} messages", fmt_seconds(large_cpu),
               f"{small:,} messages {fmt_seconds(little_cpu)}", large_cpu / little_cpu, None, False),
    ]  # fmt: skip


def run(
    messages: int = 100_000, small: int = 10_000, kinds: tuple[str, ...] = ("sqlite", "postgresql")
) -> list[Result]:
    out: list[Result] = []
    with stores() as held:
        for kind in kinds:
            out += results(kind, messages, small, measure(kind, messages, small, held))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--stores", default="sqlite,postgresql", help="comma-separated: sqlite, postgresql")
    args = parser.parse_args(argv)
    rows = run(args.messages, args.small, tuple(args.stores.split(",")))
    print("| benchmark | measured | baseline (same run) | ratio | target | result |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        verdict = "info" if r.target is None else ("pass" if r.passed else "MISS")
        print(f"| {r.name} | {r.measured} | {r.baseline} | {r.ratio:.2f} | {r.target_text} | {verdict} |")
    return 0 if all(r.passed for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
