"""A compaction worker for the crash tests, run as a real child process (``python crash_child.py``).

It opens the store by URL, loads the session, and runs automatic compaction with
:class:`BasicCompactService`. At ``--stage`` it writes ``--marker`` and then hangs until killed:

* ``started``, ``summarized``, ``before-commit``, ``committed``: in the ``on_progress`` callback;
* ``during-summary``: inside the summarizer, which never returns.

With ``--go PATH`` the summarizer instead writes the marker and waits until PATH exists, then
finishes normally (the slow-compaction test). ``--outcome PATH`` receives a JSON document: the
result, or the error type and message the compaction raised.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import threading
from pathlib import Path
from uuid import UUID

from compaction.errors import EventCompactionError
from compaction.service import BasicCompactService
from compaction.sessions.store import SessionStore
from compaction.summarizers.template import TemplateSummarizer
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.summarizer import SummaryOutput, SummaryRequest

PROGRESS_STAGES = ("started", "summarized", "before-commit", "committed")
STAGES = (*PROGRESS_STAGES, "during-summary", "none")


def write_marker(path: Path, text: str) -> None:
    """Write atomically, so the parent never reads a half-written marker."""
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    os.replace(partial, path)


class HoldingSummarizer(TemplateSummarizer):
    """Writes the marker when the summary starts, then hangs forever (or until ``go`` exists)."""

    def __init__(self, marker: Path, go: Path | None) -> None:
        self.marker = marker
        self.go = go

    async def summarize(self, request: SummaryRequest) -> SummaryOutput:
        write_marker(self.marker, "during-summary")
        go = self.go
        if go is None:
            await asyncio.Event().wait()  # forever: the parent kills us here
        while go is not None and not go.exists():  # the parent's file: polled across processes
            await asyncio.sleep(0.02)
        return await super().summarize(request)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    parser.add_argument("--session", required=True)
    parser.add_argument("--stage", choices=STAGES, required=True)
    parser.add_argument("--marker", type=Path, required=True)
    parser.add_argument("--window", type=int, required=True)
    parser.add_argument("--lease", type=float, default=600.0)
    parser.add_argument("--go", type=Path)
    parser.add_argument("--outcome", type=Path)
    args = parser.parse_args()

    def on_progress(stage: str) -> None:
        if stage == args.stage:
            write_marker(args.marker, stage)
            threading.Event().wait()  # forever: the parent SIGKILLs us here

    holding = args.stage == "during-summary" or args.go is not None
    summarizer = HoldingSummarizer(args.marker, args.go) if holding else TemplateSummarizer()
    service = BasicCompactService(
        BasicConfig(context_window=args.window, lease_seconds=args.lease),
        summarizer=summarizer,
        on_progress=on_progress,
    )
    with SessionStore.open(args.store) as store:
        session = store.get(UUID(args.session))
        outcome: dict[str, object]
        try:
            result = asyncio.run(service.compact_if_needed(session, store=store))
            outcome = {"result": None if result is None else result.compaction_id}
        except EventCompactionError as e:
            outcome = {"error": {"type": type(e).__name__, "message": str(e)}}
    if args.outcome is not None:
        write_marker(args.outcome, json.dumps(outcome))


if __name__ == "__main__":
    main()
