"""Shared helpers: timing, scratch databases, and the result row every benchmark returns."""

from __future__ import annotations

import gc
import io
import shutil
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Result:
    """One line of the report: ``ratio`` compares to ``baseline`` and must reach ``target``.

    ``higher_is_better`` says whether the ratio is a throughput ratio (library / raw, >= target)
    or a cost ratio (large / small, <= target).
    """

    name: str
    measured: str
    baseline: str
    ratio: float
    target: float | None  # None: informational, no target
    higher_is_better: bool

    @property
    def passed(self) -> bool:
        if self.target is None:
            return True
        return self.ratio >= self.target if self.higher_is_better else self.ratio <= self.target

    @property
    def target_text(self) -> str:
        if self.target is None:
            return "(info)"
        return f"{'>=' if self.higher_is_better else '<='} {self.target:g}"


def best_of(repeat: int, run: Callable[[], float]) -> float:
    """The fastest of ``repeat`` runs; ``run`` returns the seconds it measured itself."""
    return min(run() for _ in range(repeat))


def timed(action: Callable[[], object]) -> float:
    gc.collect()
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def peak_bytes(action: Callable[[], object]) -> int:
    """The peak of what Python allocated while ``action`` ran (``tracemalloc``), in bytes."""
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


class Discarded(io.TextIOBase):
    """A text file that keeps nothing (where a read writes when its output is not what is measured)."""

    def write(self, text: str) -> int:
        return len(text)


@contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=f"bench-{prefix}-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def fmt_seconds(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"
