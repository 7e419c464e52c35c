"""Compaction ids come from the log, and an imported log can hold any string: recovery never turns
one into a path outside the failure-report folder. An orphan ``compact/start`` whose id is
``../victim/evil`` (imported from a native export) is judged from its lease alone, reported with a
warning naming the id, and ``--repair`` deletes nothing outside the folder."""

from __future__ import annotations

import json
import os
import socket
from datetime import timedelta
from pathlib import Path

import pytest

from compaction.engine.lock import clear_failure, failure_report_path, report_failure
from compaction.sessions.events import now_utc
from compaction.sessions.invariants import DEFAULT_INVARIANTS
from compaction.sessions.native import export_lines
from compaction.sessions.store import SessionStore
from compaction.vocabulary.checkpoint import new_compaction_id
from compaction.vocabulary.events import CompactStart, Lease
from tests.builders import run_json, start_turn, tool_step, user

HOST = socket.gethostname()
EVIL = "../victim/evil"


@pytest.fixture
def folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """The failure-report folder and, beside it, a victim file the evil id points at (written as
    a report of this process would be, so reading it would make the live lease look failed)."""
    failures = tmp_path / "failures"
    failures.mkdir()
    monkeypatch.setenv("COMPACTION_FAILURE_DIR", str(failures))
    victim = tmp_path / "victim" / "evil.json"
    victim.parent.mkdir()
    victim.write_text(json.dumps({"host": HOST, "pid": os.getpid(), "reason": "planted"}))
    return failures, victim


def evil_export(path: Path) -> Path:
    """A native export whose session ends in an orphan compact/start with the evil id, its lease
    held by this (live) process for ten minutes."""
    with SessionStore.open("memory://") as store:
        session = store.create(invariants=DEFAULT_INVARIANTS)
        user(session, "Please fix the failing tests in src/mod.py")
        start_turn(session, window=3000)
        for _ in range(4):
            tool_step(session, 2, output="output line " * 30)
        lease = Lease(host=HOST, pid=os.getpid(), expires_at=now_utc() + timedelta(minutes=10))
        session.append(CompactStart(compaction_id=EVIL, turn=session.open_turn, lease=lease))
        path.write_text("".join(line + "\n" for line in export_lines(session)), encoding="utf-8")
    return path


def test_recover_never_reads_or_deletes_outside_the_folder(
    tmp_path: Path, folders: tuple[Path, Path]
) -> None:
    failures, victim = folders
    planted = victim.read_bytes()
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    status, _ = run_json("--store", url, "import", str(evil_export(tmp_path / "evil.jsonl")))
    assert status == 0
    for argv in (("recover",), ("recover", "--repair")):
        status, document = run_json("--store", url, *argv)
        (orphan,) = document["orphans"]
        assert orphan["compaction_id"] == EVIL
        # judged by its lease alone: the planted file was not read as this owner's failure report
        assert (orphan["stale"], orphan["rule"], orphan["action"]) == (False, "live", "none")
        assert any(EVIL in w and "not a UUID" in w for w in orphan["warnings"]), orphan
        assert victim.read_bytes() == planted
    assert [p.parent for p in failures.rglob("*")] in ([], [failures])


def test_the_human_report_names_the_bad_id(tmp_path: Path, folders: tuple[Path, Path]) -> None:
    from tests.builders import run_human

    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    assert run_json("--store", url, "import", str(evil_export(tmp_path / "evil.jsonl")))[0] == 0
    status, out, _ = run_human("--store", url, "recover", "--repair")
    assert status == 0
    assert f"compaction id {EVIL!r} is not a UUID" in " ".join(out.split())
    assert folders[1].is_file()


def test_report_and_clear_stay_in_the_folder(tmp_path: Path, folders: tuple[Path, Path]) -> None:
    failures, victim = folders
    lease = Lease(host=HOST, pid=os.getpid(), expires_at=now_utc() + timedelta(minutes=10))
    start = CompactStart(compaction_id=EVIL, turn=None, lease=lease, seq=3, time=now_utc())
    written = report_failure(start, __import__("uuid").uuid4(), "failed")
    assert written is not None and written.parent == failures
    assert written == failure_report_path(EVIL)
    clear_failure(EVIL)
    assert not written.exists() and victim.is_file()


@pytest.mark.parametrize("cid", [EVIL, "/etc/passwd", "..", "a\x00b", "c-orphan", "x" * 4000])
def test_every_id_names_a_file_directly_in_the_folder(cid: str, folders: tuple[Path, Path]) -> None:
    path = failure_report_path(cid)
    assert path.parent == folders[0] and len(path.name) < 100 and path.suffix == ".json"


def test_a_uuid_keeps_its_readable_name(folders: tuple[Path, Path]) -> None:
    cid = new_compaction_id()
    assert failure_report_path(cid) == folders[0] / f"{cid}.json"
