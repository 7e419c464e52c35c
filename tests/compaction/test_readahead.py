"""The read-ahead: what a compaction needs of each message is read once, as the events
arrive (the pressure check, from half the threshold), so the compaction itself reads nothing anew
and produces the same checkpoint as one that reads everything itself."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from compaction.handover import identifiers
from compaction.handover.reading import read
from compaction.service import BasicCompactService
from compaction.sessions import hashing
from compaction.sessions.mapper import encode_event
from compaction.sessions.session import Session
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.events import CompactSummary
from tests.builders import end_turn, start_turn, tool_step, user


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every message read anew for its facts or identifiers, and every event hashed anew."""
    seen: list[str] = []
    real_read, real_kinds, real_encode = read.compute, identifiers.message_kinds.compute, hashing.encode_event
    monkeypatch.setattr(read, "compute", lambda m: seen.append(f"read {m.id}") or real_read(m))
    monkeypatch.setattr(
        identifiers.message_kinds, "compute", lambda m: seen.append(f"ids {m.id}") or real_kinds(m)
    )
    monkeypatch.setattr(hashing, "encode_event", lambda e: seen.append(f"hash {e.seq}") or real_encode(e))
    return seen


def steps(session: Session, count: int) -> None:
    start_turn(session)
    for index in range(count):
        tool_step(session, n_calls=2, output=f"ok {index}: src/app/module_{index}.py")
    end_turn(session)


def task() -> Session:
    session = Session()
    user(session, "Fix the failing tests in src/app/main.py")
    return session


def test_each_message_is_read_once_as_it_arrives(reads: list[str]) -> None:
    session = task()
    steps(session, 5)
    service = BasicCompactService(BasicConfig(context_window=100_000))
    on_surface = [session.event(s) for s in session.nodes]
    assert service.observe(session) == len(on_surface)
    assert len([r for r in reads if r.startswith("hash")]) == len(on_surface)
    reads.clear()
    assert service.observe(session) == 0 and reads == []  # nothing new
    steps(session, 1)
    assert service.observe(session) == 3  # the new step: the assistant message and two results
    assert len([r for r in reads if r.startswith("read")]) == 3


def test_a_compaction_after_the_read_ahead_reads_nothing_anew(reads: list[str]) -> None:
    session = task()
    steps(session, 12)
    service = BasicCompactService(BasicConfig(context_window=100_000, min_identifier_ratio=0.0))
    service.observe(session)
    reads.clear()
    result = asyncio.run(service.compact_now(session))
    assert result is not None
    assert [r for r in reads if not r.startswith("read checkpoint-")] == []


def test_the_read_ahead_changes_nothing_of_what_is_compacted() -> None:
    def compacted(read_ahead: bool) -> CompactSummary:
        session = task()
        steps(session, 12)
        service = BasicCompactService(BasicConfig(context_window=100_000, min_identifier_ratio=0.0))
        if read_ahead:
            service.observe(session)
        assert asyncio.run(service.compact_now(session)) is not None
        summary = next(e for e in session.events() if isinstance(e, CompactSummary))
        for seq, digest in summary.shadowed_hashes.items():  # each the hash of the stored encoding
            assert digest == hashlib.sha256(encode_event(session.event(int(seq)))).hexdigest()
        return summary

    ahead, not_ahead = compacted(True), compacted(False)
    assert ahead.summary == not_ahead.summary
    assert ahead.shadowed_seqs == not_ahead.shadowed_seqs
    assert ahead.fidelity == not_ahead.fidelity


def test_the_pressure_check_reads_ahead_from_half_the_threshold(reads: list[str]) -> None:
    session = task()
    steps(session, 4)
    roomy = BasicCompactService(BasicConfig(context_window=1_000_000))
    assert asyncio.run(roomy.compact_if_needed(session)) is None
    assert reads == []  # far below the threshold: nothing read ahead
    measured = roomy.meter.measure(session).total_tokens
    window = next(
        w for w in range(100, 1_000_000, 10) if measured < roomy.config.budget(w)[0] <= 2 * measured
    )
    near = BasicCompactService(BasicConfig(context_window=window))
    assert asyncio.run(near.compact_if_needed(session)) is None  # below the threshold, past half
    assert len([r for r in reads if r.startswith("read")]) == len(session.nodes)
