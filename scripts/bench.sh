#!/usr/bin/env bash
# Run every benchmark script (benchmarks/bench_*.py) with the project's Python, one after another.
#
#   scripts/bench.sh [PYTHON]          (default PYTHON: .venv/bin/python)
set -euo pipefail

python="${1:-.venv/bin/python}"
cd "$(dirname "$0")/.."

shopt -s nullglob
benches=(benchmarks/bench_*.py)
if [ ${#benches[@]} -eq 0 ]; then
    echo "bench: no benchmarks/bench_*.py yet; nothing to run" >&2
    exit 0
fi
for bench in "${benches[@]}"; do
    echo "== $bench" >&2
    "$python" "$bench"
done
