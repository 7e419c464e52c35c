"""The OpenAPI document: every route documented, every documented path routed, every schema it
names defined, and the copy kept in docs/openapi.json the one the service serves."""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from compaction.serve import application
from compaction.sessions.store import SessionStore
from tests.conftest import ROOT

Client = TestClient[Any, Any]
DOCUMENTED = ROOT / "docs" / "openapi.json"


def routed() -> set[tuple[str, str]]:
    with SessionStore.open("memory://") as store:
        app = application(store)
    found = set()
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("path") or info.get("formatter")
        if route.method != "HEAD":
            found.add((route.method.lower(), str(path)))
    return found


def documented(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {(method, path) for path, operations in document["paths"].items() for method in operations}


async def test_the_served_document_is_the_one_in_docs() -> None:
    with SessionStore.open("memory://") as store:
        async with TestClient(TestServer(application(store))) as client:
            response = await client.get("/v1/openapi.json")
            served = await response.read()
    assert response.status == 200
    assert served == DOCUMENTED.read_bytes(), (
        "docs/openapi.json differs from the served document; regenerate it with "
        "`python -c 'import sys; from compaction.serve.openapi import encoded; "
        "sys.stdout.buffer.write(encoded())' > docs/openapi.json`"
    )


def test_every_route_is_documented_and_every_documented_path_routed() -> None:
    document = json.loads(DOCUMENTED.read_text(encoding="utf-8"))
    assert document["openapi"].startswith("3.1")
    assert routed() == documented(document)


def test_every_schema_the_document_names_is_defined() -> None:
    text = DOCUMENTED.read_text(encoding="utf-8")
    named = set(re.findall(r'"#/components/schemas/([A-Za-z]+)"', text))
    assert named and named <= set(json.loads(text)["components"]["schemas"])


def test_every_path_parameter_is_declared() -> None:
    document = json.loads(DOCUMENTED.read_text(encoding="utf-8"))
    for path, operations in document["paths"].items():
        for operation in operations.values():
            declared = {p["name"] for p in operation.get("parameters", ()) if p["in"] == "path"}
            assert declared == set(re.findall(r"{(\w+)}", path)), path
