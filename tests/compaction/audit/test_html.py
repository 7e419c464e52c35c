"""``compaction audit --html``: a self-contained page that a real browser renders.

The page is opened in headless Chromium (``--dump-dom``); its inline script runs there and records
the rendered width of each timeline, so the assertions see the page as laid out, not just the file.
Locally a machine without Chromium skips the browser test; under ``CI=true`` it fails instead
(``.ci/run`` installs Debian's ``chromium``).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from compaction.audit.html import Limits, render_html, surface_tokens
from compaction.audit.report import audit_session
from compaction.basic import BasicCompactService
from compaction.cli.demo import run_demo_session
from compaction.cli.main import main
from compaction.config import BasicConfig
from compaction.meters import HeuristicMeter
from compaction.sessions.blocks import Message, TextBlock
from compaction.sessions.events import UserMessage
from compaction.sessions.session import Session
from compaction.sessions.store import SessionStore

WINDOW = 6000
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
)  # fmt: skip
INJECTED = "<script>document.title='pwned'</script><b id=\"injected\">x</b>"


def chromium() -> str:
    found = shutil.which("chromium") or (
        "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None
    )
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
    assert "#dc2626" not in page.split('<polyline')[1].split("</svg>")[0]  # no red marker: all passed
    assert "&lt;script&gt;document.title" in page and INJECTED not in page
