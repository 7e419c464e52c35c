"""Run the benchmarks and print one Markdown table.

    .venv/bin/python -m benchmarks.run                # all of them
    .venv/bin/python benchmarks/run.py surface        # only the named ones (see BENCHMARKS)
    .venv/bin/python -m benchmarks.run peers --quick  # a flag, for the benchmarks that take it (FLAGS)

The PostgreSQL scale-out benchmark has its own runner (``python -m benchmarks.bench_scaleout``):
it starts worker processes and takes minutes, so it is not part of the default set.

Ratios are measured within one run (library against its baseline, or large against small), so
they hold on a noisy machine where absolute times do not. Exit status 1 when a target is missed.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import (
    bench_adapters,
    bench_append,
    bench_cli,
    bench_compaction,
    bench_decision,
    bench_fidelity,
    bench_load,
    bench_memory,
    bench_meter,
    bench_peers,
    bench_readers,
    bench_rebuild,
    bench_recovery,
    bench_serve,
    bench_surface,
)
from benchmarks.common import Result

BENCHMARKS: dict[str, Callable[[], list[Result]]] = {
    "append": bench_append.run,
    "load": bench_load.run,
    "surface": bench_surface.run,
    "compaction": bench_compaction.run,
    "decision": bench_decision.run,
    "fidelity": bench_fidelity.run,
    "meter": bench_meter.run,
    "memory": bench_memory.run,
    "rebuild": bench_rebuild.run,
    "readers": bench_readers.run,
    "recovery": bench_recovery.run,
    "peers": bench_peers.run,  # in the default set only with the bench extra (bench_peers.available)
    "adapters": bench_adapters.run,  # needs PostgreSQL ($COMPACTION_BENCH_PG) and the framework extras
    "serve": bench_serve.run,  # needs PostgreSQL ($COMPACTION_BENCH_PG); starts compaction serve processes
    "cli": bench_cli.run,  # on request only (ON_REQUEST): needs PostgreSQL, imports 100k messages twice
}

ON_REQUEST = {"cli"}
"""Benchmarks run only when named: they take minutes."""

FLAGS: dict[str, dict[str, Callable[[], list[Result]]]] = {
    # peers: 100k only, one round, every target still judged; serve: 200 conversations, SQLite only
    "--quick": {"peers": bench_peers.run_quick, "serve": bench_serve.run_quick},
}
"""Per flag, the benchmarks that take it and what runs in place of theirs when it is given."""


def table(results: list[Result]) -> str:
    lines = [
        "| benchmark | measured | baseline | ratio | target | result |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        verdict = "info" if r.target is None else ("pass" if r.passed else "MISS")
        lines.append(
            f"| {r.name} | {r.measured} | {r.baseline} | {r.ratio:.2f} | {r.target_text} | {verdict} |"
        )
    return "\n".join(lines)


def chosen(argv: list[str]) -> dict[str, Callable[[], list[Result]]] | str:
    """What to run, by name, with the flags of ``argv`` applied; or why ``argv`` is refused."""
    flags = [a for a in argv if a.startswith("--")]
    names = [a for a in argv if not a.startswith("--")]
    names = names or [
        n for n in BENCHMARKS if n not in ON_REQUEST and (n != "peers" or bench_peers.available())
    ]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        return f"unknown benchmark(s) {unknown}; choose from {list(BENCHMARKS)}"
    runs = {name: BENCHMARKS[name] for name in names}
    known = ", ".join(f"{f} ({', '.join(takers)})" for f, takers in FLAGS.items())
    for flag in flags:
        takers = FLAGS.get(flag)
        if takers is None:
            return f"unknown flag {flag}; flags (and the benchmarks that take them): {known}"
        applied = [name for name in names if name in takers]
        if not applied:
            return f"{flag} applies to none of {names}; flags (and the benchmarks that take them): {known}"
        runs.update((name, takers[name]) for name in applied)
    return runs


def main(argv: list[str]) -> int:
    runs = chosen(argv)
    if isinstance(runs, str):
        print(runs, file=sys.stderr)
        return 2
    results: list[Result] = []
    for name, run in runs.items():
        print(f"running {name} ...", file=sys.stderr, flush=True)
        results.extend(run())
    print(
        f"Python {platform.python_version()} on {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} CPUs\n"
    )
    print(table(results))
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
