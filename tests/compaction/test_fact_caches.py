"""Per-message facts found once: the identifiers of a message are extracted once and
shared by the template summarizer, the completion and the fidelity gate; a span's error facts
parse each tool call once; a cold meter prices the surface in one batch, with the same figures.
What is found once is kept by the session's analysis (:class:`SpanAnalysis`), active while a
compaction runs; the tests make one active where the compaction would."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import msgspec
import pytest

from compaction.engine.meters import HeuristicMeter, Meter
from compaction.handover import calls, facts, failures, identifiers, outcomes, reading, walk
from compaction.handover.analysis import SpanAnalysis
from compaction.handover.files import file_actions
from compaction.service import BasicCompactService
from compaction.sessions.blocks import (
    ImageBlock,
    Message,
    ReasoningBlock,
    Source,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from compaction.sessions.events import AssistantMessage, SessionEvent, UserMessage
from compaction.sessions.session import Session
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.contract import CompactionResult
from tests.builders import MODEL, start_turn, tool_step, turn, user


def call(call_id: str, command: str) -> ToolCallBlock:
    return ToolCallBlock(call_id, "bash", msgspec.json.encode({"command": command}).decode())


def agent(message_id: str, text: str, *calls: ToolCallBlock) -> Message:
    return Message(id=message_id, role="assistant", content=(TextBlock(text), *calls), source=MODEL)


def result(call_id: str, text: str, *, is_error: bool = False) -> Message:
    block = ToolResultBlock(call_id, (TextBlock(text),), is_error=is_error)
    source = Source(kind="tool", call_id=call_id)
    return Message(id=f"r-{call_id}", role="user", content=(block,), source=source)


def span() -> list[Message]:
    return [
        Message(id="u", role="user", content=(TextBlock("Fix src/app/main.py please"),)),
        agent("a1", "Reading src/app/main.py and /etc/app/config.toml", call("c1", "pytest tests/test_a.py")),
        result("c1", "E   ValueError: bad value 0123456789abcdef\nFAILED", is_error=True),
        agent("a2", "Now src/app/util.py", call("c2", "pytest tests/test_b.py"), call("c3", "ls src")),
        result("c2", "KeyError: 'x'\nTypeError happened", is_error=True),
        result("c3", "main.py util.py"),
        agent("a3", "Again src/app/main.py", call("c4", "pytest tests/test_a.py")),
        result("c4", "1 passed"),
    ]


@pytest.fixture
def analysis() -> Iterator[SpanAnalysis]:
    """An analysis active for the test, as a compaction makes its session's."""
    with SpanAnalysis().active() as active:
        yield active


def kinds(found: identifiers.Identifiers) -> list[list[str]]:
    return [list(d) for d in (found.paths, found.commands, found.errors, found.error_lines, found.ids)]


def test_a_span_is_the_union_of_its_messages_in_first_seen_order() -> None:
    messages = span()
    found = identifiers.extract(messages)
    assert kinds(found) == [
        ["src/app/main.py", "/etc/app/config.toml", "tests/test_a.py", "src/app/util.py", "tests/test_b.py"],
        ["pytest tests/test_a.py", "pytest tests/test_b.py", "ls src"],
        ["ValueError", "KeyError", "TypeError"],
        ["ValueError: bad value 0123456789abcdef", "KeyError: 'x'"],
        [],  # ids come from tool-call arguments only
    ]
    # the same, message by message, as a cold extraction of each prefix gives
    with SpanAnalysis().active():
        warm = [kinds(identifiers.extract(messages[:end])) for end in range(len(messages) + 1)]
    for end in range(len(messages) + 1):
        assert warm[end] == kinds(identifiers.extract(messages[:end]))


@pytest.mark.usefixtures("analysis")
def test_each_message_is_extracted_once(extracted: list[str]) -> None:
    messages = span()
    first = identifiers.extract(messages)
    again = identifiers.extract(messages[2:])
    assert kinds(identifiers.extract(messages)) == kinds(first)
    assert sorted(extracted) == sorted(m.id for m in messages)
    assert kinds(again) == kinds(identifiers.extract(messages[2:]))
    # an equal message (another object, the same content) is the same identifiers, found again:
    # kept by identity only (a real session's messages differ by id, a copy by value never comes)
    copy = [msgspec.structs.replace(m) for m in messages]
    assert kinds(identifiers.extract(copy)) == kinds(first)
    assert len(extracted) == 2 * len(messages)


def test_without_an_analysis_nothing_is_kept(extracted: list[str]) -> None:
    messages = span()
    first = identifiers.extract(messages)
    assert kinds(identifiers.extract(messages)) == kinds(first)
    assert sorted(extracted) == sorted(m.id for m in [*messages, *messages])


def test_the_analysis_is_bounded_in_bytes(extracted: list[str]) -> None:
    messages = span()
    with SpanAnalysis().active() as roomy:
        identifiers.extract(messages)
    needed = roomy.bytes
    assert needed > 0
    extracted.clear()
    with SpanAnalysis(max_bytes=needed // 2).active() as tight:
        first = identifiers.extract(messages)
        assert tight.bytes <= needed // 2
        assert tight.budget.restarts > 0  # it started over past its bound ...
        again = identifiers.extract(list(reversed(messages)))  # another sequence: message by message
        assert sorted(map(sorted, kinds(again))) == sorted(map(sorted, kinds(first)))  # the same ...
    assert len(extracted) > len(messages)  # ... what it forgot extracted again


def compacted_turn() -> CompactionResult:
    """A task and one turn of 12 two-call steps, compacted by hand (the gate recording only)."""
    session = Session()
    turn(session, "Fix the failing tests in src/app/main.py", steps=12, n_calls=2)
    service = BasicCompactService(BasicConfig(context_window=100_000, min_identifier_ratio=0.0))
    result = asyncio.run(service.compact_now(session))
    assert result is not None
    return result


def test_summarizer_completion_and_gate_share_one_extraction(extracted: list[str]) -> None:
    compacted_turn()
    assert extracted  # the span's identifiers were found ...
    assert len(extracted) == len(set(extracted))  # ... once per message, not once per reader


def test_one_compaction_finds_its_span_facts_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The template summarizer (the span led by the task statement) and the completion (the span
    alone) share one walk of the span: the lead's facts are added to the span's, not re-walked."""
    walked: list[int] = []
    real = facts.span_facts.compute
    monkeypatch.setattr(facts.span_facts, "compute", lambda m: walked.append(len(m)) or real(m))
    result = compacted_turn()
    assert sorted(walked) == [1, len(result.shadowed_seqs)]  # the lead alone, the span once


def _public_spans() -> Iterator[tuple[str, list[Message]]]:
    from compaction.importers import import_path
    from compaction.sessions.session import project
    from tests.conftest import PUBLIC_TRANSCRIPTS

    for path in PUBLIC_TRANSCRIPTS:
        for number, imported in enumerate(import_path(path)):
            session = imported.session
            messages = [m for m in (project(session.event(s)) for s in session.nodes) if m]
            yield f"{path.name}#{number}", messages


def test_led_span_facts_equal_the_facts_of_the_whole_request_on_every_transcript() -> None:
    """:func:`facts.led_span_facts` is exact: for every user message of every public transcript
    taken as the lead and every cut after it, the facts equal those of one walk over both."""
    checked = 0
    for name, messages in _public_spans():
        leads = [i for i, m in enumerate(messages) if m.role == "user" and m.source.kind == "user"]
        for i in leads[:6]:
            for end in sorted({i + 1, i + 2, i + 5, i + 40, (i + len(messages)) // 2, len(messages)}):
                lead, rest = messages[i], messages[i + 1 : end]
                whole = facts.span_facts.compute([lead, *rest])
                with SpanAnalysis().active():
                    led = facts.led_span_facts(lead, rest)
                assert led == whole, (name, i, end)
                assert led.identifiers.all() == whole.identifiers.all(), (name, i, end)
                checked += 1
    assert checked > 200


def test_error_facts_parse_each_call_once(analysis: SpanAnalysis) -> None:
    messages = span()
    walked = walk.walk_span(messages, [reading.read(m) for m in messages])
    errors = failures.span_errors(walked)
    assert [(e.command, e.fixed) for e in errors] == [
        ("pytest tests/test_a.py", True),  # the same command passed later
        ("pytest tests/test_b.py", False),
    ]
    found = calls.call_key.memo(analysis).computed
    assert found == len(walked.steps)  # each call's key found when it was read
    assert identifiers.parsed_arguments.memo(analysis).computed == len(
        {s.call.arguments for s in walked.steps}
    )
    again = walk.walk_span(messages, [reading.read(m) for m in messages])
    assert failures.span_errors(again) == errors
    assert calls.call_key.memo(analysis).computed == found  # the same messages are not read twice


def test_span_facts_are_the_same_with_warm_caches() -> None:
    cold = facts.span_facts(span())
    with SpanAnalysis().active():
        assert facts.span_facts(span()) == cold
        assert facts.span_facts(span()) == cold
    with SpanAnalysis().active():
        messages = span()
        assert facts.span_facts(messages) == cold
        assert facts.span_facts(messages) == cold


@pytest.mark.usefixtures("analysis")
def test_arguments_of_returns_a_copy() -> None:
    block = call("c9", "make")
    calls.arguments_of(block)["command"] = "changed"
    assert calls.arguments_of(block) == {"command": "make"}
    assert calls.call_key(block) == "make"


# ---------------------------------------------------------------- batched pricing


def events() -> list[SessionEvent]:
    odd = "naïve café 😀 " * 7  # non-ASCII, astral (two UTF-16 units)
    image = ImageBlock(attachment_id="img", media_type="image/png")
    big = ToolResultBlock("c1", (TextBlock("x" * 1001), image))
    return [
        UserMessage(message=Message(id="u", role="user", content=(TextBlock(odd),)), surface_op="append"),
        AssistantMessage(
            turn=1,
            step=1,
            surface_op="append",
            message=Message(
                id="a",
                role="assistant",
                content=(ReasoningBlock("think " * 33), TextBlock(odd), call("c1", "ls " + odd)),
                source=MODEL,
            ),
        ),
        AssistantMessage(
            turn=1,
            step=2,
            surface_op="append",
            message=Message(id="e", role="assistant", content=(), source=MODEL),
        ),
        UserMessage(message=Message(id="r", role="user", content=(big,)), surface_op="append"),
    ]


@pytest.mark.parametrize("meter", [HeuristicMeter(), HeuristicMeter(3.5), HeuristicMeter(1)])
def test_batch_prices_equal_one_by_one(meter: HeuristicMeter) -> None:
    batch = events()
    assert meter.event_prices(batch) == [meter.event(e) for e in batch]
    assert meter.event_prices(batch)[2] == 0  # an empty assistant message projects to nothing


def test_a_subclass_pricing_its_own_way_is_not_batched_past() -> None:
    class Words(HeuristicMeter):
        def text_tokens(self, text: str) -> int:
            return len(text.split())

    meter = Words()
    batch = events()
    assert meter.event_prices(batch) == [meter.event(e) for e in batch]
    assert meter.event_prices(batch) != HeuristicMeter().event_prices(batch)


def test_a_cold_measure_prices_the_surface_in_one_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    session = Session()
    user(session, "task")
    start_turn(session)
    for _ in range(20):
        tool_step(session, n_calls=1)
    meter = HeuristicMeter()
    batches: list[int] = []
    original = meter.event_prices

    def spy(batch: list[SessionEvent]) -> list[int]:
        batches.append(len(batch))
        return original(batch)

    monkeypatch.setattr(meter, "event_prices", spy)
    reading = meter.measure(session)
    assert batches == [len(session.nodes)]
    assert reading.surface_tokens == sum(Meter.event(meter, session.event(s)) for s in session.nodes)
    tool_step(session, n_calls=2)
    meter.measure(session)
    assert batches == [len(session.nodes) - 3, 3]


# ---------------------------------------------------------------- the faster patterns


def reference_paths(text: str) -> list[str]:
    """The path search before the per-message facts were cached: ``PATH_RE`` over the whole text."""
    found = []
    for match in identifiers.PATH_RE.finditer(text):
        path = match.group(0).rstrip(".,:;")
        if (
            3 <= len(path) <= identifiers.MAX_PATH
            and not path.startswith("//")
            and "://" not in text[max(0, match.start() - 8) : match.end()]
        ):
            found.append(path)
    return found


PIECES = (
    "a",
    "Z",
    "E",
    "/",
    ".",
    "_",
    "-",
    "~",
    ":",
    " ",
    "\n",
    "é",
    "Ω",
    "…",
    "0",
    "x",
    "rror",
    "Error",
    "FooError",
    "XFault",
    "ValueError:",
    "/usr/lib/python3",
    "a/b.py",
    "~/x/y.txt",
    "./c/d.json",
    "http://h/p.html",
    "src/app/main.py,",
    "_KeyError",
    "éTypeError",
    "ErrorError",
    "Warnings",
    "deadbeef",
    "0a1b",
    "c2d3e4f5a6b7",
    "-0123-",
)


def test_the_faster_patterns_find_what_the_plain_ones_find() -> None:
    import random

    rng = random.Random(13)
    for _ in range(20_000):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 12)))
        assert identifiers.error_names(text) == identifiers.ERROR_NAME_RE.findall(text), text
        assert list(identifiers._paths(text)) == reference_paths(text), text
        ids = identifiers.ID_RE.findall(text)  # found only in a text the cheaper scan lets through
        assert not ids or identifiers.HEX_RUN_RE.search(text), text


# ---------------------------------------------------------------- the span as a range


def long_session(steps: int = 30) -> Session:
    session = Session()
    user(session, "task")
    start_turn(session)
    for _ in range(steps):
        tool_step(session, n_calls=1, output="x" * 400)
    return session


def test_a_selected_span_is_a_range_until_its_seqs_are_read() -> None:
    from compaction.engine.selection import select_span

    session = long_session()
    meter = HeuristicMeter()
    meter.measure(session)
    span = select_span(session, meter, 500)
    assert span is not None
    assert span._seqs is None  # the decision copied no seqs
    assert len(span) == span.last - span.first + 1
    assert (span.start, span.end) == (session.nodes[span.first], session.nodes[span.last])
    tool_step(session, n_calls=1)  # appends leave the positions where they were
    assert span.seqs == tuple(session.nodes[span.first : span.last + 1])


def test_a_lazy_span_refuses_a_surface_rolled_back_since() -> None:
    from compaction.engine.selection import select_span
    from compaction.errors import SpanError

    session = long_session()
    meter = HeuristicMeter()
    meter.measure(session)
    mark = session.mark()
    tool_step(session, n_calls=1)
    span = select_span(session, meter, 500)
    assert span is not None
    session.rollback(mark)
    with pytest.raises(SpanError, match="select it again"):
        _ = span.seqs


def test_a_second_reader_of_the_span_reuses_the_block_facts(analysis: SpanAnalysis) -> None:
    messages = span()
    memos = (
        outcomes.first_informative_line.memo(analysis),
        file_actions(analysis),
        calls.result_text.memo(analysis),
        calls.failed.memo(analysis),
    )
    facts.span_facts(messages)  # the template summarizer
    computed = [memo.computed for memo in memos]
    assert all(computed)
    facts.span_facts(messages[1:])  # the completion: the shadowed span without the task statement
    assert [memo.computed for memo in memos] == computed


# ---------------------------------------------------------------- one decorator for every reader


def test_a_remembered_reader_computes_once_per_analysis_and_keeps_nothing_without_one() -> None:
    from compaction.handover.analysis import remembered
    from compaction.sessions.memo import ENTRY_BYTES, ValueMemo

    computed: list[str] = []

    @remembered(lambda budget: ValueMemo(budget, lambda key, value: ENTRY_BYTES + len(value)))
    def shout(text: str) -> str:
        computed.append(text)
        return text.upper()

    assert [shout("a"), shout("a")] == ["A", "A"] and computed == ["a", "a"]  # no analysis: no memo
    first, second = SpanAnalysis(), SpanAnalysis()
    with first.active():
        assert [shout("b"), shout("b"), shout("c")] == ["B", "B", "C"]
    with second.active():
        assert shout("b") == "B"  # another session's analysis keeps its own
    assert computed == ["a", "a", "b", "c", "b"]
    assert shout.memo(first).computed == 2 and shout.memo(second).computed == 1
    assert first.bytes == 2 * ENTRY_BYTES + 2
    first.budget.start_over()  # the analysis's bound reached: every memo starts over
    with first.active():
        shout("b")
    assert computed[-1] == "b" and shout.memo(first).computed == 3
