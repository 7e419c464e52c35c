"""The span's identifiers folded by the read-ahead and carried by the snapshot
(:mod:`compaction.handover.fold`): at every cut of every public transcript the fold gives exactly
what extracting the span's messages gives, and a process that loads the session from its snapshot
compacts with the fold to the same checkpoint as without it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest

from compaction.handover.fold import READING, IdentifierFold, folded_identifiers
from compaction.handover.identifiers import Identifiers, extract
from compaction.handover.readahead import ReadAhead
from compaction.handover.reading import read
from compaction.importers import import_path
from compaction.service import BasicCompactService
from compaction.sessions.session import Session, SessionSnapshot, project
from compaction.sessions.store import SessionStore
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.events import CompactSummary
from tests.builders import end_turn, start_turn, tool_step, user
from tests.conftest import PUBLIC_TRANSCRIPTS

CUTS = 40


def kinds(found: Identifiers) -> tuple[list[str], ...]:
    groups = (found.paths, found.commands, found.errors, found.error_lines, found.ids)
    return tuple(list(group) for group in groups)


def extracted(session: Session, shadowed: tuple[int, ...]) -> Identifiers:
    """The identifiers of the span's messages as the compaction extracts them (no analysis)."""
    return extract([m for m in (project(session.event(seq)) for seq in shadowed) if m is not None])


def cuts(begin: int, end: int) -> list[int]:
    step = max(1, (end - begin) // CUTS)
    return sorted({*range(begin + 1, end + 1, step), begin + 1, end})


def transcript_id(path: Path) -> str:
    return f"{path.parent.name[-24:]}/{path.name[:24]}"


@pytest.mark.parametrize("path", PUBLIC_TRANSCRIPTS, ids=transcript_id)
def test_the_fold_equals_the_extraction_at_every_cut(path: Path) -> None:
    for item in import_path(path):
        session = item.session
        ReadAhead().observe(session)
        fold = IdentifierFold.decode(session.readings[READING]())
        assert fold is not None and fold.holds(session)
        nodes, begin = session.nodes, fold.begin
        folded = 0
        for cut in cuts(begin, len(nodes)):
            shadowed = tuple(nodes[begin:cut])
            found = folded_identifiers(session, shadowed)
            if 0 <= fold.halt_at < cut:
                assert found is None  # a checkpoint in the span: extracted as before
                continue
            assert found is not None
            assert kinds(found) == kinds(extracted(session, shadowed)), (path.name, cut)
            folded += 1
        assert folded >= 1


@pytest.mark.parametrize("path", PUBLIC_TRANSCRIPTS, ids=transcript_id)
def test_a_fold_read_part_way_is_advanced_to_the_cut(path: Path) -> None:
    session = import_path(path)[0].session
    fold = IdentifierFold.start(session)
    assert fold is not None
    nodes = session.nodes
    middle = (fold.begin + len(nodes)) // 2
    fold.advance(session, middle)
    session.readings[READING] = fold.encode
    for cut in cuts(fold.begin, len(nodes)):
        shadowed = tuple(nodes[fold.begin : cut])
        found = folded_identifiers(session, shadowed)
        if found is None:  # only for a span with a checkpoint in it
            assert any(read(m).checkpoint for m in map(project, map(session.event, shadowed)) if m)
        else:
            assert kinds(found) == kinds(extracted(session, shadowed)), (path.name, cut)


def test_a_span_the_fold_does_not_start_is_extracted() -> None:
    session = worked()
    ReadAhead().observe(session)
    nodes = session.nodes
    assert folded_identifiers(session, tuple(nodes[1:])) is not None
    assert folded_identifiers(session, tuple(nodes[2:])) is None  # not the fold's first node
    assert folded_identifiers(session, tuple(nodes[:3])) is None  # the task statement in it


def read_rolled_back_and_read_again(session: Session, reading: str) -> None:
    """Read ``session`` ahead, append and read 3 steps, roll them back (``reading`` must be
    forgotten), append 3 other steps at the same seqs and read them."""
    read_ahead = ReadAhead()
    read_ahead.observe(session)
    mark = session.mark()
    steps(session, 3, "after")
    read_ahead.observe(session)
    session.rollback(mark)
    assert reading not in session.readings
    steps(session, 3, "other")  # the same seqs as the forgotten events, other messages
    read_ahead.observe(session)


def test_a_rollback_forgets_the_fold_and_the_read_ahead_folds_again() -> None:
    session = worked()
    read_rolled_back_and_read_again(session, READING)
    shadowed = tuple(session.nodes[1:])
    found = folded_identifiers(session, shadowed)
    assert found is not None and kinds(found) == kinds(extracted(session, shadowed))
    assert "src/other/module_0.py" in found.paths and "src/after/module_0.py" not in found.paths


def test_a_fold_of_another_surface_is_not_used() -> None:
    session = worked()
    ReadAhead().observe(session)
    stale = session.readings[READING]
    compacted(session)  # a checkpoint replaced the span: a new surface generation
    session.readings[READING] = stale
    for begin in (1, 2):
        assert folded_identifiers(session, tuple(session.nodes[begin:])) is None


def test_the_snapshot_carries_the_fold(tmp_path: Path) -> None:
    with SessionStore.open(f"sqlite:///{tmp_path / 's.db'}", snapshot_interval=1) as store:
        session = worked()
        ReadAhead().observe(session)
        store.save(session)
        loaded = store.get(session.id)
        assert loaded.readings[READING]() == session.readings[READING]()
        shadowed = tuple(loaded.nodes[1:])
        found = folded_identifiers(loaded, shadowed)
        assert found is not None and kinds(found) == kinds(extracted(loaded, shadowed))


def test_a_snapshot_without_readings_still_restores() -> None:
    session = worked()
    fields = msgspec.structs.asdict(session.snapshot())
    del fields["readings"]
    older = msgspec.msgpack.decode(msgspec.msgpack.encode(fields), type=SessionSnapshot)
    restored = Session.from_snapshot(session.id, older, lambda lo, hi: list(session.events(lo, hi)))
    assert restored.readings == {} and restored.nodes == session.nodes
    assert folded_identifiers(restored, tuple(restored.nodes[1:])) is None


def test_a_cold_compaction_uses_the_fold_and_commits_the_same(tmp_path: Path, extracted: list[str]) -> None:
    extractions = extracted
    summaries: dict[bool, CompactSummary] = {}
    counts: dict[bool, int] = {}
    with SessionStore.open(f"sqlite:///{tmp_path / 's.db'}", snapshot_interval=1) as store:
        session = worked()
        ReadAhead().observe(session)
        store.save(session)
        for with_fold in (True, False):
            loaded = store.get(session.id)
            if not with_fold:
                loaded.readings.clear()
            extractions.clear()
            summaries[with_fold] = compacted(loaded)
            counts[with_fold] = len(extractions)
    assert counts[True] < counts[False] / 2, counts
    assert summaries[True].summary == summaries[False].summary
    assert summaries[True].fidelity == summaries[False].fidelity
    assert summaries[True].shadowed_hashes == summaries[False].shadowed_hashes


def compacted(session: Session) -> CompactSummary:
    service = BasicCompactService(BasicConfig(context_window=4_000))
    report = asyncio.run(service.compact_to_fit(session))
    assert report.failure is None and len(report.compactions) == 1
    event = session.event(report.compactions[0].summary_seq)
    assert isinstance(event, CompactSummary)
    return event


def steps(session: Session, count: int, label: str) -> None:
    start_turn(session)
    for index in range(count):
        text = f"Editing src/{label}/module_{index}.py"
        tool_step(session, n_calls=2, output=f"{label} {index}: ValueError", text=text)
    end_turn(session)


def worked() -> Session:
    session = Session()
    user(session, "Fix the failing tests in src/app/main.py")
    steps(session, 30, "app")
    user(session, "Now look at lib/util/strings.py too")
    steps(session, 30, "lib")
    return session
