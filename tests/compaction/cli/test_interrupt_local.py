"""Ctrl-C during ``compact --summarizer local``, with the real embedded model: a progress line shows
while the model works, and SIGINT ends the process within 2 s with exit status 130, leaving no
process behind and no compaction open in the log."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from compaction.sessions.store import SessionStore
from recovery import recover
from tests.compaction.summarizers.test_local_model import require_local_model
from tests.conftest import ROOT, TRANSCRIPTS

pytestmark = [pytest.mark.llm, pytest.mark.slow]

PYDICOM = TRANSCRIPTS / "swe-agent" / "pydicom__pydicom-1458.traj"
COMPACTION = [
    sys.executable, "-c",
    # Ctrl-C raises KeyboardInterrupt even when this test runs where SIGINT is ignored (a background job)
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from compaction.cli.main import main; sys.exit(main())",
]  # fmt: skip


def in_session(session_id: int) -> list[int]:
    """The processes of the session ``session_id`` (``start_new_session`` made the child its leader)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the process ended meanwhile
        if int(fields[3]) == session_id and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def lines_of(stream: object, into: queue.Queue[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        into.put(line)


def test_ctrl_c_during_a_local_compaction_ends_at_once(tmp_path: Path) -> None:
    require_local_model()
    store = f"sqlite:///{tmp_path / 'local.db'}"
    imported = subprocess.run(
        [*COMPACTION, "--store", store, "import", str(PYDICOM)], cwd=ROOT, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    with subprocess.Popen(
        [*COMPACTION, "--store", store, "compact", "242f", "--window", "8000", "--summarizer", "local"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
    ) as child:  # fmt: skip
        said: queue.Queue[str] = queue.Queue()
        reader = threading.Thread(target=lines_of, args=(child.stderr, said), daemon=True)
        reader.start()
        try:
            progress = said.get(timeout=240)  # the server loads, then the first request starts
            time.sleep(1.0)  # the model is now reading the prompt or generating
            running = child.poll() is None
            child.send_signal(signal.SIGINT)
            sent = time.monotonic()
            code = child.wait(timeout=30)
            elapsed = time.monotonic() - sent
        finally:
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
        reader.join(timeout=10)
    assert progress.startswith("summarizing with local/smollm2 (request 1"), progress
    assert "Ctrl-C stops it" in progress
    assert running, "the compaction ended before it could be interrupted"
    assert code == 130
    assert elapsed < 2.0, f"exited {elapsed:.1f} s after SIGINT"
    assert in_session(child.pid) == []
    rest = "".join(said.queue)
    assert "compaction: interrupted" in rest
    with SessionStore.open(store) as opened:
        assert recover(opened).orphans == ()
