"""The reliability probes as a bounded CI suite: fuzz (fixed seed, bounded corpus), races and
crashes on SQLite and PostgreSQL. ``make soak`` runs the same loops for a set time
(:mod:`tests.reliability.soak`)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.conftest import require_pg
from tests.reliability import fuzz
from tests.reliability.crash import crash_round
from tests.reliability.race import race_round
from tests.reliability.restart import restart_round
from tests.reliability.soak import restart_target

SEED = 15
CASES = {"sqlite": 120, "postgresql": 30}

backends = pytest.mark.parametrize(
    "durable_store_url",
    ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)],
    indirect=True,
)


def test_the_corpus_is_fixed_by_its_seed() -> None:
    first = [(c.name, c.data) for c in fuzz.corpus(SEED, 20)]
    assert first == [(c.name, c.data) for c in fuzz.corpus(SEED, 20)]
    assert first != [(c.name, c.data) for c in fuzz.corpus(SEED + 1, 20)]
    assert len({data for _, data in first}) > 15


@backends
def test_hostile_transcripts_and_exports_import_cleanly_or_are_refused(
    durable_store_url: str, tmp_path: Path
) -> None:
    backend = "sqlite" if durable_store_url.startswith("sqlite") else "postgresql"
    tally = fuzz.Tally()
    for case in fuzz.corpus(SEED, CASES[backend]):
        fuzz.run_case(case, durable_store_url, tmp_path, tally)
    assert tally.failures == [], "\n".join(tally.failures)
    assert tally.runs == CASES[backend]
    # the corpus exercises both sides: it is not all refusals, nor all imports
    assert tally.counts["clean-import"] > 0 and tally.counts["clean-refusal"] > 0, tally.counts


def test_the_fuzz_runner_counts_a_hang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The watchdog works: an import that never returns is counted as a hang, not waited for."""
    import time

    from compaction.cli import main as cli_main

    def never_returns(argv: list[str]) -> int:
        time.sleep(60)
        return 0

    monkeypatch.setattr(cli_main, "main", never_returns)
    tally = fuzz.Tally()
    case = fuzz.Case("sleeper", b"{}")
    assert fuzz.run_case(case, f"sqlite:///{tmp_path}/s.db", tmp_path, tally, seconds=0.3) == "hang"
    assert tally.counts["hang"] == 1 and tally.failures


@backends
def test_racing_writers_lose_nothing(durable_store_url: str) -> None:
    result = race_round(durable_store_url, writers=4, saves=10)
    assert (result.errors, result.hangs, result.lost, result.duplicated) == ([], 0, 0, 0)
    assert result.acknowledged == result.stored == 40


@backends
def test_a_killed_writer_leaves_whole_sessions_only(durable_store_url: str, tmp_path: Path) -> None:
    rng = random.Random(SEED)
    for _ in range(2):
        result = crash_round(durable_store_url, tmp_path, rng)
        assert result.errors == []
        assert (result.torn, result.lost) == (0, 0), result
        assert result.sessions >= 1


@pytest.mark.postgres
def test_a_postgresql_restart_under_a_writer_loses_no_acknowledged_save(tmp_path: Path) -> None:
    """The soak's restart fault, once: a private cluster (restarted for real) where one can be
    started, else the writer's own connections on the shared server ended."""
    require_pg()
    with restart_target("postgresql") as target:
        assert target.url is not None
        result = restart_round(target.url, tmp_path, random.Random(SEED), target.cluster)
    assert result.errors == [], (target.mode, result)
    assert result.restarts == 1 and result.hangs == 0
    assert (result.torn, result.lost) == (0, 0), result
    assert result.acknowledged >= 3  # one before the restart, two after it
