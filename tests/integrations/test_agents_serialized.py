"""Agents SDK runs of one conversation in one process never mix their items: concurrent
``session.run_streamed`` runs follow each other (the run lock is held until the streamed run ends,
its events read or not), and the session's own methods called from outside a run wait for the run
in progress. What cannot be serialized (``Runner.run(..., session=s)`` driven by the SDK alone) is
in docs/integrations.md."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.integrations import support
from tests.integrations.support import require_framework, runs_of

require_framework("agents", "openai-agents")

from agents import Agent  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from openai.types.responses import Response, ResponseCompletedEvent  # noqa: E402

from compaction.integrations.openai_agents import CompactingSession  # noqa: E402
from tests.integrations.test_agents_runs import LongRunModel, read_file  # noqa: E402


class StreamingModel(LongRunModel):
    """:class:`LongRunModel` through the streaming interface: one ``response.completed`` event per
    model call. ``gate``: the first call waits for it (a run held open while the test acts)."""

    def __init__(self, reads: int, gate: asyncio.Event | None = None) -> None:
        super().__init__(reads)
        self.gate = gate

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        if self.gate is not None:
            await self.gate.wait()
        return await super().get_response(*args, **kwargs)

    async def stream_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
        found = await self.get_response(system_instructions, input, *args, **kwargs)
        response = Response(
            id=f"resp_{len(self.inputs)}", created_at=0, model="fake", object="response",
            output=found.output, parallel_tool_calls=False, tool_choice="auto", tools=[],
        )  # fmt: skip
        yield ResponseCompletedEvent(type="response.completed", response=response, sequence_number=0)


def agent(model: Model) -> Agent[Any]:
    return Agent(name="fixer", instructions="You fix bugs.", model=model, tools=[read_file])


async def runs_in_the_log(session: CompactingSession) -> list[list[Any]]:
    return runs_of(await session.memory.load(session.session_id))


def prompts_sent(model: LongRunModel) -> list[list[str]]:
    """The user prompts of every request ``model`` was sent."""
    return [[str(i["content"]) for i in sent if i.get("role") == "user"] for sent in model.inputs]


async def test_concurrent_streamed_runs_follow_each_other(url: str) -> None:
    session = CompactingSession("fixer", url, context_window=100_000)
    prompts = [f"question {k}" for k in range(4)]
    models = [StreamingModel(reads=2) for _ in prompts]
    results = [await_later(session.run_streamed(agent(m), p)) for m, p in zip(models, prompts, strict=True)]

    async def consume(k: int) -> str:
        result = await results[k]
        if k % 2 == 0:  # half of them read their events, half only wait for the end
            async for _ in result.stream_events():
                pass
        else:
            while not result.is_complete:
                await asyncio.sleep(0.01)
        return str(result.final_output)

    answers = await asyncio.gather(*(consume(k) for k in range(4)))
    assert sorted(answers) == sorted(f"done with {p}" for p in prompts)
    for model in models:  # each model saw earlier runs whole and no later run's prompt
        own = model.prompt
        for sent in prompts_sent(model):
            assert sent[-1] == own, (own, sent)
    runs = await runs_in_the_log(session)
    assert len(runs) == 4
    for run in runs:  # each run's items together: its prompt, two reads, its own answer
        prompt = run[0].message.content[0].text
        assert [e.type for e in run].count("tool/result") == 2
        assert run[-1].message.content[0].text == f"done with {prompt}"
    assert not session.memory.run_lock("fixer").locked()
    support.every_call_answered_in_order(support.surface_here(url, (await session.memory.load("fixer")).id))
    support.audit_passes(url)


def await_later(work: Any) -> asyncio.Task[Any]:
    return asyncio.ensure_future(work)


async def test_the_sessions_methods_wait_for_a_run_in_progress(url: str) -> None:
    session = CompactingSession("fixer", url, context_window=100_000)
    gate = asyncio.Event()
    run = asyncio.ensure_future(session.run(agent(StreamingModel(reads=1, gate=gate)), "question 0"))
    while not session.memory.run_lock("fixer").locked():
        await asyncio.sleep(0.01)
    added = asyncio.ensure_future(session.add_items([{"role": "user", "content": "from outside"}]))
    read = asyncio.ensure_future(session.get_items())
    await asyncio.sleep(0.3)
    assert not added.done() and not read.done(), "a session method ran inside another run"
    gate.set()
    await run
    await asyncio.gather(added, read)
    runs = await runs_in_the_log(session)
    assert [run[0].message.content[0].text for run in runs] == ["question 0", "from outside"]
    assert [e.type for e in runs[0]].count("tool/result") == 1
    assert runs[0][-1].message.content[0].text == "done with question 0"
    texts = [str(i["content"]) for i in read.result() if i.get("type", "message") == "message"]
    answer = next(k for k, t in enumerate(texts) if "done with question 0" in t)
    assert texts.index("from outside") > answer, "the read saw the run unfinished"


async def test_a_streamed_run_that_fails_lets_the_conversation_go(url: str) -> None:
    class Broken(StreamingModel):
        async def get_response(self, *args: Any, **kwargs: Any) -> Any:
            raise ConnectionError("the provider is down (the test)")

    session = CompactingSession("fixer", url, context_window=100_000)
    result = await session.run_streamed(agent(Broken(reads=1)), "question 0")
    try:
        async for _ in result.stream_events():
            pass
    except ConnectionError:
        pass
    await asyncio.wait_for(session.get_items(), timeout=30)
    assert not session.memory.run_lock("fixer").locked()


async def test_compact_through_run_streamed_answers_in_the_stream(url: str) -> None:
    session = CompactingSession("fixer", url, context_window=100_000)
    await session.run(agent(StreamingModel(reads=1)), "question 0")
    result = await session.run_streamed(agent(StreamingModel(reads=1)), "/compact")
    async for _ in result.stream_events():
        pass
    assert "compact" in str(result.final_output).lower()
    assert not session.memory.run_lock("fixer").locked()
