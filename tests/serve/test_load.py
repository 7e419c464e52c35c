"""200 conversations at once against one service over a real socket: every request answered, every
turn stored once in its own session, every surface valid."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from uuid import UUID

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from compaction.serve import application
from compaction.sessions.blocks import text_of
from compaction.sessions.events import UserMessage
from compaction.sessions.store import SessionStore
from tests.serve.conversation import openai_turn
from tests.sessions.test_render import openai_problems

CONVERSATIONS = 200
TURNS = 3


@pytest.mark.slow
async def test_200_concurrent_conversations_each_get_exactly_their_turns(tmp_path: Path) -> None:
    with SessionStore.open(f"sqlite:///{tmp_path / 'sessions.db'}") as store:
        async with TestServer(application(store)) as server:
            connector = aiohttp.TCPConnector(limit=CONVERSATIONS)
            async with aiohttp.ClientSession(str(server.make_url("")), connector=connector) as http:
                done = await asyncio.gather(*(_conversation(http, n) for n in range(CONVERSATIONS)))
        assert len({session for session, _ in done}) == CONVERSATIONS
        for number, (session, version) in enumerate(done):
            stored = store.get(UUID(session))
            assert len(stored) == version
            prompts = [text_of(e.message.content) for e in stored.events() if isinstance(e, UserMessage)]
            assert [p for p in prompts if p.startswith("Step ")] == [
                openai_turn(number * 100 + turn)[0]["content"] for turn in range(TURNS)
            ]


async def _conversation(http: aiohttp.ClientSession, number: int) -> tuple[str, int]:
    body: Any = {"provider": "openai", "model": "gpt-4o", "window": 3000}
    async with http.post("/v1/sessions", json=body) as response:
        assert response.status == 201
        session, etag = (await response.json())["id"], response.headers["ETag"]
    for turn in range(TURNS):
        body = {"format": "openai", "items": openai_turn(number * 100 + turn)}
        async with http.post(
            f"/v1/sessions/{session}/items", json=body, headers={"If-Match": etag}
        ) as response:
            assert response.status == 200, await response.text()
            etag = response.headers["ETag"]
        async with http.post(f"/v1/sessions/{session}/compact", json={"mode": "if_needed"}) as response:
            assert response.status == 200, await response.text()
            etag = response.headers["ETag"]
    async with http.get(f"/v1/sessions/{session}/surface?format=openai") as response:
        surface = await response.json()
        assert openai_problems(surface["messages"]) == [] and surface["tokens"] < 3000
    return session, int(etag.strip('"'))
