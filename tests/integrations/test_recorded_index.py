"""The index of recorded messages a memory keeps per loaded session: an adapter's "what of these
messages is new?" reads only the events appended since its last call, and the index holds what a
full scan of the log finds, across appends, compactions and another writer's events."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from compaction.integrations.memory import AssistantItem, CompactingMemory, UserItem
from compaction.sessions.blocks import Message, Source, TextBlock
from compaction.sessions.session import Session, project

MODEL = Source(kind="model", provider="agent-framework", model="unknown")


def turn(k: int) -> list[Any]:
    text = " ".join(f"line {i}: the cart total of turn {k} rounds half up." for i in range(30))
    return [
        UserItem(Message(id=f"u{k}", role="user", content=(TextBlock(f"question {k}"),))),
        AssistantItem(Message(id=f"a{k}", role="assistant", content=(TextBlock(text),), source=MODEL)),
    ]


def scanned(session: Session) -> list[str]:
    return [m.id for e in session.events() if e.SURFACE and (m := project(e)) is not None]


class Counting:
    """Counts the events a session hands out through ``events()``."""

    def __init__(self, session: Session) -> None:
        self.read = 0
        events = session.events

        def counted(start: int = 0, stop: int | None = None) -> Iterator[Any]:
            for event in events(start, stop):
                self.read += 1
                yield event

        session.events = counted  # type: ignore[method-assign]


def test_each_call_reads_only_the_events_appended_since_the_last(url: str) -> None:
    memory = CompactingMemory(url, context_window=2_000)
    for k in range(12):
        memory.record_sync("k", turn(k), origin=f"turn {k}")
        memory.surface_sync("k")  # compacts under pressure
    assert memory.compactions, "the session compacted"
    session = memory.load_sync("k")
    index = memory.recorded(session)
    assert index.ids == set(scanned(session)) and [m.id for m in index.messages] == scanned(session)
    counting = Counting(session)
    length = len(session)
    memory.record_sync("k", turn(12), origin="turn 12")
    assert memory.load_sync("k") is session, "the loaded session is used again"
    appended = len(session) - length
    assert memory.recorded_ids(session) >= {"u12", "a12"}
    assert counting.read == appended, f"read {counting.read} events for {appended} new ones"
    counting.read = 0
    memory.recorded_ids(session)
    assert counting.read == 0, "nothing new, nothing read"
    assert memory.recorded(session).ids == set(scanned(session))
    memory.close()


def test_another_writers_events_are_indexed_after_the_reload(url: str) -> None:
    ours = CompactingMemory(url, context_window=100_000)
    theirs = CompactingMemory(url, context_window=100_000)
    ours.record_sync("k", turn(0), origin="ours")
    assert ours.recorded_ids(ours.load_sync("k")) == {"u0", "a0"}
    theirs.record_sync("k", turn(1), origin="theirs")
    session = ours.load_sync("k")  # the store holds more than the loaded session: loaded again
    assert ours.recorded_ids(session) == {"u0", "a0", "u1", "a1"} == set(scanned(session))
    ours.close()
    theirs.close()
