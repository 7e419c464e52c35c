"""A service over each backend, driven over real HTTP (aiohttp's test server listens on a loopback
socket), and the helpers the service tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from compaction.serve import application
from compaction.sessions.store import SessionStore
from tests.serve.conversation import JSON

TOKEN = "test-token-0123456789abcdef"


@pytest.fixture
def service_store(store_url: str) -> Iterator[SessionStore]:
    with SessionStore.open(store_url) as store:
        yield store


@pytest.fixture
async def client(service_store: SessionStore) -> AsyncIterator[TestClient[Any, Any]]:
    async with TestClient(TestServer(application(service_store, poll=0.02))) as opened:
        yield opened


async def create(client: TestClient[Any, Any], window: int = 6000, **extra: Any) -> tuple[str, str]:
    """A new session: its id and its ETag."""
    body: JSON = {
        "provider": "openai",
        "model": "gpt-4o",
        "window": window,
        "system": "You fix bugs.",
        **extra,
    }
    response = await client.post("/v1/sessions", json=body)
    assert response.status == 201, await response.text()
    return (await response.json())["id"], response.headers["ETag"]


async def append(
    client: TestClient[Any, Any],
    session: str,
    format: str,
    items: list[JSON],
    etag: str | None = None,
    *,
    key: str | None = None,
) -> tuple[int, JSON, str | None]:
    headers = {k: v for k, v in (("If-Match", etag), ("Idempotency-Key", key)) if v is not None}
    response = await client.post(
        f"/v1/sessions/{session}/items", json={"format": format, "items": items}, headers=headers
    )
    return response.status, await response.json(), response.headers.get("ETag")
