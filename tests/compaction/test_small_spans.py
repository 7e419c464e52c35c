"""A span too small to gain anything is declined before any model request
(:mod:`compaction.engine.floor`): a 5-message OpenAI-style session compacted with ``--manual
--summarizer openai`` against a real HTTP server speaking the OpenAI protocol sends it nothing,
writes nothing, and exits 3 with a message that says why; a span above the floor still commits."""

from __future__ import annotations

import json
from pathlib import Path
from uuid import UUID

import pytest

from compaction.engine.floor import checkpoint_floor
from compaction.engine.meters import HeuristicMeter
from compaction.errors import SpanTooSmallError
from compaction.service import BasicCompactService
from compaction.sessions.store import SessionStore
from compaction.summarizers.openai import OpenAISummarizer
from compaction.vocabulary.config import BasicConfig
from tests.builders import run_json
from tests.compaction.cli.test_compact_reporting import provider_in_thread
from tests.compaction.summarizers.provider_servers import (
    ProviderServer,
    Reply,
    openai_frames,
    openai_usage,
)

SUMMARY = "\n".join(
    f"## {section}\n{body}"
    for section, body in [
        ("Primary Request and Intent", "Fix the 401 of the login test in `src/app/auth.py`."),
        ("Key Technical Concepts", "Bearer token check."),
        ("Files and Code", "`src/app/auth.py`, `tests/test_api.py`."),
        ("Errors and Fixes", "`pytest -q tests/test_api.py`: AssertionError: expected 200, got 401."),
        ("Pending Jobs", "Fix the header comparison."),
        ("Current Work", "Reading `src/app/auth.py`."),
        ("Next Step", "Compare against the Authorization header."),
        ("Critical Context", "None."),
    ]
)


def five_messages(output: str = "") -> list[dict[str, object]]:
    """The user's ask, a tool call, its result, the agent's note, the user's go-ahead."""
    result = output or (
        "FAILED tests/test_api.py::test_login - AssertionError: expected 200, got 401\n"
        "1 failed, 3 passed in 0.41s"
    )
    command = json.dumps({"command": "pytest -q tests/test_api.py"})
    return [
        {"role": "user", "content": "The login test fails with a 401; fix src/app/auth.py."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": command}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": result},
        {"role": "assistant", "content": "The token check reads the wrong header; reading src/app/auth.py."},
        {"role": "user", "content": "Go ahead."},
    ]


def imported(url: str, tmp_path: Path, messages: list[dict[str, object]]) -> str:
    path = tmp_path / "session.json"
    path.write_text(json.dumps(messages))
    code, document = run_json("--store", url, "import", str(path))
    assert code == 0, document
    return str(document["sessions"][0]["session_id"])


def events_of(url: str, sid: str) -> int:
    with SessionStore.open(url) as store:
        return len(store.get(UUID(sid)))


def compact(url: str, sid: str, server: ProviderServer) -> tuple[int, dict[str, object]]:
    return run_json(
        "--store", url, "compact", sid, "--manual", "--summarizer", "openai",
        "--base-url", server.base_url, "--model", "gpt-4o-mini",
    )  # fmt: skip


def test_a_five_message_span_is_declined_before_the_model_is_asked(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    sid = imported(sqlite_url, tmp_path, five_messages())
    before = events_of(sqlite_url, sid)
    reply = Reply(frames=openai_frames([SUMMARY], usage=openai_usage(300, 120)))
    with provider_in_thread(reply) as server:
        code, document = compact(sqlite_url, sid, server)
        assert server.received == []  # no request: nothing paid
    assert code == 3, document
    error = document["error"]
    assert isinstance(error, dict) and error["type"] == "SpanTooSmallError"
    assert "nothing to gain" in error["message"] and "no summarizer was asked" in error["message"]
    assert events_of(sqlite_url, sid) == before  # no compact/start, no bracket to recover


def test_the_same_session_with_a_span_above_the_floor_commits_with_one_request(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    log = "\n".join(f"tests/test_api.py::test_case_{i} PASSED" for i in range(120))
    output = f"{log}\nFAILED tests/test_api.py::test_login - AssertionError: expected 200, got 401"
    sid = imported(sqlite_url, tmp_path, five_messages(output))
    reply = Reply(frames=openai_frames([SUMMARY], usage=openai_usage(900, 120)))
    with provider_in_thread(reply) as server:
        code, document = compact(sqlite_url, sid, server)
        assert len(server.received) == 1
    assert code == 0, document
    compactions = document["compactions"]
    assert isinstance(compactions, list) and len(compactions) == 1
    assert compactions[0]["summary_tokens"] < compactions[0]["shadowed_tokens"]


async def test_the_engine_declines_before_the_summarizer_and_writes_nothing(tmp_path: Path) -> None:
    from compaction.importers import import_path

    path = tmp_path / "session.json"
    path.write_text(json.dumps(five_messages()))
    (item,) = import_path(path)
    session = item.session
    provider = await ProviderServer().start()
    try:
        provider.script(Reply(frames=openai_frames([SUMMARY])))
        summarizer = OpenAISummarizer(provider.base_url, "gpt-4o-mini", api_key="sk-test")
        async with summarizer:
            service = BasicCompactService(BasicConfig(), summarizer=summarizer)
            length = len(session)
            with pytest.raises(SpanTooSmallError) as raised:
                await service.compact_now(session)
        assert provider.received == [] and len(session) == length
        assert raised.value.span_tokens <= raised.value.floor_tokens
    finally:
        await provider.stop()


def test_the_floor_is_the_frame_and_the_headings_the_gate_requires() -> None:
    meter = HeuristicMeter()
    with_sections = checkpoint_floor(meter, BasicConfig())
    frame_only = checkpoint_floor(meter, BasicConfig(require_sections=False))
    assert 0 < frame_only < with_sections
