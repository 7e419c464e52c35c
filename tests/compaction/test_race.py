"""Two real processes compact one session on SQLite, PostgreSQL and JetStream (race_child.py).

Exactly one wins (a complete bracket); the other reports BusyError (on JetStream refused by the
lease bucket before it stores anything, elsewhere by the log's conflict on the start's seq);
nothing is lost: every event of the original log is still there byte for byte, the surface is
valid, and exactly one compaction committed. A worker that appends while another summarizes does
not lose its event either: the manual compaction re-checks its span on a fresh load and commits
around it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from compaction.sessions import render
from compaction.sessions.mapper import encode_event
from compaction.sessions.session import Session, project
from compaction.sessions.store import SessionStore
from compaction.vocabulary.checkpoint import is_checkpoint
from compaction.vocabulary.events import CompactEnd, CompactStart
from tests.builders import end_turn, start_turn, tool_step, user

CHILD = Path(__file__).with_name("race_child.py")


def seed(url: str) -> tuple[UUID, list[bytes]]:
    with SessionStore.open(url) as store:
        session = Session()
        user(session, "Fix the failing tests in src/app/ and keep `pytest -q` green.")
        start_turn(session)
        for _ in range(6):
            tool_step(session, n_calls=2, output="FAILED tests/test_app.py::test_total - " * 8)
        end_turn(session)
        store.save(session)
        return session.id, [encode_event(e) for e in session.events()]


def race(url: str, session_id: UUID, workdir: Path, mode: str) -> dict[str, dict[str, Any]]:
    workers = [
        subprocess.Popen(
            [sys.executable, str(CHILD), url, str(session_id), str(workdir), name, other, mode],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, other in (("first", "second"), ("second", "first"))
    ]
    reports: dict[str, dict[str, Any]] = {}
    for worker in workers:
        out, err = worker.communicate(timeout=90)
        assert worker.returncode == 0, err
        report = json.loads(out.strip().splitlines()[-1])
        assert report["outcome"] != "failed", f"{report['error']}\n{err}"
        reports[report["name"]] = report
    return reports


def check_log(url: str, session_id: UUID, original: list[bytes], added: int) -> Session:
    with SessionStore.open(url) as store:
        loaded = store.get(session_id, use_snapshots=False)
    assert len(loaded) == len(original) + added
    assert [encode_event(loaded.event(s)) for s in range(len(original))] == original
    starts = [e for e in loaded.events() if isinstance(e, CompactStart)]
    ends = [e for e in loaded.events() if isinstance(e, CompactEnd)]
    assert len(starts) == 1 and len(ends) == 1 and ends[0].error is None
    assert ends[0].compaction_id == starts[0].compaction_id
    assert loaded.surface.is_balanced()
    assert render.pairing_problems(loaded.derive_messages()) == []
    checkpoints = [m for m in loaded.derive_messages() if is_checkpoint(m)]
    assert len(checkpoints) == 1
    assert loaded.nodes[0] == loaded.first_user_seq
    return loaded


@pytest.mark.parametrize("mode", ["race", "lock"])
def test_two_processes_race_exactly_one_wins(durable_store_url: str, tmp_path: Path, mode: str) -> None:
    session_id, original = seed(durable_store_url)
    reports = race(durable_store_url, session_id, tmp_path, mode)
    outcomes = sorted(r["outcome"] for r in reports.values())
    assert outcomes == ["busy", "committed"], reports
    winner = next(r for r in reports.values() if r["outcome"] == "committed")
    loser = next(r for r in reports.values() if r["outcome"] == "busy")
    if mode == "lock":
        assert winner["name"] == "first"
        assert (
            "compaction already in progress; the session compaction lock is already active"
            in (loser["error"])
        )
        assert f"pid {winner['pid']}" in loser["error"]  # the holder is named
    elif durable_store_url.startswith("nats://"):  # the lease bucket decides, not the append
        assert loser["error"].startswith("compaction: another writer holds the compaction lease")
        assert f"pid {winner['pid']}" in loser["error"]
    else:
        assert loser["error"].startswith("compaction: another writer appended to session")
    check_log(durable_store_url, session_id, original, added=4)


def test_an_append_during_a_manual_summary_is_kept_after_the_checkpoint(
    durable_store_url: str, tmp_path: Path
) -> None:
    session_id, original = seed(durable_store_url)
    reports = race(durable_store_url, session_id, tmp_path, "append")
    assert reports["first"]["outcome"] == "committed", reports
    assert reports["second"]["outcome"] == "appended"
    loaded = check_log(durable_store_url, session_id, original, added=5)
    late = len(original) + 1  # start, then the other worker's message, then the commit
    assert loaded.event(late).TYPE == "user/message"
    assert loaded.nodes[-1] == late  # positional: after the checkpoint and the newest unit
    message = project(loaded.event(loaded.nodes[1]))
    assert message is not None and is_checkpoint(message)
