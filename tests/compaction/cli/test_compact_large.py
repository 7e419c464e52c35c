"""``compaction compact`` of a long generated session through the command line, on SQLite and
PostgreSQL: the compaction commits, the session ends under its threshold, and the audit passes.

The session is the benchmark's (``benchmarks/openai_transcript.py``: one tool call and a short
result per step, every step naming its own file), at 5,000 messages: thousands of identifiers,
so the completion and the gate take their many-identifier paths. The time is measured in
``python -m benchmarks.bench_cli``, not here.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.openai_transcript import write_transcript
from tests.builders import run_json

MESSAGES = 5_000
WINDOW = 40_000  # the session prices about 140,000 tokens


def test_a_long_generated_session_compacts_and_audits_from_the_command_line(
    table_store_url: str, tmp_path: Path
) -> None:
    transcript = write_transcript(tmp_path / "session.jsonl", MESSAGES)
    code, imported = run_json("import", str(transcript), "--format", "openai", "--store", table_store_url)
    assert code == 0, imported
    [row] = imported["sessions"]
    assert row["status"] == "imported" and row["tool_results"] == MESSAGES // 2 - 1
    sid = row["session_id"]

    code, compacted = run_json("compact", sid, "--window", str(WINDOW), "--store", table_store_url)
    assert code == 0, compacted
    assert compacted["compactions"] and compacted["failed_attempt"] is None
    assert compacted["status"] == "under_threshold"
    assert compacted["tokens_after"] < compacted["threshold"] < compacted["tokens_before"]

    code, audit = run_json("audit", sid, "--store", table_store_url)
    assert code == 0, audit
    [session] = audit["sessions"]
    assert session["passed"], session
    assert len(session["compactions"]) == len(compacted["compactions"])
