"""The abstract store suite: every test runs against memory://, SQLite and PostgreSQL.

The ``store_url`` fixture (conftest) gives one URL per backend; nothing here knows which one it got.
URL parsing tests at the end need no backend.
"""

from __future__ import annotations

import uuid
from collections.abc import Container, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest
from eventsourcing.persistence import StoredEvent

from compaction.errors import (
    ConcurrencyError,
    ConfigurationError,
    SessionIdError,
    SessionNotFoundError,
    StoreError,
    UnknownEventTypeError,
)
from compaction.sessions.blocks import (
    ImageBlock,
    Message,
    ReasoningBlock,
    Source,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from compaction.sessions.events import (
    APPEND,
    AssistantChunk,
    AssistantMessage,
    CommandDone,
    CommandRun,
    ContextMessage,
    Replace,
    RequestHeader,
    SessionEvent,
    SessionResume,
    SteeringMessage,
    StepEnd,
    StepStart,
    ToolCall,
    ToolError,
    ToolResult,
    ToolSpec,
    TurnEnd,
    TurnEndReason,
    TurnStart,
    Usage,
    UserMessage,
    registered_types,
)
from compaction.sessions.hashing import surface_hash, surface_hash_in_windows
from compaction.sessions.invariants import DEFAULT_INVARIANTS
from compaction.sessions.mapper import encode_event
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore, parse_store_url
from compaction.vocabulary.events import (
    COMPACT_PLUGIN,
    CompactEnd,
    CompactPrune,
    CompactStart,
    CompactSummary,
    Fidelity,
    Lease,
    PhaseEnd,
    ScratchpadSet,
    ShadowedRange,
)
from tests.builders import (
    MODEL,
    state_of,
    turn,
    user,
    user_event,
)


def worked(session: Session, turns: int) -> Session:
    """``turns`` tool-heavy turns, with a checkpoint replacement every third turn."""
    for _ in range(turns):
        turn(session, f"prompt {len(session)}", n_calls=2)
        if session.structure.next_turn % 3 == 0:
            span = tuple(session.nodes[1:-1])
            session.append(
                user_event(f"checkpoint {len(session)}", op=Replace(span[0], span[-1]), sources=span)
            )
    return session


# ---------------------------------------------------------------- every event type, every block


def every_kind_of_event(session: Session) -> None:
    image = ImageBlock(attachment_id="att-1", media_type="image/png", bytes=2048, width=64, height=32)
    bare_image = ImageBlock(attachment_id="att-2", media_type="image/jpeg")
    prompt = Message(id="u0", role="user", content=(TextBlock("look at this ✓"), image))
    session.append(UserMessage(message=prompt, surface_op=APPEND, origin="line 1"))
    session.append(TurnStart(turn=1))
    tools = (ToolSpec("bash", "run a command", {"type": "object", "properties": {}}),)
    session.append(
        RequestHeader(
            provider="p",
            model="m",
            system="sys",
            tools=tools,
            context_window=8000,
            reason="initial",
        )
    )
    session.append(StepStart(turn=1, step=1))
    chunk = session.append(AssistantChunk(turn=1, step=1, chunk='{"partial": '))
    calls = (ToolCallBlock("c1", "bash", '{"cmd": "ls"}'), ToolCallBlock("c2", "bash", "{}"))
    thinking = Message(
        id="a1",
        role="assistant",
        content=(ReasoningBlock("hmm"), TextBlock("two calls"), *calls),
        source=MODEL,
    )
    usage = Usage(input_tokens=10, output_tokens=5, cache_read_tokens=3, reasoning_tokens=1)
    session.append(
        AssistantMessage(
            turn=1,
            step=1,
            message=thinking,
            usage=usage,
            surface_op=APPEND,
            source_event_seqs=(chunk.seq,),
        )
    )
    call1 = session.append(ToolCall(turn=1, step=1, call_id="c1", name="bash", arguments="{}"))
    first = Message(
        id="r1",
        role="user",
        content=(ToolResultBlock("c1", (TextBlock("file.txt"), bare_image)),),
        source=Source(kind="tool", call_id="c1"),
    )
    result1 = session.append(
        ToolResult(
            turn=1,
            step=1,
            message=first,
            meta={"exit": 0, "nested": {"list": [1, 2.5, None, "x"]}},
            surface_op=APPEND,
            source_event_seqs=(call1.seq,),
        )
    )
    session.append(ToolCall(turn=1, step=1, call_id="c2", name="bash", arguments="{}"))
    failed = Message(
        id="r2",
        role="user",
        content=(ToolResultBlock("c2", (TextBlock("boom"),), is_error=True),),
        source=Source(kind="tool", call_id="c2"),
    )
    session.append(
        ToolResult(
            turn=1,
            step=1,
            message=failed,
            error=ToolError("Boom", "E_BOOM"),
            synthesized=True,
            surface_op=APPEND,
        )
    )
    steer = Message(id="s1", role="user", content=(TextBlock("use python"),))
    session.append(SteeringMessage(message=steer, surface_op=APPEND))
    session.append(StepEnd(turn=1, step=1))
    session.append(StepStart(turn=1, step=2))
    empty = Message(id="a2", role="assistant", content=(), source=MODEL)
    session.append(
        AssistantMessage(
            turn=1, step=2, message=empty, interrupted=True, surface_op=APPEND, source_event_seqs=()
        )
    )
    session.append(StepEnd(turn=1, step=2))
    session.append(TurnEnd(turn=1, reason=TurnEndReason("error", message="429", code="RATE")))
    context = Message(id="ctx", role="user", content=(TextBlock("AGENTS.md"),))
    session.append(ContextMessage(message=context, surface_op=APPEND))
    session.append(SessionResume(host="worker-1", pid=4242))
    lease = Lease(host="worker-1", pid=4242, expires_at=datetime(2030, 1, 1, 12, tzinfo=UTC))
    start = session.append(CompactStart(compaction_id="k1", turn=None, lease=lease))
    shadowed = (0,)
    summary = session.append(
        CompactSummary(
            compaction_id="k1",
            summary=(TextBlock("## Goal\nlook"),),
            shadowed_range=ShadowedRange(0, 0),
            shadowed_seqs=shadowed,
            shadowed_token_count=40,
            provider="p",
            model="m",
            max_tokens=512,
            usage=Usage(input_tokens=40, output_tokens=9),
            fidelity=Fidelity(sections_present=("Goal",), identifiers_total=2, identifiers_kept=2),
            shadowed_hashes={"0": "ab" * 32},
            summary_token_count=9,
        )
    )
    checkpoint = Message(
        id="checkpoint-k1",
        role="user",
        content=(TextBlock("## Goal\nlook"),),
        source=Source(kind="plugin", plugin=COMPACT_PLUGIN, compaction_id="k1"),
    )
    session.append(
        UserMessage(
            message=checkpoint,
            surface_op=Replace(0, 0),
            source_event_seqs=(start.seq, summary.seq, *shadowed),
        )
    )
    session.append(CompactEnd(compaction_id="k1", turn=None))
    session.append(TurnStart(turn=2))
    session.append(
        CompactPrune(
            shadowed_range=ShadowedRange(result1.seq, result1.seq),
            shadowed_seqs=(result1.seq,),
            shadowed_token_count=12,
            chars_before=8,
            chars_after=3,
        )
    )
    pruned_block = ToolResultBlock("c1", (TextBlock("[…]"),))
    original = session.event(result1.seq)
    assert isinstance(original, ToolResult)
    session.append(
        msgspec.structs.replace(
            original,
            seq=-1,
            time=SessionEvent().time,
            message=msgspec.structs.replace(first, content=(pruned_block,)),
            surface_op=Replace(result1.seq, result1.seq),
            source_event_seqs=(result1.seq,),
        )
    )
    session.append(TurnEnd(turn=2, reason=TurnEndReason("completed")))
    failed_start = session.append(CompactStart(compaction_id="k2", turn=None, lease=lease))
    session.append(CompactEnd(compaction_id="k2", turn=None, error="summarizer failed: timeout"))
    assert failed_start.seq == len(session) - 2
    session.append(ScratchpadSet(key="plan", value={"steps": ["read", "fix"]}, source="seq:0"))
    session.append(PhaseEnd(name="explore", conclusion="the bug is in module 3"))
    a_command_and_its_compaction(session, lease)


def a_command_and_its_compaction(session: Session, lease: Lease) -> None:
    session.enforce(DEFAULT_INVARIANTS)  # session/invariants: the rest is written under them
    run = session.append(CommandRun(command_id="cmd-1", name="compact", args="keep paths"))
    assert isinstance(run, CommandRun)
    session.append(
        CompactStart(
            compaction_id="k3", turn=None, lease=lease, source_command_id="cmd-1", focus="keep paths"
        )
    )
    session.append(
        CompactEnd(compaction_id="k3", turn=None, error="summary failed", source_command_id="cmd-1")
    )
    session.append(CommandDone(command_id="cmd-1", kind="error", text="Compaction could not ..."))


def test_every_event_type_and_block_round_trips(store: SessionStore) -> None:
    session = store.create()
    every_kind_of_event(session)
    assert store.save(session) == len(session)
    assert store.save(session) == 0  # nothing pending any more
    ours = {
        name
        for name, cls in registered_types().items()
        # the core vocabulary
        if cls.__module__ in ("compaction.sessions.events", "compaction.vocabulary.events")
    }
    assert ours <= {e.TYPE for e in session.events()}, "add the new event type to this test"
    loaded = store.load_events(session.id)
    assert loaded == list(session.events())
    assert [encode_event(e) for e in loaded] == [encode_event(e) for e in session.events()]
    again = store.get(session.id)
    assert state_of(again) == state_of(session)
    for event in again.events():
        assert event.time.tzinfo is not None
        assert event.time.utcoffset() == timedelta(0)


def test_times_keep_microseconds_and_utc(store: SessionStore) -> None:
    moment = datetime(2025, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)
    session = store.create()
    session.append(msgspec.structs.replace(user_event("a"), time=moment))
    store.save(session)
    loaded = store.get(session.id).event(0)
    assert loaded.time == moment
    assert loaded.time.utcoffset() == timedelta(0)


# ---------------------------------------------------------------- atomic saves and conflicts


def test_a_conflicting_batch_stores_nothing(store: SessionStore) -> None:
    session = worked(store.create(), 1)
    store.save(session)
    first, second = store.get(session.id), store.get(session.id)
    user(first, "winner")
    store.save(first)
    second.append_all([user_event("loser 1"), TurnStart(turn=2), user_event("loser 2")])
    with pytest.raises(ConcurrencyError) as caught:
        store.save(second)
    err = caught.value
    assert (err.session_id, err.first_seq, err.last_seq) == (
        session.id,
        len(first) - 1,
        len(first) + 1,
    )
    assert f"session {session.id}" in str(err) and "Reload the session and retry" in str(err)
    stored = store.load_events(session.id)
    assert len(stored) == len(first)
    assert stored[-1].message.content == (TextBlock("winner"),)  # type: ignore[attr-defined]
    assert state_of(store.get(session.id)) == state_of(first)


def test_the_loser_reloads_and_retries(store: SessionStore) -> None:
    session = store.create()
    user(session, "start")
    store.save(session)
    first, second = store.get(session.id), store.get(session.id)
    user(first, "winner")
    store.save(first)
    user(second, "loser")
    with pytest.raises(ConcurrencyError):
        store.save(second)
    retry = store.get(session.id)
    user(retry, "loser, retried")
    assert store.save(retry) == 1
    texts = [m.content[0].text for m in store.get(session.id).derive_messages()]  # type: ignore[union-attr]
    assert texts == ["start", "winner", "loser, retried"]


def test_a_failed_first_save_leaves_the_session_unknown(store: SessionStore) -> None:
    session_id = uuid.uuid4()
    winner, loser = store.create(session_id), store.create(session_id)
    user(winner, "w")
    store.save(winner)
    loser.append_all([user_event("a"), user_event("b")])
    with pytest.raises(ConcurrencyError):
        store.save(loser)
    assert len(store.get(session_id)) == 1


def test_a_compressed_store_round_trips_events_and_snapshots(store_url: str) -> None:
    settings = {"COMPRESSOR_TOPIC": "eventsourcing.compressor:ZlibCompressor"}
    with SessionStore(settings, location=parse_store_url(store_url)) as compressed:
        compressed.snapshot_interval = 5
        session = worked(compressed.create(), 3)
        compressed.save(session)
        raw = compressed.application.recorder.select_events(session.id, limit=1)[0].state
        assert raw != encode_event(session.event(0))  # stored compressed
        assert state_of(compressed.get(session.id)) == state_of(session)
        assert state_of(compressed.get(session.id, use_snapshots=False)) == state_of(session)


# ---------------------------------------------------------------- snapshots and versions


def test_snapshots_load_the_same_session_as_a_full_replay(store: SessionStore) -> None:
    store.snapshot_interval = 7
    session = store.create()
    for _ in range(6):
        worked(session, 1)
        store.save(session)
    assert len(session) > 3 * store.snapshot_interval
    snapshots = store.application.snapshots
    assert snapshots is not None
    assert snapshots.recorder.select_events(session.id)  # snapshots were taken
    via_snapshot = store.get(session.id)
    full = store.get(session.id, use_snapshots=False)
    assert state_of(via_snapshot) == state_of(full) == state_of(session)
    assert via_snapshot.event(2) == full.event(2)  # lazily fetched old seqs
    assert list(via_snapshot.events()) == list(full.events())
    assert via_snapshot.surface.cuts() == full.surface.cuts()


def test_a_session_loaded_from_a_snapshot_keeps_going(store: SessionStore) -> None:
    store.snapshot_interval = 5
    session = worked(store.create(), 4)
    store.save(session)
    loaded = store.get(session.id)
    worked(loaded, 2)
    store.save(loaded)
    worked(session, 2)
    assert state_of(store.get(session.id)) == state_of(session)
    assert state_of(store.get(session.id, use_snapshots=False)) == state_of(session)


@pytest.mark.parametrize("use_snapshots", [True, False])
def test_loading_at_a_version_is_the_surface_at_that_seq(store: SessionStore, use_snapshots: bool) -> None:
    store.snapshot_interval = 6
    session = store.create()
    for _ in range(4):
        worked(session, 1)
        store.save(session)
    for seq in (0, 5, 6, 7, 12, len(session) // 2, len(session) - 2, len(session) - 1):
        then = store.get(session.id, at=seq, use_snapshots=use_snapshots)
        assert len(then) == seq + 1
        assert then.nodes == session.surface_at(seq)
        assert then.derive_messages() == session.messages_at(seq)
        assert then.nodes == Session.replay(session.id, session.events(0, seq + 1)).nodes


def test_loading_past_the_end_or_before_the_start_fails(store: SessionStore) -> None:
    session = worked(store.create(), 1)
    store.save(session)
    with pytest.raises(StoreError, match=f"has {len(session)} events"):
        store.get(session.id, at=len(session))
    with pytest.raises(StoreError, match="seqs start at 0"):
        store.get(session.id, at=-1)


def test_load_events_windows(store: SessionStore) -> None:
    session = worked(store.create(), 2)
    store.save(session)
    everything = list(session.events())
    assert store.load_events(session.id) == everything
    assert store.load_events(session.id, 3, 9) == everything[3:9]
    assert store.load_events(session.id, 9) == everything[9:]
    assert store.load_events(session.id, 0, 1) == everything[:1]
    assert store.load_events(uuid.uuid4()) == []


@pytest.mark.parametrize("window", [1, 4, 4096])
def test_iter_events_reads_in_windows_what_load_events_returns(store: SessionStore, window: int) -> None:
    session = store.create()
    for _ in range(3):  # several saves: several commits on JetStream
        worked(session, 2)
        store.save(session)
    everything = list(session.events())
    assert list(store.iter_events(session.id, window=window)) == everything
    assert list(store.iter_events(session.id, 3, 9, window=window)) == everything[3:9]
    assert list(store.iter_events(session.id, 9, window=window)) == everything[9:]
    assert list(store.iter_events(session.id, 5, 5, window=window)) == []
    odd = {s for s in range(len(everything)) if s % 2}
    assert list(store.iter_events(session.id, 2, only=odd, window=window)) == [
        e for e in everything[2:] if e.seq in odd
    ]
    assert list(store.iter_events(uuid.uuid4(), window=window)) == []


def test_iter_events_of_a_session_that_grows_between_windows(store: SessionStore) -> None:
    session = worked(store.create(), 3)
    store.save(session)
    before = len(session)
    read = []
    for event in store.iter_events(session.id, window=2):
        read.append(event)
        if len(read) == 1:  # between the first window and the next
            worked(session, 2)
            store.save(session)
    assert before <= len(read) <= len(session)
    assert read == list(session.events(0, len(read)))  # a contiguous prefix, each event once
    assert list(store.iter_events(session.id, hi=before, window=2)) == list(session.events(0, before))


@pytest.mark.parametrize("use_snapshots", [True, False])
def test_fold_holds_the_state_get_loads_and_fetches_its_events_again(
    store: SessionStore, use_snapshots: bool
) -> None:
    store.snapshot_interval = 9
    session = store.create()
    for _ in range(4):
        worked(session, 2)
        store.save(session)
    folded = store.fold(session.id, use_snapshots=use_snapshots, window=5)
    assert state_of(folded) == state_of(session)
    assert folded.saved_length == len(session)
    assert list(folded.events()) == list(session.events())  # fetched from the store
    at = len(session) // 2
    assert state_of(store.fold(session.id, hi=at, window=4)) == state_of(store.get(session.id, at=at - 1))
    with pytest.raises(SessionNotFoundError):
        store.fold(uuid.uuid4())
    with pytest.raises(StoreError, match="cannot fold its first"):
        store.fold(session.id, hi=len(session) + 1)


def test_the_surface_hash_in_windows_is_the_surface_hash(store: SessionStore) -> None:
    session = worked(store.create(), 7)  # checkpoints: summaries far after the nodes around them
    store.save(session)
    folded = store.fold(session.id, window=3)

    def pick(lo: int, hi: int, only: Container[int]) -> Iterator[SessionEvent]:
        return store.iter_events(session.id, lo, hi, only=only, window=3)

    for window in (1, 2, 5, 4096):
        assert surface_hash_in_windows(folded, pick, window) == surface_hash(session)


# ---------------------------------------------------------------- listing and lookup


def test_session_ids_lists_every_session_once_in_creation_order(store: SessionStore) -> None:
    assert store.session_ids() == []
    ids = []
    for turns in (1, 2, 1):
        session = worked(store.create(), turns)
        store.save(session)
        ids.append(session.id)
    more = store.get(ids[0])
    user(more, "again")
    store.save(more)
    assert store.session_ids() == ids
    assert [len(s) for s in store.iter_sessions()] == [len(store.get(i)) for i in ids]


def test_an_unknown_session_is_not_found(store: SessionStore) -> None:
    missing = uuid.uuid4()
    assert not store.exists(missing)
    with pytest.raises(SessionNotFoundError) as caught:
        store.get(missing)
    assert isinstance(caught.value, KeyError)
    assert str(caught.value) == f"no session {missing} in the store"
    session = worked(store.create(), 1)
    store.save(session)
    assert store.exists(session.id)


def test_an_unknown_event_type_in_a_stored_row(store: SessionStore) -> None:
    session_id = uuid.uuid4()
    store.application.recorder.insert_events(
        [StoredEvent(originator_id=session_id, originator_version=0, topic="bogus/type", state=b"{}")]
    )
    with pytest.raises(UnknownEventTypeError) as caught:
        store.get(session_id)
    assert caught.value.event_type == "bogus/type"
    assert f"session {session_id} seq 0" in str(caught.value)
    assert "'bogus/type'" in str(caught.value)


def test_a_row_whose_payload_disagrees_with_its_position(store: SessionStore) -> None:
    session = store.create()
    stray = msgspec.structs.replace(user_event("a"), seq=5, time=datetime.now(UTC))
    store.application.recorder.insert_events(
        [
            StoredEvent(
                originator_id=session.id,
                originator_version=0,
                topic="user/message",
                state=encode_event(stray),
            )
        ]
    )
    with pytest.raises(StoreError, match="carries seq 5"):
        store.get(session.id)


def test_an_undecodable_payload(store: SessionStore) -> None:
    session_id = uuid.uuid4()
    store.application.recorder.insert_events(
        [StoredEvent(originator_id=session_id, originator_version=0, topic="turn/start", state=b"{")]
    )
    with pytest.raises(StoreError, match=f"cannot decode turn/start payload at session {session_id} seq 0"):
        store.get(session_id)


# ---------------------------------------------------------------- two processes' worth of handles


def test_two_store_handles_share_a_durable_log(durable_store_url: str) -> None:
    with SessionStore.open(durable_store_url) as one, SessionStore.open(durable_store_url) as two:
        session = worked(one.create(), 1)
        one.save(session)
        assert state_of(two.get(session.id)) == state_of(session)
        racer = two.get(session.id)
        user(session, "one wins")
        one.save(session)
        user(racer, "two loses")
        with pytest.raises(ConcurrencyError):
            two.save(racer)
        assert two.session_ids() == [session.id]


# ---------------------------------------------------------------- store URLs


def test_store_urls_parse_into_eventsourcing_settings(tmp_path: Path) -> None:
    memory = parse_store_url("memory://")
    assert (memory.kind, memory.env["PERSISTENCE_MODULE"]) == ("memory", "eventsourcing.popo")
    relative = parse_store_url("sqlite:///./.compaction/x.db")
    assert relative.env["SQLITE_DBNAME"] == "./.compaction/x.db"
    absolute = parse_store_url(f"sqlite:///{tmp_path}/nested/s.db")
    assert Path(absolute.env["SQLITE_DBNAME"]) == tmp_path / "nested" / "s.db"
    assert (tmp_path / "nested").is_dir()
    pg = parse_store_url("postgresql://alice:s3cret@db.example:6543/sessions")
    assert pg.kind == "postgresql"
    assert (pg.env["POSTGRES_HOST"], pg.env["POSTGRES_PORT"]) == ("db.example", "6543")
    assert (pg.env["POSTGRES_USER"], pg.env["POSTGRES_PASSWORD"]) == ("alice", "s3cret")
    assert pg.env["POSTGRES_DBNAME"] == "sessions"
    assert pg.display == "postgresql://alice:***@db.example:6543/sessions"
    assert parse_store_url("postgres://u@h/db").env["POSTGRES_PORT"] == "5432"


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("mysql://u@h/db", "unsupported store URL 'mysql://u@h/db': expected sqlite:///PATH"),
        ("sessions.db", "unsupported store URL 'sessions.db'"),
        ("sqlite://", "has no database path; expected sqlite:///PATH"),
        ("sqlite:///", "has no database path"),
        ("postgresql://u@h:5432/", "needs a host and a database"),
        (
            "postgresql:///db",
            "needs a host and a database; expected postgresql://USER@HOST:PORT/DB",
        ),
    ],
)
def test_bad_store_urls_say_what_was_expected(url: str, fragment: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        SessionStore.open(url)
    assert fragment in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_a_session_id_may_be_given_as_its_text_and_anything_else_is_refused_saying_what_came(
    store: SessionStore,
) -> None:
    session = store.create()
    session.append(user_event("fix the bug"))
    store.save(session)
    text = str(session.id)
    assert store.exists(text) and store.exists(text.upper().replace("-", ""))
    assert list(store.get(text).events()) == list(session.events())
    assert store.load_events(text) == list(session.events())
    assert list(store.iter_events(text)) == list(session.events())
    assert store.stream_length(text) == 1
    assert [row.seq for row in store.read_rows(text)] == [0]
    assert store.fold(text).derive_messages() == session.derive_messages()
    copied = str(uuid.uuid4())
    store.append_events(copied, list(session.events()))
    assert list(store.get(uuid.UUID(copied)).events()) == list(session.events())
    assert not store.exists(str(uuid.uuid4()))
    wanted = uuid.uuid4()
    created = store.create(str(wanted).upper())  # a Session holds the UUID, whatever it was given
    assert isinstance(created.id, uuid.UUID) and created.id == wanted
    with pytest.raises(SessionIdError, match="'abc' is not a UUID"):
        Session("abc")
    with pytest.raises(SessionIdError, match=r"'not-a-uuid' is not a UUID"):
        store.get("not-a-uuid")
    with pytest.raises(SessionIdError, match=r"42 \(int\) is neither a uuid\.UUID nor its string form"):
        store.exists(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError):  # the builtin kinds too, for callers that catch those
        store.load_events("../../etc/passwd")
