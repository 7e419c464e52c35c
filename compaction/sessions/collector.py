"""The garbage collector paused while a batch of objects that all stay alive is made.

CPython's collector runs a full collection each time the objects that survived the younger
collections grow by a quarter; building a batch that stays alive (a rebuild's decoded rows, a
span's fetched events, a span's readings for a compaction) triggers several, each walking every
tracked object of the process, for nothing: none of the batch is garbage. Pausing it for the
batch's making costs nothing it would have freed; the next collection after the pause walks the
batch once.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]


@contextmanager
def collector_paused() -> Iterator[None]:
    """The collector off for the block (left as it was: off stays off)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
