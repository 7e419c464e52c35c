"""Run the benchmarks and print one Markdown table.

    .venv/bin/python -m benchmarks.run            # all of them
    .venv/bin/python benchmarks/run.py surface    # only the named ones (see BENCHMARKS)

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
    bench_append,
    bench_compaction,
    bench_decision,
    bench_fidelity,
    bench_load,
    bench_meter,
    bench_peers,
    bench_rebuild,
    bench_recovery,
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
    "rebuild": bench_rebuild.run,
    "recovery": bench_recovery.run,
    "peers": bench_peers.run,  # in the default set only with the bench extra (bench_peers.available)
}


def table(results: list[Result]) -> str:
    lines = [
        "| benchmark | measured | baseline | ratio | target | result |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        verdict = "info" if r.target is None else ("pass" if r.passed else "MISS")
        lines.append(
            f"| {r.name} | {r.measured} | {r.baseline} | {r.ratio:.2f} | {r.target_text} "
            f"| {verdict} |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    names = argv or [n for n in BENCHMARKS if n != "peers" or bench_peers.available()]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark(s) {unknown}; choose from {list(BENCHMARKS)}", file=sys.stderr)
        return 2
    results: list[Result] = []
    for name in names:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        results.extend(BENCHMARKS[name]())
    print(
        f"Python {platform.python_version()} on {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} CPUs\n"
    )
    print(table(results))
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
