"""Event hashes and file actions kept by the read-ahead and carried by the snapshot
(:mod:`compaction.handover.carried`): for every event and every paired result of every public
transcript they equal a fresh hash and a fresh reading, a process that loads the session recalls
them instead of hashing and pairing the span again, and its checkpoint is the one a process that
read the session ahead commits."""

from __future__ import annotations

import asyncio
from array import array
from pathlib import Path

import pytest

from compaction.handover.analysis import SpanAnalysis
from compaction.handover.carried import READING, SEQ_CODE, carried, recall_carried
from compaction.handover.files import file_action, file_actions
from compaction.handover.readahead import ReadAhead
from compaction.importers import import_path
from compaction.service import BasicCompactService
from compaction.sessions.blocks import ToolCallBlock, ToolResultBlock
from compaction.sessions.hashing import event_hash
from compaction.sessions.session import Session, project
from compaction.sessions.store import SessionStore
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.events import CompactSummary
from tests.compaction.test_identifier_fold import read_rolled_back_and_read_again, worked
from tests.conftest import PUBLIC_TRANSCRIPTS


def transcript_id(path: Path) -> str:
    return f"{path.parent.name[-24:]}/{path.name[:24]}"


def block(session: Session, seq: int, index: int) -> object:
    message = project(session.event(seq))
    assert message is not None
    return message.content[index]


@pytest.mark.parametrize("path", PUBLIC_TRANSCRIPTS, ids=transcript_id)
def test_what_is_carried_equals_a_fresh_reading(path: Path) -> None:
    for item in import_path(path):
        session = item.session
        ReadAhead().observe(session)
        found = carried(session)
        assert found is not None
        seqs = array(SEQ_CODE)
        seqs.frombytes(found.seqs)
        messages = session.nodes
        assert list(seqs) == list(messages)
        for at, seq in enumerate(seqs):
            digest = found.digests[32 * at : 32 * (at + 1)].hex()
            assert digest == event_hash(session.event(seq)), (path.name, seq)
        for record in found.files:
            result = block(session, record.seq, record.index)
            call = block(session, record.call_seq, record.call_index)
            assert isinstance(result, ToolResultBlock) and isinstance(call, ToolCallBlock)
            assert result.tool_call_id == call.id
            assert (record.kind, record.paths) == file_action(call, result), (path.name, record.seq)
        paired = sum(isinstance(i, ToolResultBlock) for s in messages for i in _content(session, s))
        assert len(found.files) <= paired


def _content(session: Session, seq: int) -> tuple[object, ...]:
    message = project(session.event(seq))
    return () if message is None else message.content


@pytest.mark.parametrize("path", PUBLIC_TRANSCRIPTS, ids=transcript_id)
def test_a_loaded_session_recalls_them_for_any_span(path: Path, tmp_path: Path) -> None:
    with SessionStore.open(f"sqlite:///{tmp_path / 's.db'}", snapshot_interval=1) as store:
        for item in import_path(path):
            ReadAhead().observe(item.session)
            store.save(item.session)
            loaded = store.get(item.session.id)
            nodes = loaded.nodes
            for begin in (0, 1, len(nodes) // 3):
                shadowed = tuple(nodes[begin:])
                events = [loaded.event(seq) for seq in shadowed]
                analysis = SpanAnalysis()
                recalled = recall_carried(loaded, analysis, shadowed, events)
                assert recalled == len(events)
                for event in events:
                    assert analysis.event_hash(event) == event_hash(event)
                assert analysis.hashes.computed == 0
                with analysis.active():
                    for result, (call, action) in _kept_actions(analysis):
                        assert action == _fresh_action(call, result)
                assert file_actions(analysis).computed == 0


def _kept_actions(
    analysis: SpanAnalysis,
) -> list[tuple[ToolResultBlock, tuple[ToolCallBlock, tuple[str, tuple[str, ...]]]]]:
    memo = file_actions(analysis)
    return [(memo._objects[key], value) for key, value in memo._values.items()]


def _fresh_action(call: ToolCallBlock, result: ToolResultBlock) -> tuple[str, tuple[str, ...]]:
    with SpanAnalysis().active():
        return file_action(call, result)


def test_a_rollback_forgets_them_and_the_read_ahead_reads_the_new_events() -> None:
    session = worked()
    read_rolled_back_and_read_again(session, READING)
    found = carried(session)
    assert found is not None
    seqs = array(SEQ_CODE)
    seqs.frombytes(found.seqs)
    for at, seq in enumerate(seqs):
        assert found.digests[32 * at : 32 * (at + 1)].hex() == event_hash(session.event(seq))


def test_a_span_read_in_this_process_is_not_recalled() -> None:
    session = worked()
    read_ahead = ReadAhead()
    read_ahead.observe(session)
    analysis = read_ahead.analysis(session)
    shadowed = tuple(session.nodes[1:])
    assert recall_carried(session, analysis, shadowed, [session.event(s) for s in shadowed]) == 0


@pytest.mark.parametrize("path", PUBLIC_TRANSCRIPTS, ids=transcript_id)
def test_a_cold_compaction_commits_what_a_warm_one_does(path: Path, tmp_path: Path) -> None:
    """Warm: the session read ahead by the service that compacts it. Cold: a new service compacts
    the session loaded from the snapshot the warm writer saved (hashes and file actions recalled),
    and once more with the snapshot's readings dropped (everything read during the compaction)."""
    session = import_path(path)[0].session
    window = _window(session)
    with SessionStore.open(f"sqlite:///{tmp_path / 's.db'}", snapshot_interval=1) as store:
        warm_service = BasicCompactService(BasicConfig(context_window=window))
        warm_service.observe(session)
        store.save(session)
        summaries = {"cold": _compacted(store.get(session.id), window, keep_readings=True)}
        summaries["unread"] = _compacted(store.get(session.id), window, keep_readings=False)
        summaries["warm"] = _first_summary(session, warm_service)[0]
    reference = summaries.pop("warm")
    for name, summary in summaries.items():
        assert summary.summary == reference.summary, name
        assert summary.shadowed_hashes == reference.shadowed_hashes, name
        assert summary.fidelity == reference.fidelity, name


def _window(session: Session) -> int:
    """A window the session's requests overflow, above their fixed overhead."""
    reading = BasicCompactService(BasicConfig(context_window=10**9)).meter.measure(session)
    return max(2_000, reading.overhead_tokens + reading.surface_tokens // 2)


def _compacted(session: Session, window: int, *, keep_readings: bool) -> CompactSummary:
    service = BasicCompactService(BasicConfig(context_window=window))
    if not keep_readings:
        session.readings.clear()
    summary, compactions = _first_summary(session, service)
    computed = service.read_ahead.analysis(session).hashes.computed
    if keep_readings:  # only the checkpoints of the later compactions hashed
        assert computed < compactions, computed
    else:
        assert computed >= len(summary.shadowed_seqs), computed
    return summary


def _first_summary(session: Session, service: BasicCompactService) -> tuple[CompactSummary, int]:
    report = asyncio.run(service.compact_to_fit(session))
    assert report.failure is None and report.compactions, report
    event = session.event(report.compactions[0].summary_seq)
    assert isinstance(event, CompactSummary)
    return event, len(report.compactions)
