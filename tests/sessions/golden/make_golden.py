"""Write the golden native exports in this directory. Run ONCE per format version, then commit:

    .venv/bin/python tests/sessions/golden/make_golden.py

The files are the compatibility contract of the native event format: every later version of the
library must still import them exactly and audit them (``tests/sessions/test_golden.py`` reads the
committed files and never regenerates them). Never edit or regenerate a committed file; when the format
changes, bump ``compaction.sessions.native.VERSION``, add an upcaster, and add the new version's files next to
the old ones (the file name carries the version).

Sessions are deterministic: fixed session ids, a clock that ticks one second per event from a fixed
instant, fixed compaction ids and leases, the template summarizer, the heuristic meter.

- ``compacted.v1.jsonl``: three turns of tool steps, a manual compaction, two more turns and a
  second compaction whose span holds the first summary (merged);
- ``orphan.v1.jsonl``: a ``compact/start`` saved without the rest (a crash after the lock);
- ``pruned.v1.jsonl``: an oversized tool result pruned (``compact/prune`` + ``tool/result`` replace);
- ``vocabulary.v1.jsonl``: every session event type and optional field (context, steering,
  assistant chunks, usage, tool errors and meta, session/resume, a failed compaction bracket).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import UUID

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[2])]  # the repository root, for tests.builders

from compaction.engine import transaction  # noqa: E402
from compaction.engine.meters import HeuristicMeter  # noqa: E402
from compaction.engine.prune import PruneConfig, prune_session  # noqa: E402
from compaction.service import BasicCompactService  # noqa: E402
from compaction.sessions.blocks import (  # noqa: E402
    ImageBlock,
    Message,
    ReasoningBlock,
    Source,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from compaction.sessions.events import (  # noqa: E402
    AssistantChunk,
    AssistantMessage,
    ContextMessage,
    SessionResume,
    SteeringMessage,
    StepEnd,
    StepStart,
    ToolCall,
    ToolError,
    ToolResult,
    TurnEnd,
    TurnEndReason,
    Usage,
)
from compaction.sessions.native import export_session  # noqa: E402
from compaction.sessions.session import Session  # noqa: E402
from compaction.sessions.store import SessionStore  # noqa: E402
from compaction.summarizers.template import TemplateSummarizer  # noqa: E402
from compaction.vocabulary.config import BasicConfig  # noqa: E402
from compaction.vocabulary.events import CompactEnd, CompactStart, Lease  # noqa: E402
from tests import builders  # noqa: E402
from tests.builders import answer_step, end_turn, start_turn, user  # noqa: E402

EPOCH = datetime(2025, 1, 1, tzinfo=UTC)
LEASE = Lease(host="golden-host", pid=4242, expires_at=EPOCH + timedelta(days=1))
IDS = {
    "compacted": UUID("00000000-0000-4000-8000-00000000c001"),
    "orphan": UUID("00000000-0000-4000-8000-00000000c002"),
    "pruned": UUID("00000000-0000-4000-8000-00000000c003"),
    "vocabulary": UUID("00000000-0000-4000-8000-00000000c004"),
}
LONG_OUTPUT = "".join(f"src/pkg/module_{i}.py:{i}: FAILED test_case_{i}\n" for i in range(400))


def fixed_compaction_ids(prefix: str) -> Iterator[str]:
    for n in range(1, 1000):
        yield f"00000000-0000-4000-9000-{prefix}{n:06d}"


def deterministic_compactions(prefix: str) -> None:
    """Fixed compaction ids and leases for the transaction (the real ones are random / host-bound)."""
    ids = fixed_compaction_ids(prefix)
    transaction.new_compaction_id = lambda: next(ids)  # type: ignore[attr-defined]
    transaction.new_lease = lambda seconds, now=None: LEASE  # type: ignore[attr-defined]


def new_session(name: str) -> Session:
    return Session(IDS[name], clock=builders.ticking_clock(EPOCH))


def turn(session: Session, prompt: str, steps: int, output: str = "ok") -> None:
    builders.turn(
        session, prompt, steps=steps, n_calls=2, output=output, answer="done with this part", window=6000
    )


# ---------------------------------------------------------------- the sessions


def compacted(store: SessionStore) -> Session:
    deterministic_compactions("00c001")
    session = new_session("compacted")
    output = "pytest tests/test_app.py: 3 failed\nE   AssertionError: expected 200 got 500\n" * 8
    for n in range(3):
        turn(session, f"fix the failing tests in src/app/part_{n}.py", steps=3, output=output)
    store.save(session)
    service = BasicCompactService(BasicConfig(context_window=6000), summarizer=TemplateSummarizer())
    assert asyncio.run(service.compact_now(session, store=store)) is not None
    for n in range(3, 5):
        turn(session, f"now refactor src/app/part_{n}.py", steps=3, output=output)
    store.save(session)
    assert asyncio.run(service.compact_now(session, store=store)) is not None
    return session


def orphan(store: SessionStore) -> Session:
    session = new_session("orphan")
    turn(session, "list the files in src/", steps=2)
    session.append(CompactStart(compaction_id=next(fixed_compaction_ids("00c002")), turn=None, lease=LEASE))
    store.save(session)  # then the process died: no summary, no end
    return session


def pruned(store: SessionStore) -> Session:
    session = new_session("pruned")
    turn(session, "run the whole test suite", steps=1, output=LONG_OUTPUT)
    turn(session, "and now only the unit tests", steps=1, output="12 passed")
    store.save(session)
    report = prune_session(session, HeuristicMeter(), PruneConfig(), store=store)
    assert len(report.pruned) == 2, report
    return session


def vocabulary(store: SessionStore) -> Session:
    deterministic_compactions("00c004")
    session = new_session("vocabulary")
    session.append(
        ContextMessage(
            message=Message(id="ctx0", role="user", content=(TextBlock("AGENTS.md: use pytest"),)),
            surface_op="append",
            origin="AGENTS.md",
        )
    )
    user(session, "describe the screenshot and fix the bug")
    start_turn(session, window=50_000)
    _rich_step(session)
    session.append(
        SteeringMessage(
            message=Message(id="steer0", role="user", content=(TextBlock("also check the logs"),)),
            surface_op="append",
        )
    )
    answer_step(session, "checked the logs too")
    session.append(
        TurnEnd(turn=session.open_turn or 0, reason=TurnEndReason("max-tokens", message="cut", code="length"))
    )
    session.append(SessionResume(host="golden-host", pid=4243))
    _failed_bracket(session)
    user(session, "thanks, one more check")
    start_turn(session)
    answer_step(session, "all good")
    end_turn(session)
    store.save(session)
    return session


def _rich_step(session: Session) -> None:
    t = session.open_turn
    assert t is not None
    s = session.structure.next_step
    session.append(StepStart(turn=t, step=s))
    session.append(AssistantChunk(turn=t, step=s, chunk="Let me look"))
    call = ToolCallBlock("call-img", "read_file", json.dumps({"path": "logs/app.log"}))
    model = Source(kind="model", provider="golden", model="golden-1")
    content = (ReasoningBlock("the log holds the trace"), TextBlock("Let me look."), call)
    session.append(
        AssistantMessage(
            turn=t, step=s, message=Message(id="a-rich", role="assistant", content=content, source=model),
            surface_op="append", usage=Usage(input_tokens=120, output_tokens=30, cache_read_tokens=64),
        )
    )  # fmt: skip
    dispatch = ToolCall(turn=t, step=s, call_id=call.id, name=call.name, arguments=call.arguments)
    dispatched = session.append(dispatch)
    image = ImageBlock(attachment_id="att-1", media_type="image/png", bytes=2048, width=64, height=32)
    block = ToolResultBlock(call.id, (TextBlock("Traceback: KeyError 'user_id'"), image), is_error=True)
    tool_source = Source(kind="tool", call_id=call.id)
    session.append(
        ToolResult(
            turn=t, step=s,
            message=Message(id="r-rich", role="user", content=(block,), source=tool_source),
            surface_op="append", source_event_seqs=(dispatched.seq,),
            error=ToolError(name="read_file", code="ENOENT"), meta={"duration_ms": 12},
        )
    )  # fmt: skip
    session.append(StepEnd(turn=t, step=s))


def _failed_bracket(session: Session) -> None:
    compaction_id = next(fixed_compaction_ids("00c004"))
    session.append(CompactStart(compaction_id=compaction_id, turn=None, lease=LEASE))
    session.append(CompactEnd(compaction_id=compaction_id, turn=None, error="summarizer: HTTP 503"))


SESSIONS: dict[str, Callable[[SessionStore], Session]] = {
    "compacted": compacted,
    "orphan": orphan,
    "pruned": pruned,
    "vocabulary": vocabulary,
}


def main(directory: Path = HERE, version: int = 1) -> list[Path]:
    written: list[Path] = []
    with SessionStore.open("memory://") as store:
        for name, build in SESSIONS.items():
            session = build(store)
            path = directory / f"{name}.v{version}.jsonl"
            export_session(store.get(session.id, use_snapshots=False), path)
            written.append(path)
    return written


if __name__ == "__main__":
    for written in main():
        print(written)
