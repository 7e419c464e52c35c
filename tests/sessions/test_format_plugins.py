"""Third-party transcript formats: the ``compaction.formats`` entry points
(compaction/importers/registry.py, loaded by compaction/plugins.py), from a real distribution on
``sys.path`` (a module and a dist-info with its entry_points.txt), in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from compaction.importers.format import TranscriptFormat
from compaction.importers.registry import BUILT_IN, GROUP
from compaction.plugins import load_plugins
from tests.conftest import TRANSCRIPTS

ACME = """
from compaction.importers.builder import SessionBuilder
from compaction.importers.content import model_source, user_message
from compaction.importers.format import TranscriptFormat
from compaction.importers.ids import file_digest, session_id_for
from compaction.importers.json_input import as_dict, json_lines
from compaction.sessions.blocks import Message, TextBlock


def recognises(value):
    return "acme" in as_dict(value)


def import_file(path, data):
    lines, truncated = json_lines(path, data)
    builder = SessionBuilder(session_id_for("acme", file_digest(data), 0), source=str(path), format="acme")
    for number, line in lines:
        origin = f"line {number}"
        text = (TextBlock(line.get("text", "")),)
        if line["acme"] == "user":
            builder.user(user_message(origin, text), origin)
        else:
            source = model_source("acme", "acme-1")
            builder.assistant(Message(id=origin, role="assistant", content=text, source=source), origin)
    return [builder.finish()]


FORMAT = TranscriptFormat(
    "acme", title="Acme agent logs", looks_like="Acme agent logs (lines with `acme`)",
    recognises=recognises, import_file=import_file,
)
"""

ENTRY_POINTS = f"""[{GROUP}]
acme = acme_format:FORMAT
broken = no_such_module_anywhere:FORMAT
claude-code = acme_format:FORMAT
"""


@pytest.fixture
def installed(tmp_path: Path) -> dict[str, str]:
    """The environment of a process that has the ``acme-format`` distribution installed."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "acme_format.py").write_text(textwrap.dedent(ACME))
    info = site / "acme_format-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-format\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return {**os.environ, "PYTHONPATH": str(site)}


def compaction(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "compaction.cli.main", *argv],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip


def test_a_third_party_format_is_detected_and_imported(installed: dict[str, str], tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    log.write_text('{"acme": "user", "text": "list the files"}\n{"acme": "agent", "text": "a.txt"}\n')
    store = f"sqlite:///{tmp_path / 'sessions.db'}"
    done = compaction(installed, "--store", store, "import", str(log), "--json")
    assert done.returncode == 0, done.stderr
    [row] = json.loads(done.stdout)["sessions"]
    assert (row["format"], row["status"], row["messages"]) == ("acme", "imported", 2)
    helped = compaction(installed, "import", "--help")
    assert "acme (Acme agent logs)" in " ".join(helped.stdout.split())


def test_a_broken_plugin_reports_itself_and_the_built_ins_stay(
    installed: dict[str, str], tmp_path: Path
) -> None:
    broken = compaction(installed, "--store", "memory://", "import", "--format", "broken", __file__, "--json")
    assert broken.returncode != 0
    error = json.loads(broken.stdout)["error"]
    assert error["type"] == "PluginError"
    assert "plugin format 'broken'" in error["message"] and "ModuleNotFoundError" in error["message"]
    # a plugin named like a built-in is ignored: Claude Code files still import as claude-code
    transcript = next((TRANSCRIPTS / "spotter").glob("*.jsonl"))
    done = compaction(
        installed, "--store", f"sqlite:///{tmp_path / 's.db'}", "import", str(transcript), "--json"
    )
    assert done.returncode == 0, done.stderr
    assert {row["format"] for row in json.loads(done.stdout)["sessions"]} == {"claude-code"}


def test_the_loader_checks_what_each_entry_point_names() -> None:
    points = [
        EntryPoint(name="jsonish", value="json:dumps", group=GROUP),
        EntryPoint(name="renamed", value="compaction.importers.pi:FORMAT", group=GROUP),
        EntryPoint(name="pi", value="compaction.importers.pi:FORMAT", group=GROUP),
    ]
    found = load_plugins(
        GROUP, TranscriptFormat, label="TranscriptFormat", reserved=[f.name for f in BUILT_IN],
        name_of=lambda f: f.name, found=points,
    )  # fmt: skip
    assert [(p.name, p.value, p.problem) for p in found] == [
        ("jsonish", None, "expected a TranscriptFormat, found function"),
        ("renamed", None, "the entry point is named 'renamed' but its TranscriptFormat is 'pi'"),
    ]
    assert found[0].describe("format") == (
        f"plugin format 'jsonish' (json:dumps, group {GROUP}) expected a TranscriptFormat, found function"
    )
