"""Commands from other packages: the ``compaction.commands`` entry points (compaction/cli/plugins.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from compaction.cli import main as cli_main
from compaction.cli.main import COMMANDS, all_commands
from compaction.cli.plugins import GROUP, plugin_commands
from tests.builders import run_human, run_json

CORE = [c.name for c in COMMANDS]


def point(name: str, value: str) -> EntryPoint:
    return EntryPoint(name=name, value=value, group=GROUP)


def test_rebuild_and_recover_come_from_the_installed_entry_points() -> None:
    names = [c.name for c in all_commands()]
    assert {"rebuild", "recover"} <= set(names)
    assert "rebuild" not in CORE and "recover" not in CORE  # compaction.cli does not import them
    assert names == sorted(names)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("no_such_module_anywhere:COMMAND", "cannot be loaded: ModuleNotFoundError"),
        ("json:dumps", "expected a compaction.cli.Command, found function"),
        ("recovery.cli:COMMAND", "the entry point is named 'fixit' but its Command is 'recover'"),
    ],
)
def test_a_broken_plugin_is_reported_by_name_and_the_rest_work(
    value: str, reason: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        cli_main, "plugin_commands", lambda core: plugin_commands(core, [point("fixit", value)])
    )
    code, document = run_json("--store", "memory://", "fixit")
    assert code == 1
    error = document["error"]
    assert error["type"] == "PluginError"
    assert "plugin command 'fixit'" in error["message"] and value in error["message"]
    assert reason in error["message"]
    code, _, err = run_human("--store", "memory://", "fixit")
    assert code == 1
    assert "Traceback" not in err and "fixit" in err
    assert run_json("--store", "memory://", "sessions") == (0, {"sessions": []})  # the rest still work


def test_a_plugin_cannot_replace_a_core_command() -> None:
    found = plugin_commands(CORE, [point("sessions", "no_such_module:COMMAND")])
    assert found == []


THIRD_PARTY = """
import argparse
from compaction.cli.command import Command

def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("word")

COMMAND = Command(
    "hello", "say hello from a third-party plugin", configure,
    lambda context, args: {"hello": args.word},
    lambda document, console: console.print(f"hello {document['hello']}"),
)
"""


def test_a_third_party_package_adds_a_command_through_its_entry_point(tmp_path: Path) -> None:
    """A real distribution on sys.path (module + dist-info with entry_points.txt), in a fresh process."""
    (tmp_path / "hello_plugin.py").write_text(textwrap.dedent(THIRD_PARTY))
    info = tmp_path / "hello_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hello-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{GROUP}]\nhello = hello_plugin:COMMAND\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    run = [sys.executable, "-m", "compaction.cli.main", "--store", "memory://"]
    done = subprocess.run(
        [*run, "hello", "world", "--json"], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"hello": "world"}
    helped = subprocess.run(
        [*run, "--help"], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert "say hello from a third-party plugin" in helped.stdout
