"""A newcomer's first hour, in fresh processes: the demo's hints run exactly as printed from the
repository root with the virtual environment not on ``PATH``."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

SCRIPT = Path(sys.executable).parent / "compaction"
"""The ``compaction`` script of the environment the tests run in (``.venv/bin/compaction``)."""


def without_the_venv() -> dict[str, str]:
    """The environment with no ``PATH`` entry holding this venv's scripts, nor a store."""
    scripts = SCRIPT.parent.absolute()
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and Path(p).absolute() != scripts]
    env = {k: v for k, v in os.environ.items() if k not in {"COMPACTION_STORE", "VIRTUAL_ENV"}}
    env["PATH"] = os.pathsep.join(path)
    return env


def run_line(line: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """One command line run by a shell, as a user would paste it."""
    return subprocess.run(
        ["/bin/sh", "-c", line], cwd=cwd, env=without_the_venv(), capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip


def hints(stderr: str, script: str) -> list[str]:
    """The command lines under ``Next:`` (each starts with how to run the program)."""
    lines = stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Next"))
    return [line.strip() for line in lines[start + 1 :] if line.strip().startswith(script)]


@pytest.mark.slow
def test_the_demo_hints_run_as_printed_from_the_repository_root(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'demo.db'}"
    script = os.path.relpath(SCRIPT, ROOT)
    assert run_line("command -v compaction", ROOT).returncode != 0  # not on PATH
    demo = run_line(f"{shlex.quote(script)} --store {store} demo --turns 1 --steps 6", ROOT)
    assert demo.returncode == 0, demo.stderr
    suggested = hints(demo.stderr, shlex.quote(script if "/" in script else f"./{script}"))
    assert [shlex.split(h, comments=True)[3] for h in suggested] == ["audit", "show", "sessions"]
    for line in suggested:
        done = run_line(line, ROOT)
        assert done.returncode == 0, (line, done.stderr)
        assert done.stdout.strip(), line


def test_the_hint_names_the_script_that_ran(tmp_path: Path) -> None:
    """Found on PATH, the program suggests its bare name; run by its path, that path."""
    store = "memory://"
    env = without_the_venv()
    on_path = subprocess.run(
        ["/bin/sh", "-c", f"compaction --store {store} sessions"], cwd=tmp_path, capture_output=True,
        text=True, timeout=120, check=False,
        env={**env, "PATH": os.pathsep.join([str(SCRIPT.parent), env["PATH"]])},
    )  # fmt: skip
    assert on_path.returncode == 0, on_path.stderr
    assert "try `compaction demo`" in on_path.stderr
    outside = run_line(f"{shlex.quote(str(SCRIPT))} --store {store} sessions", tmp_path)
    assert f"try `{shlex.quote(str(SCRIPT))} demo`" in outside.stderr
