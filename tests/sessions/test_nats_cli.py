"""The command line and ``copy`` on a JetStream store give what they give on SQLite.

Every public transcript is imported into a SQLite store and into a JetStream store; ``sessions``,
``show``, ``compact``, ``audit``, ``recover`` and ``export`` must then print the same documents on
both (the store URLs and timings aside), and ``copy`` moves sessions between SQLite, PostgreSQL and
JetStream in both directions, the copies equal event by event (the hash of every stored payload).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from compaction.sessions.mapper import encode_event
from compaction.sessions.store import SessionStore
from tests.builders import Doc, run_json
from tests.conftest import PUBLIC_TRANSCRIPTS

_VARYING = {
    "compaction_id", "seconds", "elapsed", "elapsed_seconds", "duration",
    "store", "source", "target", "path", "out",
}  # fmt: skip


def _stable(document: Any) -> Any:
    """The document without what names the store or measures time."""
    if isinstance(document, dict):
        return {k: _stable(v) for k, v in document.items() if k not in _VARYING}
    if isinstance(document, list | tuple):
        return [_stable(v) for v in document]
    return document


def _ok(*argv: str) -> Doc:
    code, document = run_json(*argv)
    assert code == 0, document
    return document


def event_hashes(url: str, *, timeless: bool = False) -> dict[UUID, str]:
    """Session id -> sha256 over the msgspec encoding of every stored event, in seq order;
    ``timeless``: without what differs between two runs (an import stamps events that have no
    time in their transcript with the clock of the moment; compactions have random ids)."""
    with SessionStore.open(url) as store:
        found = {}
        for sid in store.session_ids():
            digest = hashlib.sha256()
            for event in store.load_events(sid):
                digest.update(_timeless(encode_event(event)) if timeless else encode_event(event))
            found[sid] = digest.hexdigest()
        return found


_OF_THE_RUN = {"time", "compaction_id", "lease", "surface_hash", "hash"}
"""Fields that differ between two runs: clock readings, random ids, the lease, and the export's
surface hash and event hashes once they cover a compaction (its random id, its checkpoint)."""


def _timeless(line: bytes) -> bytes:
    return json.dumps(_without_run(json.loads(line)), sort_keys=True).encode()


def _without_run(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_run(v) for k, v in value.items() if k not in _OF_THE_RUN}
    if isinstance(value, list):
        return [_without_run(v) for v in value]
    if isinstance(value, str) and value.startswith("checkpoint-"):  # named by the compaction id
        return "checkpoint-"
    return value


@pytest.fixture
def both(sqlite_url: str, nats_url: str) -> Iterator[tuple[str, str]]:
    files = [str(p) for p in PUBLIC_TRANSCRIPTS]
    imports = [_stable(_ok("--store", url, "import", *files)) for url in (sqlite_url, nats_url)]
    assert imports[0] == imports[1]
    yield sqlite_url, nats_url


def test_the_cli_gives_the_same_results_on_jetstream_as_on_sqlite(
    both: tuple[str, str], tmp_path: Path
) -> None:
    sqlite, nats = both
    listings = [_ok("--store", url, "sessions") for url in both]
    assert listings[0] == listings[1]
    sessions = [row["session_id"] for row in listings[0]["sessions"]]
    assert len(sessions) >= len(PUBLIC_TRANSCRIPTS)
    assert event_hashes(sqlite, timeless=True) == event_hashes(nats, timeless=True)
    for sid in sessions:
        shown = [_stable(_ok("--store", url, "show", sid)) for url in both]
        assert shown[0] == shown[1], sid
    longest = max(listings[0]["sessions"], key=lambda r: r["events"])["session_id"]
    compacted = [
        _stable(run_json("--store", url, "compact", longest, "--window", "32000", "--manual")) for url in both
    ]
    assert compacted[0] == compacted[1]
    assert compacted[0][1]["compactions"], compacted[0]
    assert event_hashes(sqlite, timeless=True) == event_hashes(nats, timeless=True)
    audits = [_stable(run_json("--store", url, "audit", "--all")) for url in both]
    assert audits[0] == audits[1]
    assert audits[0][0] == 0, audits[0]
    recovered = [_stable(_ok("--store", url, "recover")) for url in both]
    assert recovered[0] == recovered[1]
    exports = []
    for name, url in zip(("sqlite", "nats"), both, strict=True):
        out = tmp_path / f"{name}.jsonl"
        _ok("--store", url, "export", longest, "--out", str(out))
        exports.append([_timeless(line) for line in out.read_bytes().splitlines()])
    assert exports[0] == exports[1]
    events_before = listings[0]["sessions"][sessions.index(longest)]["events"]
    assert len(exports[0]) == json.loads(exports[0][0])["events"] + 1 > events_before + 1


@pytest.mark.parametrize("other", ["sqlite", "postgresql"])
def test_copy_to_jetstream_and_back_is_equal_event_by_event(
    other: str, nats_url: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    first = str(request.getfixturevalue({"sqlite": "sqlite_url", "postgresql": "pg_url"}[other]))
    back = f"sqlite:///{tmp_path / 'back.db'}"
    files = [str(p) for p in PUBLIC_TRANSCRIPTS]
    _ok("--store", first, "import", *files)
    there = _ok("--store", first, "copy", "--to", nats_url, "--all")
    assert there["verified"] is True
    if other == "postgresql":  # and back into PostgreSQL's own kind of store: a fresh SQLite file
        _ok("--store", nats_url, "copy", "--to", back, "--all")
    else:
        back = first.replace(".db", "-back.db")
        _ok("--store", nats_url, "copy", "--to", back, "--all")
    expected = event_hashes(first)
    assert event_hashes(nats_url) == expected
    assert event_hashes(back) == expected
