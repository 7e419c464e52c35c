"""The restart fault: restart PostgreSQL under a writer, then check the store.

A writer process (:mod:`tests.reliability.restart_writer`) saves sessions continuously; once its
first save is acknowledged the server is restarted (a private cluster: ``pg_ctl restart``, ``fast``
or ``immediate`` in turn, :mod:`tests.reliability.pg_cluster`), or, without a private cluster, the
writer's own connections are ended (``pg_terminate_backend`` by its application name, never the
shared server's other sessions). The writer must acknowledge another save after the restart; then
it is killed, and every acknowledged save must be stored whole (``lost`` counts the others) and no
session stored in part (``torn``).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from uuid import UUID

from compaction.sessions.store import SessionStore
from tests.reliability.fuzz import ROOT
from tests.reliability.pg_cluster import PrivateCluster

WRITER = "compaction-soak-restart-writer"
STARTUP_SECONDS = 60.0
RIDE_OUT_SECONDS = 60.0


@dataclass
class RestartResult:
    restarts: int = 0
    down_seconds: float = 0.0
    acknowledged: int = 0
    unacknowledged: int = 0  # saves the writer gave up on (not acknowledged: not lost)
    torn: int = 0
    lost: int = 0
    hangs: int = 0  # no save acknowledged after the restart within RIDE_OUT_SECONDS
    errors: list[str] = field(default_factory=list)


def restart_round(
    url: str, workdir: Path, rng: random.Random, cluster: PrivateCluster | None, *, events: int = 200
) -> RestartResult:
    result = RestartResult()
    acked = workdir / f"restart-acked-{time.monotonic_ns()}.txt"
    acked.touch()
    with SessionStore.open(url) as store:
        before = set(store.all_session_ids())
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.reliability.restart_writer", url, str(acked),
         "--events", str(events)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PGAPPNAME": WRITER},
    )  # fmt: skip
    try:
        if not _wait_for_acks(acked, child, 1, STARTUP_SECONDS):
            result.errors.append("the restart writer acknowledged nothing before the restart")
            return result
        time.sleep(rng.uniform(0.0, 0.4))  # the restart lands anywhere in a later save
        count = len(_acked(acked))
        result.down_seconds = _restart(url, cluster, rng)
        result.restarts = 1
        if not _wait_for_acks(acked, child, count + 2, RIDE_OUT_SECONDS):
            result.hangs += 1
            result.errors.append(
                f"the writer acknowledged no save within {RIDE_OUT_SECONDS:.0f} s of the restart"
            )
    finally:
        child.send_signal(signal.SIGKILL)
        _, err = child.communicate()
    result.unacknowledged = err.count("unacknowledged:")
    saved = _acked(acked)
    result.acknowledged = len(saved)
    with SessionStore.open(url) as store:
        stored = {sid: store.stream_length(sid) for sid in store.all_session_ids() if sid not in before}
    result.torn = sum(length not in (0, events) for length in stored.values())
    result.lost = sum(stored.get(sid, 0) != events for sid in saved)
    if child.returncode not in (-signal.SIGKILL, None) and "Traceback" in err:
        result.errors.append(f"the restart writer failed: {err[-300:]}")
    return result


def _restart(url: str, cluster: PrivateCluster | None, rng: random.Random) -> float:
    if cluster is not None:
        return cluster.restart(rng.choice(("fast", "immediate")))
    import psycopg

    began = time.monotonic()
    base, name = url.rsplit("/", 1)
    with psycopg.connect(f"{base}/postgres", autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND application_name = %s",
            (name, WRITER),
        )
    return time.monotonic() - began


def _acked(path: Path) -> set[UUID]:
    """The acknowledged ids: whole lines only (the writer may be writing the next one)."""
    return {UUID(line) for line in path.read_text().split("\n")[:-1] if line}


def _wait_for_acks(path: Path, child: subprocess.Popen[str], count: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and child.poll() is None:
        if len(_acked(path)) >= count:
            return True
        time.sleep(0.02)
    return len(_acked(path)) >= count
