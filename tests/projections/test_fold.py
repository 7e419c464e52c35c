"""FoldProjection: the view author writes ``initial`` and ``evolve``; the library keeps each
session's state in the view, written with the tracking record. Runs on every backend; a property
test stops and restarts the runner at arbitrary batch boundaries (what a kill leaves: the last
committed batch) and gets the states of one uninterrupted pass."""

from __future__ import annotations

import random
from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compaction.errors import ProjectionConfigError, ProjectionFoldError
from compaction.sessions.events import SessionEvent, StepEnd
from compaction.sessions.store import SessionStore
from projections import FoldProjection, ProjectionRunner
from projections.tables import Row, Table, table
from tests.builders import turn

STEPS = table("fold_steps", ("session_id",), session_id="text", steps="int")


class Tally(msgspec.Struct, frozen=True):
    events: int = 0
    types: dict[str, int] = {}
    last_seq: int = -1


def tally(state: Tally, event: SessionEvent) -> Tally:
    assert event.seq == state.last_seq + 1, "folded out of order or twice"
    types = {**state.types, event.type: state.types.get(event.type, 0) + 1}
    return Tally(state.events + 1, types, event.seq)


class TallyProjection(FoldProjection[Tally]):
    name = "tally"
    state_type: ClassVar[type] = Tally
    view_tables: ClassVar[tuple[Table, ...]] = (STEPS,)

    def initial(self) -> Tally:
        return Tally()

    def evolve(self, state: Tally, event: SessionEvent) -> Tally:
        return tally(state, event)

    def view_rows(self, key: str, state: Tally) -> Iterable[tuple[str, Row]]:
        yield STEPS.name, (key, state.types.get(StepEnd.TYPE, 0))


def expected(store: SessionStore) -> dict[str, Tally]:
    tallies: dict[str, Tally] = {}
    for session_id in store.session_ids():
        state = Tally()
        for event in store.load_events(session_id):
            state = tally(state, event)
        tallies[str(session_id)] = state
    return tallies


def write(store: SessionStore, rng: random.Random, sessions: int = 3) -> None:
    for _ in range(sessions):
        session = store.create()
        for i in range(rng.randint(1, 4)):
            turn(session, f"task {i}", steps=rng.randint(0, 2))
            store.save(session)


def test_the_library_keeps_the_state(store: SessionStore) -> None:
    write(store, random.Random(1))
    with ProjectionRunner(store, [TallyProjection]) as runner:
        runner.rebuild()
        view = runner.views["tally"]
        assert TallyProjection.states(view) == expected(store)
        some = store.session_ids()[0]
        assert TallyProjection.state_of(view, some) == expected(store)[str(some)]
        steps = dict(view.select(STEPS.name, ("session_id", "steps")))
        assert steps == {k: t.types.get("step/end", 0) for k, t in expected(store).items()}
        write(store, random.Random(2), sessions=1)
        runner.catch_up()  # the states of the first pass are resumed, not refolded
        assert TallyProjection.states(view) == expected(store)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(1, 40), min_size=1, max_size=6), seed=st.integers(0, 1000))
def test_restarting_anywhere_gives_the_same_states(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int], seed: int
) -> None:
    folder: Path = tmp_path_factory.mktemp("fold")
    with SessionStore.open(f"sqlite:///{folder / 's.db'}") as store:
        write(store, random.Random(seed))
        for size in sizes:  # a new runner each time: states come back from the view
            with ProjectionRunner(store, [TallyProjection], batch_size=size) as runner:
                runner.step()
        with ProjectionRunner(store, [TallyProjection]) as runner:
            runner.catch_up()
            assert TallyProjection.states(runner.views["tally"]) == expected(store)


class Broken(TallyProjection):
    name = "broken"

    def evolve(self, state: Tally, event: SessionEvent) -> Tally:
        if event.seq == 2:
            raise ValueError("the author's bug")
        return super().evolve(state, event)


def test_a_failing_fold_names_the_event_and_writes_nothing(sqlite_url: str) -> None:
    with SessionStore.open(sqlite_url) as store:
        write(store, random.Random(3), sessions=1)
        with ProjectionRunner(store, [Broken]) as runner:
            with pytest.raises(ProjectionFoldError, match=r"seq 2 .*ValueError: the author's bug"):
                runner.catch_up()
            assert runner.position == 0
            assert Broken.states(runner.views["broken"]) == {}


def test_a_class_clashing_with_a_named_projection_is_refused(sqlite_url: str) -> None:
    class Surface(TallyProjection):
        name = "surface"

    with SessionStore.open(sqlite_url) as store, pytest.raises(ProjectionConfigError):
        ProjectionRunner(store, ["surface", Surface])
