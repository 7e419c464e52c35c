"""Meter acceptance: after a compaction, the request total the meter reports is the one the
provider would count, on every public transcript that carries provider usage.

The provider's own figures, computed here independently of the meter's fit: the usage records since
the session's latest ``request/header`` (prompt tokens = input + cache read + cache write), each with
the heuristic price of the surface that request carried. The **provider-priced overhead** is the
first request's prompt minus its (tiny) surface; the **provider's observed ratio** is the median,
over the requests carrying at least a quarter of the final surface, of (prompt - overhead) /
surface. A compaction at window W (``compact_to_fit``, what ``compaction compact --window W`` runs)
must leave a meter estimate within 15% of ``overhead + ratio x surface after``. The 0.1 meter's
estimate (the latest usage total plus the surface change at the heuristic's price) is shown beside
it: its "phantom overhead" (the shadowed text subtracted at the heuristic's price, the rest of
the provider's count kept) is what the calibrated meter removes.

One check against a real provider count: the spotter session holds a compaction made by Claude Code
itself; the meter, given the log up to the first request after it, must estimate that request within
15% of what the provider counted.

And the threshold sweep: on the pi and Claude Code sample sessions, ``compact_to_fit`` at windows
from 100k down to 20k either ends under the threshold or names a cause that holds (the overhead alone
reaches it, or nothing left can be compacted: a second run commits nothing).

    .venv/bin/python -m benchmarks.bench_meter
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import statistics
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import Result
from compaction.engine.meters import HeuristicMeter
from compaction.errors import CompactionConfigError
from compaction.importers import import_path
from compaction.service import BasicCompactService
from compaction.sessions.events import AssistantMessage, RequestHeader
from compaction.sessions.session import Session
from compaction.sessions.surface import Surface
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.contract import FitReport

TOLERANCE = 1.15
"""Estimate vs the provider's figure: within 15% either way (the ratio reported is max(a/b, b/a))."""
SWEEP = (100_000, 60_000, 40_000, 30_000, 25_000, 20_000)
SWEPT = ("pi-mono/large-session.jsonl", "claude-code-log/-Users-dain-workspace-claude-code-log-sample")
TRANSCRIPTS = Path(__file__).resolve().parents[1] / "tests" / "data" / "transcripts"


@dataclass(frozen=True)
class UsageRecord:
    """One request the provider counted: its assistant message, prompt tokens, the usage total
    (with the output), and the heuristic price of the surface before and after the message."""

    seq: int
    prompt: int
    total: int
    surface: int
    surface_after: int
    replaced_before: bool  # a replacement landed since the previous record


@dataclass(frozen=True)
class Reference:
    """The provider's overhead and ratio for one session (see the module docstring)."""

    overhead: int
    ratio: float
    records: int

    def price(self, surface: int) -> int:
        return round(self.overhead + self.ratio * surface)


def usage_records(session: Session, meter: HeuristicMeter) -> list[UsageRecord]:
    """The session's usage records since its latest request/header, in log order."""
    surface = Surface()
    tokens = 0
    prices: dict[int, int] = {}
    records: list[UsageRecord] = []
    replaced = False
    for event in session.events():
        plan = surface.fold(event, session.event)
        before = tokens
        if plan.on_surface:
            prices[event.seq] = meter.event(event)
            if plan.is_replace:
                tokens -= sum(prices[s] for s in plan.shadowed)
                before = tokens
                replaced = True
            tokens += prices[event.seq]
        if isinstance(event, RequestHeader):
            records.clear()
        elif isinstance(event, AssistantMessage) and event.usage is not None:
            prompt = event.usage.total - event.usage.output_tokens
            if prompt > 0:
                records.append(UsageRecord(event.seq, prompt, event.usage.total, before, tokens, replaced))
                replaced = False
    return records


def provider_reference(records: list[UsageRecord]) -> Reference:
    first, last = records[0], records[-1]
    raw = first.prompt - first.surface
    grown = [r for r in records if r.surface > 0 and r.surface >= last.surface / 4] or [last]
    ratio = statistics.median((r.prompt - raw) / r.surface for r in grown)
    return Reference(round(first.prompt - ratio * first.surface), ratio, len(records))


def uncalibrated(records: list[UsageRecord], header_tokens: int, surface_now: int) -> int:
    """The 0.1 meter: the latest usage total plus the surface change since, at the heuristic's price."""
    last = records[-1]
    baseline = max(last.total, header_tokens + last.surface_after)
    return baseline + surface_now - last.surface_after


def sessions_with_usage(root: Path = TRANSCRIPTS) -> Iterator[tuple[str, Session]]:
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.suffix not in {".jsonl", ".traj", ".json"}:
            continue
        if "subagents" in path.parts or path.name.endswith(".md"):
            continue
        for index, item in enumerate(import_path(path)):
            if usage_records(item.session, HeuristicMeter()):
                name = str(path.relative_to(root))
                yield (f"{name}#{index}" if index else name), item.session


def window_for(reference: Reference, total: int) -> int:
    """A window that makes compaction necessary and leaves room above the overhead."""
    return max(total // 3, math.ceil(reference.overhead * 2))


async def compact(session: Session, window: int) -> FitReport:
    service = BasicCompactService(BasicConfig(context_window=window), meter=HeuristicMeter())
    return await service.compact_to_fit(session)


@dataclass(frozen=True)
class Acceptance:
    """One transcript's meter figures after a compaction at ``window``."""

    name: str
    window: int
    reference: Reference
    estimate: int
    expected: int
    uncalibrated: int
    surface_after: int
    compactions: int

    @property
    def ratio(self) -> float:
        return max(self.estimate / self.expected, self.expected / self.estimate)


def acceptance(name: str, session: Session) -> Acceptance:
    meter = HeuristicMeter()
    records = usage_records(session, meter)
    reference = provider_reference(records)
    before = meter.measure(session).total_tokens
    window = window_for(reference, before)
    report = asyncio.run(compact(session, window))
    reading = HeuristicMeter().measure(session)  # a fresh meter: from the log alone
    return Acceptance(
        name=name,
        window=window,
        reference=reference,
        estimate=reading.total_tokens,
        expected=reference.price(reading.surface_tokens),
        uncalibrated=uncalibrated(records, reading.header_tokens, reading.surface_tokens),
        surface_after=reading.surface_tokens,
        compactions=len(report.compactions),
    )


def after_foreign_compaction(session: Session) -> tuple[int, int] | None:
    """(meter estimate, provider count) of the first request after a compaction the harness made
    itself, the meter seeing the log up to that request only; None when the session has none."""
    records = usage_records(session, HeuristicMeter())
    crossing = next((r for r in records[1:] if r.replaced_before), None)
    if crossing is None:
        return None
    before = Session.replay(session.id, list(session.events(0, crossing.seq)), strict_structure=False)
    return HeuristicMeter().measure(before).total_tokens, crossing.prompt


@dataclass(frozen=True)
class SweepPoint:
    window: int
    status: str
    reason: str | None
    explained: bool  # under the threshold, or the named cause holds


def sweep_point(session: Session, window: int) -> SweepPoint:
    threshold = math.floor(window * BasicConfig().threshold_ratio)
    overhead = HeuristicMeter().measure(session).overhead_tokens
    if overhead >= threshold:  # refused before anything is written (CompactionConfigError)
        with contextlib.suppress(CompactionConfigError):
            asyncio.run(compact(session, window))
            return SweepPoint(window, "not refused", "fixed_overhead", False)
        return SweepPoint(window, "refused", "fixed_overhead", True)
    report = asyncio.run(compact(session, window))
    if report.shortfall is None:
        return SweepPoint(window, report.status, None, True)
    reason = report.shortfall.reason
    if reason == "fixed_overhead":
        holds = report.overhead_tokens >= report.threshold
    elif reason == "unsplittable_unit":
        holds = not asyncio.run(compact(session, window)).compactions  # nothing left to compact
    else:
        holds = False
    return SweepPoint(window, report.status, reason, holds)


def sweep(name: str, session_of: dict[str, Session]) -> list[SweepPoint]:
    points: list[SweepPoint] = []
    for window in SWEEP:
        session = Session.replay(session_of[name].id, list(session_of[name].events()), strict_structure=False)
        points.append(sweep_point(session, window))
    return points


def run() -> list[Result]:
    imported = dict(sessions_with_usage())
    results: list[Result] = []
    for name, session in imported.items():
        fresh = Session.replay(session.id, list(session.events()), strict_structure=False)
        a = acceptance(name, fresh)
        results.append(
            Result(
                f"meter after compaction, {name[:40]} (W {a.window:,}, {a.compactions} compactions)",
                f"{a.estimate:,} (surface {a.surface_after:,})",
                f"{a.expected:,} = {a.reference.overhead:,} + {a.reference.ratio:.3f} x surface; "
                f"0.1 meter: {a.uncalibrated:,}",
                a.ratio,
                TOLERANCE,
                higher_is_better=False,
            )
        )
        foreign = after_foreign_compaction(session)
        if foreign is not None:
            estimate, counted = foreign
            results.append(
                Result(
                    f"meter vs the provider after the harness's own compaction, {name[:40]}",
                    f"{estimate:,}",
                    f"{counted:,} (provider)",
                    max(estimate / counted, counted / estimate),
                    TOLERANCE,
                    higher_is_better=False,
                )
            )
    by_prefix = {prefix: n for n in imported for prefix in SWEPT if n.startswith(prefix)}
    for prefix, name in by_prefix.items():
        points = sweep(name, imported)
        explained = sum(p.explained for p in points)
        reached = sum(p.status == "under_threshold" for p in points)
        causes = ", ".join(f"{p.window // 1000}k: {p.reason}" for p in points if p.reason) or "none"
        results.append(
            Result(
                f"compact --window sweep, {prefix[:40]}",
                f"{reached}/{len(points)} under the threshold",
                f"explained: {causes}",
                explained / len(points),
                1.0,
                higher_is_better=True,
            )
        )
    return results


if __name__ == "__main__":
    from benchmarks.run import table

    rows = run()
    print(table(rows))
    sys.exit(0 if all(r.passed for r in rows) else 1)
