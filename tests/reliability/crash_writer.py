"""A writer to be killed (SIGKILL) by the crash checks: saves sessions of ``--events`` events, one
atomic save each, and appends each saved session's id to ``--acked`` (after the save returned).

    python -m tests.reliability.crash_writer URL ACKED_FILE --events N [--payload BYTES]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from compaction.sessions.blocks import Message, TextBlock
from compaction.sessions.events import UserMessage
from compaction.sessions.store import SessionStore


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("acked", type=Path)
    parser.add_argument("--events", type=int, default=500)
    parser.add_argument("--payload", type=int, default=200)
    args = parser.parse_args()
    text = "p" * args.payload
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
            store.save(session)
            acked.write(f"{session.id}\n")
            acked.flush()
            os.fsync(acked.fileno())


if __name__ == "__main__":
    main()
