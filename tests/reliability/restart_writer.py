"""A writer that rides out database restarts, for the soak's restart fault: saves sessions of
``--events`` events, one atomic save each through the retrying helper, and appends each saved
session's id to ``ACKED_FILE`` (after the save returned). A save that still fails is not
acknowledged: its session is abandoned and the writer goes on with a new one after a pause.

    python -m tests.reliability.restart_writer URL ACKED_FILE --events N [--payload BYTES]

Runs until killed; prints one line per unacknowledged save on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from compaction.errors import StoreError
from compaction.sessions.blocks import Message, TextBlock
from compaction.sessions.events import UserMessage
from compaction.sessions.retry import save_retrying
from compaction.sessions.store import SessionStore

PAUSE = 0.2


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("acked", type=Path)
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--payload", type=int, default=200)
    args = parser.parse_args()
    text = "r" * args.payload
    with SessionStore.open(args.url) as store, args.acked.open("a") as acked:
        while True:
            session = store.create(strict_structure=False)
            session.append_all(
                UserMessage(
                    message=Message(id=f"u{i}", role="user", content=(TextBlock(text),)),
                    surface_op="append",
                )
                for i in range(args.events)
            )
            try:
                save_retrying(store, session, delay=0.5)
            except StoreError as e:
                print(f"unacknowledged: {type(e).__name__}: {e}"[:300], file=sys.stderr, flush=True)
                time.sleep(PAUSE)
                continue
            acked.write(f"{session.id}\n")
            acked.flush()
            os.fsync(acked.fileno())


if __name__ == "__main__":
    main()
