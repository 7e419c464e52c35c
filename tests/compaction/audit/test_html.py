"""``compaction audit --html``: a self-contained page that a real browser renders.

The page is opened in headless Chromium (``--dump-dom``); its inline script runs there and records
the rendered width of each timeline, so the assertions see the page as laid out, not just the file.
Locally a machine without Chromium skips the browser test; under ``CI=true`` it fails instead
(``.ci/run`` installs Debian's ``chromium``).
"""

from __future__ import annotations

import asyncio
import html
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from compaction.audit.html import Limits, render_html, surface_tokens
from compaction.audit.report import audit_log, audit_session, load_log
from compaction.cli.demo import run_demo_session
from compaction.cli.main import main
from compaction.engine.meters import HeuristicMeter
from compaction.handover.completion import APPENDIX_TITLE
from compaction.service import BasicCompactService
from compaction.sessions.blocks import Message, TextBlock, text_of
from compaction.sessions.events import UserMessage
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore
from compaction.vocabulary.config import BasicConfig, CompletionMode
from compaction.vocabulary.events import CompactSummary
from compaction.vocabulary.instruction import SECTIONS
from tests.builders import start_turn, tool_step, user
from tests.compaction.test_support import ScriptedSummarizer

WINDOW = 6000
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
)  # fmt: skip
INJECTED = "<script>document.title='pwned'</script><b id=\"injected\">x</b>"
WEAK = "\n\n".join(f"## {name}\n- Worked on the task; made progress and will continue." for name in SECTIONS)
"""A plausible eight-section summary with no identifier: the completion appends what it missed."""
OUTPUT = "ValueError: bad value in src/app/core.py line 3\n" + "    rows = compute(rows)\n" * 20


def chromium() -> str:
    found = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    if found:
        return found
    if os.environ.get("CI") == "true":
        pytest.fail("headless Chromium is required under CI=true (apt-get install chromium)")
    pytest.skip("chromium is not installed (apt-get install chromium)")


def dump_dom(page: Path, profile: Path) -> str:
    done = subprocess.run(
        [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def compacted_demo(url: str) -> Session:
    with SessionStore.open(url) as store:
        session = store.create()
        session.append(
            UserMessage(
                message=Message(id="hostile", role="user", content=(TextBlock(INJECTED),)),
                surface_op="append",
            )
        )
        service = BasicCompactService(BasicConfig(context_window=WINDOW))
        asyncio.run(
            run_demo_session(
                session, store=store, turns=1, steps_per_turn=24, context_window=WINDOW,
                pre_step=[service.pre_step],
            )
        )  # fmt: skip
        store.save(session)
    return session


@pytest.mark.browser
def test_the_html_report_renders_in_headless_chromium(sqlite_url: str, tmp_path: Path) -> None:
    session = compacted_demo(sqlite_url)
    page = tmp_path / "report" / "audit.html"
    assert main(["--store", sqlite_url, "audit", str(session.id), "--html", str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", text), "the page must not fetch anything"
    dom = dump_dom(page, tmp_path / "profile")
    assert 'data-rendered="true"' in dom
    svg = re.search(r"<svg[^>]*\bclass=\"timeline\"[^>]*>", dom)
    assert svg is not None, "the timeline SVG is in the DOM"
    width = re.search(r'data-rendered-width="(\d+)"', svg.group(0))
    marks = re.search(r'data-marks="(\d+)"', svg.group(0))
    with SessionStore.open(sqlite_url) as store:
        audit = audit_session(store, session.id)
    assert width is not None and int(width.group(1)) > 300
    assert marks is not None and int(marks.group(1)) == len(audit.compactions) >= 2
    assert 'class="window"' in dom and 'class="threshold"' in dom
    tables = re.findall(r'<table class="checks[^"]*"', dom)
    assert len(tables) == len(audit.compactions) + 1  # one per compaction, plus the log-level checks
    for compaction in audit.compactions:
        assert f'id="c-{compaction.compaction_id}"' in dom
    assert "content-hashes" in dom and "all eight sections present" in dom
    assert '<b id="injected">' not in dom and "<title>compaction audit: audit passed</title>" in dom


def test_the_timeline_follows_the_surface_and_marks_failures(sqlite_url: str) -> None:
    session = compacted_demo(sqlite_url)
    with SessionStore.open(sqlite_url) as store:
        audit = audit_session(store, session.id)
    points = surface_tokens(audit.log.events, HeuristicMeter())
    assert len(points) == len(session)
    assert points[-1] == HeuristicMeter().surface_tokens(session)
    for compaction in audit.compactions:
        seq = compaction.replacement_seq
        assert seq is not None and points[seq] < points[seq - 1]  # every compaction is a drop
    page = render_html([audit], limits=Limits(window=WINDOW))
    assert page.count('class="compaction-mark"') == len(audit.compactions)
    assert "#dc2626" not in page.split("<polyline")[1].split("</svg>")[0]  # no red marker: all passed
    assert "&lt;script&gt;document.title" in page and INJECTED not in page


# ---------------------------------------------------------------- a completed summary, in two parts


def completed_report(
    url: str, summarizer: ScriptedSummarizer, completion: CompletionMode
) -> tuple[str, CompactSummary]:
    """The HTML report of a session whose one compaction's summary the compaction completed."""
    session = Session()
    user(session, "Fix the failing tests under tests/ and run `pytest -q` until green.")
    start_turn(session)
    for _ in range(4):
        tool_step(session, n_calls=1, output=OUTPUT)
    service = BasicCompactService(BasicConfig(completion=completion), summarizer=summarizer)
    result = asyncio.run(service.compact_region(session, session.nodes[1], session.nodes[4]))
    summary = session.event(result.summary_seq)
    assert isinstance(summary, CompactSummary) and summary.completion is not None
    with SessionStore.open(url) as store:
        store.save(session)
        audit = audit_log(load_log(store, session.id))
    assert audit.passed
    return render_html([audit]), summary


def pre(page: str, css_class: str) -> str:
    (found,) = re.findall(rf'<pre class="{css_class}">(.*?)</pre>', page, re.DOTALL)
    return html.unescape(found)


def test_a_completed_summary_shows_what_the_model_wrote_apart_from_what_the_completion_added(
    sqlite_url: str,
) -> None:
    page, summary = completed_report(sqlite_url, ScriptedSummarizer(WEAK), "appendix")
    record = summary.completion
    assert record is not None and record.appendix.startswith(f"## {APPENDIX_TITLE}")
    assert "<h4>summary, completed by the compaction</h4>" in page
    assert '<h5 class="summary-label">written by the summarizer (scripted/scripted-summary)</h5>' in page
    assert (
        '<h5 class="summary-label">added by the compaction (appendix completion), not by the summarizer</h5>'
        in page
    )
    model, added = pre(page, "summary-model"), pre(page, "summary-added")
    assert model == WEAK  # the model's words only: no appendix attributed to it
    assert APPENDIX_TITLE not in model and "src/mod_1_0.py" not in model
    assert added == record.appendix and "src/mod_1_0.py" in added  # inside `cat src/mod_1_0.py`
    assert f"{model}\n\n{added}" == text_of(summary.summary)
    assert page.index('class="summary-model"') < page.index('class="summary-added"')
    assert 'class="summary-text"' not in page and 'class="summary-draft"' not in page


def test_a_repaired_summary_also_shows_the_first_draft(sqlite_url: str) -> None:
    repaired = WEAK + "\n- Fixed the ValueError."
    page, summary = completed_report(sqlite_url, ScriptedSummarizer(WEAK, repaired), "both")
    assert summary.completion is not None and summary.completion.draft == WEAK
    assert pre(page, "summary-model") == repaired and pre(page, "summary-draft") == WEAK
    assert "(both completion), not by the summarizer" in page
    assert "replaced after one repair request" in page


def test_a_summary_nothing_was_added_to_is_one_block(sqlite_url: str) -> None:
    session = compacted_demo(sqlite_url)
    with SessionStore.open(sqlite_url) as store:
        audit = audit_session(store, session.id)
    page = render_html([audit])
    assert page.count('<pre class="summary-text">') == len(audit.compactions) >= 2
    assert 'class="summary-model"' not in page and 'class="summary-added"' not in page
