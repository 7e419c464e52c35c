"""Projection runners as real processes: killed mid-rebuild, and the ``--follow`` process.

A runner killed with SIGKILL in the middle of a rebuild resumes from its tracking records and ends
equal to a clean rebuild, having applied every notification exactly once. ``compaction rebuild
--follow`` applies events appended by another process, stops cleanly on SIGTERM / SIGINT (exit 0,
the batch under way recorded), and a restarted follower resumes without re-applying anything.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from compaction.sessions.store import SessionStore
from projections import ALL, ProjectionRunner, ViewRecorder
from tests.builders import wait_until
from tests.projections.test_projections import Writer, check_against_aggregate, dump

CLI = [sys.executable, "-m", "compaction.cli.main"]


@pytest.fixture
def store(durable_store_url: str) -> Iterator[SessionStore]:
    with SessionStore.open(durable_store_url) as opened:
        yield opened


def positions(store: SessionStore, views: dict[str, ViewRecorder]) -> dict[str, int]:
    return {name: view.max_tracking_id(store.name) or 0 for name, view in views.items()}


def grow(store: SessionStore, seed: int, sessions: int, operations: int) -> None:
    """Several interleaved sessions, saved in chunks (a log big enough for many small batches)."""
    writer = Writer(store, random.Random(seed), autosave=False)
    grown = [writer.new_session() for _ in range(sessions)]
    for round_ in range(operations):
        session = grown[round_ % sessions]
        writer.step(session)
        if len(session) - session.saved_length > 150 or round_ >= operations - sessions:
            store.save(session)


def run_cli(store_url: str, *arguments: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, "--store", store_url, *arguments, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(child: subprocess.Popen[str], timeout: float = 60) -> dict[str, Any]:
    out, err = child.communicate(timeout=timeout)
    assert child.returncode == 0, f"exit {child.returncode}\nstdout: {out}\nstderr: {err}"
    document: dict[str, Any] = json.loads(out)
    return document


# ---------------------------------------------------------------- SIGKILL mid-rebuild


def test_a_runner_killed_mid_rebuild_resumes_to_a_clean_rebuild(
    store: SessionStore, durable_store_url: str, probe: dict[str, ViewRecorder]
) -> None:
    grow(store, seed=21, sessions=4, operations=360)
    latest = store.max_notification_id()
    assert latest is not None and latest > 2000
    child = run_cli(durable_store_url, "rebuild", "--batch-size", "20")
    try:
        wait_until(lambda: min(positions(store, probe).values()) >= 100, 60, "a few batches")
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL
    at_kill = positions(store, probe)
    assert all(0 < p < latest for p in at_kill.values()), at_kill
    with ProjectionRunner(store) as resumed:
        reports = resumed.catch_up()
        # Exactly the notifications after each tracking record, each once.
        assert {r.name: r.events for r in reports} == {
            n: store.count_notifications(p, latest) for n, p in at_kill.items()
        }
        check_against_aggregate(store, resumed.views)
        after_resume = dump(resumed.views)
        clean = resumed.rebuild()
        assert all(r.events == store.count_notifications(0, latest) for r in clean)
        assert dump(resumed.views) == after_resume


# ---------------------------------------------------------------- the --follow process


def test_follow_applies_new_events_stops_on_signals_and_resumes(
    store: SessionStore, durable_store_url: str, probe: dict[str, ViewRecorder]
) -> None:
    grow(store, seed=31, sessions=2, operations=8)
    writer = Writer(store, random.Random(32))
    first = store.max_notification_id()

    follower = run_cli(durable_store_url, "rebuild", "--follow", "--poll", "0.05")
    try:
        wait_until(lambda: set(positions(store, probe).values()) == {first}, 60, "the catch-up")
        session = writer.new_session()
        for _ in range(4):
            writer.step(session)
        second = store.max_notification_id()
        assert second > first
        wait_until(lambda: set(positions(store, probe).values()) == {second}, 30, "new events")
        check_against_aggregate(store, probe)
        follower.send_signal(signal.SIGTERM)
        document = finish(follower)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert document["mode"] == "follow"
    assert [(p["name"], p["events"], p["position"]) for p in document["projections"]] == [
        (name, store.count_notifications(0, second), second) for name in ALL
    ]

    restarted = run_cli(durable_store_url, "rebuild", "--follow", "--poll", "0.05")
    try:
        for _ in range(3):
            writer.step(session)
        third = store.max_notification_id()
        wait_until(lambda: set(positions(store, probe).values()) == {third}, 60, "the restart")
        restarted.send_signal(signal.SIGINT)
        resumed = finish(restarted)
    finally:
        if restarted.poll() is None:
            restarted.kill()
    # The restart applied only what was appended after the first follower stopped.
    counted = store.count_notifications(second, third)  # ids have gaps on JetStream
    assert [p["events"] for p in resumed["projections"]] == [counted] * len(ALL)
    check_against_aggregate(store, probe)
    with ProjectionRunner(store) as runner:
        incremental = dump(runner.views)
        runner.rebuild()
        assert dump(runner.views) == incremental
