"""The worked plugin example (``examples/acme_owner``), installed with ``pip install -e`` from a temporary
copy, through the whole path in fresh processes: the ``compaction`` command lists, shows, audits and
rebuilds sessions holding its ``acme/owner`` event type, runs (and follows) its ``acme_savings``
projection, and a session holding an event type nobody registered stays readable.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.persistence import StoredEvent

from compaction.sessions.store import SessionStore
from tests.builders import turn, wait_until
from tests.conftest import ROOT

pytestmark = pytest.mark.slow  # one pip install, a dozen command-line processes

EXAMPLE = ROOT / "examples" / "acme_owner"
BIN = Path(sys.executable).parent


def _pip(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def acme(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The example installed (editable) from a fresh copy; uninstalled afterwards."""
    copy = tmp_path_factory.mktemp("example") / "acme_owner"
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    _pip("install", "--no-deps", "-e", str(copy))
    try:
        yield copy
    finally:
        _pip("uninstall", "-y", "acme-owner")


def cli(*argv: str, check: bool = True) -> Any:
    done = subprocess.run(
        [str(BIN / "compaction"), *argv, "--json"],
        capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
    )  # fmt: skip
    if check:
        assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


WRITE = """
import sys
from compaction.sessions.store import SessionStore
from acme_owner.events import OwnerSet
from tests.builders import turn

store = SessionStore.open(sys.argv[1])
for user in sys.argv[2:]:
    session = store.create()
    session.append(OwnerSet(user=user))
    for i in range(8):
        turn(session, f"task {i} " + "x" * 400, output="y" * 2000)
    store.save(session)
    print(session.id)
"""


def write_owned(url: str, *users: str) -> list[str]:
    """Sessions owned by ``users``, written by a process that has the plugin, each compacted by
    the command line (a real compaction, the template summarizer)."""
    done = subprocess.run(
        [sys.executable, "-c", WRITE, url, *users],
        capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    ids = done.stdout.split()
    for session_id in ids:
        compacted = cli("compact", session_id, "--store", url)
        assert compacted["compactions"], compacted
    return ids


def write_unknown(url: str) -> str:
    """A session whose last row is of a type no package defines (written behind the API)."""
    with SessionStore.open(url) as store:
        session = store.create()
        turn(session, "hello")
        store.save(session)
        state = b'{"seq":%d,"time":"2026-01-01T00:00:00Z","mood":"fine"}' % len(session)
        store.application.recorder.insert_events(
            [StoredEvent(session.id, len(session), "nobody/knows", state)]
        )
    return str(session.id)


def savings(views: Path) -> dict[str, tuple[str | None, int]]:
    with sqlite3.connect(views) as db:
        rows = db.execute("SELECT session_id, owner, saved FROM acme_savings").fetchall()
    return {key: (owner, saved) for key, owner, saved in rows}


def test_the_plugin_works_from_a_fresh_process(acme: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    ada, bob = write_owned(url, "ada", "bob")
    stranger = write_unknown(url)

    listed = cli("sessions", "--store", url)
    assert {row["session_id"] for row in listed["sessions"]} == {ada, bob, stranger}

    log = cli("show", ada, "--log", "--store", url)
    assert log["events"][0] == {"seq": 0, "type": "acme/owner", "known": True, "fields": {"user": "ada"}}
    unknown = cli("show", stranger, "--log", "--store", url)["events"][-1]
    assert unknown["type"] == "nobody/knows" and unknown["known"] is False
    assert unknown["fields"] == {"mood": "fine"}
    surface = cli("show", stranger, "--store", url)  # the model's view is untouched by it
    assert len(surface["messages"]) == 4

    audited = cli("audit", "--all", "--store", url)
    assert audited["passed"] is True, audited

    rebuilt = cli("rebuild", "--store", url)
    names = {p["name"]: p for p in rebuilt["projections"]}
    assert set(names) == {"surface", "ledger", "usage", "acme_savings"}
    rows = savings(tmp_path / "sessions.views.db")
    assert rows[ada][0] == "ada" and rows[bob][0] == "bob" and rows[ada][1] > 0
    assert rows[stranger] == (None, 0)

    strict = subprocess.run(
        [str(BIN / "compaction"), "show", stranger, "--store", url, "--json"],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "COMPACTION_STRICT_TYPES": "1"},
    )  # fmt: skip
    assert strict.returncode != 0 and "nobody/knows" in strict.stdout
    flagged = cli("audit", "--all", "--strict-types", "--store", url, check=False)
    assert "nobody/knows" in json.dumps(flagged) and flagged != audited


def test_the_plugin_projection_follows_the_log(acme: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    (first,) = write_owned(url, "ada")
    views = tmp_path / "sessions.views.db"
    follower = subprocess.Popen(
        [str(BIN / "compaction"), "rebuild", "--follow", "--projection", "acme_savings",
         "--poll", "0.05", "--store", url, "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        wait_until(lambda: views.exists() and first in _quiet(savings, views), 60, "the first session")
        (second,) = write_owned(url, "cy")
        wait_until(lambda: _quiet(savings, views).get(second, (None, 0))[1] > 0, 60, "the follow")
    finally:
        follower.send_signal(signal.SIGTERM)
        out, err = follower.communicate(timeout=60)
    assert follower.returncode == 0, err
    assert json.loads(out)["mode"] == "follow"
    assert savings(views)[second][0] == "cy"


def _quiet(read: Any, views: Path) -> dict[str, tuple[str | None, int]]:
    try:
        found: dict[str, tuple[str | None, int]] = read(views)
    except sqlite3.Error:  # the follower has not created its tables yet
        return {}
    return found


def test_a_session_of_an_unregistered_type_counts_it(tmp_path: Path) -> None:
    """Without any plugin: the row is an opaque event, counted under its stored type."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    session_id = uuid.UUID(write_unknown(url))
    with SessionStore.open(url) as store:
        session = store.get(session_id)
        assert session.type_counts.get("unknown") == 1
        (last,) = store.load_events(session_id, len(session) - 1)
        assert last.type == "nobody/knows"
