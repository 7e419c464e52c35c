"""The service's API over every backend (memory, SQLite, PostgreSQL, JetStream), over real HTTP.

What each test proves is in its name; the checks are on what the store holds afterwards, not only
on what the service answered.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import aiohttp
import pytest
from aiohttp.test_utils import TestClient

from compaction.errors import StoreError
from compaction.serve.routes import EXPORT_BLOCK
from compaction.sessions.events import SessionEvent
from compaction.sessions.native import export_lines
from compaction.sessions.render import to_anthropic
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from tests.builders import turn as builder_turn
from tests.serve.conftest import append, create
from tests.serve.conversation import TURNS, openai_turn
from tests.sessions.test_render import anthropic_problems, openai_problems

Client = TestClient[Any, Any]


async def test_a_session_is_created_with_its_header_and_read_back_with_its_version(
    client: Client, service_store: SessionStore
) -> None:
    session, etag = await create(client, tools=[{"name": "bash", "description": "run a command"}])
    response = await client.get(f"/v1/sessions/{session}")
    info = await response.json()
    assert response.headers["ETag"] == etag == f'"{info["version"]}"'
    assert (info["provider"], info["model"], info["window"], info["open_turn"]) == (
        "openai",
        "gpt-4o",
        6000,
        None,
    )
    header = service_store.get(UUID(session)).latest_header()
    assert header is not None and header.context_window == 6000 and header.tools[0].name == "bash"
    again = await client.post("/v1/sessions", json={"provider": "openai", "model": "gpt-4o", "id": session})
    assert again.status == 409 and (await again.json())["error"]["type"] == "SessionStateError"


async def test_a_model_without_a_known_window_needs_one(client: Client) -> None:
    response = await client.post("/v1/sessions", json={"provider": "acme", "model": "acme-1"})
    error = (await response.json())["error"]
    assert response.status == 400 and error["type"] == "BadRequestError" and "window" in error["message"]
    response = await client.post("/v1/sessions", json={"provider": "acme"})
    assert response.status == 400 and "model" in (await response.json())["error"]["message"]


@pytest.mark.parametrize("format", ["openai", "anthropic", "responses"])
async def test_turns_in_each_provider_shape_render_validly_for_every_provider(
    client: Client, format: str
) -> None:
    session, etag = await create(client, window=200_000)
    for turn in range(3):
        status, body, etag = await append(client, session, format, TURNS[format](turn), etag)
        assert status == 200, body
    openai = await (await client.get(f"/v1/sessions/{session}/surface?format=openai")).json()
    assert openai_problems(openai["messages"]) == [] and openai["messages"][0] == {
        "role": "system",
        "content": "You fix bugs.",
    }
    assert sum(m["role"] == "tool" for m in openai["messages"]) == 3
    anthropic = await (await client.get(f"/v1/sessions/{session}/surface?format=anthropic")).json()
    assert anthropic_problems(anthropic["messages"]) == [] and anthropic["system"] == "You fix bugs."
    responses = await (await client.get(f"/v1/sessions/{session}/surface?format=responses")).json()
    kinds = [item.get("type", "message") for item in responses["messages"]]
    assert kinds.count("function_call") == kinds.count("function_call_output") == 3
    info = await (await client.get(f"/v1/sessions/{session}")).json()
    assert info["open_turn"] is None  # each turn ended with an answer without tool calls


async def test_a_tool_result_without_its_call_rejects_the_whole_request(
    client: Client, service_store: SessionStore
) -> None:
    session, etag = await create(client)
    stored = service_store.stream_length(UUID(session))
    bad = [*openai_turn(0), {"role": "tool", "tool_call_id": "call_nowhere", "content": "orphan"}]
    status, body, _ = await append(client, session, "openai", bad, etag)
    assert status == 422 and body["error"]["type"] == "IntegrationError"
    assert (
        "call_nowhere" in body["error"]["message"]
        and "nothing of this request was stored" in body["error"]["message"]
    )
    assert service_store.stream_length(UUID(session)) == stored
    status, body, _ = await append(
        client,
        session,
        "anthropic",
        [
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "orphan"}],
            }
        ],
    )
    assert status == 422 and "toolu_x" in body["error"]["message"]
    status, body, etag = await append(client, session, "openai", openai_turn(0), etag)
    assert status == 200 and body["first_seq"] == stored  # the session is as it was: the next append fits


async def test_a_body_of_the_wrong_shape_is_a_bad_request_naming_the_field(client: Client) -> None:
    session, _ = await create(client)
    for body, found in (({"format": "gemini", "items": []}, "format"), ({"items": []}, "format")):
        response = await client.post(f"/v1/sessions/{session}/items", json=body)
        error = (await response.json())["error"]
        assert response.status == 400 and error["type"] == "BadRequestError" and found in error["message"]
    response = await client.post(f"/v1/sessions/{session}/items", data=b"{not json")
    assert response.status == 400
    status, body, _ = await append(client, session, "openai", [{"role": "robot", "content": "x"}])
    assert status == 400 and "role" in body["error"]["message"]
    response = await client.get("/v1/sessions/not-a-uuid/surface")
    assert response.status == 400
    response = await client.get(f"/v1/sessions/{UUID(int=7)}")
    assert response.status == 404 and (await response.json())["error"]["type"] == "SessionNotFoundError"


async def test_two_writers_of_one_version_one_wins_the_other_gets_409_and_nothing_half_written(
    client: Client, service_store: SessionStore
) -> None:
    session, etag = await create(client)
    results = await asyncio.gather(
        append(client, session, "openai", openai_turn(1), etag),
        append(client, session, "openai", openai_turn(2), etag),
    )
    statuses = sorted(status for status, _, _ in results)
    assert statuses == [200, 409]
    won = next(body for status, body, _ in results if status == 200)
    lost = next(body for status, body, _ in results if status == 409)
    assert lost["error"]["type"] == "ConcurrencyError"
    assert service_store.stream_length(UUID(session)) == won["version"]
    users = [e for e in service_store.get(UUID(session)).events() if e.TYPE == "user/message"]
    assert len(users) == 1  # one writer's turn, whole; none of the other's


async def test_a_retried_append_with_its_idempotency_key_is_not_stored_twice(
    client: Client, service_store: SessionStore
) -> None:
    session, etag = await create(client)
    status, first, after = await append(client, session, "openai", openai_turn(1), etag, key="turn-1")
    assert status == 200 and not first["replayed"]
    # the answer was lost: the client retries with the same If-Match and key
    status, again, etag_again = await append(client, session, "openai", openai_turn(1), etag, key="turn-1")
    assert status == 200 and again["replayed"] and etag_again == after
    assert (again["first_seq"], again["events"]) == (first["first_seq"], first["events"])
    # without If-Match too
    status, again, _ = await append(client, session, "openai", openai_turn(1), key="turn-1")
    assert status == 200 and again["replayed"]
    assert service_store.stream_length(UUID(session)) == first["version"]
    status, _, _ = await append(client, session, "openai", openai_turn(2), etag, key="turn-2")
    assert status == 409  # another key at a stale version is a conflict, not a replay
    status, body, _ = await append(client, session, "openai", openai_turn(2), key="bad key!")
    assert status == 400 and "Idempotency-Key" in body["error"]["message"]


async def test_compact_if_needed_before_a_model_call_then_audit_passes(
    client: Client, service_store: SessionStore
) -> None:
    session, etag = await create(client, window=4000)
    for turn in range(8):
        status, body, etag = await append(client, session, "openai", openai_turn(turn), etag)
        assert status == 200, body
    before = await (await client.get(f"/v1/sessions/{session}/surface")).json()
    assert before["tokens"] > 0.8 * 4000
    response = await client.post(
        f"/v1/sessions/{session}/compact", json={"mode": "if_needed"}, headers={"If-Match": etag}
    )
    done = await response.json()
    assert response.status == 200, done
    assert done["compactions"] and done["tokens_after"] < 0.8 * 4000 <= done["tokens_before"]
    assert response.headers["ETag"] == f'"{done["version"]}"'
    after = await (await client.get(f"/v1/sessions/{session}/surface?format=openai")).json()
    assert openai_problems(after["messages"]) == [] and after["tokens"] == done["tokens_after"]
    assert "src/module_0.py" in json.dumps(after["messages"])  # the summary keeps the paths
    audit = await (await client.get(f"/v1/sessions/{session}/audit")).json()
    assert audit["passed"] and len(audit["compactions"]) == len(done["compactions"])
    # under the threshold now: nothing to do
    again = await (await client.post(f"/v1/sessions/{session}/compact", json={"mode": "if_needed"})).json()
    assert again["compactions"] == [] and again["version"] == done["version"]


async def test_manual_compaction_in_an_open_turn_is_busy(client: Client) -> None:
    session, etag = await create(client)
    status, _, etag = await append(
        client, session, "openai", openai_turn(1)[:2], etag
    )  # a call, no result yet
    assert status == 200
    response = await client.post(f"/v1/sessions/{session}/compact", json={"mode": "manual"})
    assert response.status == 409 and (await response.json())["error"]["type"] == "BusyError"
    status, _, _ = await append(
        client, session, "openai", openai_turn(1)[2:], etag
    )  # the result, next request
    assert status == 200
    response = await client.post(f"/v1/sessions/{session}/compact", json={"mode": "manual"})
    assert response.status == 200 and len((await response.json())["compactions"]) == 1


async def test_replay_at_a_seq_is_the_surface_the_model_saw_then(
    client: Client, service_store: SessionStore
) -> None:
    session, etag = await create(client)
    for turn in range(3):
        _, _, etag = await append(client, session, "openai", openai_turn(turn), etag)
    before = int(etag.strip('"')) - 1
    await client.post(f"/v1/sessions/{session}/compact", json={"mode": "manual"})
    now = await (await client.get(f"/v1/sessions/{session}/surface?format=anthropic")).json()
    for at in (5, 20, before):
        replayed = await (await client.get(f"/v1/sessions/{session}/surface?format=anthropic&at={at}")).json()
        then = service_store.get(UUID(session), at=at)
        assert replayed["at"] == at and replayed["version"] == now["version"]
        assert replayed["messages"] == to_anthropic(then.derive_messages())
    assert len(replayed["messages"]) > len(now["messages"])  # before the compaction: every turn verbatim
    response = await client.get(f"/v1/sessions/{session}/surface?at=100000")
    assert (
        response.status == 400 and "expected a seq of session" in (await response.json())["error"]["message"]
    )


async def test_export_is_the_native_format_of_the_stored_session(
    client: Client, service_store: SessionStore
) -> None:
    session, etag = await create(client)
    await append(client, session, "anthropic", TURNS["anthropic"](0), etag)
    response = await client.get(f"/v1/sessions/{session}/export")
    assert response.status == 200 and response.content_type == "application/x-ndjson"
    expected = "".join(line + "\n" for line in export_lines(service_store.get(UUID(session))))
    assert await response.text() == expected


def _long_session(store: SessionStore, turns: int) -> Session:
    session = store.create()
    for n in range(turns):
        builder_turn(session, f"prompt {n}", n_calls=2)
    store.save(session)
    return session


async def test_a_long_export_is_streamed_whole_in_blocks(client: Client, service_store: SessionStore) -> None:
    session = _long_session(service_store, 180)
    assert len(session) > 2 * EXPORT_BLOCK
    response = await client.get(f"/v1/sessions/{session.id}/export")
    assert response.status == 200 and response.headers["ETag"] == f'"{len(session)}"'
    assert await response.text() == "".join(line + "\n" for line in export_lines(session))


async def test_an_export_that_fails_mid_way_aborts_the_connection(
    client: Client, service_store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = _long_session(service_store, 180)
    read = service_store.iter_events

    def failing(
        session_id: UUID, lo: int = 0, hi: int | None = None, **kwargs: Any
    ) -> Iterator[SessionEvent]:
        for event in read(session_id, lo, hi, **kwargs):
            if lo == 0 and hi == len(session) and event.seq == EXPORT_BLOCK + 10:  # the lines, not the hash
                raise StoreError("the store went away mid-way")
            yield event

    monkeypatch.setattr(service_store, "iter_events", failing)
    response = await client.get(f"/v1/sessions/{session.id}/export")
    assert response.status == 200  # the first block was written
    with pytest.raises(aiohttp.ClientPayloadError):
        await response.read()


async def test_sessions_are_listed_by_prefix_and_page_and_searched_by_text(client: Client) -> None:
    made = sorted([(await create(client))[0] for _ in range(3)])
    await append(client, made[1], "openai", [{"role": "user", "content": "find the needle in the haystack"}])
    listed = await (await client.get("/v1/sessions?limit=2")).json()
    ours = [s["id"] for s in listed["sessions"]]
    assert len(ours) == 2 and ours == sorted(ours) and listed["next_after"] == ours[-1]
    rest = await (await client.get(f"/v1/sessions?after={listed['next_after']}&limit=1000")).json()
    assert rest["next_after"] is None and not set(ours) & {s["id"] for s in rest["sessions"]}
    assert set(made) <= set(ours) | {s["id"] for s in rest["sessions"]}
    found = await (await client.get("/v1/sessions?q=NEEDLE")).json()
    assert [s["id"] for s in found["sessions"]] == [made[1]]
    prefixed = await (await client.get(f"/v1/sessions?prefix={made[2][:8]}")).json()
    assert made[2] in [s["id"] for s in prefixed["sessions"]]


async def test_the_event_stream_resumes_after_the_last_event_id_without_gap_or_double(
    client: Client, service_store: SessionStore
) -> None:
    session, etag = await create(client)
    await append(client, session, "openai", openai_turn(0), etag)
    every = [n.notification_id for n in service_store.notifications(0, 10_000)]  # gaps on JetStream
    first = await _read_events(client, "/v1/events?after=0", count=5)
    assert [e["notification_id"] for e in first] == every[:5]
    resumed = {"Last-Event-ID": str(every[4])}
    rest = await _read_events(client, "/v1/events", count=len(every) - 5, headers=resumed)
    assert [e["notification_id"] for e in first + rest] == every
    gaps = [i for i in range(len(every) - 1) if every[i + 1] - every[i] > 1]
    assert gaps or service_store.backend != "nats"  # JetStream's ids follow the stream sequence
    for i in gaps[:1]:  # an ?after= inside a gap starts at the next id
        middle = (every[i] + every[i + 1]) // 2
        assert (await _read_events(client, f"/v1/events?after={middle}", count=1))[0][
            "notification_id"
        ] == every[i + 1]
    assert {e["session_id"] for e in rest} == {session} and rest[-1]["event"]["type"] == "turn/end"
    only = await _read_events(client, f"/v1/events?session={session}", count=2)
    assert [e["event"]["seq"] for e in only] == [0, 1]


async def _read_events(
    client: Client, path: str, count: int, headers: dict[str, str] | None = None
) -> list[Any]:
    """The first ``count`` events of the stream at ``path`` (the ``id:`` lines checked against the data)."""
    found: list[Any] = []
    async with client.get(path, headers=headers) as response:
        assert response.status == 200 and response.content_type == "text/event-stream"
        event_id = None
        async for raw in response.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("id: "):
                event_id = int(line[4:])
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                assert data["notification_id"] == event_id
                found.append(data)
                if len(found) == count:
                    break
    return found


async def test_health_and_readiness(client: Client) -> None:
    assert (await (await client.get("/healthz")).json()) == {"status": "ok"}
    ready = await client.get("/readyz")
    assert ready.status == 200 and (await ready.json())["status"] == "ready"


async def test_an_if_match_past_the_session_is_a_bad_request(client: Client) -> None:
    session, etag = await create(client)
    ahead = f'"{int(etag.strip(chr(34))) + 5}"'
    status, body, _ = await append(client, session, "openai", openai_turn(1), ahead)
    assert status == 400 and "If-Match" in body["error"]["message"]
    response = await client.post(
        f"/v1/sessions/{session}/compact", json={}, headers={"If-Match": "W/" + etag}
    )
    assert response.status == 200  # a weak ETag of the current version is the current version
    status, body, _ = await append(client, session, "openai", openai_turn(1), "*")
    assert status == 200
