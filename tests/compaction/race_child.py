"""One worker of the cross-process compaction race (driven by tests/compaction/test_race.py).

    python tests/compaction/race_child.py STORE_URL SESSION_ID WORKDIR NAME OTHER MODE

Barrier files in WORKDIR coordinate the two workers: ``NAME.loaded`` once the session is loaded,
``NAME.started`` once its ``compact/start`` is stored, ``NAME.done`` when its attempt is over. The
summarizer of a worker that got the lock waits for ``OTHER.done``, so the other worker's attempt
really happens while this one is summarizing.

Modes: ``race`` (both load, then both compact: one start wins the append), ``lock`` (the second
worker loads only after the first stored its start, so it sees a live lock), ``append`` (the
second worker does not compact; it appends a user message while the first summarizes).

Prints one JSON document: ``{"name", "pid", "outcome", "error"}`` with outcome ``committed``,
``busy``, ``changed``, ``appended`` or ``failed``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

from compaction.errors import BusyError, SurfaceChangedError
from compaction.service import BasicCompactService
from compaction.sessions.blocks import Message, TextBlock
from compaction.sessions.events import UserMessage
from compaction.sessions.store import SessionStore
from compaction.summarizers.template import TemplateSummarizer
from compaction.vocabulary.summarizer import SummaryOutput, SummaryRequest

TIMEOUT = 30.0


def touch(workdir: Path, name: str) -> None:
    (workdir / name).write_text(str(os.getpid()))


async def wait_for(path: Path) -> None:
    """Until the other worker's barrier file exists: polled, as nothing else crosses processes."""
    deadline = time.monotonic() + TIMEOUT
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"race worker {os.getpid()}: {path.name} never appeared")
        await asyncio.sleep(0.02)


class BarrierSummarizer(TemplateSummarizer):
    """The template summary, delivered only after the other worker finished its attempt."""

    def __init__(self, other_done: Path) -> None:
        self.other_done = other_done

    async def summarize(self, request: SummaryRequest) -> SummaryOutput:
        await wait_for(self.other_done)
        return await super().summarize(request)


@dataclass(frozen=True)
class Worker:
    url: str
    session_id: UUID
    workdir: Path
    name: str
    other: str
    mode: str

    def mark(self, stage: str) -> None:
        touch(self.workdir, f"{self.name}.{stage}")

    def others(self, stage: str) -> Path:
        return self.workdir / f"{self.other}.{stage}"


async def compact(store: SessionStore, worker: Worker) -> str:
    session = store.get(worker.session_id)
    worker.mark("loaded")
    if worker.mode == "race":  # both hold the same state before either appends its start
        await wait_for(worker.others("loaded"))

    def progress(stage: str) -> None:
        if stage == "started":
            worker.mark("started")

    service = BasicCompactService(summarizer=BarrierSummarizer(worker.others("done")), on_progress=progress)
    result = await service.compact_now(session, store=store)
    return "committed" if result is not None else "failed"


async def append_during(store: SessionStore, worker: Worker) -> str:
    worker.mark("loaded")
    await wait_for(worker.others("started"))
    session = store.get(worker.session_id)
    message = Message(id="late-user", role="user", content=(TextBlock("one more request"),))
    session.append(UserMessage(message=message, surface_op="append"))
    store.save(session)
    return "appended"


async def run(worker: Worker) -> str:
    with SessionStore.open(worker.url) as store:
        second = worker.name == "second"
        if worker.mode == "append" and second:
            return await append_during(store, worker)
        if worker.mode == "lock" and second:
            await wait_for(worker.others("started"))
        return await compact(store, worker)


def main(argv: list[str]) -> int:
    url, session_id, workdir, name, other, mode = argv
    worker = Worker(url, UUID(session_id), Path(workdir), name, other, mode)
    outcome, error = "failed", ""
    try:
        outcome = asyncio.run(run(worker))
    except BusyError as e:
        outcome, error = "busy", str(e)
    except SurfaceChangedError as e:
        outcome, error = "changed", str(e)
    except Exception as e:  # reported to the test, which fails on it
        error = f"{type(e).__name__}: {e}"
    finally:
        worker.mark("done")
    print(json.dumps({"name": name, "pid": os.getpid(), "outcome": outcome, "error": error}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
