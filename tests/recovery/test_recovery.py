"""Recovery: the orphan scan, liveness rules, the inertness proof, turn closers, repair, the
recovery process and the ``recover`` command. Stores are real (memory, SQLite, PostgreSQL)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest

import recovery
from compaction.cli.main import main as cli_main
from compaction.engine.lock import inspect_lock
from compaction.errors import ConfigurationError
from compaction.service import BasicCompactService
from compaction.sessions import hashing
from compaction.sessions.blocks import Message, TextBlock, ToolCallBlock
from compaction.sessions.events import (
    AssistantMessage,
    CommandRun,
    Replace,
    SessionResume,
    StepEnd,
    StepStart,
    ToolCall,
    ToolResult,
    TurnEnd,
    UserMessage,
    now_utc,
)
from compaction.sessions.interrupted import NOT_STARTED_TEXT, OUTCOME_UNKNOWN_TEXT
from compaction.sessions.invariants import DEFAULT_INVARIANTS
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from compaction.vocabulary.checkpoint import checkpoint_message
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.events import CompactEnd, CompactStart, CompactSummary, Lease, ShadowedRange
from recovery import (
    OrphanCorruptionError,
    OrphanReport,
    OrphanScanner,
    Recovery,
    RecoveryConfig,
    RecoveryConfigError,
    hash_surface,
    interrupted_turn_closers,
    judge,
    process_alive,
    prove_inert,
    recover,
    settle,
    surface_hash,
)
from recovery.scan import Orphan
from tests.builders import MODEL, end_turn, run_json, start_turn, tool_step, user

HOST = socket.gethostname()
WINDOW = 3000


def dead_pid() -> int:
    """The pid of a process that existed on this host and is gone (reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def lease(pid: int, seconds: float = 600.0, host: str = HOST) -> Lease:
    return Lease(host=host, pid=pid, expires_at=now_utc() + timedelta(seconds=seconds))


def history(session: Session, steps: int = 12) -> None:
    """A task, an open turn and enough tool steps to compact."""
    user(session, "Please fix the failing tests in src/mod.py")
    start_turn(session, window=WINDOW)
    for _ in range(steps):
        tool_step(session, 2, output="output line " * 30)


def orphan_start(
    session: Session, owner: Lease, *, turn: int | None = -1, cid: str = "c-orphan"
) -> CompactStart:
    owned = session.open_turn if turn == -1 else turn
    event = session.append(CompactStart(compaction_id=cid, turn=owned, lease=owner))
    assert isinstance(event, CompactStart)
    return event


def saved_session(store: SessionStore, owner: Lease | None = None, **kwargs: object) -> Session:
    session = store.create(invariants=DEFAULT_INVARIANTS)  # repairs must keep the brackets valid
    history(session)
    if owner is not None:
        orphan_start(session, owner, **kwargs)  # type: ignore[arg-type]
    store.save(session)
    return session


def repair() -> RecoveryConfig:
    return RecoveryConfig(repair=True)


# ---------------------------------------------------------------- the surface hash


def test_surface_hash_follows_its_documented_recipe() -> None:
    session = Session()
    history(session, steps=2)
    messages = session.derive_messages()
    encoded = [json.dumps(list(session.nodes), separators=(",", ":"))]
    encoded += [json.dumps(msgspec.to_builtins(m), separators=(",", ":")) for m in messages]
    expected = hashlib.sha256("".join(encoded).encode()).hexdigest()
    assert surface_hash(session) == expected == hash_surface(session.nodes, messages)


def test_surface_hash_is_pinned_for_a_fixed_surface() -> None:
    """Export and copy compare hashes across versions: the recipe must not drift silently."""
    message = Message(id="m1", role="user", content=(TextBlock("hello"),))
    call = Message(
        id="a1",
        role="assistant",
        content=(ToolCallBlock("c1", "bash", '{"command": "ls"}'),),
        source=MODEL,
    )
    assert hash_surface([0, 3], [message, call]) == (
        hashlib.sha256(
            b"[0,3]"
            b'{"id":"m1","role":"user","content":[{"type":"text","text":"hello"}]}'
            b'{"id":"a1","role":"assistant","content":[{"type":"tool-call","id":"c1","name":"bash",'
            b'"arguments":"{\\"command\\": \\"ls\\"}"}],"source":{"kind":"model","provider":"test",'
            b'"model":"test-model"}}'
        ).hexdigest()
    )


def test_one_surface_hash_for_the_library() -> None:
    """Recovery reports the same hash export and copy record (compaction.sessions.hashing.surface_hash)."""
    session = Session()
    history(session)
    asyncio.run(BasicCompactService(BasicConfig(context_window=WINDOW)).compact_if_needed(session))
    assert session.surface.generation == 1  # a replacement is on the surface
    assert surface_hash is hashing.surface_hash
    assert hash_surface(session.nodes, session.derive_messages()) == hashing.surface_hash(session)


def test_surface_hash_matches_across_reload_and_changes_with_the_surface(store_url: str) -> None:
    with SessionStore.open(store_url) as store:
        session = store.create()
        history(session, steps=3)
        store.save(session)
        live = surface_hash(session)
        assert len(live) == 64 and int(live, 16) >= 0
        assert surface_hash(store.get(session.id)) == live
        assert surface_hash(store.get(session.id, use_snapshots=False)) == live
        tool_step(session)
        assert surface_hash(session) != live


# ---------------------------------------------------------------- live or stale


def test_judge_applies_each_rule_in_order() -> None:
    now = now_utc()
    start = CompactStart(seq=10, time=now, compaction_id="c", turn=1, lease=lease(os.getpid()))
    live = judge(start, resume_seq=None, now=now, host=HOST)
    assert (live.stale, live.rule) == (False, "live")
    assert str(os.getpid()) in live.reason
    resumed = judge(start, resume_seq=11, now=now, host=HOST)
    assert (resumed.stale, resumed.rule) == (True, "resume")
    assert judge(start, resume_seq=9, now=now, host=HOST).rule == "live"  # an older resume
    expired = judge(start, resume_seq=None, now=now + timedelta(seconds=601), host=HOST)
    assert (expired.stale, expired.rule) == (True, "lease-expired")
    gone = msgspec.structs.replace(start, lease=lease(dead_pid()))
    assert judge(gone, resume_seq=None, now=now, host=HOST).rule == "owner-gone"
    assert judge(gone, resume_seq=None, now=now, host=HOST, check_pids=False).rule == "live"
    assert judge(gone, resume_seq=None, now=now, host="another-host").rule == "live"


def test_process_alive_sees_zombies_as_gone() -> None:
    assert process_alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        for _ in range(500):  # exited but not reaped: a zombie
            if not process_alive(child.pid):
                break
            threading.Event().wait(0.01)
        assert not process_alive(child.pid)
    finally:
        child.wait()
    assert not process_alive(child.pid)
    assert not process_alive(0)


# ---------------------------------------------------------------- the scan


def test_scan_finds_exactly_the_unmatched_starts(store_url: str) -> None:
    with SessionStore.open(store_url) as store:
        clean = saved_session(store)
        failed = saved_session(store, lease(dead_pid()))
        failed.append(CompactEnd(compaction_id="c-orphan", turn=failed.open_turn, error="boom"))
        store.save(failed)
        orphaned = saved_session(store, lease(dead_pid()), cid="c-lost")
        total = sum(len(store.get(s.id)) for s in (clean, failed, orphaned))

        scanner = OrphanScanner(store, batch=2)  # several pages
        first = scanner.poll()
        assert [(o.session_id, o.compaction_id) for o in scanner.orphans] == [(orphaned.id, "c-lost")]
        assert first.events_scanned == total
        assert first.records_read == 3  # two starts and one end
        assert scanner.poll().events_scanned == 0  # nothing new

        resumed = store.get(orphaned.id)
        resumed.append(SessionResume(host="h", pid=1))
        store.save(resumed)
        second = scanner.poll()
        assert (second.events_scanned, second.records_read) == (1, 1)
        assert scanner.last_resume(orphaned.id) == len(resumed) - 1


def test_a_live_lease_is_reported_live_and_never_repaired(store_url: str) -> None:
    with SessionStore.open(store_url) as store:
        session = saved_session(store, lease(os.getpid()))
        length = len(session)
        report = recover(store, repair())
        (orphan,) = report.orphans
        assert (orphan.stale, orphan.rule, orphan.inert, orphan.action) == (
            False,
            "live",
            True,
            "none",
        )
        assert orphan.owner_pid == os.getpid()
        assert len(store.get(session.id)) == length
        assert inspect_lock(store.get(session.id)).live


# ---------------------------------------------------------------- the inertness proof


def test_a_lone_start_is_inert_with_the_sessions_hash() -> None:
    session = Session()
    history(session)
    before = surface_hash(session)
    start = orphan_start(session, lease(os.getpid()))
    tool_step(session)  # the session went on after the crash
    proof = prove_inert(session, start)
    assert proof.inert
    assert proof.orphan_seqs == (start.seq,)
    assert proof.surface_hash == surface_hash(session) != before
    assert proof.with_orphan.seqs == proof.without_orphan.seqs == tuple(session.nodes)
    assert proof.evidence == ()


def landed_without_end(session: Session, start: CompactStart) -> tuple[int, int]:
    """A non-atomic commit that crashed after the replacement: summary + replacement, no end."""
    shadowed = tuple(session.nodes[1:4])  # one assistant message and its two results
    summary = session.append(
        CompactSummary(
            compaction_id=start.compaction_id,
            summary=(TextBlock("## Summary\nshort"),),
            shadowed_range=ShadowedRange(shadowed[0], shadowed[-1]),
            shadowed_seqs=shadowed,
            shadowed_token_count=100,
            provider="test",
            model="test",
        )
    )
    replacement = session.append(
        UserMessage(
            message=checkpoint_message(start.compaction_id, (TextBlock("short"),)),
            surface_op=Replace(shadowed[0], shadowed[-1]),
            source_event_seqs=(start.seq, summary.seq, *shadowed),
        )
    )
    return summary.seq, replacement.seq


def test_a_landed_replacement_is_not_inert_and_says_why() -> None:
    session = Session()
    history(session)
    start = orphan_start(session, lease(dead_pid()))
    summary_seq, replacement_seq = landed_without_end(session, start)
    proof = prove_inert(session, start)
    assert not proof.inert
    assert proof.citing_seqs == (replacement_seq,)
    assert proof.orphan_seqs == (start.seq, summary_seq, replacement_seq)
    assert proof.with_orphan.seqs != proof.without_orphan.seqs
    assert proof.surface_hash == surface_hash(session)
    text = "\n".join(proof.evidence)
    assert f"user/message at seq {replacement_seq} cites the start" in text
    assert f"compact/summary at seq {summary_seq}" in text
    assert "differs from the surface without them" in text


def test_a_lone_summary_is_inert_but_noted() -> None:
    session = Session()
    history(session)
    start = orphan_start(session, lease(dead_pid()))
    summary = session.append(
        CompactSummary(
            compaction_id=start.compaction_id,
            summary=(TextBlock("s"),),
            shadowed_range=ShadowedRange(4, 4),
            shadowed_seqs=(4,),
            shadowed_token_count=1,
            provider="t",
            model="t",
        )
    )
    proof = prove_inert(session, start)
    assert proof.inert
    assert proof.orphan_seqs == (start.seq, summary.seq)
    assert any("stored without its compact/end" in line for line in proof.evidence)


def test_a_corrupt_orphan_is_reported_loudly_and_left_alone(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with SessionStore.open(store_url) as store:
        session = store.create()
        history(session)
        start = orphan_start(session, lease(dead_pid()))
        landed_without_end(session, start)
        store.save(session)
        length = len(session)
        report = recover(store, repair())
        (orphan,) = report.orphans
        assert (orphan.stale, orphan.inert, orphan.action) == (True, False, "refused-corrupt")
        assert orphan.evidence and not report.passed
        assert len(store.get(session.id)) == length
        assert "CORRUPTION" in caplog.text
        with pytest.raises(OrphanCorruptionError, match="not inert") as raised:
            report.raise_for_corruption()
        assert any("cites the start" in line for line in raised.value.evidence)


# ---------------------------------------------------------------- interrupted-turn closers


def open_step_with_calls(session: Session) -> tuple[int, int]:
    """An open step: an assistant message with two calls, the first dispatched, none answered."""
    turn = session.open_turn
    assert turn is not None
    step = session.structure.next_step
    session.append(StepStart(turn=turn, step=step))
    calls = (ToolCallBlock("k1", "bash", "{}"), ToolCallBlock("k2", "bash", "{}"))
    session.append(
        AssistantMessage(
            turn=turn,
            step=step,
            surface_op="append",
            message=Message(id="a-open", role="assistant", content=(TextBlock("go"), *calls), source=MODEL),
        )
    )
    recorded = session.append(ToolCall(turn=turn, step=step, call_id="k1", name="bash", arguments="{}"))
    return step, recorded.seq


def test_closers_answer_pending_calls_and_close_step_and_turn() -> None:
    session = Session()
    history(session, steps=2)
    turn = session.open_turn
    step, call_seq = open_step_with_calls(session)
    last = session.event(len(session) - 1)
    closers = interrupted_turn_closers(session)
    first, second, step_end, turn_end = closers
    base = len(session)
    assert [c.seq for c in closers] == list(range(base, base + 4))
    assert all(c.time == last.time for c in closers)
    assert isinstance(first, ToolResult) and isinstance(second, ToolResult)
    assert first.error is not None and first.error.code == "TOOL_OUTCOME_UNKNOWN"
    assert first.source_event_seqs == (call_seq,)
    assert first.message.id == f"interrupted-tool-result-k1-{base}"
    assert first.message.content[0].content[0].text == OUTCOME_UNKNOWN_TEXT  # type: ignore[union-attr]
    assert second.error is not None and second.error.code == "TOOL_NOT_STARTED"
    assert second.source_event_seqs is None
    assert second.message.content[0].content[0].text == NOT_STARTED_TEXT  # type: ignore[union-attr]
    assert (first.turn, first.step, first.synthesized) == (turn, step, True)
    assert isinstance(step_end, StepEnd) and (step_end.turn, step_end.step) == (turn, step)
    assert isinstance(turn_end, TurnEnd) and turn_end.reason.kind == "interrupted"
    session.append_all(closers)  # they obey every append rule
    assert session.open_turn is None and session.surface.is_balanced()


def test_closers_are_empty_without_an_open_turn_and_skip_answered_calls() -> None:
    session = Session()
    assert interrupted_turn_closers(session) == []
    history(session, steps=2)
    (turn_end,) = interrupted_turn_closers(session)  # steps all closed, calls all answered
    assert isinstance(turn_end, TurnEnd)
    end_turn(session)
    assert interrupted_turn_closers(session) == []


# ---------------------------------------------------------------- repair


def test_repair_closes_the_orphan_and_the_turn_and_is_idempotent(store_url: str) -> None:
    with SessionStore.open(store_url) as store:
        session = store.create()
        history(session)
        before = surface_hash(session)
        start = orphan_start(session, lease(dead_pid()))
        open_step_with_calls(session)  # the dead worker was mid-step too
        store.save(session)
        length = len(session)

        dry = recover(store)
        assert [o.action for o in dry.orphans] == ["would-repair"]
        assert len(store.get(session.id)) == length

        report = recover(store, repair())
        (orphan,) = report.orphans
        assert orphan.action == "repaired" and orphan.end_seq == length
        assert orphan.closer_seqs == tuple(range(length + 1, length + 5))
        repaired = store.get(session.id)
        end = repaired.event(length)
        assert isinstance(end, CompactEnd) and end.compaction_id == start.compaction_id
        assert end.error is not None and end.error.startswith("abandoned: owner process")
        assert f"pid {os.getpid()}" in end.error
        assert repaired.open_turn is None and not inspect_lock(repaired).live
        assert surface_hash(repaired) != before  # the synthetic results joined the surface

        again = recover(store, repair())
        assert again.orphans == () and len(store.get(session.id)) == len(repaired)
        result = asyncio.run(
            BasicCompactService(BasicConfig(context_window=WINDOW)).compact_now(repaired, store=store)
        )
        assert result is not None


def test_a_standalone_orphan_is_closed_without_touching_turns(store_url: str) -> None:
    with SessionStore.open(store_url) as store:
        session = store.create()
        history(session)
        end_turn(session)
        orphan_start(session, lease(dead_pid()), turn=None)
        store.save(session)
        (orphan,) = recover(store, repair()).orphans
        assert orphan.action == "repaired" and orphan.closer_seqs == () and orphan.turn is None


def test_a_command_orphan_is_closed_under_its_command_and_still_loads(store_url: str) -> None:
    with SessionStore.open(store_url) as store:
        session = store.create(invariants=DEFAULT_INVARIANTS)
        history(session)
        end_turn(session)
        session.append(CommandRun(command_id="cmd-1", name="compact"))
        start = session.append(
            CompactStart(compaction_id="c-cmd", turn=None, lease=lease(dead_pid()), source_command_id="cmd-1")
        )
        store.save(session)  # the worker died during /compact
        (orphan,) = recover(store, repair()).orphans
        assert orphan.action == "repaired"
        repaired = store.get(session.id, use_snapshots=False)  # the invariant re-checks the end
        end = repaired.event(orphan.end_seq or -1)
        assert isinstance(end, CompactEnd) and end.compaction_id == start.compaction_id
        assert end.source_command_id == "cmd-1" and end.error


def test_settle_reports_an_orphan_closed_in_between() -> None:
    with SessionStore.open("memory://") as store:
        session = saved_session(store, lease(dead_pid()))
        (found,) = recover(store, repair()).orphans
        start = session.event(found.start_seq)
        assert isinstance(start, CompactStart)
        stale = judge(start, resume_seq=None, now=now_utc(), host=HOST)
        outcome = settle(store, Orphan(session.id, start), stale, repair=True)
        assert (outcome.action, outcome.proof) == ("already-closed", None)


def test_two_recovery_processes_close_an_orphan_once(sqlite_url: str) -> None:
    with SessionStore.open(sqlite_url) as one, SessionStore.open(sqlite_url) as two:
        session = saved_session(one, lease(dead_pid()))
        first, second = Recovery(one, repair()), Recovery(two, repair())
        first.scanner.poll()
        second.scanner.poll()  # both have seen the orphan
        assert [o.action for o in first.run_once().orphans] == ["repaired"]
        # the second's scan is behind: its next pass reads the end and has nothing to do
        assert second.run_once().orphans == ()
        events = two.load_events(session.id)
        assert len([e for e in events if isinstance(e, CompactEnd)]) == 1


# ---------------------------------------------------------------- the recovery process


def test_follow_repairs_when_the_lease_expires() -> None:
    with SessionStore.open("memory://") as store:
        session = saved_session(store, lease(os.getpid(), seconds=0.3))
        seen: list[tuple[bool, str]] = []
        config = RecoveryConfig(repair=True, interval_seconds=0.15)
        report = Recovery(store, config).follow(polls=5, on_report=lambda r: seen.append((r.stale, r.action)))
        assert seen == [(False, "none"), (True, "repaired")]
        assert report.polls == 5
        assert [o.action for o in report.orphans] == ["repaired"]
        assert not inspect_lock(store.get(session.id)).live


def test_follow_stops_on_the_stop_event() -> None:
    with SessionStore.open("memory://") as store:
        stop = threading.Event()
        stop.set()
        report = Recovery(store, RecoveryConfig(interval_seconds=60)).follow(stop=stop)
        assert report.polls == 1 and report.orphans == ()


def test_recovery_config_is_validated() -> None:
    bad: list[dict[str, Any]] = [
        {"interval_seconds": 0},
        {"interval_seconds": float("nan")},
        {"batch": 0},
        {"repair": "yes"},
        {"host": ""},
    ]
    for values in bad:
        with pytest.raises(RecoveryConfigError, match="RecoveryConfig") as raised:
            RecoveryConfig(**values)
        assert isinstance(raised.value, ConfigurationError)


def test_public_surface_is_pinned() -> None:
    assert sorted(recovery.__all__) == sorted(
        [
            "SURFACE_HASH_VERSION",
            "InertnessProof",
            "Liveness",
            "Orphan",
            "OrphanCorruptionError",
            "OrphanReport",
            "OrphanScanner",
            "Recovery",
            "RecoveryConfig",
            "RecoveryConfigError",
            "RecoveryError",
            "RecoveryReport",
            "RepairConflictError",
            "Settlement",
            "hash_surface",
            "interrupted_turn_closers",
            "judge",
            "process_alive",
            "prove_inert",
            "recover",
            "settle",
            "surface_hash",
        ]
    )
    for name in recovery.__all__:
        assert getattr(recovery, name) is not None


# ---------------------------------------------------------------- the command


def test_recover_command_reports_repairs_and_repeats(sqlite_url: str) -> None:
    with SessionStore.open(sqlite_url) as store:
        session = saved_session(store, lease(dead_pid()))
        expected_hash = surface_hash(session)
    status, document = run_json("--store", sqlite_url, "recover")
    assert status == 0
    (orphan,) = document["orphans"]
    assert {
        k: orphan[k] for k in ("session_id", "compaction_id", "stale", "inert", "surface_hash", "action")
    } == {
        "session_id": str(session.id),
        "compaction_id": "c-orphan",
        "stale": True,
        "inert": True,
        "surface_hash": expected_hash,
        "action": "would-repair",
    }
    assert orphan["start_seq"] == len(session) - 1 and orphan["age_seconds"] >= 0
    assert "reason" in orphan and document["passed"] is True

    status, document = run_json("--store", sqlite_url, "recover", "--repair")
    assert status == 0 and [o["action"] for o in document["orphans"]] == ["repaired"]
    status, document = run_json(
        "recover",
        "--repair",
        "--follow",
        "--max-polls",
        "2",
        "--interval",
        "0.01",
        "--store",
        sqlite_url,
    )
    assert status == 0 and document["orphans"] == [] and document["polls"] == 2


def test_recover_command_fails_on_corruption(sqlite_url: str) -> None:
    with SessionStore.open(sqlite_url) as store:
        session = store.create()
        history(session)
        start = orphan_start(session, lease(dead_pid()))
        landed_without_end(session, start)
        store.save(session)
    status, document = run_json("--store", sqlite_url, "recover", "--repair")
    assert status == 1
    assert document["passed"] is False and document["corrupt"] == 1
    (orphan,) = document["orphans"]
    assert orphan["action"] == "refused-corrupt" and orphan["inert"] is False and orphan["evidence"]


def test_recover_command_renders_for_people(sqlite_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with SessionStore.open(sqlite_url) as store:
        saved_session(store, lease(dead_pid()))
    assert cli_main(["--store", sqlite_url, "recover"]) == 0
    out = capsys.readouterr().out
    assert "would-repair" in out and "owner process" in out
    assert cli_main(["--store", sqlite_url, "recover", "--interval", "0", "--follow", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["error"]["type"] == "RecoveryConfigError"


def test_follow_forgets_an_orphan_its_owner_closed() -> None:
    with SessionStore.open("memory://") as store:
        session = saved_session(store, lease(os.getpid()))
        seen: list[str] = []

        def owner_finishes(report: OrphanReport) -> None:
            seen.append(report.action)
            session.append(CompactEnd(compaction_id="c-orphan", turn=session.open_turn, error="x"))
            store.save(session)

        process = Recovery(store, RecoveryConfig(repair=True, interval_seconds=0.01))
        report = process.follow(polls=3, on_report=owner_finishes)
        assert seen == ["none"]  # reported once, live; then closed by its owner
        assert process.run_once().orphans == ()
        assert [o.action for o in report.orphans] == ["none"]
        ends = [e for e in store.load_events(session.id) if isinstance(e, CompactEnd)]
        assert [e.error for e in ends] == ["x"]  # recovery wrote nothing


def test_an_unreadable_session_is_reported_and_the_others_are_still_recovered(tmp_path: Path) -> None:
    import sqlite3

    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    with SessionStore.open(url) as store:
        good = saved_session(store, lease(dead_pid()))
        bad = saved_session(store, lease(dead_pid()), cid="c-bad")
    connection = sqlite3.connect(tmp_path / "sessions.db")
    with connection:  # one payload of the bad session no longer decodes
        connection.execute(
            "UPDATE stored_events SET state = ? WHERE originator_id = ? AND originator_version = 3",
            (b"{not json", bad.id.hex),
        )
    connection.close()
    with SessionStore.open(url) as store:
        report = recover(store, repair())
        actions = {o.session_id: o.action for o in report.orphans}
        assert actions == {str(good.id): "repaired", str(bad.id): "unreadable"}
        assert report.passed is False  # the operator is told (exit status 1)
        assert inspect_lock(store.get(good.id)).start_seq is None


@pytest.mark.parametrize(
    "durable_store_url",
    ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)],
    indirect=True,
)
def test_an_undecodable_lock_record_does_not_stop_the_recovery_of_other_sessions(
    durable_store_url: str,
) -> None:
    """A compact/start row that does not decode used to fail the whole scan
    (StoreError), so the healthy orphan of another session stayed busy."""
    from tests.reliability import tamper

    url = durable_store_url
    with SessionStore.open(url) as store:
        good = saved_session(store, lease(dead_pid()))
        bad = saved_session(store, lease(dead_pid()), cid="c-bad")
    bad_seq = len(bad) - 1  # the bad session's compact/start
    tamper.set_state(url, bad.id, bad_seq, b'{"type":"compact/start","seq":')
    with SessionStore.open(url) as store:
        report = recover(store, repair())
        assert [(o.session_id, o.action) for o in report.orphans] == [(str(good.id), "repaired")]
        assert [(u.session_id, u.seq, u.event_type) for u in report.unreadable] == [
            (str(bad.id), bad_seq, "compact/start")
        ]
        assert report.passed is False
        assert inspect_lock(store.get(good.id)).start_seq is None
        document = report.to_json()
        assert document["unreadable"][0]["action"] == "unreadable"
    code, cli = run_json("--store", url, "recover", "--repair")
    assert code == 1
    assert [u["session_id"] for u in cli["unreadable"]] == [str(bad.id)]
    assert cli["orphans"] == []  # the good one was closed by the first pass


def test_the_follow_scan_reports_an_undecodable_lock_record_once_and_goes_on(tmp_path: Path) -> None:
    from tests.reliability import tamper

    url = f"sqlite:///{tmp_path / 's.db'}"
    with SessionStore.open(url) as store:
        bad = saved_session(store, lease(dead_pid()), cid="c-bad")
        tamper.set_topic(url, bad.id, len(bad) - 1, "compact/start")
        tamper.set_state(url, bad.id, len(bad) - 1, b"[]")
        process = Recovery(store, repair())
        first = process.run_once()
        good = saved_session(store, lease(dead_pid()))
        second = process.run_once()
    assert [u.session_id for u in first.unreadable] == [str(bad.id)]
    assert [u.session_id for u in second.unreadable] == [str(bad.id)]
    assert [(o.session_id, o.action) for o in second.orphans] == [(str(good.id), "repaired")]
