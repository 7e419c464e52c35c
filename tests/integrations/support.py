"""What the framework tests share: the task, a framework that must be there under CI, the audit,
and the surface as another process reads it (the store URL is a fixture of the folder's conftest)."""

from __future__ import annotations

import importlib
import json
import os
from typing import Any
from uuid import UUID

import pytest

from compaction.sessions.render import to_openai
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from tests.builders import run_json, run_python

FILE = "src/shop/cart.py"
"""The file every framework's scripted agent is asked to fix."""


def prompt(k: int) -> str:
    """The user's ``k``-th message of a framework test's session."""
    return (
        f"task {k}: the discount test fails, fix {FILE}" if k == 0 else f"follow-up {k}: check {FILE} again"
    )


def require_framework(module: str, extra: str) -> None:
    """Skip the calling test module when ``module`` is missing, but fail it under ``CI=true``
    (``make test`` installs every extra, so a missing framework there is a broken install)."""
    try:
        importlib.import_module(module)
    except ImportError as e:
        reason = f"{module} is not installed (pip install -e '.[{extra}]'): {e}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"the {extra} extra is required under CI=true: {reason}", pytrace=False)
        pytest.skip(reason, allow_module_level=True)


def audit_passes(url: str) -> list[dict[str, Any]]:
    """``compaction audit --all`` on ``url``: asserts it passed; returns every compaction it checked."""
    code, doc = run_json("--store", url, "audit", "--all")
    assert code == 0 and doc["passed"] is True, json.dumps(doc)[:2000]
    return [c for session in doc["sessions"] for c in session["compactions"]]


SURFACE_READER = """
import json, sys
from uuid import UUID
from compaction.sessions.render import to_openai
from compaction.sessions.store import SessionStore

with SessionStore.open(sys.argv[1]) as store:
    print(json.dumps(to_openai(store.get(UUID(sys.argv[2])).derive_messages())))
"""


def surface_here(url: str, session_id: UUID) -> list[dict[str, Any]]:
    with SessionStore.open(url) as store:
        return to_openai(store.get(session_id).derive_messages())


def surface_in_another_process(url: str, session_id: UUID) -> list[dict[str, Any]]:
    loaded: list[dict[str, Any]] = json.loads(run_python(SURFACE_READER, url, str(session_id)))
    return loaded


def runs_of(session: Session) -> list[list[Any]]:
    """The logged message events of ``session`` grouped by user prompt (one group per run)."""
    runs: list[list[Any]] = []
    for event in session.events():
        if event.type == "user/message":
            runs.append([])
        if runs and getattr(event, "message", None) is not None:
            runs[-1].append(event)
    return runs


def every_call_answered_in_order(messages: list[dict[str, Any]]) -> None:
    """OpenAI chat validity of a surface: each tool message answers a call of the assistant
    message before it, and every call is answered before the next assistant message."""
    open_calls: set[str] = set()
    for message in messages:
        if message["role"] == "assistant":
            assert not open_calls, f"calls {open_calls} unanswered before {message}"
            open_calls = {call["id"] for call in message.get("tool_calls", [])}
        elif message["role"] == "tool":
            assert message["tool_call_id"] in open_calls, f"tool result without its call: {message}"
            open_calls.discard(message["tool_call_id"])
    assert not open_calls, f"calls never answered: {open_calls}"
