"""Compaction on every public transcript (imported with ``compaction.importers.import_path``).

Manual: head-anchored spans are compacted one after another with ``compact_region`` (each one
merges the previous checkpoint) until the request fits a small window: a quarter of the session's
tokens, but never less than what must stay (the task statement, the newest unit) plus room for a
checkpoint. Automatic: a new turn with a small window, then ``compact_if_needed`` (retaining only
the newest unit). After every compaction the surface is tool-pairing balanced, the task statement
is still on it verbatim, every shadowed seq is cited by the replacement, and the derived messages
pair every tool call with its result.

Windows count the request the library can see (system prompt, tool schemas and surface). Claude
Code transcripts also carry provider usage that includes a system prompt the transcript does not
record; that prefix is not something compaction can shrink, so the windows here leave it out.
"""

from __future__ import annotations

import math
from pathlib import Path

import msgspec
import pytest

from compaction.engine.meters import HeuristicMeter
from compaction.engine.selection import protected_position
from compaction.importers import import_path
from compaction.service import BasicCompactService
from compaction.sessions.blocks import Message
from compaction.sessions.events import UNSET_SEQ, UNSET_TIME, RequestHeader, TurnStart
from compaction.sessions.session import Session, project
from compaction.vocabulary.checkpoint import is_checkpoint
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.contract import CompactionResult
from tests.compaction.test_support import assert_committed, bracket, checkpoints_on_surface
from tests.conftest import PUBLIC_TRANSCRIPTS

ALLOWANCE = 1600  # room for the checkpoint when choosing the smallest window that can fit
# (the handover checkpoint lists every error and user message: ~1,450 tokens after the
# seven merged compactions of the third OpenHands session)
RATIOS: dict[str, list[float]] = {}


def request_tokens(session: Session, meter: HeuristicMeter) -> int:
    reading = meter.measure(session)
    return reading.surface_tokens + reading.header_tokens


def newest_unit_start(session: Session) -> int:
    """Position of the newest unit: the last balanced cut before the end of the surface."""
    cuts = session.surface.cuts()
    return max(i for i in range(len(session.nodes)) if cuts[i] == 0)


def head_position(session: Session) -> int:
    protected = protected_position(session, True)
    return 0 if protected is None else protected + 1


def next_span(session: Session, meter: HeuristicMeter, chunk: int) -> tuple[int, int] | None:
    """From the head (the previous checkpoint, if any) to the last balanced cut within ``chunk``
    tokens, at least one unit beyond a checkpoint, never the newest unit."""
    nodes, cuts = session.nodes, session.surface.cuts()
    first, stop = head_position(session), newest_unit_start(session)
    head = project(session.event(nodes[first])) if first < len(nodes) else None
    after_checkpoint = head is not None and is_checkpoint(head)
    end: int | None = None
    accumulated = 0
    for index in range(first, stop):
        accumulated += meter.node_price(session, nodes[index])
        if cuts[index + 1] != 0 or (index == first and after_checkpoint):
            continue
        if end is not None and accumulated > chunk:
            break
        end = index
    return None if end is None else (nodes[first], nodes[end])


def kept_tokens(session: Session, meter: HeuristicMeter) -> int:
    """What no compaction may shadow: everything up to the task statement and the newest unit."""
    nodes = session.nodes
    kept = nodes[: head_position(session)] + nodes[newest_unit_start(session) :]
    return sum(meter.node_price(session, seq) for seq in kept) + meter.header_tokens(session)


def small_window(session: Session, meter: HeuristicMeter, fraction: int) -> int:
    """A ``1/fraction`` of the request, but no less than what must stay plus room for a
    checkpoint; for sessions too small for that, the window whose threshold is just under the
    request (one compaction has to make room)."""
    before = request_tokens(session, meter)
    window = max(before // fraction, math.ceil((kept_tokens(session, meter) + ALLOWANCE) / 0.8))
    if math.floor(window * 0.8) > before:
        window = before * 5 // 4
    return window


def first_user(session: Session) -> Message | None:
    seq = session.first_user_seq
    if seq is None or seq not in session.surface:
        return None  # another harness's compaction already shadowed it
    return project(session.event(seq))


def check(session: Session, result: CompactionResult, task: Message | None) -> None:
    assert_committed(session, result, task)
    assert len(checkpoints_on_surface(session)) >= 1
    fidelity = bracket(session, result)[1].fidelity
    assert fidelity is not None
    RATIOS.setdefault("retention", []).append(fidelity.retention_ratio)
    RATIOS.setdefault("compression", []).append(result.shadowed_token_count / result.summary_token_count)


def with_window(session: Session, window: int) -> RequestHeader:
    """The session's latest request envelope (same system prompt and tools) with ``window``."""
    seq = session.last_of("request/header")
    latest = session.event(seq) if seq is not None else None
    if not isinstance(latest, RequestHeader):
        return RequestHeader(provider="replay", model="replay-1", context_window=window)
    return msgspec.structs.replace(
        latest, seq=UNSET_SEQ, time=UNSET_TIME, origin=None, context_window=window, reason="change"
    )


def transcript_id(path: Path) -> str:
    return f"{path.parent.name[-24:]}/{path.name[:24]}"


@pytest.mark.parametrize("path", PUBLIC_TRANSCRIPTS, ids=transcript_id)
async def test_manual_compaction_until_it_fits(path: Path) -> None:
    imported = import_path(path)
    assert imported
    for item in imported:
        session = item.session
        meter = HeuristicMeter()
        service = BasicCompactService(BasicConfig(), meter=meter)
        before = request_tokens(session, meter)
        window = small_window(session, meter, 4)
        threshold = math.floor(window * 0.8)
        assert before >= threshold, f"{path.name}: the chosen window {window} needs no compaction"
        task = first_user(session)
        task_position = session.surface.position(session.first_user_seq or -1)
        compactions = 0
        while request_tokens(session, meter) >= threshold:
            span = next_span(session, meter, chunk=max(window // 2, ALLOWANCE))
            assert span is not None, (
                f"{path.name}: {request_tokens(session, meter)} tokens >= {threshold} with "
                "nothing left to compact"
            )
            result = await service.compact_region(session, *span, manual=True)
            check(session, result, task)
            compactions += 1
        assert compactions >= 1
        assert request_tokens(session, meter) < threshold
        assert session.surface.position(session.first_user_seq or -1) == task_position
        assert len(checkpoints_on_surface(session)) == 1  # each compaction merged the previous one


@pytest.mark.parametrize("path", PUBLIC_TRANSCRIPTS, ids=transcript_id)
async def test_automatic_compaction_in_a_new_turn(path: Path) -> None:
    session = import_path(path)[0].session
    meter = HeuristicMeter()
    task = first_user(session)
    window = small_window(session, meter, 3)
    turn = session.structure.next_turn
    session.append(TurnStart(turn=turn))
    session.append(with_window(session, window))
    # Retain only the newest unit (as overflow recovery does), so the window's arithmetic is the
    # same as the manual test's: what must stay, plus the checkpoint.
    service = BasicCompactService(BasicConfig(retain_tokens=0), meter=meter)
    result = await service.compact_if_needed(session)
    assert result is not None
    check(session, result, task)
    assert bracket(session, result)[0].turn == turn
    assert meter.measure(session).total_tokens < service.config.budget(window)[0]


def test_report_ratios(capsys: pytest.CaptureFixture[str]) -> None:
    """Prints what the template summarizer achieved on the transcripts above (run with -s)."""
    if not RATIOS:
        return  # run alone: nothing measured in this process
    retention, compression = RATIOS["retention"], RATIOS["compression"]
    with capsys.disabled():
        print(
            f"\n{len(retention)} compactions: identifier retention min {min(retention):.0%}, "
            f"compression (shadowed/summary tokens) min {min(compression):.1f}x "
            f"median {sorted(compression)[len(compression) // 2]:.1f}x"
        )
    assert min(retention) >= BasicConfig().min_identifier_ratio
