"""No result depends on what else was imported: ``import compaction`` (which Python runs before any
``compaction.*`` module) registers every event type and the importers' foreign-compaction handler.

Each case runs in a fresh interpreter, since the registries live for the life of a process.
"""

from __future__ import annotations

import json

import pytest

from tests.builders import run_python
from tests.conftest import TRANSCRIPTS

SPOTTER = TRANSCRIPTS / "spotter" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"

IMPORT_ONLY_IMPORTERS = """
import json, sys
from pathlib import Path
from compaction.importers import import_path
from compaction.sessions.mapper import encode_event

imported = [i.session for i in import_path(Path(sys.argv[1]), "auto")]
print(json.dumps([
    {"id": str(s.id), "events": [[e.TYPE, encode_event(e).decode()] for e in s.events()]}
    for s in imported
]))
"""

EVERYTHING = "import compaction.cli.main, projections, recovery, compaction.audit.report\n"


def _without_times(sessions: list[dict[str, object]]) -> list[dict[str, object]]:
    """Import is deterministic but for the time of events the transcript does not date."""
    cleaned = []
    for session in sessions:
        events = [[t, {k: v for k, v in json.loads(p).items() if k != "time"}] for t, p in session["events"]]  # type: ignore[attr-defined]
        cleaned.append({"id": session["id"], "events": events})
    return cleaned


@pytest.mark.slow
def test_importing_only_the_importers_gives_the_same_events_as_importing_everything() -> None:
    alone = json.loads(run_python(IMPORT_ONLY_IMPORTERS, str(SPOTTER)))
    everything = json.loads(run_python(EVERYTHING + IMPORT_ONLY_IMPORTERS, str(SPOTTER)))
    types = [t for t, _ in alone[0]["events"]]
    assert {"compact/start", "compact/summary", "compact/end"} <= set(types), "the imported compaction"
    assert _without_times(alone) == _without_times(everything)


STORE_READ = """
import sys
from uuid import UUID
from compaction.sessions.store import SessionStore

with SessionStore.open(sys.argv[1]) as store:
    session = store.get(UUID(sys.argv[2]))
    print(len(session), session.type_counts.get("compact/end", 0))
"""

STORE_WRITE = """
import sys
from pathlib import Path
from compaction.importers import import_path
from compaction.sessions.store import SessionStore

with SessionStore.open(sys.argv[1]) as store:
    session = next(iter(import_path(Path(sys.argv[2]), "auto"))).session
    store.save(session)
    print(session.id)
"""


def test_a_store_with_compactions_loads_in_a_process_that_imported_only_the_store(tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/sessions.db"
    session_id = run_python(STORE_WRITE, url, str(SPOTTER)).strip()
    events, compactions = run_python(STORE_READ, url, session_id).split()
    assert int(events) > 800 and int(compactions) >= 1
