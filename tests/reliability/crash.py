"""Crash checks: SIGKILL a writer process at a random moment, then check the store.

After each kill every stored session is whole (a save is atomic: all of its events or none), every
save the writer acknowledged is stored (``lost`` counts the others), and ``compaction sessions``
lists the store without an unreadable session.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from uuid import UUID

from compaction.sessions.store import SessionStore
from tests.reliability.fuzz import ROOT, cli

STARTUP_SECONDS = 60.0


@dataclass
class CrashResult:
    kills: int = 0
    sessions: int = 0
    torn: int = 0  # sessions stored with only part of their save
    lost: int = 0  # acknowledged saves not stored
    errors: list[str] = field(default_factory=list)


def crash_round(url: str, workdir: Path, rng: random.Random, *, events: int = 400) -> CrashResult:
    result = CrashResult()
    acked = workdir / f"acked-{time.monotonic_ns()}.txt"
    acked.touch()
    with SessionStore.open(url) as store:
        before = set(store.all_session_ids())  # only the writer's sessions are checked
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.reliability.crash_writer", url, str(acked), "--events", str(events)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + STARTUP_SECONDS
    while not acked.read_text() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)  # the writer is up once its first save is acknowledged
    time.sleep(rng.uniform(0.0, 0.4))  # then kill it anywhere in a later save
    if child.poll() is not None:
        failure = child.stderr.read().decode()[-300:]  # type: ignore[union-attr]
        result.errors.append(f"the writer exited by itself: {failure}")
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stderr.close()  # type: ignore[union-attr]
    result.kills = 1
    saved = {UUID(line) for line in acked.read_text().split()}
    with SessionStore.open(url) as store:
        stored = {sid: store.stream_length(sid) for sid in store.all_session_ids() if sid not in before}
    result.sessions = len(stored)
    result.torn = sum(length not in (0, events) for length in stored.values())
    result.lost = sum(stored.get(sid, 0) != events for sid in saved)
    code, out, err = cli("--store", url, "sessions", "--json")
    if code != 0 or any(row.get("unreadable") for row in json.loads(out)["sessions"]):
        result.errors.append(f"sessions after a kill: exit {code}: {(out + err)[-300:]}")
    return result
