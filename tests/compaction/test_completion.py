"""Summaries completed before the gate (compaction.handover.completion): a weak model's text, a user's own
summarizer's text, an OpenAI-compatible server's text all commit with the default config; the
checkpoint carries what they missed; ``compact/summary`` records what the model wrote and what was
added, and the audit shows both and still passes."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compaction.audit.checks import audit_events
from compaction.audit.report import audit_document, audit_log, load_log, render_document
from compaction.errors import CompactionConfigError, FidelityError, SummarizerError
from compaction.handover.completion import (
    APPENDIX_TITLE,
    ERROR_COMMAND_CHARS,
    HEADER_CHARS,
    MAX_ERRORS,
    Gaps,
    Needs,
    appendix,
    build_appendix,
    clip,
    gaps,
    listed,
    model_text,
    repair_request,
    without_echo,
)
from compaction.handover.facts import SpanFacts, span_facts
from compaction.handover.failures import ErrorFact
from compaction.handover.fidelity import missing_sections
from compaction.handover.identifiers import Identifiers, extract
from compaction.handover.retention import Retention, retention
from compaction.importers import import_path
from compaction.service import BasicCompactService
from compaction.sessions.blocks import text_of
from compaction.sessions.session import Session, project
from compaction.sessions.store import SessionStore
from compaction.vocabulary.config import BasicConfig
from compaction.vocabulary.events import CompactSummary
from compaction.vocabulary.instruction import INSTRUCTION, SECTIONS
from compaction.vocabulary.summarizer import Summarizer, SummaryOutput, SummaryRequest
from tests.builders import run_human, run_json, start_turn, tool_step, user
from tests.compaction.summarizers.provider_servers import ProviderServer, Reply, openai_frames, openai_usage
from tests.compaction.test_support import ScriptedSummarizer, bracket, sectioned
from tests.conftest import PUBLIC_TRANSCRIPTS, TRANSCRIPTS

OUTPUT = "ValueError: bad value in src/app/core.py line 3\n" + "    rows = compute(rows)\n" * 20
WEAK = "\n\n".join(f"## {name}\n- Worked on the task; made progress and will continue." for name in SECTIONS)
"""A plausible eight-section summary that keeps no identifier at all (a "weak model")."""
SHORT_SESSION = TRANSCRIPTS / "swe-agent" / "6e44b9__sweagenttestrepo-1c2844.traj"


def working_session(steps: int = 4) -> Session:
    session = Session()
    user(session, "Fix the failing tests under tests/ and run `pytest -q` until green.")
    start_turn(session)
    for _ in range(steps):
        tool_step(session, n_calls=1, output=OUTPUT)
    return session


def span_identifiers(session: Session, seqs: tuple[int, ...]) -> list[str]:
    return extract(m for m in (project(session.event(s)) for s in seqs) if m).all()


async def compact(summarizer: Summarizer, **config: Any) -> tuple[Session, CompactSummary]:
    session = working_session()
    service = BasicCompactService(BasicConfig(**config), summarizer=summarizer)
    result = await service.compact_region(session, session.nodes[1], session.nodes[4])
    _, summary, _ = bracket(session, result)
    return session, summary


# ---------------------------------------------------------------- the appendix (the default)


async def test_a_weak_models_summary_commits_with_the_missing_references_appended() -> None:
    with pytest.raises(FidelityError, match="summary keeps 0/5 verbatim identifiers"):
        await compact(ScriptedSummarizer(WEAK), completion="off")  # what the gate alone says
    session, summary = await compact(ScriptedSummarizer(WEAK))
    wanted = span_identifiers(session, summary.shadowed_seqs)
    text = text_of(summary.summary)
    assert text.startswith(WEAK) and f"## {APPENDIX_TITLE}" in text
    assert all(ident in text for ident in wanted)
    record = summary.completion
    assert record is not None and record.mode == "appendix" and record.draft is None
    assert set(record.added_identifiers) == set(wanted) and record.added_sections == ()
    assert text == f"{WEAK}\n\n{record.appendix}" and model_text(text, record) == WEAK
    assert record.model_fidelity is not None and record.model_fidelity.identifiers_kept == 0
    assert summary.fidelity is not None and summary.fidelity.retention_ratio == 1.0
    # the checkpoint on the surface carries the references
    checkpoint = session.derive_messages()[1]
    assert all(ident in text_of(checkpoint.content) for ident in wanted)


class OwnSummarizer(Summarizer):
    """A user's own summarizer: any text at all."""

    provider = "mine"
    model = "my-model"

    async def summarize(self, request: SummaryRequest) -> SummaryOutput:
        return SummaryOutput(text="The agent read two modules.", provider=self.provider, model=self.model)


async def test_a_custom_summarizer_with_any_text_passes_with_the_default_config() -> None:
    session, summary = await compact(OwnSummarizer())
    record = summary.completion
    assert record is not None and record.added_sections == SECTIONS
    text = text_of(summary.summary)
    assert missing_sections(text) == () and text.startswith("The agent read two modules.")
    audits, log_checks = audit_events(list(session.events()))
    assert all(c.passed for c in log_checks) and audits[0].passed, audits[0].failed
    completion = next(c for c in audits[0].checks if c.name == "completion")
    assert "model wrote 27 characters" in completion.evidence
    assert "8 sections" in completion.evidence and "5 identifiers" in completion.evidence


async def test_a_complete_summary_gets_no_appendix() -> None:
    commands = [f"cat src/mod_{step}_0.py" for step in (1, 2)]
    text = sectioned(*commands, "src/mod_1_0.py src/mod_2_0.py ValueError")
    _, summary = await compact(ScriptedSummarizer(text))
    assert text_of(summary.summary) == text
    assert summary.completion is not None and summary.completion.appendix == ""


def test_the_appendix_lists_user_asks_open_tasks_and_errors_with_their_sections() -> None:
    facts = SpanFacts(
        user_asks=("check again", "new beads for the epic were added. tackle them"),
        open_tasks=("Add lazy_html to mix.exs",),
        errors=(ErrorFact("Bash", "mix test", "** (UndefinedFunctionError) lazy_html missing", False),),
        intent="Run mix test again after adding the dependency.",
    )
    found = Gaps(
        sections=("Pending Jobs", "Next Step"),
        user_asks=facts.user_asks,
        errors=facts.errors,
        open_tasks=facts.open_tasks,
        identifiers=("mix.exs",),
    )
    block = appendix(found, facts)
    assert block.startswith(f"## {APPENDIX_TITLE}\n")
    assert "  - check again\n" in block and "tackle them" in block
    assert "  - Bash: mix test -> ** (UndefinedFunctionError) lazy_html missing (not fixed)" in block
    assert "- Other: `mix.exs`" in block
    assert "## Pending Jobs\n- Add lazy_html to mix.exs" in block
    assert "## Next Step\n- Run mix test again after adding the dependency." in block
    assert appendix(Gaps(), facts) == ""


def test_the_appendix_carries_every_missed_failure_once_per_line() -> None:
    """Fixed or not, early or late: each failure the summary missed, by its first informative line
    (a repeated line once, with its count and latest call), its command clipped."""
    long_command = "pytest " + " ".join(f"tests/test_{i}.py" for i in range(40))
    errors = (
        *(
            ErrorFact("Edit", f"src/mod_{i}.py", f"String to replace not found in src/mod_{i}.py", fixed=True)
            for i in range(8)
        ),
        ErrorFact("Bash", "make", "fatal error: zlib.h: No such file or directory", fixed=True),
        ErrorFact("Bash", "make -j2", "fatal error: zlib.h: No such file or directory", fixed=False),
        ErrorFact("Bash", long_command, "E   ModuleNotFoundError: No module named 'yaml'", fixed=False),
    )
    facts = SpanFacts(errors=errors)
    summary = "## Errors and Fixes\n- String to replace not found in src/mod_3.py"
    found = gaps(summary, facts)
    assert len(found.errors) == len(errors) - 1  # all but the one the summary mentions
    block = appendix(found, facts)
    for i in (0, 1, 2, 4, 5, 6, 7):  # fixed early failures, which the last five alone would drop
        # the line names the file the edit was on: it is not said twice
        line = f"  - Edit -> String to replace not found in src/mod_{i}.py (fixed later)\n"
        assert line in block
    assert "mod_3.py" not in block
    assert block.count("zlib.h") == 1
    assert "  - Bash: make -j2 -> fatal error: zlib.h: No such file or directory ×2 (not fixed)\n" in block
    (yaml,) = [line for line in block.splitlines() if "yaml" in line]
    assert " [...] " in yaml and len(yaml) < ERROR_COMMAND_CHARS + 100
    assert retention(f"{summary}\n\n{block}", facts).errors == (len(errors), len(errors))


def test_the_appendix_lists_at_most_max_errors_lines_and_counts_the_rest() -> None:
    errors = tuple(
        ErrorFact("Bash", f"step {i}", f"error: step {i} failed", fixed=i != 3) for i in range(MAX_ERRORS + 5)
    )
    facts = SpanFacts(errors=errors)
    found = gaps(WEAK, facts)
    block = appendix(found, facts)
    listed = [line for line in block.splitlines() if line.startswith("  - Bash -> ")]
    assert len(listed) == MAX_ERRORS
    assert "  - Bash -> error: step 3 failed (not fixed)" in listed  # the unfixed one is kept
    assert listed[-1] == f"  - Bash -> error: step {MAX_ERRORS + 4} failed (fixed later)"  # then the latest
    assert "  - ... and 5 more failures (5 other lines), in the log" in block


@pytest.mark.parametrize("path", PUBLIC_TRANSCRIPTS, ids=lambda p: p.name[:24])
async def test_a_completed_weak_summary_keeps_every_error_on_the_public_transcripts(path: Path) -> None:
    """The weak model's summary of each public session (the default config, the gate included),
    completed, keeps every failure's first informative line at >= 10x on spans over 20k tokens."""
    for item in import_path(path):
        session = item.session
        result = await BasicCompactService(summarizer=ScriptedSummarizer(WEAK)).compact_now(session)
        assert result is not None
        summary = session.event(result.summary_seq)
        assert isinstance(summary, CompactSummary) and summary.completion is not None
        facts = span_facts([m for m in (project(session.event(s)) for s in result.shadowed_seqs) if m])
        kept, total = retention(text_of(summary.summary), facts).errors
        assert kept == total, (path.name, kept, total)
        assert Retention.ratio((kept, total)) >= 0.8
        if result.shadowed_token_count > 20_000:
            assert result.shadowed_token_count / result.summary_token_count >= 10


def test_gaps_follow_the_span_facts() -> None:
    facts = SpanFacts(user_asks=("please port the parser to Rust",), open_tasks=("write the docs",))
    found = gaps(sectioned("please port the parser to Rust"), facts)
    assert found.user_asks == () and found.open_tasks == ("write the docs",)
    assert found.sections == () and found.identifiers == ()


def test_completion_is_validated() -> None:
    with pytest.raises(CompactionConfigError, match=r"completion \('bogus'\) must be one of appendix, "):
        BasicConfig(completion="bogus")  # type: ignore[arg-type]
    assert BasicConfig().completion == "appendix"


# ---------------------------------------------------------------- repair, and both


class RepairingSummarizer(ScriptedSummarizer):
    """First a weak summary; asked to repair, adds the identifiers the request lists (up to
    ``keep`` of them), as a model that follows the repair instruction would."""

    def __init__(self, keep: int = 99, fail: bool = False) -> None:
        super().__init__(WEAK)
        self.keep = keep
        self.fail = fail

    async def summarize(self, request: SummaryRequest) -> SummaryOutput:
        if not self.requests:
            return await super().summarize(request)
        self.requests.append(request)
        if self.fail:
            raise SummarizerError("scripted: the repair call failed", code="server_error")
        listed = re.findall(r"^- identifier: (.+)$", request.instruction, re.MULTILINE)
        text = WEAK + "\n" + "\n".join(f"- {i}" for i in listed[: self.keep])
        return SummaryOutput(text=text, provider=self.provider, model=self.model)


async def test_repair_sends_one_request_listing_what_is_missing() -> None:
    summarizer = RepairingSummarizer()
    session, summary = await compact(summarizer, completion="repair")
    first, repair = summarizer.requests
    wanted = span_identifiers(session, summary.shadowed_seqs)
    (draft,) = repair.messages
    assert WEAK in text_of(draft.content) and "<compacted-summary>" in text_of(draft.content)
    assert [f"- identifier: {i}" in repair.instruction for i in wanted] == [True] * len(wanted)
    assert (repair.system, repair.max_tokens) == (first.system, first.max_tokens)
    record = summary.completion
    assert record is not None and record.draft == WEAK and record.appendix == ""
    assert all(i in text_of(summary.summary) for i in wanted)


async def test_both_repairs_then_appends_what_is_still_missing() -> None:
    summarizer = RepairingSummarizer(keep=2)
    session, summary = await compact(summarizer, completion="both")
    wanted = span_identifiers(session, summary.shadowed_seqs)
    record = summary.completion
    assert record is not None and record.draft == WEAK and len(summarizer.requests) == 2
    assert len(record.added_identifiers) == len(wanted) - 2
    assert all(i in text_of(summary.summary) for i in wanted)


async def test_a_failed_repair_falls_back_to_the_draft() -> None:
    with pytest.raises(FidelityError, match="summary keeps 0/5"):
        await compact(RepairingSummarizer(fail=True), completion="repair")
    _, summary = await compact(RepairingSummarizer(fail=True), completion="both")
    record = summary.completion
    assert record is not None and record.draft is None and len(record.added_identifiers) == 5
    assert record.repair_error is not None and "the repair call failed" in record.repair_error


def test_the_repair_request_carries_no_shadowed_messages() -> None:
    request = SummaryRequest(
        session_id="s", compaction_id="c", system="sys", tools=(), messages=(), instruction="x",
        max_tokens=99,
    )  # fmt: skip
    repair = repair_request(request, "draft", Gaps(sections=("Next Step",), identifiers=("a/b.py",)))
    assert len(repair.messages) == 1 and "- section: ## Next Step" in repair.instruction
    assert repair.instruction.endswith("- identifier: a/b.py")


# ---------------------------------------------------------------- the audit shows both


async def test_the_audit_shows_model_text_and_what_was_added(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    session, summary = await compact(ScriptedSummarizer(WEAK))
    with SessionStore.open(url) as store:
        store.save(session)
        audit = audit_log(load_log(store, session.id))
    assert audit.passed
    (compaction,) = audit_document([audit])["sessions"][0]["compactions"]
    shown = compaction["completion"]
    assert shown["mode"] == "appendix" and shown["model_chars"] == len(WEAK)
    assert shown["added_identifiers"] == 5 and shown["model_identifiers_kept"] == "0/5"
    from io import StringIO

    from rich.console import Console

    out = StringIO()
    render_document(audit_document([audit]), Console(file=out, width=200))
    added = len(text_of(summary.summary)) - len(WEAK) - 2
    line = f"completed by appendix: the model kept 0/5 identifiers; added {added} characters (5 identifiers)"
    assert line in out.getvalue()


async def test_the_audit_fails_an_appendix_that_lists_what_the_span_never_had() -> None:
    import msgspec

    session, summary = await compact(ScriptedSummarizer(WEAK))
    assert summary.completion is not None
    forged = msgspec.structs.replace(
        summary.completion, added_identifiers=(*summary.completion.added_identifiers, "src/invented.py")
    )
    events = [
        msgspec.structs.replace(e, completion=forged) if e.seq == summary.seq else e for e in session.events()
    ]
    audits, _ = audit_events(events)
    (check,) = [c for c in audits[0].checks if c.name == "completion"]
    assert not check.passed and "src/invented.py" in check.evidence


class Scanned(str):
    """A text that counts the whole scans asked of it: ``in``, and ``find`` or ``rfind`` over all
    of it (a ``find`` resumed after the last hit goes on with the same pass)."""

    scans = 0

    def __contains__(self, part: str) -> bool:  # type: ignore[override]
        self.scans += 1
        return super().__contains__(part)

    def find(self, part: str, *bounds: Any) -> int:
        self.scans += not bounds
        return super().find(part, *bounds)

    def rfind(self, part: str, *bounds: Any) -> int:
        self.scans += not bounds
        return super().rfind(part, *bounds)


async def test_the_audit_looks_up_a_long_appendix_in_one_pass_not_once_per_identifier() -> None:
    """A long span's appendix runs to a megabyte and lists tens of thousands of
    identifiers: scanning it once per identifier made the audit of a 250k-event session grow with
    the square of the span."""
    import msgspec

    session = working_session(steps=300)
    service = BasicCompactService(BasicConfig(), summarizer=ScriptedSummarizer(WEAK))
    result = await service.compact_region(session, session.nodes[1], session.nodes[-1])
    _, summary, _ = bracket(session, result)
    assert summary.completion is not None
    added = len(summary.completion.added_identifiers)
    assert added > 500
    appendix = Scanned(summary.completion.appendix)
    forged = msgspec.structs.replace(summary.completion, appendix=appendix)
    events = [
        msgspec.structs.replace(e, completion=forged) if e.seq == summary.seq else e for e in session.events()
    ]
    audits, _ = audit_events(events)
    (check,) = [c for c in audits[0].checks if c.name == "completion"]
    assert check.passed, check.evidence
    assert f"({added} identifiers" in check.evidence
    assert appendix.scans < added // 10, (
        f"the appendix was scanned {appendix.scans} times for {added} identifiers"
    )


# ---------------------------------------------------------------- the command line, over real HTTP


@pytest.fixture
def provider() -> Iterator[tuple[ProviderServer, asyncio.AbstractEventLoop]]:
    """An OpenAI-compatible server on its own loop in a thread (the CLI runs its own loop)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = asyncio.run_coroutine_threadsafe(ProviderServer().start(), loop).result(10)
    try:
        yield server, loop
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_cli_openai_summaries_without_identifiers_commit_with_the_default_config(
    provider: tuple[ProviderServer, asyncio.AbstractEventLoop], tmp_path: Path
) -> None:
    server, _ = provider
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    session = import_path(SHORT_SESSION)[0].session
    with SessionStore.open(url) as store:
        store.save(session)
    server.script(*[Reply(frames=openai_frames([WEAK[:200], WEAK[200:]], usage=openai_usage(900, 120)))] * 6)
    code, document = run_json(
        "--store", url, "compact", str(session.id), "--summarizer", "openai",
        "--base-url", server.base_url, "--model", "gpt-4o-mini", "--window", "2000",
    )  # fmt: skip
    assert code == 0, document
    assert document["compactions"] and len(server.received) == len(document["compactions"])
    with SessionStore.open(url) as store:
        stored = store.get(session.id)
        for compaction in document["compactions"]:
            summary = stored.event(compaction["summary_seq"])
            assert isinstance(summary, CompactSummary) and summary.completion is not None
            assert summary.completion.model_fidelity is not None
            assert summary.completion.model_fidelity.identifiers_kept == 0
            assert model_text(text_of(summary.summary), summary.completion) == WEAK
        # The checkpoint on the surface carries the references of everything it stands for,
        # through every merge of an earlier checkpoint.
        first = document["compactions"][0]
        wanted = span_identifiers(stored, tuple(first["shadowed_seqs"]))
        (checkpoint,) = [m for m in stored.derive_messages() if m.id.startswith("checkpoint-")]
        assert wanted and all(i in text_of(checkpoint.content) for i in wanted)
    code, audit = run_json("--store", url, "audit", str(session.id))
    assert code == 0 and audit["passed"], audit


async def test_a_merge_carries_the_earlier_checkpoints_references_on() -> None:
    session = working_session(steps=6)
    service = BasicCompactService(BasicConfig(), summarizer=ScriptedSummarizer(WEAK))
    first = await service.compact_region(session, session.nodes[1], session.nodes[4])
    wanted = span_identifiers(session, first.shadowed_seqs)
    second = await service.compact_region(session, session.nodes[1], session.nodes[3])
    assert first.replacement_seq in second.shadowed_seqs  # the first checkpoint was merged
    summary = session.event(second.summary_seq)
    assert isinstance(summary, CompactSummary) and summary.completion is not None
    assert set(wanted) <= set(summary.completion.added_identifiers)
    (checkpoint,) = [m for m in session.derive_messages() if m.id.startswith("checkpoint-")]
    assert all(i in text_of(checkpoint.content) for i in wanted)
    audits, _ = audit_events(list(session.events()))
    assert all(a.passed for a in audits), [a.failed for a in audits]


async def test_an_appendix_that_outgrows_a_tiny_span_is_refused_by_name() -> None:
    from compaction.errors import ShrinkError

    session = Session()
    user(session, "Fix the failing tests under tests/ and run `pytest -q` until green.")
    start_turn(session)
    for _ in range(3):  # a span above the floor (the frame and the headings), under the appendix
        tool_step(session, n_calls=1, output="3 passed in 0.02s; " * 10)
    service = BasicCompactService(BasicConfig(), summarizer=OwnSummarizer())
    with pytest.raises(ShrinkError, match=r"of its characters are the completion appendix"):
        await service.compact_region(session, session.nodes[1], session.nodes[4])


def test_cli_completion_off_and_the_summarizer_window(
    provider: tuple[ProviderServer, asyncio.AbstractEventLoop], tmp_path: Path
) -> None:
    server, _ = provider
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    session = import_path(SHORT_SESSION)[0].session
    with SessionStore.open(url) as store:
        store.save(session)
    weak = Reply(frames=openai_frames([WEAK], usage=openai_usage(900, 120)))
    server.script(*[weak] * 8)
    base = ["--store", url, "compact", str(session.id), "--summarizer", "openai",
            "--base-url", server.base_url, "--model", "gpt-4o-mini", "--manual"]  # fmt: skip
    _, refused = run_json(*base, "--completion", "off")
    assert not refused.get("compactions")  # the gate alone refuses the weak model
    with SessionStore.open(url) as store:
        ends = [e for e in store.get(session.id).events() if e.TYPE == "compact/end"]
    assert len(ends) == 1 and "fidelity gate" in (ends[0].error or "")  # type: ignore[attr-defined]
    asked = len(server.received)
    code, document = run_json(*base, "--summarizer-window", "2400", "--max-tokens", "300")
    assert code == 0, document
    (compaction,) = document["compactions"]
    with SessionStore.open(url) as store:
        summary = store.get(session.id).event(compaction["summary_seq"])
    assert isinstance(summary, CompactSummary) and summary.chunks >= 2
    assert len(server.received) - asked == summary.chunks + 1  # the chunks and one merge


# ---------------------------------------------------------------- the appendix within a budget


class TwoLines(Summarizer):
    """A user's own summarizer: a short, correct summary of two lines."""

    provider = "mine"
    model = "two-lines"

    async def summarize(self, request: SummaryRequest) -> SummaryOutput:
        return SummaryOutput(
            text="The agent read the two modules the user named.\nNext it runs the tests.",
            provider=self.provider,
            model=self.model,
        )


async def test_a_short_custom_summary_of_a_small_span_commits_with_the_default_config() -> None:
    session = Session()
    user(session, "Fix the failing tests under tests/ and run `pytest -q` until green.")
    start_turn(session)
    for _ in range(3):
        tool_step(session, n_calls=1, output="x = compute(rows)  # the module body\n" * 18)
    service = BasicCompactService(BasicConfig(), summarizer=TwoLines())
    result = await service.compact_region(session, session.nodes[1], session.nodes[4])
    assert 300 <= result.shadowed_token_count <= 500  # a span of about 400 tokens
    assert result.summary_token_count < result.shadowed_token_count
    _, summary, _ = bracket(session, result)
    record = summary.completion
    assert record is not None and record.added_sections == SECTIONS  # what the gate needs
    text = text_of(summary.summary)
    assert text.startswith("The agent read the two modules the user named.")
    audits, _ = audit_events(list(session.events()))
    assert audits[0].passed, audits[0].failed


async def test_a_tight_budget_fills_by_priority_and_says_what_it_left_out() -> None:
    facts = SpanFacts(
        user_asks=("Make the login endpoint return 200 for valid credentials",),
        errors=(
            ErrorFact("bash", "pytest -q", "FAILED tests/test_api.py::test_login - AssertionError", False),
            ErrorFact("bash", "mypy src", "src/app.py:3: error: Incompatible return value type", True),
        ),
        open_tasks=("Add a regression test",),
    )
    found = Gaps(
        sections=("Files and Code",),
        identifiers=("src/app.py", "tests/test_api.py", "pytest -q"),
        user_asks=facts.user_asks,
        open_tasks=facts.open_tasks,
        errors=facts.errors,
    )
    needs = Needs(sections=("Files and Code",), identifiers=("src/app.py",))
    whole = appendix(found, facts)
    tight = build_appendix(found, facts, budget=HEADER_CHARS + 220, needs=needs)
    assert len(tight.text) < len(whole)
    assert "## Files and Code" in tight.text and "`src/app.py`" in tight.text  # the gate's needs
    assert "FAILED tests/test_api.py::test_login" in tight.text  # the unfixed error comes next
    assert tight.left and "Left out for space (in the log): " in tight.text
    assert tight.left_out in tight.text
    nothing = build_appendix(found, facts, budget=0, needs=needs)
    assert "`src/app.py`" in nothing.text and "## Files and Code" in nothing.text
    assert "FAILED" not in nothing.text


# ---------------------------------------------------------------- a weak model's echo


SKELETON = "\n\n".join(
    f"## {name}\n- [Describe the {name.lower()} here, quoting the conversation where possible.]"
    for name in SECTIONS
)
"""What a weak model returns: the instruction's skeleton, a bracketed placeholder per section."""
ECHOED = INSTRUCTION.split("## ", 1)[1].split("Rules:", 1)[0]
"""The instruction's own section lines, repeated."""


def test_placeholders_and_instruction_lines_are_taken_out_and_their_sections_are_empty() -> None:
    assert missing_sections(SKELETON) == SECTIONS
    assert missing_sections("## " + ECHOED) == SECTIONS
    echo = without_echo(SKELETON)
    assert echo.text == "" and echo.sections == SECTIONS and not echo.own
    mixed = without_echo(f"{WEAK}\n- [Add the errors here]\n- Preserve exact file paths, commands")
    assert mixed.own and mixed.lines == 2 and mixed.text == WEAK


def test_an_echoing_server_commits_no_placeholder_and_the_audit_warns(
    provider: tuple[ProviderServer, asyncio.AbstractEventLoop], tmp_path: Path
) -> None:
    server, _ = provider
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    session = import_path(SHORT_SESSION)[0].session
    with SessionStore.open(url) as store:
        store.save(session)
    server.script(*[Reply(frames=openai_frames([SKELETON], usage=openai_usage(900, 120)))] * 6)
    code, document = run_json(
        "--store", url, "compact", str(session.id), "--summarizer", "openai",
        "--base-url", server.base_url, "--model", "smollm2", "--window", "2000",
    )  # fmt: skip
    assert code == 0, document
    assert document["compactions"]
    with SessionStore.open(url) as store:
        stored = store.get(session.id)
        for compaction in document["compactions"]:
            summary = stored.event(compaction["summary_seq"])
            assert isinstance(summary, CompactSummary) and summary.completion is not None
            assert "[Describe" not in text_of(summary.summary)
            assert summary.completion.model_empty and summary.completion.echoed_sections == SECTIONS
        (checkpoint,) = [m for m in stored.derive_messages() if m.id.startswith("checkpoint-")]
        assert "[Describe" not in text_of(checkpoint.content)
        assert missing_sections(text_of(checkpoint.content)) == ()
    code, audit = run_json("--store", url, "audit", str(session.id))
    assert code == 0 and audit["passed"], audit
    (shown,) = audit["sessions"]
    for compaction in shown["compactions"]:
        assert any("echoed the instruction" in w for w in compaction["warnings"]), compaction
        assert any("nothing of its own" in w for w in compaction["warnings"])
    code, out, _ = run_human("--store", url, "audit", str(session.id))
    count = sum(len(c["warnings"]) for c in shown["compactions"])
    assert code == 0 and f"PASS, {count} warnings" in out
    assert "warning: the model echoed the instruction" in out


# ---------------------------------------------------------------- each thing said once


@pytest.mark.parametrize("path", PUBLIC_TRANSCRIPTS, ids=lambda p: p.name[:24])
async def test_an_echo_completed_says_each_ask_and_error_once(path: Path) -> None:
    """The appendix that fills every section of an echoed summary does not list again among its
    references the asks and the errors those sections hold: each distinct failure line and each
    ask is on one line of the checkpoint, and the audit passes."""
    for item in import_path(path):
        session = item.session
        result = await BasicCompactService(summarizer=ScriptedSummarizer(SKELETON)).compact_now(session)
        assert result is not None
        summary = session.event(result.summary_seq)
        assert isinstance(summary, CompactSummary) and summary.completion is not None
        text = text_of(summary.summary)
        facts = span_facts([m for m in (project(session.event(s)) for s in result.shadowed_seqs) if m])
        lines = list(dict.fromkeys(e.first_line for e in facts.errors))
        for line in lines:
            if sum(other.startswith(line[:60]) for other in lines) == 1:  # a prefix of its own
                holding = [ln for ln in text.splitlines() if line[:60] in ln]
                assert len(holding) == 1, (path.name, line, holding)
        for ask in facts.user_asks:  # a bullet of Primary Request, not also one of the references
            bullets = [ln for ln in text.splitlines() if ln.lstrip(" ") == f"- {clip(ask)}"]
            assert len(bullets) == facts.user_asks.count(ask), (path.name, ask)
        assert retention(text, facts) == Retention(
            identifiers=(len(facts.identifiers), len(facts.identifiers)),
            user_asks=(len(facts.user_asks), len(facts.user_asks)),
            errors=(len(facts.errors), len(facts.errors)),
            open_tasks=(len(facts.open_tasks), len(facts.open_tasks)),
        )
        audits, _ = audit_events(list(session.events()))
        assert all(a.passed for a in audits), [a.failed for a in audits if not a.passed]


def test_a_command_an_error_line_names_is_not_listed_again_and_is_read_back() -> None:
    errors = (
        ErrorFact("Bash", "make -j2", "fatal error: zlib.h: No such file or directory", fixed=False),
        ErrorFact("Bash", "npm test", "Command `npm test` exited with code 1", fixed=True),
        ErrorFact("Edit", "src/zip.c", "String to replace not found in file.", fixed=True),
    )
    wanted = Identifiers(
        paths=dict.fromkeys(["src/zip.c", "/w/app/src/zip.c", "/w/app"]),
        commands=dict.fromkeys(["make -j2", "npm test", "ls -l /w/app"]),
    )
    facts = SpanFacts(errors=errors, identifiers=wanted)
    block = appendix(gaps(WEAK, facts, wanted), facts, wanted)
    assert "  - Bash `make -j2` -> fatal error: zlib.h: No such file or directory (not fixed)" in block
    assert "  - Bash -> Command `npm test` exited with code 1 (fixed later)" in block  # named once
    assert "  - Edit: src/zip.c -> String to replace not found in file. (fixed later)" in block
    assert "- Commands: `npm test`, `ls -l /w/app`" in block  # `make -j2` is named by its error line
    assert "- Paths: `/w/app/src/zip.c`" in block  # `src/zip.c` and `/w/app` are inside it
    assert set(listed(block).commands) == {"make -j2", "npm test", "ls -l /w/app"}
    assert all(i in block for i in wanted.all())
