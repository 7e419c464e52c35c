"""A store-to-store copy run as a real child process, to be SIGKILLed half-way (``test_copy.py``).

    python copy_child.py SOURCE_URL TARGET_URL MARKER --batch N --hang-after K

It copies every session of SOURCE into TARGET with :func:`compaction.sessions.copy.copy_sessions` (the code
the ``copy`` command runs) in batches of N events. After the K-th committed batch it writes MARKER
and hangs, so the parent kills it at a known point: some sessions complete, one with only a prefix
of its events, the rest not started.
"""

from __future__ import annotations

import argparse
import os
import threading
from pathlib import Path
from uuid import UUID

from compaction.sessions.copy import copy_sessions
from compaction.sessions.partitioned import open_store


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("source")
    parser.add_argument("target")
    parser.add_argument("marker", type=Path)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--hang-after", type=int, required=True)
    args = parser.parse_args()
    batches = 0

    def progress(session_id: UUID, done: int, total: int) -> None:
        nonlocal batches
        batches += 1
        if batches == args.hang_after:
            partial = args.marker.with_suffix(".partial")
            partial.write_text(f"{session_id} {done} {total}")
            os.replace(partial, args.marker)
            threading.Event().wait()  # forever: the parent SIGKILLs us here

    with open_store(args.source) as source, open_store(args.target) as target:
        copy_sessions(source, target, source.session_ids(), progress=progress, batch=args.batch)


if __name__ == "__main__":
    main()
