"""What the library keeps of a session goes with the session: no module of compaction, projections or
recovery holds a message, an event, a content block or a tool output after the session is dropped,
and the per-session analysis the service held (:class:`SpanAnalysis`) is released with it."""

from __future__ import annotations

import asyncio
import functools
import gc
import importlib
import logging
import pkgutil
import sys
import types
import weakref
from collections.abc import Iterator

import msgspec
import pytest

from compaction.audit import audit_events
from compaction.errors import CompactionConfigError
from compaction.handover import facts
from compaction.handover.analysis import SpanAnalysis, active_analysis
from compaction.handover.reading import Read, read
from compaction.service import BasicCompactService
from compaction.sessions.blocks import Block, Message
from compaction.sessions.events import SessionEvent
from compaction.sessions.hashing import event_hash
from compaction.sessions.session import Session, project
from compaction.summarizers.template import TemplateSummarizer, render_summary
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.events import CompactSummary
from compaction.vocabulary.summarizer import SummaryOutput, SummaryRequest
from tests.builders import end_turn, start_turn, tool_step, user

LIBRARY = ("compaction", "projections", "recovery")
MARK = "LEAKMARK"
"""In every tool output of the sessions below: a string holding it is a session's text."""
HELD = (Message, SessionEvent, *Block.__args__)
OPAQUE = (
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.CodeType,
    types.FrameType,
    logging.Logger,
    logging.Handler,
    logging.Manager,
    weakref.ref,
    str,
    bytes,
    int,
    float,
)
"""Not looked into: what they refer to is another module's (a function's globals) or the logging
machinery's (a test runner's captured records)."""
DEPTH = 12


def library_modules() -> list[types.ModuleType]:
    """Every library module that imports here (an adapter whose framework is not installed does not)."""
    for package in LIBRARY:
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, f"{package}."):
            if info.name.endswith("__main__"):
                continue
            try:
                importlib.import_module(info.name)
            except ImportError:
                continue
    return [m for name, m in sorted(sys.modules.items()) if name.split(".")[0] in LIBRARY]


def held(found: object) -> bool:
    return isinstance(found, HELD) or (isinstance(found, str) and MARK in found)


def _inside(found: object, module: str) -> Iterator[tuple[str, object]]:
    """What ``found`` refers to, named: the own attributes of a class defined in ``module`` (not
    another module's classes), a table's keys and values, an object's referents."""
    if isinstance(found, type):
        if found.__module__ == module:
            yield from ((f".{k}", v) for k, v in vars(found).items())
        return
    if isinstance(found, OPAQUE):
        return
    if isinstance(found, dict):
        for key, value in list(found.items()):
            yield f"[{key!r:.40}]", value
            yield f"<key {key!r:.40}>", key
        return
    for index, referent in enumerate(gc.get_referents(found)):
        yield f"<{type(found).__name__} {index}>", referent


def kept_by_modules(modules: list[types.ModuleType]) -> list[str]:
    """Where the modules' globals (their containers, objects and caches, ``functools.lru_cache``
    tables included) hold a message, an event, a block or a marked text."""
    hits: list[str] = []
    seen: set[int] = set()
    for module in modules:
        stack: list[tuple[str, object, int]] = [
            (f"{module.__name__}.{k}", v, 0) for k, v in vars(module).items() if not k.startswith("__")
        ]
        while stack:
            path, found, depth = stack.pop()
            if id(found) in seen:
                continue
            seen.add(id(found))
            if held(found):
                hits.append(f"{path}: {type(found).__name__}")
                continue
            if depth < DEPTH:
                stack += [(path + step, child, depth + 1) for step, child in _inside(found, module.__name__)]
    return hits


def lru_tables(modules: list[types.ModuleType]) -> list[str]:
    """The library's ``functools.lru_cache`` functions that keep anything (those a module imports
    from the standard library, ``urllib.parse.urlsplit``'s, are not the library's)."""
    full: list[str] = []
    for module in modules:
        for name, value in vars(module).items():
            if not isinstance(value, functools._lru_cache_wrapper):
                continue
            ours = str(getattr(value, "__module__", "")).split(".")[0] in LIBRARY
            if ours and value.cache_info().currsize:
                full.append(f"{module.__name__}.{name}")
    return full


def built_session(marker: str, steps: int = 12) -> Session:
    built = Session()
    user(built, f"Fix the failing tests in src/app/main.py ({marker})")
    start_turn(built)
    for index in range(steps):
        output = f"{marker}-{MARK}-{index}: src/app/module_{index}.py\nValueError: bad {index} {marker}"
        tool_step(built, n_calls=2, output=output)
    end_turn(built)
    return built


def exercised(
    service: BasicCompactService, marker: str
) -> tuple[weakref.ref[Session], weakref.ref[SpanAnalysis]]:
    """A session read ahead, compacted by the service, audited and summarized apart; then dropped.
    The weak references to it and to its analysis are what is left."""
    compacted = built_session(marker)
    service.observe(compacted)
    assert asyncio.run(service.compact_now(compacted)) is not None
    audits, _ = audit_events(list(compacted.events()))
    assert audits
    messages = [m for m in map(project, compacted.events()) if m is not None]
    assert render_summary(messages)
    return weakref.ref(compacted), weakref.ref(service.read_ahead.analysis(compacted))


@pytest.fixture(scope="module")
def modules() -> list[types.ModuleType]:
    return library_modules()


def test_no_module_keeps_a_dropped_session(modules: list[types.ModuleType]) -> None:
    assert len(modules) > 100
    service = BasicCompactService(BasicConfig(context_window=100_000, min_identifier_ratio=0.0))
    dropped, analysis = exercised(service, "first")
    gc.collect()
    assert dropped() is None
    assert analysis() is None  # released with the session, while the service lives on
    assert len(service.read_ahead) == 0
    assert active_analysis() is None
    assert kept_by_modules(modules) == []
    assert lru_tables(modules) == []


def test_the_check_finds_what_a_module_keeps(
    modules: list[types.ModuleType], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check can fail: a message in a module's table, and a tool output in a module's
    ``lru_cache``, are reported."""
    kept = built_session("planted")
    message = next(m for m in map(project, kept.events()) if m is not None)
    output = next(e for e in kept.events() if MARK in msgspec.json.encode(e).decode())

    def measured(text: str) -> int:
        return len(text)

    measured.__module__ = facts.__name__  # as if the library defined it
    planted_cache = functools.lru_cache(maxsize=None)(measured)
    planted_cache(str(output.message.content[0].content[0].text))  # type: ignore[attr-defined]
    monkeypatch.setattr(facts, "_planted_table", {"first": [message]}, raising=False)
    monkeypatch.setattr(facts, "_planted_cache", planted_cache, raising=False)
    hits = kept_by_modules(modules)
    assert any(hit.startswith("compaction.handover.facts._planted_table['first']") for hit in hits), hits
    assert any(hit.startswith("compaction.handover.facts._planted_cache") for hit in hits), hits
    assert lru_tables(modules) == ["compaction.handover.facts._planted_cache"]


def test_a_service_holds_an_analysis_per_live_session_only() -> None:
    service = BasicCompactService(BasicConfig(context_window=100_000, min_identifier_ratio=0.0))
    live = built_session("live")
    service.observe(live)
    refs = [exercised(service, f"gone-{index}") for index in range(3)]
    gc.collect()
    assert all(dropped() is None and analysis() is None for dropped, analysis in refs)
    assert len(service.read_ahead) == 1
    assert service.read_ahead.analysis(live).bytes > 0


class Yielding(TemplateSummarizer):
    """The template summarizer, letting the event loop run other tasks first (as a model call does)."""

    async def summarize(self, request: SummaryRequest) -> SummaryOutput:
        await asyncio.sleep(0)
        return await super().summarize(request)


def test_each_task_compacts_with_its_own_session_analysis(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two sessions compacting at once in one event loop: each reads with its own analysis."""
    config = BasicConfig(context_window=100_000, min_identifier_ratio=0.0)
    service = BasicCompactService(config, summarizer=Yielding())
    sessions = [built_session("task-0"), built_session("task-1")]
    owner = {id(m): i for i, s in enumerate(sessions) for m in map(project, s.events()) if m is not None}
    seen: list[tuple[int, SpanAnalysis | None]] = []
    real_read = read.compute

    def spy(message: Message) -> Read:
        seen.append((owner.get(id(message), -1), active_analysis()))
        return real_read(message)

    monkeypatch.setattr(read, "compute", spy)

    async def both() -> None:
        await asyncio.gather(*(service.compact_now(s) for s in sessions))

    asyncio.run(both())
    analyses = [service.read_ahead.analysis(s) for s in sessions]
    assert {index for index, _ in seen} >= {0, 1}
    assert all(analysis is analyses[index] for index, analysis in seen if index >= 0)


def test_the_bound_is_the_services_to_set_and_a_bad_one_is_refused() -> None:
    service = BasicCompactService(analysis_bytes=1 << 20)
    assert service.read_ahead.analysis(built_session("bound")).max_bytes == 1 << 20
    for bad in (-1, 1.5, True):
        with pytest.raises(CompactionConfigError, match="non-negative number of bytes"):
            BasicCompactService(analysis_bytes=bad)  # type: ignore[arg-type]


def test_a_tight_bound_reads_again_and_commits_the_same_checkpoint() -> None:
    def compacted(analysis_bytes: int) -> tuple[CompactSummary, SpanAnalysis]:
        config = BasicConfig(context_window=100_000, min_identifier_ratio=0.0)
        service = BasicCompactService(config, analysis_bytes=analysis_bytes)
        kept = built_session("tight")
        service.observe(kept)
        assert asyncio.run(service.compact_now(kept)) is not None
        summary = next(e for e in kept.events() if isinstance(e, CompactSummary))
        for seq, digest in summary.shadowed_hashes.items():  # each the hash of the stored encoding
            assert digest == event_hash(kept.event(int(seq)))
        return summary, service.read_ahead.analysis(kept)

    roomy, roomy_analysis = compacted(1 << 30)
    tight, tight_analysis = compacted(roomy_analysis.bytes // 4)
    assert roomy_analysis.budget.restarts == 0
    assert tight_analysis.budget.restarts > 0
    assert tight_analysis.bytes <= tight_analysis.max_bytes
    assert (tight.summary, tight.fidelity, tight.shadowed_seqs) == (
        roomy.summary,
        roomy.fidelity,
        roomy.shadowed_seqs,
    )
