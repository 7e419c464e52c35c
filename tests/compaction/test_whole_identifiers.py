"""Identifiers whole: every path a checkpoint lists occurs whole in what it replaced (never cut at a
hyphen, a dot or a length limit, nor taken from a clipped quotation), on every public transcript."""

from __future__ import annotations

import asyncio
import math
import re
from pathlib import Path

import pytest

from compaction.engine.meters import HeuristicMeter
from compaction.handover.identifiers import clip_words, extract, word_head, word_tail
from compaction.importers import import_path
from compaction.service import BasicCompactService
from compaction.sessions.blocks import Message, TextBlock, ToolCallBlock, ToolResultBlock, text_of
from compaction.sessions.session import Session, project
from compaction.vocabulary.checkpoint import framed_summary, is_checkpoint
from compaction.vocabulary.config import BasicConfig
from tests.compaction.test_transcripts import ALLOWANCE, next_span, request_tokens, small_window
from tests.conftest import PUBLIC_TRANSCRIPTS


def log_text(session: Session) -> str:
    """Every message the log holds, this library's checkpoints aside (another harness's imported
    one is part of what was replaced): texts, call arguments, results."""
    parts: list[str] = []
    for event in session.events():
        message = project(event)
        if message is None or framed_summary(message) is not None:
            continue
        for block in message.content:
            if isinstance(block, TextBlock):
                parts.append(block.text)
            elif isinstance(block, ToolCallBlock):
                parts.append(block.arguments.encode().decode("unicode_escape", "ignore"))
                parts.append(block.arguments)
            elif isinstance(block, ToolResultBlock):
                parts.append(text_of(block.content))
    return "\n".join(parts)


def whole_in(path: str, text: str) -> bool:
    """``path`` occurs in ``text`` with no path character glued before or after it."""
    pattern = r"(?<![\w.-])" + re.escape(path) + r"(?![\w-]|\.\w)"
    return re.search(pattern, text) is not None


def checkpoint_paths(session: Session) -> list[str]:
    found: list[str] = []
    for event in session.events():
        message = project(event)
        if message is not None and is_checkpoint(message):
            as_agent = Message(id=message.id, role="assistant", content=message.content)
            found += [p for p in extract([as_agent]).paths if p not in found]
    return found


async def compact_until_it_fits(session: Session) -> None:
    meter = HeuristicMeter()
    service = BasicCompactService(BasicConfig(), meter=meter)
    window = small_window(session, meter, 4)
    threshold = math.floor(window * 0.8)
    while request_tokens(session, meter) >= threshold:
        span = next_span(session, meter, chunk=max(window // 2, ALLOWANCE))
        if span is None:
            return
        await service.compact_region(session, *span, manual=True)


@pytest.mark.parametrize("path", PUBLIC_TRANSCRIPTS, ids=lambda p: f"{p.parent.name[-16:]}/{p.name[:20]}")
def test_every_path_in_every_checkpoint_occurs_whole_in_the_span(path: Path) -> None:
    for item in import_path(path):
        session = item.session
        asyncio.run(compact_until_it_fits(session))  # merges earlier checkpoints, quotes clipped
        text = log_text(session)
        cut = [p for p in checkpoint_paths(session) if not whole_in(p, text)]
        assert not cut, (path.name, cut[:10])


def test_paths_are_never_cut_at_a_hyphen_a_dot_or_a_clipped_quotation() -> None:
    text = (
        "cd /Users/USER/workspace/danieldemmel.me-next && ls\n"
        "edit /repo/claude_code_log/parser.py then /workspace/ponylang__ponyc__0.1/build/build_release"
    )
    agent = Message(id="a", role="assistant", content=(TextBlock(text),))
    assert list(extract([agent]).paths) == [
        "/Users/USER/workspace/danieldemmel.me-next",
        "/repo/claude_code_log/parser.py",
        "/workspace/ponylang__ponyc__0.1/build/build_release",
    ]
    clipped = clip_words("Read /repo/claude_code_log/parser.py" + "x" * 80, 40)
    assert clipped.endswith("…")
    again = Message(id="b", role="assistant", content=(TextBlock(clipped),))
    assert all(whole_in(p, text) for p in extract([again]).paths)


def test_a_clipped_quotation_says_it_is_clipped_and_keeps_whole_words() -> None:
    line = "run pytest tests/test_api.py::test_login then fix src/app/api.py and rerun the suite"
    assert clip_words(line, 50) == "run pytest tests/test_api.py::test_login then …"
    assert word_head(line, 30) == "run pytest tests/test_api.py::…"  # no space in its second half
    assert word_tail(line, 30).startswith("… ") and word_tail(line, 30).endswith("rerun the suite")
    assert clip_words(line, 200) == line
