"""``compaction compact``: where the session ended and why, the exit status, and one token figure.

``compact`` says when the result is still above the threshold
or the window and why; above the window it exits 1 with the reason in its JSON; a failed further
attempt never hides a compaction that committed; a window not above the fixed overhead is refused
with the overhead named; ``sessions``, ``show`` and ``compact`` print the same request total; an
imported Claude Sonnet 4.5 session needs no ``--window``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from uuid import UUID

import pytest

from compaction.sessions.events import RequestHeader, TurnStart
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from tests.builders import Doc, end_turn, run_human, run_json, tool_step, user
from tests.compaction.summarizers.provider_servers import (
    ProviderServer,
    Reply,
    openai_frames,
    openai_usage,
)
from tests.conftest import TRANSCRIPTS

PI = TRANSCRIPTS / "pi-mono" / "large-session.jsonl"
SONNET_45 = (
    TRANSCRIPTS
    / "claude-code-log"
    / "-Users-dain-workspace-danieldemmel-me-next"
    / "9e953218-585f-4692-89df-9e0747a31c68.jsonl"
)
BIG = "Traceback (most recent call last):\n" + '  File "src/app/core.py", line 7\n' * 60


def stored(url: str, session: Session) -> str:
    with SessionStore.open(url) as store:
        store.save(session)
    return str(session.id)


def steps_session(*outputs: str, system: str | None = None, newest_user: str | None = None) -> Session:
    """A task, one turn of single-call tool steps with these outputs, optionally a last user
    message, closed; the header carries ``system`` and no window."""
    session = Session()
    user(session, "Fix the failing tests in src/app/ and keep `pytest -q` green.")
    session.append(TurnStart(turn=1))
    session.append(RequestHeader(provider="test", model="house-model", system=system))
    for output in outputs:
        tool_step(session, n_calls=1, output=output)
    end_turn(session)
    if newest_user is not None:
        user(session, newest_user)
    return session


def imported(url: str, path: Path) -> str:
    code, document = run_json("--store", url, "import", str(path))
    assert code == 0, document
    return str(document["sessions"][0]["session_id"])


# ---------------------------------------------------------------- the window and the overhead


def test_a_window_not_above_the_fixed_overhead_is_refused_with_the_overhead_named(
    sqlite_url: str,
) -> None:
    """``--window 10`` was once accepted and left the session over the window."""
    sid = stored(sqlite_url, steps_session(BIG, BIG, system="s" * 800))  # 200 + 4 tokens
    code, document = run_json("--store", sqlite_url, "compact", sid, "--window", "10")
    assert code == 1 and set(document) == {"error"}
    assert document["error"]["type"] == "CompactionConfigError"
    message = document["error"]["message"]
    assert "context window 10 is not above the fixed overhead" in message and "204 tokens" in message
    assert "system prompt and tool schemas of request/header seq 2" in message
    with SessionStore.open(sqlite_url) as store:
        assert store.get(UUID(sid)).last_of("compact/start") is None  # nothing was written


def test_a_threshold_not_above_the_fixed_overhead_is_refused_before_anything_is_written(
    sqlite_url: str,
) -> None:
    """The window was above the overhead but its threshold was not; two compactions were once
    written before the command said it was still above. Now nothing is written, and the window
    that would do is named."""
    sid = stored(sqlite_url, steps_session(BIG, BIG, system="s" * 800))  # 200 + 4 tokens
    code, document = run_json("--store", sqlite_url, "compact", sid, "--window", "250")
    assert code == 1 and document["error"]["type"] == "CompactionConfigError"
    message = document["error"]["message"]
    assert "the threshold 200 (0.8 x the context window 250) is not above the fixed overhead" in message
    assert "204 tokens" in message and "nothing was compacted" in message
    assert "Use a window of at least 257" in message  # floor(256 x 0.8) = 204 is not above 204
    with SessionStore.open(sqlite_url) as store:
        assert store.get(UUID(sid)).last_of("compact/start") is None
    _, document = run_json("--store", sqlite_url, "compact", sid, "--window", "257")
    assert "error" not in document and document["compactions"]  # not refused: it compacts


def test_a_tiny_window_with_no_overhead_to_refuse_ends_above_it_and_exits_1(sqlite_url: str) -> None:
    """No system prompt, no usage: nothing to refuse up front, but the task statement alone is
    larger than ``--window 10``; the command compacts what it can and says it is still over."""
    sid = stored(sqlite_url, steps_session(BIG, BIG))
    code, document = run_json("--store", sqlite_url, "compact", sid, "--window", "10")
    assert code == 1, document
    assert document["status"] == "above_window" and document["overhead_tokens"] == 0
    assert document["reason"]["kind"] == "unsplittable_unit"


def test_the_overhead_measured_by_the_provider_is_the_one_named(sqlite_url: str) -> None:
    sid = imported(sqlite_url, PI)
    code, document = run_json("--store", sqlite_url, "compact", sid, "--window", "1000")
    assert code == 1 and document["error"]["type"] == "CompactionConfigError"
    assert "measured on the provider's count of the request at seq" in document["error"]["message"]


def test_above_the_window_exits_1_with_the_reason_and_the_committed_compactions(
    sqlite_url: str,
) -> None:
    """The newest unit alone is larger than the window: the older steps are compacted, the command
    says which unit stays and exits 1."""
    sid = stored(sqlite_url, steps_session(BIG, BIG, BIG, newest_user="x" * 8000))
    code, document = run_json("--store", sqlite_url, "compact", sid, "--window", "1500")
    assert code == 1, document
    assert document["status"] == "above_window" and document["tokens_after"] >= 1500
    assert len(document["compactions"]) >= 1  # committed, and listed
    reason = document["reason"]
    assert reason["kind"] == "unsplittable_unit"
    assert "the newest unit" in reason["message"] and "context window (1,500)" in reason["message"]
    with SessionStore.open(sqlite_url) as store:
        newest = store.get(UUID(sid)).nodes[-1]
    assert reason["seqs"] == [newest] and reason["tokens"] >= 2000
    code, out, _ = run_human("--store", sqlite_url, "compact", sid, "--window", "1500")
    assert code == 1 and "still above the context window (1,500)" in out
    assert "(unsplittable unit)" in out


def test_above_the_threshold_but_within_the_window_says_why_and_exits_0(sqlite_url: str) -> None:
    sid = stored(sqlite_url, steps_session(BIG, BIG, BIG, newest_user="x" * 4800))  # ~1,200 tokens
    code, document = run_json("--store", sqlite_url, "compact", sid, "--window", "1600")
    assert code == 0, document
    assert document["status"] == "above_threshold"
    assert document["threshold"] == 1280 and 1280 <= document["tokens_after"] < 1600
    assert document["reason"]["kind"] == "unsplittable_unit"
    assert "the threshold (1,280 = 0.8 x 1,600)" in document["reason"]["message"]


def test_under_the_threshold_there_is_no_reason(sqlite_url: str) -> None:
    sid = stored(sqlite_url, steps_session(BIG, BIG, BIG, BIG))
    code, document = run_json("--store", sqlite_url, "compact", sid, "--window", "3000")
    assert code == 0 and document["status"] == "under_threshold" and document["reason"] is None
    assert document["tokens_after"] < document["threshold"] == 2400


# ---------------------------------------------------------------- a failed further attempt


@contextmanager
def provider_in_thread(*replies: Reply) -> Iterator[ProviderServer]:
    """A real OpenAI-compatible server on its own event loop (the command line runs its own)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = asyncio.run_coroutine_threadsafe(ProviderServer().start(), loop).result(10)
    server.script(*replies)
    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_a_failed_further_attempt_never_hides_the_compaction_that_committed(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first summary commits; the second (the retained tail, once the tail alone is not enough)
    is not smaller than what it would shadow: ShrinkError. The committed compaction is still in the
    document, the failure beside it, and the exit status follows where the session ended."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    session = steps_session(BIG, BIG, BIG, "h" * 8000, "y" * 400)  # the tail: ~2,000 + ~130
    sid = stored(sqlite_url, session)
    huge = "z " * 20_000
    replies = [Reply(frames=openai_frames(t, usage=openai_usage(900, 30))) for t in (["short"], [huge])]
    with provider_in_thread(*replies) as server:
        code, document = run_json(
            "--store", sqlite_url, "compact", sid, "--window", "2700", "--summarizer", "openai",
            "--base-url", server.base_url, "--model", "m", "--min-ratio", "0",
        )  # fmt: skip
        assert len(server.received) == 2
    assert code == 0, document  # above the threshold, within the window
    assert set(document) >= {"compactions", "failed_attempt", "status", "reason"}
    (committed,) = document["compactions"]
    assert document["failed_attempt"]["type"] == "ShrinkError"
    assert document["reason"]["kind"] == "attempt_failed"
    assert "the 1 committed before it stand" in document["reason"]["message"]
    with SessionStore.open(sqlite_url) as store:
        log = store.get(UUID(sid))
    assert committed["replacement_seq"] in log.nodes


# ---------------------------------------------------------------- one figure, known windows


def test_sessions_show_and_compact_print_the_same_request_total(sqlite_url: str) -> None:
    sid = imported(sqlite_url, PI)

    def listed() -> Doc:
        code, document = run_json("--store", sqlite_url, "sessions")
        assert code == 0
        return next(r for r in document["sessions"] if r["session_id"] == sid)

    def shown() -> int:
        code, document = run_json("--store", sqlite_url, "show", sid)
        assert code == 0
        return int(document["tokens"])

    before = listed()["tokens"]
    assert shown() == before
    code, document = run_json("--store", sqlite_url, "compact", sid, "--window", "40000")
    assert code == 0 and document["tokens_before"] == before
    assert document["status"] == "under_threshold"
    assert listed()["tokens"] == shown() == document["tokens_after"]
    # the 0.1 meter: 53,627 after compacting while the surface held 10,873 (~42.7k phantom overhead)
    overhead, ratio = document["overhead_tokens"], document["ratio"]
    assert overhead < 2500 and 1.2 < ratio < 1.45
    surface = listed()["surface_tokens"]
    assert document["tokens_after"] == pytest.approx(overhead + ratio * surface, abs=2)


def test_a_claude_sonnet_45_session_needs_no_window(sqlite_url: str) -> None:
    """Once refused with "no context capacity for anthropic/claude-sonnet-4-5-20250929"."""
    sid = imported(sqlite_url, SONNET_45)
    code, document = run_json("--store", sqlite_url, "compact", sid)
    assert code == 0, document
    assert document["window"] == 200_000 and document["status"] == "under_threshold"
    assert document["compactions"] == []


def test_compact_without_a_window_names_the_one_it_assumed_and_the_html_draws_it(
    sqlite_url: str, tmp_path: Path
) -> None:
    """The window compact inferred once showed only under --json, and the HTML report said
    "context window unknown" for the same session."""
    claude = next((TRANSCRIPTS / "claude-code-log").rglob("37f83ec9-*.jsonl"))
    sid = imported(sqlite_url, claude)
    _, document = run_json("--store", sqlite_url, "compact", sid)
    window, threshold = document["window"], document["threshold"]
    assert document["window_source"].startswith("the known window of anthropic/claude-")
    code, out, err = run_human("--store", sqlite_url, "compact", sid)
    assert code == 0, err
    assert f"context window {window:,} ({document['window_source']}), threshold {threshold:,}" in out
    report = tmp_path / "report.html"
    code, _, err = run_human("--store", sqlite_url, "audit", sid, "--html", str(report))
    assert code == 0, err
    page = report.read_text(encoding="utf-8")
    assert "context window unknown" not in page
    assert f"context window {window:,} ({document['window_source']}), threshold {threshold:,}" in page
