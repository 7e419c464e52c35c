"""The audit every framework test's store goes through when the test ends (this folder's
conftest) fails a test whose store does not pass ``compaction audit --all``."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.integrations.conftest import audit_store
from tests.integrations.support import require_framework

require_framework("agents", "openai-agents")

from compaction.integrations.openai_agents import CompactingSession  # noqa: E402


async def test_a_store_whose_compaction_lost_its_end_fails_the_audit(url: str, tmp_path: Path) -> None:
    session = CompactingSession("fixer", url, context_window=3000)
    for k in range(8):
        text = " ".join(f"line {i}: the total of cart {k} rounds half up." for i in range(40))
        answer = {"id": f"msg_{k}", "type": "message", "role": "assistant", "status": "completed",
                  "content": [{"type": "output_text", "text": text, "annotations": []}]}  # fmt: skip
        await session.add_items([{"content": f"question {k}", "role": "user"}, answer])
        await session.get_items()
    assert session.memory.compactions, "the session compacted"
    logged = await session.memory.load("fixer")
    session.close()
    audit_store(url)  # as written: passes

    broken = tmp_path / "broken.db"
    source = sqlite3.connect(url.removeprefix("sqlite:///"))
    source.backup(target := sqlite3.connect(broken))
    source.close()
    end = next(seq for seq in range(len(logged)) if logged.event(seq).type == "compact/end")
    deleted = target.execute(
        "DELETE FROM stored_events WHERE originator_id=? AND originator_version=?", (logged.id.hex, end + 1)
    ).rowcount
    target.commit()
    target.close()
    assert deleted == 1
    with pytest.raises(pytest.fail.Exception, match="did not pass"):
        audit_store(f"sqlite:///{broken}")
