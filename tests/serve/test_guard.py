"""What guards the service: the bearer token, the size limit, the error table, mounting in another
application, and the command line's refusal to open a non-loopback address without a token."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from compaction import errors
from compaction.cli.main import main
from compaction.serve import application
from compaction.serve.failures import STATUS, status_of
from compaction.serve.server import Binding, check_binding, is_loopback, read_token
from compaction.sessions.store import SessionStore
from tests.serve.conftest import TOKEN

Client = TestClient[Any, Any]


@pytest.fixture
async def guarded() -> AsyncIterator[Client]:
    with SessionStore.open("memory://") as store:
        async with TestClient(TestServer(application(store, token=TOKEN, max_body=4096))) as client:
            yield client


async def test_without_the_token_every_route_but_the_probes_is_401(guarded: Client) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong-token"}, {"Authorization": f"Basic {TOKEN}"}):
        response = await guarded.get("/v1/sessions", headers=headers)
        error = (await response.json())["error"]
        assert response.status == 401 and error["type"] == "UnauthorizedError"
        assert response.headers["WWW-Authenticate"] == "Bearer"
    assert (await guarded.get("/healthz")).status == 200
    assert (await guarded.get("/readyz")).status == 200
    response = await guarded.get("/v1/sessions", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status == 200


async def test_a_body_over_the_limit_is_413_as_json(guarded: Client) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    big = {"provider": "openai", "model": "gpt-4o", "system": "x" * 10_000}
    response = await guarded.post("/v1/sessions", json=big, headers=headers)
    error = (await response.json())["error"]
    assert response.status == 413 and error["type"] == "PayloadTooLargeError" and error["status"] == 413


async def test_an_unknown_route_or_method_is_json_too(guarded: Client) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    response = await guarded.delete("/v1/sessions", headers=headers)
    assert response.status == 405 and (await response.json())["error"]["type"] == "RouteNotFoundError"
    response = await guarded.get("/v2/anything", headers=headers)
    assert response.status == 404 and (await response.json())["error"]["type"] == "RouteNotFoundError"


def test_every_error_of_the_tree_has_a_client_or_server_status() -> None:
    """The table maps the root and its branches; every class of the tree gets the status of its
    nearest mapped ancestor, and the statuses a client acts on are the ones the docs promise."""
    tree = [
        c
        for _, c in inspect.getmembers(errors, inspect.isclass)
        if issubclass(c, errors.EventCompactionError)
    ]
    assert all(400 <= status_of(c.__new__(c)) < 600 for c in tree)
    assert set(STATUS) <= set(tree)
    promised = {
        errors.ConcurrencyError: 409,
        errors.LeaseTakenError: 409,
        errors.BusyError: 409,
        errors.SessionNotFoundError: 404,
        errors.IntegrationError: 422,
        errors.SurfaceRuleError: 422,
        errors.BadRequestError: 400,
        errors.UnauthorizedError: 401,
        errors.PayloadTooLargeError: 413,
        errors.SaveError: 503,
        errors.SummarizerError: 502,
        errors.FidelityError: 500,
    }
    assert {c: status_of(c.__new__(c)) for c in promised} == promised


async def test_the_application_mounts_under_a_prefix_of_another_aiohttp_application() -> None:
    with SessionStore.open("memory://") as store:
        outer = web.Application()
        outer.add_subapp("/compaction", application(store, token=TOKEN))
        async with TestClient(TestServer(outer)) as client:
            assert (await client.get("/compaction/healthz")).status == 200  # the probes stay open
            assert (await client.get("/compaction/v1/sessions")).status == 401
            headers = {"Authorization": f"Bearer {TOKEN}"}
            body = {"provider": "openai", "model": "gpt-4o"}
            created = await client.post("/compaction/v1/sessions", json=body, headers=headers)
            assert created.status == 201
            assert created.headers["Location"].endswith(
                f"/compaction/v1/sessions/{(await created.json())['id']}"
            )


def test_a_non_loopback_address_is_refused_without_a_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.org")
    with pytest.raises(
        errors.ConfigurationError, match="refusing to serve a non-loopback address without a token"
    ):
        check_binding(Binding(host="0.0.0.0"))
    check_binding(Binding(host="0.0.0.0", token=TOKEN))  # with one it may
    code = main(["--store", f"sqlite:///{tmp_path / 's.db'}", "serve", "--host", "0.0.0.0", "--port", "0"])
    assert code == 1 and "--token-file FILE" in capsys.readouterr().err
    short = tmp_path / "short"
    short.write_text("abc\n")
    with pytest.raises(errors.ConfigurationError, match="at least 16 characters"):
        read_token(short)
    good = tmp_path / "token"
    good.write_text(f"{TOKEN}\n# a comment line\n")
    assert read_token(good) == TOKEN


async def test_shutting_down_ends_the_event_streams() -> None:
    """A follower's stream ends when the service shuts down, so the shutdown does not wait on it."""
    with SessionStore.open("memory://") as store:
        server = TestServer(application(store, poll=0.02))
        async with TestClient(server) as client:
            response = await client.get("/v1/events?after=0")
            assert response.status == 200
            assert (await response.content.readline()).startswith(b": committed events")
            closing = asyncio.ensure_future(server.close())
            rest = await asyncio.wait_for(response.content.read(), timeout=10)  # the end of the stream
            await asyncio.wait_for(closing, timeout=10)
            assert b"data:" not in rest
