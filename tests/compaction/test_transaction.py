"""The region transaction (docs/architecture.md, "The compaction transaction"): both compact/end
outcomes, the shrink check, the fidelity gate, the two stability assertions, the lock, manual
compaction, and cancellation mid-summary."""

from __future__ import annotations

import asyncio
import hashlib
import re
from typing import Any

import msgspec
import pytest

from compaction.engine.lock import inspect_lock, new_lease
from compaction.errors import (
    BusyError,
    CommitError,
    EmptySummaryError,
    FidelityError,
    ShrinkError,
    SpanError,
    SpanTooSmallError,
    StoreError,
    SummarizerError,
    SurfaceChangedError,
)
from compaction.service import BasicCompactService
from compaction.sessions.blocks import Message, TextBlock, ToolResultBlock
from compaction.sessions.events import (
    UNSET_SEQ,
    UNSET_TIME,
    Replace,
    RequestHeader,
    SessionResume,
    SteeringMessage,
    ToolResult,
)
from compaction.sessions.mapper import encode_event
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from compaction.summarizers.template import TemplateSummarizer
from compaction.vocabulary.checkpoint import is_checkpoint
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.events import CompactEnd, CompactStart, CompactSummary
from compaction.vocabulary.instruction import INSTRUCTION, PREAMBLE
from compaction.vocabulary.summarizer import Summarizer
from tests.builders import end_turn, log_types, start_turn, tool_step, user
from tests.compaction.test_support import (
    FailingSummarizer,
    GatedSummarizer,
    ScriptedSummarizer,
    assert_committed,
    bracket,
    checkpoints_on_surface,
    prices,
    sectioned,
    surface_snapshot,
    text_of_price,
)

TASK = "Fix the failing tests under tests/ and run `pytest -q` until green."
RELAXED = {"require_sections": False, "min_identifier_ratio": 0.0, "completion": "off"}
OUTPUT = "ValueError: bad value in src/app/core.py line 3\n" + "    rows = compute(rows)\n" * 20


def service(summarizer: Summarizer | None = None, **config: Any) -> BasicCompactService:
    return BasicCompactService(BasicConfig(**config), summarizer=summarizer)


def working_session(steps: int = 4, *, close_turn: bool = False) -> Session:
    """The task, then one turn of ``steps`` closed tool steps."""
    session = Session()
    user(session, TASK)
    start_turn(session)
    for _ in range(steps):
        tool_step(session, n_calls=1, output=OUTPUT)
    if close_turn:
        end_turn(session)
    return session


def first_node(session: Session) -> Message:
    return session.derive_messages()[0]


# ---------------------------------------------------------------- both compact/end outcomes


async def test_success_commits_a_complete_bracket_with_exact_prices() -> None:
    session = working_session()
    task = first_node(session)
    span = session.nodes[1:5]  # the first two closed steps
    shadowed_tokens = prices(session, span)
    summarizer = ScriptedSummarizer("small checkpoint")
    before = len(session)
    result = await service(summarizer, **RELAXED).compact_region(session, span[0], span[-1])
    assert log_types(session, before) == [
        "compact/start",
        "compact/summary",
        "user/message",
        "compact/end",
    ]
    assert_committed(session, result, task)
    start, summary, end = bracket(session, result)
    assert start.turn == end.turn == session.open_turn  # owned by the open turn
    assert end.error is None
    assert summary.summary == (TextBlock("small checkpoint"),)
    assert summary.shadowed_seqs == tuple(span) == result.shadowed_seqs
    assert (summary.shadowed_range.start, summary.shadowed_range.end) == (span[0], span[-1])
    assert summary.shadowed_token_count == shadowed_tokens == result.shadowed_token_count
    assert summary.summary_token_count == result.summary_token_count == 106
    assert (summary.provider, summary.model, summary.meter) == ("scripted", "scripted-summary", "heuristic")
    assert session.nodes[1] == result.replacement_seq
    checkpoint = session.derive_messages()[1]
    assert is_checkpoint(checkpoint) and checkpoint.source.compaction_id == result.compaction_id
    assert checkpoint.content[0] == TextBlock(f"{PREAMBLE}\n\n<compacted-summary>")
    assert checkpoint.content[1:] == (TextBlock("small checkpoint"), TextBlock("</compacted-summary>"))
    assert not inspect_lock(session).live


async def test_a_failing_summarizer_closes_the_bracket_and_leaves_the_surface_untouched() -> None:
    session = working_session()
    before = surface_snapshot(session)
    length = len(session)
    error = SummarizerError("the model endpoint answered 503", code="unavailable", retryable=True)
    with pytest.raises(SummarizerError, match="503"):
        await service(FailingSummarizer(error)).compact_region(session, session.nodes[1], session.nodes[4])
    assert log_types(session, length) == ["compact/start", "compact/end"]
    start, end = session.event(length), session.event(length + 1)
    assert isinstance(start, CompactStart) and isinstance(end, CompactEnd)
    assert end.compaction_id == start.compaction_id
    assert end.error == "the model endpoint answered 503"
    assert surface_snapshot(session) == before  # nodes, generation and derived messages
    assert not inspect_lock(session).live
    assert session.last_of("compact/summary") is None


async def test_both_outcomes_are_stored(store_url: str) -> None:
    with SessionStore.open(store_url) as store:
        session = working_session()
        store.save(session)
        with pytest.raises(SummarizerError):
            await service(FailingSummarizer(SummarizerError("boom"))).compact_region(
                session, session.nodes[1], session.nodes[2], store=store
            )
        result = await service().compact_region(session, session.nodes[1], session.nodes[4], store=store)
        assert session.pending == []
        loaded = store.get(session.id)
        assert len(loaded) == len(session) and loaded.nodes == session.nodes
        ends = [e for e in loaded.events() if isinstance(e, CompactEnd)]
        assert [e.error for e in ends] == ["boom", None]
        assert_committed(loaded, result, first_node(loaded))


async def test_an_empty_summary_is_a_recorded_failure() -> None:
    session = working_session()
    before = surface_snapshot(session)
    with pytest.raises(EmptySummaryError, match="summarization produced no text summary content"):
        await service(ScriptedSummarizer("  \n "), **RELAXED).compact_region(
            session, session.nodes[1], session.nodes[4]
        )
    end = session.event(len(session) - 1)
    assert isinstance(end, CompactEnd) and end.error is not None
    assert surface_snapshot(session) == before


# ---------------------------------------------------------------- shrink check and fidelity gate


async def test_a_summary_not_smaller_than_its_span_is_rejected() -> None:
    session = Session()
    user(session, TASK)
    small = user(session, text_of_price(150))
    user(session, "the newest message")
    before = surface_snapshot(session)
    message = r"summary is not smaller than the shadowed content \((\d+) estimated framed tokens >= 150\)"
    with pytest.raises(ShrinkError, match=f"^{message}$"):
        await service(ScriptedSummarizer("a long checkpoint " * 60), **RELAXED).compact_region(
            session, small, small, manual=True
        )
    end = session.event(len(session) - 1)
    assert isinstance(end, CompactEnd) and end.error is not None
    matched = re.fullmatch(message, end.error)
    assert matched is not None and int(matched[1]) >= 150
    assert surface_snapshot(session) == before


async def test_a_span_no_checkpoint_could_shrink_is_declined_before_the_summarizer() -> None:
    """18 tokens, under the frame alone: nothing is appended and the summarizer is not asked."""
    session = Session()
    user(session, TASK)
    small = user(session, text_of_price(18))
    user(session, "the newest message")
    before, length = surface_snapshot(session), len(session)
    summarizer = ScriptedSummarizer("small checkpoint")
    with pytest.raises(SpanTooSmallError, match=r"holds 18 estimated tokens") as raised:
        await service(summarizer, **RELAXED).compact_region(session, small, small, manual=True)
    assert isinstance(raised.value, ShrinkError) and raised.value.floor_tokens >= 18
    assert summarizer.requests == [] and len(session) == length
    assert surface_snapshot(session) == before and not inspect_lock(session).live


async def test_the_fidelity_gate_rejects_a_summary_missing_a_section() -> None:
    session = working_session()
    before = surface_snapshot(session)
    commands = [f"cat src/mod_{step}_0.py" for step in (1, 2)]
    text = sectioned(*commands, "ValueError").replace("## Pending Jobs\n- (none)", "## Pending Jobs\n")
    with pytest.raises(
        FidelityError,
        match=r"^fidelity gate: summary is missing or has empty sections: Pending Jobs "
        r'\(write "\(none\)" for an empty section\)$',
    ):
        await service(ScriptedSummarizer(text), completion="off").compact_region(
            session, session.nodes[1], session.nodes[4]
        )
    assert surface_snapshot(session) == before
    end = session.event(len(session) - 1)
    assert isinstance(end, CompactEnd) and end.error is not None and "Pending Jobs" in end.error


async def test_the_fidelity_gate_rejects_a_summary_that_drops_identifiers() -> None:
    session = working_session()
    before = surface_snapshot(session)
    # Shadowed: two steps. Identifiers: two commands, two paths, one error name.
    with pytest.raises(
        FidelityError,
        match=r"summary keeps 1/5 verbatim identifiers \(20%\), below the required 90%; missing "
        r"for example: src/mod_1_0\.py, src/mod_2_0\.py, cat src/mod_1_0\.py, cat src/mod_2_0\.py$",
    ):
        await service(
            ScriptedSummarizer(sectioned("ValueError seen twice")), completion="off"
        ).compact_region(session, session.nodes[1], session.nodes[4])
    assert surface_snapshot(session) == before


async def test_the_ratio_and_hashes_are_recorded_on_success() -> None:
    session = working_session()
    span = session.nodes[1:5]
    text = sectioned("cat src/mod_1_0.py", "cat src/mod_2_0.py", "ValueError")
    result = await service(ScriptedSummarizer(text), min_identifier_ratio=0.5).compact_region(
        session, span[0], span[-1]
    )
    _, summary, _ = bracket(session, result)
    assert summary.fidelity is not None
    # the commands contain the paths verbatim, so all five identifiers are kept
    assert (summary.fidelity.identifiers_kept, summary.fidelity.identifiers_total) == (5, 5)
    assert summary.fidelity.retention_ratio == 1.0 and summary.fidelity.required_ratio == 0.5
    assert summary.fidelity.sections_missing == ()
    assert set(summary.shadowed_hashes) == {str(s) for s in span}
    for seq in span:
        digest = hashlib.sha256(encode_event(session.event(seq))).hexdigest()
        assert summary.shadowed_hashes[str(seq)] == digest


async def test_the_summarization_request_is_the_spec_request() -> None:
    session = working_session()
    task = first_node(session)
    summarizer = ScriptedSummarizer(sectioned())
    span = session.nodes[1:5]
    await service(summarizer, max_tokens=1234, **RELAXED).compact_region(session, span[0], span[-1])
    (request,) = summarizer.requests
    header = session.event(session.last_of("request/header") or 0)
    assert isinstance(header, RequestHeader)
    assert request.system == header.system and request.tools == header.tools
    assert request.instruction == INSTRUCTION and request.max_tokens == 1234
    assert request.session_id == str(session.id)
    assert request.messages[0] == task  # the task statement, kept and still shown
    shadowed = [session.event(s) for s in span]
    assert request.messages[1:] == tuple(e.message for e in shadowed)  # type: ignore[attr-defined]


# ---------------------------------------------------------------- stability


def steering(session: Session, text: str) -> None:
    session.append(
        SteeringMessage(
            message=Message(id=f"s{len(session)}", role="user", content=(TextBlock(text),)),
            surface_op="append",
        )
    )


async def test_whole_surface_stability_rejects_a_surface_append_during_summarization() -> None:
    session = working_session()
    nodes_before = list(session.nodes)
    length = len(session)
    summarizer = ScriptedSummarizer(on_summarize=lambda _: steering(session, "also update the docs"))
    with pytest.raises(
        SurfaceChangedError, match=r"^compaction: session surface changed during summarization$"
    ):
        await service(summarizer, **RELAXED).compact_region(session, session.nodes[1], session.nodes[4])
    assert log_types(session, length) == ["compact/start", "steering/message", "compact/end"]
    end = session.event(len(session) - 1)
    assert isinstance(end, CompactEnd)
    assert end.error == "compaction: session surface changed during summarization"
    assert session.nodes == [*nodes_before, length + 1]  # the steering message stays, no replacement
    assert session.surface.generation == 0


async def test_whole_surface_stability_allows_log_only_appends() -> None:
    session = working_session()

    def header(_: object) -> None:
        session.append(RequestHeader(provider="test", model="test-model-2", context_window=4000))

    result = await service(ScriptedSummarizer(on_summarize=header), **RELAXED).compact_region(
        session, session.nodes[1], session.nodes[4]
    )
    assert_committed(session, result, first_node(session))


async def test_selected_span_stability_keeps_an_append_outside_the_span_after_the_checkpoint() -> None:
    session = working_session(close_turn=True)
    appended: list[int] = []
    summarizer = ScriptedSummarizer(
        sectioned(), on_summarize=lambda _: appended.append(user(session, "one more thing"))
    )
    newest = session.nodes[-2:]  # the newest unit: the last step's call and result
    result = await service(summarizer, **RELAXED).compact_now(session)
    assert result is not None
    assert_committed(session, result, first_node(session))
    assert session.nodes == [session.first_user_seq, result.replacement_seq, *newest, *appended]
    assert appended[0] < result.replacement_seq  # positional: a lower seq after the checkpoint


def rewrite(session: Session, seq: int, text: str) -> None:
    """Rewrite a tool result's content in place on the surface (what the pruner does)."""
    original = session.event(seq)
    assert isinstance(original, ToolResult)
    block = original.message.content[0]
    assert isinstance(block, ToolResultBlock)
    content = (msgspec.structs.replace(block, content=(TextBlock(text),)),)
    session.append(
        msgspec.structs.replace(
            original,
            seq=UNSET_SEQ,
            time=UNSET_TIME,
            message=msgspec.structs.replace(original.message, content=content),
            surface_op=Replace(seq, seq),
            source_event_seqs=(seq,),
        )
    )


async def test_selected_span_stability_rejects_a_rewrite_inside_the_span() -> None:
    session = working_session(close_turn=True)
    inside = session.nodes[2]  # the first step's tool result
    summarizer = ScriptedSummarizer(sectioned(), on_summarize=lambda _: rewrite(session, inside, "[pruned]"))
    with pytest.raises(
        SurfaceChangedError, match=r"^compaction: the selected span changed during summarization$"
    ):
        await service(summarizer, **RELAXED).compact_now(session)
    end = session.event(len(session) - 1)
    assert isinstance(end, CompactEnd) and end.error is not None and "changed" in end.error
    assert checkpoints_on_surface(session) == []


async def test_selected_span_stability_rejects_a_rewrite_of_its_edge() -> None:
    session = working_session(close_turn=True)
    edge = session.nodes[-3]  # the last tool result of the span (the newest unit is kept)
    summarizer = ScriptedSummarizer(sectioned(), on_summarize=lambda _: rewrite(session, edge, "x"))
    with pytest.raises(
        SurfaceChangedError,
        match=r"^compaction: the selected span is no longer a valid replacement target$",
    ) as caught:
        await service(summarizer, **RELAXED).compact_now(session)
    assert isinstance(caught.value.__cause__, SpanError)


# ---------------------------------------------------------------- the lock


def hold_lock(session: Session) -> CompactStart:
    event = session.append(
        CompactStart(compaction_id="held-elsewhere", turn=session.open_turn, lease=new_lease(600))
    )
    assert isinstance(event, CompactStart)
    return event


async def test_a_live_compact_start_makes_every_entry_point_busy() -> None:
    session = working_session()
    held = hold_lock(session)
    length = len(session)
    svc = service(context_window=200)
    lease = held.lease
    holder = f"held by {lease.host} pid {lease.pid} until {lease.expires_at.isoformat()}"
    with pytest.raises(BusyError) as caught:
        await svc.compact_if_needed(session)
    message = str(caught.value)
    assert message.startswith(
        "automatic pressure compaction: compaction already in progress; the session compaction "
        "lock is already active"
    )
    assert f"compact/start seq {held.seq}, compaction held-elsewhere, {holder}" in message
    with pytest.raises(BusyError, match=r"^compaction: compaction already in progress") as caught:
        await svc.compact_region(session, session.nodes[1], session.nodes[2])
    assert holder in str(caught.value)
    end_turn_blocked = session.open_turn
    assert end_turn_blocked is not None
    with pytest.raises(BusyError, match=r"^compaction: compaction already in progress") as caught:
        await svc.compact_now(session)
    assert holder in str(caught.value)
    assert len(session) == length  # nothing was written


async def test_a_lock_older_than_a_session_resume_is_stale() -> None:
    session = working_session(close_turn=True)
    hold_lock(session)
    assert inspect_lock(session).live
    session.append(SessionResume(host="another-host", pid=1))
    assert not inspect_lock(session).live
    result = await service().compact_now(session)
    assert result is not None
    assert_committed(session, result, first_node(session))


# ---------------------------------------------------------------- manual and explicit


async def test_manual_compaction_requires_no_open_turn() -> None:
    session = working_session()
    length = len(session)
    with pytest.raises(BusyError, match=r"^manual compaction: the session already has an open turn \(1\)"):
        await service().compact_now(session)
    assert len(session) == length


async def test_manual_compaction_keeps_only_the_newest_unit() -> None:
    session = working_session(steps=5, close_turn=True)
    task = first_node(session)
    newest = session.nodes[-2:]
    result = await service().compact_now(session)
    assert result is not None
    assert_committed(session, result, task)
    assert session.nodes == [session.first_user_seq, result.replacement_seq, *newest]
    start, _, end = bracket(session, result)
    assert start.turn is None and end.turn is None  # standalone
    assert len(result.shadowed_seqs) == 8


async def test_manual_compaction_with_nothing_to_compact_writes_nothing() -> None:
    session = Session()
    user(session, TASK)
    start_turn(session)
    tool_step(session, n_calls=2)
    end_turn(session)
    length = len(session)
    assert await service().compact_now(session) is None
    assert len(session) == length


async def test_automatic_region_compaction_needs_an_open_turn() -> None:
    session = working_session(close_turn=True)
    with pytest.raises(SpanError, match=r"^compactRegion: no open turn — automatic compaction"):
        await service().compact_region(session, session.nodes[1], session.nodes[2])


# ---------------------------------------------------------------- cancellation


async def test_cancellation_mid_summary_closes_the_bracket_and_propagates() -> None:
    session = working_session(close_turn=True)
    before = surface_snapshot(session)
    length = len(session)
    summarizer = GatedSummarizer(sectioned())
    task = asyncio.create_task(service(summarizer, **RELAXED).compact_now(session))
    await asyncio.wait_for(summarizer.entered.wait(), 5)
    assert inspect_lock(session).live  # compact/start is in the log before the await
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert log_types(session, length) == ["compact/start", "compact/end"]
    end = session.event(length + 1)
    assert isinstance(end, CompactEnd) and end.error is not None
    assert end.error.startswith("cancelled")
    assert "cancelled" in end.error
    assert surface_snapshot(session) == before
    assert not inspect_lock(session).live


async def test_cancellation_is_stored(sqlite_url: str) -> None:
    with SessionStore.open(sqlite_url) as store:
        session = working_session(close_turn=True)
        store.save(session)
        summarizer = GatedSummarizer(sectioned())
        task = asyncio.create_task(service(summarizer).compact_now(session, store=store))
        await asyncio.wait_for(summarizer.entered.wait(), 5)
        assert isinstance(store.get(session.id).event(len(session) - 1), CompactStart)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        loaded = store.get(session.id)
        end = loaded.event(len(loaded) - 1)
        assert isinstance(end, CompactEnd) and end.error is not None and "cancelled" in end.error
        assert loaded.nodes == session.nodes


def failing_saves(store: SessionStore, *calls: int) -> list[int]:
    """Make the ``calls``-th saves (1-based, counted from now) raise StoreError; return the counter."""
    count = [0]
    real = store.save

    def save(session: Session) -> int:
        count[0] += 1
        if count[0] in calls:
            raise StoreError(f"disk full (save {count[0]})")
        return real(session)

    store.save = save  # type: ignore[method-assign]
    return count


async def test_a_store_failure_at_commit_closes_the_bracket_and_changes_nothing() -> None:
    with SessionStore.open("memory://") as store:
        session = working_session(close_turn=True)
        store.save(session)
        before = surface_snapshot(session)
        length = len(session)
        failing_saves(store, 2)  # the start is stored, the commit is refused, the close is stored
        with pytest.raises(CommitError, match="the store refused the commit") as raised:
            await service(**RELAXED).compact_now(session, store=store)
        assert isinstance(raised.value.__cause__, StoreError)
        assert log_types(session, length) == ["compact/start", "compact/end"]
        assert surface_snapshot(session) == before
        assert not inspect_lock(session).live and session.pending == []
        loaded = store.get(session.id)
        assert log_types(loaded, length) == ["compact/start", "compact/end"]
        end = loaded.event(len(loaded) - 1)
        assert isinstance(end, CompactEnd) and end.error is not None and "disk full" in end.error


async def test_a_store_failure_at_start_leaves_no_lock_in_memory() -> None:
    with SessionStore.open("memory://") as store:
        session = working_session(close_turn=True)
        store.save(session)
        length = len(session)
        failing_saves(store, 1)
        with pytest.raises(StoreError, match="disk full"):
            await service(**RELAXED).compact_now(session, store=store)
        assert len(session) == length and not inspect_lock(session).live
        assert await service(**RELAXED).compact_now(session, store=store) is not None


async def test_a_store_failure_at_close_is_retried_until_the_store_answers() -> None:
    with SessionStore.open("memory://") as store:
        session = working_session(close_turn=True)
        store.save(session)
        failing_saves(store, 2, 3)  # the close fails twice, then lands
        with pytest.raises(SummarizerError, match="boom"):
            await service(FailingSummarizer(SummarizerError("boom"))).compact_now(session, store=store)
        assert session.pending == []
        assert not inspect_lock(session).live and not inspect_lock(store.get(session.id)).live
        end = store.get(session.id).event(len(session) - 1)
        assert isinstance(end, CompactEnd) and end.error == "boom"


async def test_cancellation_wins_over_a_failed_close() -> None:
    with SessionStore.open("memory://") as store:
        session = working_session(close_turn=True)
        store.save(session)
        summarizer = GatedSummarizer(sectioned())
        failing_saves(store, 2)
        task = asyncio.create_task(service(summarizer).compact_now(session, store=store))
        await asyncio.wait_for(summarizer.entered.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert inspect_lock(session).live  # the orphan blocks until recovery


async def test_the_template_summarizer_passes_its_own_gate() -> None:
    session = working_session(steps=6, close_turn=True)
    result = await BasicCompactService(summarizer=TemplateSummarizer()).compact_now(session)
    assert result is not None
    _, summary, _ = bracket(session, result)
    assert isinstance(summary, CompactSummary) and summary.fidelity is not None
    assert summary.fidelity.retention_ratio == 1.0
    assert summary.fidelity.sections_missing == ()
    assert TASK in summary.summary[0].text


class DictStore:
    """A store of one's own, duck-typed: ``save`` and ``get`` over a dict of sessions, with no
    lease of its own (``acquire_lease`` and the rest absent): the log's ``compact/start`` alone
    arbitrates, as in the SQLite, PostgreSQL and memory stores."""

    def __init__(self) -> None:
        self.saved: dict[object, list[bytes]] = {}
        self.saves = 0

    def save(self, session: Session) -> None:
        rows = self.saved.setdefault(session.id, [])
        rows += [encode_event(e) for e in session.pending]
        session.mark_saved()
        self.saves += 1

    def get(self, session_id: object) -> Session:
        raise AssertionError("a compaction that no one raced never reloads the session")


async def test_a_duck_typed_store_without_leases_compacts_under_the_logs_lock() -> None:
    store = DictStore()
    session = working_session(close_turn=True)
    store.save(session)
    length = len(session)
    result = await service(**RELAXED).compact_now(session, store=store)  # type: ignore[arg-type]
    assert result is not None
    assert log_types(session, length) == ["compact/start", "compact/summary", "user/message", "compact/end"]
    assert store.saves == 3 and len(store.saved[session.id]) == len(session)  # the start, then the commit
    assert not inspect_lock(session).live and session.pending == []
