"""The service process killed and stopped under load: kill -9 while conversations append (restart,
nothing lost, nothing doubled: clients retry with If-Match and their Idempotency-Key), and SIGTERM
while a save waits on the database (the save finishes, the answer is sent, the process exits 0)."""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any
from uuid import UUID

import aiohttp
import psycopg
import pytest

from compaction.audit.report import audit_session
from compaction.sessions.blocks import text_of
from compaction.sessions.events import UserMessage
from compaction.sessions.store import SessionStore
from tests.serve.conversation import openai_turn
from tests.serve.process import Server

CONVERSATIONS = 10
TURNS = 20
KILLS = 3


def url_of(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'sessions.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_kill_9_mid_save_then_restart_loses_nothing_and_doubles_nothing(
    request: pytest.FixtureRequest, backend: str, tmp_path: Path
) -> None:
    server = Server(url_of(request, backend, tmp_path), tmp_path / "serve.log").start()
    try:
        sessions, stats = asyncio.run(_drive(server))
    finally:
        server.stop()
    assert stats["kills"] == KILLS and stats["retries"] > 0, stats
    with SessionStore.open(server.store_url) as store:
        for conversation, (session, version) in enumerate(sessions.items()):
            stored = store.get(UUID(session))
            assert len(stored) == version  # the last answer's ETag is what the store holds
            prompts = [text_of(e.message.content) for e in stored.events() if isinstance(e, UserMessage)]
            expected = [openai_turn(conversation * 1000 + turn)[0]["content"] for turn in range(TURNS)]
            assert prompts == expected  # each turn once, in order: none lost, none doubled
            assert audit_session(store, UUID(session)).passed


async def _drive(server: Server) -> tuple[dict[str, int], Counter[str]]:
    stats: Counter[str] = Counter()
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        created = []
        for _ in range(CONVERSATIONS):
            body = {"provider": "openai", "model": "gpt-4o", "window": 200_000}
            async with http.post(f"{server.url}/v1/sessions", json=body) as response:
                created.append(((await response.json())["id"], response.headers["ETag"]))
        finals = await asyncio.gather(
            *(
                _conversation(http, server, n, session, etag, stats=stats)
                for n, (session, etag) in enumerate(created)
            ),
            _killer(server, stats),
        )
    return dict(zip((s for s, _ in created), finals, strict=False)), stats


async def _conversation(
    http: aiohttp.ClientSession, server: Server, number: int, session: str, etag: str, *, stats: Counter[str]
) -> int:
    """Append every turn; after a failure (the server was killed, or is restarting) send the same
    request again: same If-Match, same Idempotency-Key."""
    for turn in range(TURNS):
        body = {"format": "openai", "items": openai_turn(number * 1000 + turn)}
        headers = {"If-Match": etag, "Idempotency-Key": f"{session}-{turn}"}
        while True:
            try:
                async with http.post(
                    f"{server.url}/v1/sessions/{session}/items", json=body, headers=headers
                ) as r:
                    answer: Any = await r.json()
                    assert r.status == 200, answer
                    etag = r.headers["ETag"]
                    stats["replayed"] += answer["replayed"]
                    break
            except (aiohttp.ClientError, TimeoutError):
                stats["retries"] += 1
                await asyncio.sleep(0.05)
        await asyncio.sleep(0.01)
    return int(etag.strip('"'))


async def _killer(server: Server, stats: Counter[str]) -> int:
    for _ in range(KILLS):
        await asyncio.sleep(0.5)
        await asyncio.to_thread(server.kill)
        stats["kills"] += 1
        await asyncio.to_thread(server.start)
    return 0


@pytest.mark.slow
def test_sigterm_lets_the_save_under_way_finish_then_exits_0(pg_url: str, tmp_path: Path) -> None:
    server = Server(pg_url, tmp_path / "serve.log").start()
    try:
        session, etag = _create(server)
        with SessionStore.open(pg_url) as store:
            table = store.application.recorder.events_table_name  # type: ignore[attr-defined]
        answers: list[Any] = []
        with psycopg.connect(pg_url) as blocker:
            blocker.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")  # every save now waits
            request = threading.Thread(target=lambda: answers.append(_append(server, session, etag)))
            request.start()
            time.sleep(1.0)
            assert server.process is not None
            server.process.send_signal(signal.SIGTERM)
            time.sleep(1.0)
            assert server.process.poll() is None, "the service stopped before its save finished"
            blocker.rollback()  # the lock goes: the save goes through
        request.join(timeout=60)
        assert server.process.wait(timeout=60) == 0
    finally:
        server.stop()
    assert answers and answers[0]["replayed"] is False
    with SessionStore.open(pg_url) as store:
        assert store.stream_length(UUID(session)) == answers[0]["version"] > int(etag.strip('"'))
    assert "shutting down" in (tmp_path / "serve.log").read_text()


def _create(server: Server) -> tuple[str, str]:
    body = json.dumps({"provider": "openai", "model": "gpt-4o", "window": 100_000}).encode()
    post = urllib.request.Request(f"{server.url}/v1/sessions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(post, timeout=30) as response:
        return json.loads(response.read())["id"], response.headers["ETag"]


def _append(server: Server, session: str, etag: str) -> Any:
    body = json.dumps({"format": "openai", "items": openai_turn(1)}).encode()
    headers = {"Content-Type": "application/json", "If-Match": etag}
    post = urllib.request.Request(f"{server.url}/v1/sessions/{session}/items", body, headers)
    with urllib.request.urlopen(post, timeout=60) as response:
        return json.loads(response.read())
