"""Non-Python clients over a real socket: curl, and the JavaScript example agent loop
(docs/examples/agent.mjs) under Node. Each creates a session, appends 50 turns with tool calls,
gets a compacted OpenAI-format surface that the provider validator accepts, and audits it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from compaction.sessions.blocks import text_of
from compaction.sessions.events import UserMessage
from compaction.sessions.store import SessionStore
from tests.conftest import ROOT
from tests.serve.conversation import openai_turn
from tests.serve.process import Server
from tests.sessions.test_render import openai_problems

TURNS = 50
WINDOW = 16_000


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    running = Server(f"sqlite:///{tmp_path / 'sessions.db'}", tmp_path / "serve.log").start()
    try:
        yield running
    finally:
        running.stop()


def curl(
    tmp_path: Path, method: str, url: str, body: Any = None, **headers: str
) -> tuple[int, Any, dict[str, str]]:
    """One curl call: the status, the JSON answer and the response headers."""
    command = [
        "curl",
        "-sS",
        "-X",
        method,
        "-D",
        str(tmp_path / "headers"),
        "-o",
        str(tmp_path / "body"),
        "-w",
        "%{http_code}",
        url,
    ]
    for name, value in headers.items():
        command += ["-H", f"{name.replace('_', '-')}: {value}"]
    if body is not None:
        (tmp_path / "request.json").write_text(json.dumps(body))
        command += ["-H", "Content-Type: application/json", "--data-binary", f"@{tmp_path / 'request.json'}"]
    status = int(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    lines = (tmp_path / "headers").read_text().splitlines()[1:]
    found = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines) if v}
    return status, json.loads((tmp_path / "body").read_text()), found


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_appends_50_turns_gets_a_valid_compacted_openai_surface_and_audits_it(
    server: Server, tmp_path: Path
) -> None:
    status, created, headers = curl(
        tmp_path,
        "POST",
        f"{server.url}/v1/sessions",
        {"provider": "openai", "model": "gpt-4o", "window": WINDOW, "system": "Fix bugs."},
    )
    assert status == 201
    session, etag = created["id"], headers["etag"]
    compactions = 0
    for turn in range(TURNS):
        status, appended, headers = curl(
            tmp_path,
            "POST",
            f"{server.url}/v1/sessions/{session}/items",
            {"format": "openai", "items": openai_turn(turn)},
            If_Match=etag,
            Idempotency_Key=f"turn-{turn}",
        )
        assert status == 200, appended
        etag = headers["etag"]
        if turn % 10 == 9:  # before the next model call
            status, done, headers = curl(
                tmp_path,
                "POST",
                f"{server.url}/v1/sessions/{session}/compact",
                {"mode": "if_needed"},
                If_Match=etag,
            )
            assert status == 200, done
            compactions += len(done["compactions"])
            etag = headers["etag"]
    status, surface, _ = curl(tmp_path, "GET", f"{server.url}/v1/sessions/{session}/surface?format=openai")
    assert status == 200 and compactions >= 1
    assert openai_problems(surface["messages"]) == []
    assert surface["tokens"] < WINDOW and any("tool_calls" in m for m in surface["messages"])
    status, audit, _ = curl(tmp_path, "GET", f"{server.url}/v1/sessions/{session}/audit")
    assert status == 200 and audit["passed"] and len(audit["compactions"]) == compactions
    server.terminate()
    with SessionStore.open(server.store_url) as store:
        stored = store.get(UUID(session))
    prompts = [text_of(e.message.content) for e in stored.events() if isinstance(e, UserMessage)]
    assert [p for p in prompts if p.startswith("Step ")] == [
        openai_turn(t)[0]["content"] for t in range(TURNS)
    ]


@pytest.mark.slow
def test_the_javascript_example_agent_loop_runs_under_node(server: Server) -> None:
    node = shutil.which("node")
    if node is None:
        if os.environ.get("CI") == "true":
            pytest.fail("node is not on PATH: under CI the JavaScript example must run")
        pytest.skip("node is not on PATH (the JavaScript example needs Node 18+)")
    env = {**os.environ, "COMPACTION_URL": server.url, "TURNS": str(TURNS), "WINDOW": str(WINDOW)}
    done = subprocess.run(
        [node, str(ROOT / "docs" / "examples" / "agent.mjs")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["audit_passed"] and result["compactions"] >= 1 and result["tokens"] < WINDOW
    assert openai_problems(result["messages"]) == []
    with SessionStore.open(server.store_url) as store:
        stored = store.get(UUID(result["session"]))
    assert len(stored) == result["version"]
    assert sum(e.TYPE == "turn/start" for e in stored.events()) == TURNS + 1
