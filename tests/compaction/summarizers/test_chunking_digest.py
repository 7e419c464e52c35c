"""The digest: a per-compaction model-input budget (compaction.summarizers.digest).

The span is condensed to at most the budget: tool output cut to head and tail lines, older middle
turns elided with a marker, the user's messages kept while they fit, then cut, then counted; never
dropped silently. Bounded on every public transcript; one request per compaction through a real
OpenAI-compatible server (the provider server), from Python, the registry and the command line.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from compaction.engine.meters import HeuristicMeter
from compaction.errors import CompactionConfigError, ContextLengthError
from compaction.handover.facts import span_facts
from compaction.handover.matching import normalized
from compaction.importers import import_path
from compaction.sessions.blocks import (
    Message,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    text_of,
)
from compaction.sessions.render import pairing_problems
from compaction.sessions.store import SessionStore
from compaction.summarizers.chunking import ChunkingSummarizer, fit_unit
from compaction.summarizers.digest import (
    HEAD_LINES,
    TAIL_LINES,
    DigestSummarizer,
    condense,
    condense_lines,
    digest_span,
    estimate_name,
    estimate_named,
)
from compaction.summarizers.local import LOCAL_TOKEN_RATIO, local_estimate
from compaction.summarizers.registry import SUMMARIZERS, SummarizerOptions
from compaction.vocabulary.events import CompactSummary
from compaction.vocabulary.summarizer import SummaryRequest
from tests.builders import run_json
from tests.compaction.summarizers.provider_servers import ProviderServer
from tests.compaction.summarizers.test_http import METER, chunk_replies, conversation, make_request, openai
from tests.compaction.test_completion import WEAK, provider
from tests.conftest import PUBLIC_TRANSCRIPTS, TRANSCRIPTS

__all__ = ["provider"]  # the completion tests' fixture: a provider server on its own thread

TASK = "Fix the failing tests under src/app/ and keep `pytest -q` green."
ELIDED = "messages of older turns elided by the digest"


def user(text: str, id: str) -> Message:
    return Message(id=id, role="user", content=(TextBlock(text),))


def step(i: int, lines: int, *, failed: bool = False) -> list[Message]:
    call = ToolCallBlock(f"c{i}", "bash", json.dumps({"command": f"pytest tests/test_m{i}.py"}))
    output = [f"line {j} of the output of step {i}" for j in range(lines)]
    if failed:
        output[lines // 2] = f"ValueError: step {i} broke on purpose"
    result = ToolResultBlock(f"c{i}", (TextBlock("\n".join(output)),), is_error=failed)
    return [
        Message(id=f"a{i}", role="assistant", content=(TextBlock(f"Running step {i}."), call)),
        Message(id=f"r{i}", role="user", content=(result,)),
    ]


def span(
    turns: int, lines: int = 200, asks_every: int = 5, ask_chars: int = 0
) -> tuple[list[Message], list[str]]:
    """The task, then ``turns`` tool steps of ``lines`` lines of output; a user ask every few."""
    messages, asks = [user(TASK, "u0")], []
    for i in range(turns):
        if i and i % asks_every == 0:
            ask = f"Ask {i}: please also check module m{i} and tell me what you find. " + "x" * ask_chars
            asks.append(ask)
            messages.append(user(ask, f"u{i}"))
        messages += step(i, lines)
    return messages, asks


def shown(messages: tuple[Message, ...]) -> str:
    parts = []
    for message in messages:
        for block in message.content:
            if isinstance(block, ToolResultBlock):
                parts.append(text_of(block.content))
            elif isinstance(block, TextBlock):
                parts.append(block.text)
    return "\n".join(parts)


# ---------------------------------------------------------------- condensing


def test_tool_output_keeps_its_first_and_last_lines_and_says_how_many_went() -> None:
    text = "\n".join(f"line {i}" for i in range(100)) + "\n" + "y" * 1000
    cut = condense_lines(text).splitlines()
    assert cut[:HEAD_LINES] == [f"line {i}" for i in range(HEAD_LINES)]
    assert cut[HEAD_LINES] == f"[... {101 - HEAD_LINES - TAIL_LINES} lines cut by the digest ...]"
    assert cut[-TAIL_LINES:-1] == ["line 98", "line 99"]
    assert "[... 800 characters cut ...]" in cut[-1] and len(cut[-1]) < 250
    assert condense_lines("a\nb\nc") == "a\nb\nc"


def test_a_failed_result_names_its_error_line_when_it_was_cut() -> None:
    _, result = step(3, 100, failed=True)
    condensed = condense(result)
    assert condensed is not None
    (block,) = condensed.content
    assert isinstance(block, ToolResultBlock) and block.is_error
    assert "lines cut by the digest; first error line: ValueError: step 3 broke on purpose" in text_of(
        block.content
    )


def test_harness_blocks_arguments_and_reasoning_are_condensed() -> None:
    reminder = "<system-reminder>" + "remember this " * 300 + "</system-reminder>"
    asked = condense(user(f"Please rename foo to bar.\n{reminder}", "u"))
    assert asked is not None and text_of(asked.content) == (
        "Please rename foo to bar.\n[<system-reminder> block cut by the digest]"
    )
    call = ToolCallBlock("c", "write", json.dumps({"path": "src/a.py", "content": "z" * 5000}))
    thinking = Message(id="a", role="assistant", content=(ReasoningBlock("hmm " * 500), call))
    condensed = condense(thinking)
    assert condensed is not None
    (cut,) = condensed.content  # the reasoning is left out
    assert isinstance(cut, ToolCallBlock) and cut.id == "c"
    arguments = json.loads(cut.arguments)  # still JSON, the path whole
    assert arguments["path"] == "src/a.py" and "characters cut by the digest" in arguments["content"]
    assert condense(Message(id="r", role="assistant", content=(ReasoningBlock("only"),))) is None


def test_observations_of_a_text_harness_are_cut_like_tool_output() -> None:
    fenced = Message(id="a", role="assistant", content=(TextBlock("Listing:\n```bash\nls -R\n```"),))
    listing = user("\n".join(f"file{i}.py" for i in range(300)), "o")
    ask = user("Now please only look at file7.py. " * 3, "u2")
    digest = digest_span([user(TASK, "u"), fenced, listing, ask], 10_000, METER.message)
    texts = [text_of(m.content) for m in digest.messages]
    assert "lines cut by the digest" in texts[2] and texts[3] == text_of(ask.content)


# ---------------------------------------------------------------- eliding and the user's asks


def test_a_span_that_fits_once_condensed_keeps_every_message() -> None:
    messages, _ = span(6, lines=40)
    digest = digest_span(messages, 10_000, METER.message)
    assert [m.id for m in digest.messages] == [m.id for m in messages]
    assert digest.elided_messages == 0 and digest.tokens < digest.source_tokens
    assert (digest.source_messages, digest.condensed, digest.cut) == (len(messages), 6, 0)  # the results


def test_older_middle_turns_go_first_and_every_user_ask_stays() -> None:
    messages, asks = span(60)
    digest = digest_span(messages, 2500, METER.message)
    assert digest.tokens <= 2500 < digest.source_tokens
    ids = [m.id for m in digest.messages]
    assert ids[0] == "u0" and ids[-2:] == ["a59", "r59"]  # the task and the newest turn
    text = shown(digest.messages)
    assert all(ask in text for ask in asks)  # whole, none elided
    markers = [m for m in digest.messages if m.id.startswith("digest/")]
    assert markers and all(ELIDED in text_of(m.content) for m in markers)
    assert "the user's messages among them follow" in text_of(markers[0].content)
    assert "tool calls: bash x" in text_of(markers[0].content)
    assert len(messages) - (len(ids) - len(markers)) == digest.elided_messages > 0
    assert pairing_problems(list(digest.messages)) == []
    assert digest.dropped_asks == 0


def test_asks_that_cannot_fit_are_cut_then_counted_never_dropped_silently() -> None:
    messages, asks = span(60, asks_every=2, ask_chars=3000)
    for budget in (2500, 1000):
        digest = digest_span(messages, budget, METER.message)
        assert digest.tokens <= budget
        text = shown(digest.messages)
        cut = [a for a in asks if a not in text and a[:60] in text]  # head and tail, marked
        assert cut and not any(a in text for a in asks) and "characters elided" in text
        assert len(asks) - len(cut) == digest.dropped_asks  # each one gone is counted
        markers = " ".join(text_of(m.content) for m in digest.messages if m.id.startswith("digest/"))
        dropped = f"{digest.dropped_asks} of the user's messages among them elided too"
        assert (dropped in markers) == (digest.dropped_asks > 0)
    assert digest.dropped_asks > 0  # the smaller budget needed the last step


def test_the_agents_texts_are_cut_before_the_users() -> None:
    ask = "Please keep every public function documented and typed. " * 16
    answer = Message(id="a0", role="assistant", content=(TextBlock("I will. " + "detail " * 2000),))
    digest = digest_span([user(ask, "u0"), answer], 700, METER.message)
    assert digest.tokens <= 700
    kept, cut = (text_of(m.content) for m in digest.messages)
    assert kept == ask and cut.startswith("I will.") and "characters elided" in cut
    assert (digest.condensed, digest.cut) == (0, 1)


def test_a_budget_that_nothing_fits_names_the_flags() -> None:
    messages, _ = span(4)
    with pytest.raises(ContextLengthError, match=r"no input budget .*--digest-tokens N"):
        digest_span(messages, 0, METER.message, compaction_id="cmp")
    huge = [user("Please do this: " + "word " * 20_000, "u0"), *step(0, 10)]
    with pytest.raises(ContextLengthError, match=r"cmp: the digest of 3 messages .*--digest-tokens"):
        digest_span(huge, 60, METER.message, compaction_id="cmp")


@pytest.mark.parametrize("budget", [1200, 2600, 8000])
@pytest.mark.parametrize("path", PUBLIC_TRANSCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_digest_of_every_public_transcript_is_bounded(path: Path, budget: int) -> None:
    """The whole surface of each session, priced as the local model is: within the budget, tool
    pairs intact, the task first, and every user ask present (whole, or its head with the cut
    marked) unless a marker counts it."""
    estimate = local_estimate(HeuristicMeter().message)
    for imported in import_path(path):
        messages = imported.session.derive_messages()
        digest = digest_span(messages, budget, estimate)
        assert digest.tokens <= budget
        assert digest.messages[0].id == messages[0].id
        assert pairing_problems(list(digest.messages)) == []
        text = shown(digest.messages)
        seen = normalized(text)
        absent = [a for a in span_facts(messages).user_asks if normalized(a)[:40] not in seen]
        assert len(absent) <= digest.dropped_asks, absent[:3]


# ---------------------------------------------------------------- the summarizer, one request


@pytest.fixture
async def server() -> AsyncIterator[ProviderServer]:
    running = await ProviderServer().start()
    yield running
    await running.stop()


def long_span_request(turns: int = 80) -> SummaryRequest:
    messages, _ = span(turns)
    return msgspec.structs.replace(make_request(max_tokens=300), messages=tuple(messages))


async def test_a_digest_is_one_request_within_the_budget(server: ProviderServer) -> None:
    request = long_span_request()
    server.script(*chunk_replies(["digested"]))
    async with DigestSummarizer(openai(server), METER.message, tokens=1500) as summarizer:
        output = await summarizer.summarize(request)
    assert output.text == "digested" and output.chunks == 1
    (received,) = server.received
    body = conversation(received.body)
    assert any(ELIDED in str(m.get("content")) for m in body)
    assert sum(len(json.dumps(m)) for m in body) // 4 <= 1500 * 1.2
    record = output.digest  # what compact/summary keeps, so the audit can digest the span again
    assert record is not None
    assert (record.budget, record.meter, record.ratio, record.window, record.header) == (
        1500, "heuristic", 1.0, None, True
    )  # fmt: skip
    assert record.tokens <= 1500 < record.source_tokens and record.elided > 0
    assert (record.messages, record.source_messages) == (len(body), len(request.messages))


def test_the_price_of_a_message_is_recorded_by_name_when_it_has_one() -> None:
    messages, _ = span(3)
    local = local_estimate(HeuristicMeter(3).message)
    assert estimate_name(METER.message) == ("heuristic", 1.0)
    assert estimate_name(local) == ("heuristic:3", LOCAL_TOKEN_RATIO)
    assert estimate_name(lambda message: 1) is None
    again = estimate_named("heuristic:3", LOCAL_TOKEN_RATIO)
    assert [again(m) for m in messages] == [local(m) for m in messages]
    with pytest.raises(CompactionConfigError, match="unknown meter 'unnamed:x'"):
        estimate_named("unnamed:x")


async def test_an_unnamed_price_is_recorded_as_such(server: ProviderServer) -> None:
    def my_price(message: Message) -> int:
        return METER.message(message)

    server.script(*chunk_replies(["digested"]))
    async with DigestSummarizer(openai(server), my_price, tokens=1500) as summarizer:
        output = await summarizer.summarize(long_span_request())
    assert output.digest is not None
    assert output.digest.meter.startswith("unnamed:") and "my_price" in output.digest.meter


async def test_over_a_chunker_the_budget_defaults_to_one_request_of_its_window(
    server: ProviderServer,
) -> None:
    request = long_span_request()
    server.script(*chunk_replies(["one"]))
    chunker = ChunkingSummarizer(openai(server), 2400, METER.message)
    async with DigestSummarizer(chunker, METER.message) as summarizer:
        assert summarizer.budget(request) == chunker.room(request)
        output = await summarizer.summarize(request)
    assert output.chunks == 1 and len(server.received) == 1


async def test_a_budget_above_the_window_is_split_by_the_chunker(server: ProviderServer) -> None:
    request = long_span_request()
    server.script(*chunk_replies([f"p{i}" for i in range(8)]))
    chunker = ChunkingSummarizer(openai(server), 2400, METER.message)
    async with DigestSummarizer(chunker, METER.message, tokens=5000) as summarizer:
        output = await summarizer.summarize(request)
    assert 2 <= output.chunks <= 4 and output.text == f"p{output.chunks}"  # the merge's reply
    assert len(server.received) == output.chunks + 1  # bounded by the budget, not the span


async def test_the_registry_digests_when_asked(server: ProviderServer) -> None:
    url = server.base_url
    async with SUMMARIZERS.open("openai", SummarizerOptions(base_url=url, model="m", digest_tokens=800)) as s:
        assert isinstance(s, DigestSummarizer) and s.tokens == 800
    windowed = SummarizerOptions(base_url=url, model="m", window_tokens=3000, digest=True)
    async with SUMMARIZERS.open("openai", windowed) as s:
        assert isinstance(s, DigestSummarizer) and isinstance(s.inner, ChunkingSummarizer)
    async with SUMMARIZERS.open("anthropic", SummarizerOptions(base_url=url, model="m", api_key="k")) as s:
        assert not isinstance(s, DigestSummarizer)  # remote models get the whole span by default
    with pytest.raises(CompactionConfigError, match="a digest needs an input budget: --digest-tokens N"):
        SUMMARIZERS.open("openai", SummarizerOptions(base_url=url, model="m", digest=True))
    with pytest.raises(CompactionConfigError, match=r"--no-digest\) contradicts"):
        SummarizerOptions(digest=False, digest_tokens=100)
    with pytest.raises(CompactionConfigError, match=r"--digest-tokens\) must be a positive"):
        SummarizerOptions(digest_tokens=0)
    with pytest.raises(CompactionConfigError, match="needs tokens="):
        DigestSummarizer(openai(server), METER.message)


def test_cli_digest_tokens_send_one_request_per_compaction(
    provider: tuple[ProviderServer, asyncio.AbstractEventLoop], tmp_path: Path
) -> None:
    server, _ = provider
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    session = import_path(TRANSCRIPTS / "swe-agent" / "pydicom__pydicom-1458.traj")[0].session
    with SessionStore.open(url) as store:
        store.save(session)
    server.script(*chunk_replies([WEAK] * 2))
    code, document = run_json(
        "--store", url, "compact", str(session.id), "--summarizer", "openai",
        "--base-url", server.base_url, "--model", "gpt-4o-mini", "--manual", "--digest-tokens", "900",
    )  # fmt: skip
    assert code == 0, document
    (compaction,) = document["compactions"]
    assert compaction["shadowed_tokens"] > 5000 and len(server.received) == 1
    (received,) = server.received
    assert any(ELIDED in str(m.get("content")) for m in received.body["messages"])
    with SessionStore.open(url) as store:
        summary = store.get(session.id).event(compaction["summary_seq"])
    assert isinstance(summary, CompactSummary) and summary.completion is not None
    assert summary.digest is not None and summary.digest.budget == 900  # the audit rebuilds from it
    both = ("--no-digest", "--digest-tokens", "9")
    code, refused = run_json("--store", url, "compact", str(session.id), *both)
    assert code != 0 and "contradicts" in refused["error"]["message"]


def test_fit_unit_with_its_budget_spent_returns_what_it_has() -> None:
    """A digest whose room was already spent asked to fit a unit into a negative budget; a unit
    priced at 0 then divided by zero (seen: the second `--manual` local compaction of pydicom)."""
    unit = (Message(id="m", role="user", content=(TextBlock(""),)),)
    assert fit_unit(unit, -5, lambda message: 0) == unit
