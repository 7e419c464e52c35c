"""Every ```python block of README.md and docs/*.md runs as written, offline.

A block is a complete program. Each one is written to a file and run in a fresh interpreter (``-W
error``, as the test suite runs), in an empty temporary working directory (so
``sqlite:///./.compaction/sessions.db`` is a new store) that sees the repository's ``tests`` folder
under the same name (so a path such as ``tests/data/transcripts/...`` means what it means at the
repository root), without ``COMPACTION_STORE`` or provider keys in its environment, and must print
something. Nothing in a block is substituted: it runs as printed. Blocks may not use the network, a
database server or a model server: any TCP connection made through Python's ``socket`` module
(loopback included) and any name lookup beyond the loopback interface fails the block (the docs use
the template summarizer,
``memory://`` or SQLite instead).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)

# Run before the block: refuse every TCP connection, and every name lookup that leaves this machine.
OFFLINE = """\
import ipaddress, runpy, socket, sys

def _local(host):
    if host in (None, "", "localhost") or not isinstance(host, str):
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False

def _refuse(what):
    raise OSError(f"docs examples run offline: {what} is not allowed")

_getaddrinfo = socket.getaddrinfo
def getaddrinfo(host, *args, **kwargs):
    return _getaddrinfo(host, *args, **kwargs) if _local(host) else _refuse(f"looking up {host!r}")
socket.getaddrinfo = getaddrinfo

for _name in ("connect", "connect_ex"):
    def _guarded(self, address, _original=getattr(socket.socket, _name)):
        if self.family in (socket.AF_INET, socket.AF_INET6):
            _refuse(f"connecting to {address!r}")
        return _original(self, address)
    setattr(socket.socket, _name, _guarded)

runpy.run_path(sys.argv[1], run_name="__main__")
"""


def python_blocks(page: Path) -> list[str]:
    return FENCE.findall(page.read_text(encoding="utf-8"))


BLOCKS = [
    pytest.param(page, index, source, id=f"{page.relative_to(ROOT)}-{index + 1}")
    for page in PAGES
    for index, source in enumerate(python_blocks(page))
]


def test_the_docs_have_python_blocks() -> None:
    pages = {page.relative_to(ROOT).as_posix() for page, *_ in (p.values for p in BLOCKS)}
    assert {"README.md", "docs/sessions.md", "docs/compaction.md", "docs/summarizers.md"} <= pages
    assert len(BLOCKS) >= 15


def test_every_fence_is_found() -> None:
    """A ```python fence the pattern misses (indented, unterminated) would silently go untested."""
    for page in PAGES:
        opened = len(re.findall(r"```python", page.read_text(encoding="utf-8")))
        assert opened == len(python_blocks(page)), page.name


@pytest.mark.parametrize(
    ("host", "refused"),
    [("example.com", "looking up 'example.com'"), ("127.0.0.1", "connecting to ('127.0.0.1', 5432)")],
)
def test_the_offline_guard_refuses_the_network(host: str, refused: str, tmp_path: Path) -> None:
    script = tmp_path / "online.py"
    script.write_text(f"import socket\nsocket.create_connection(({host!r}, 5432), timeout=5)\n")
    done = run_offline(script, tmp_path)
    assert done.returncode != 0
    assert f"docs examples run offline: {refused} is not allowed" in done.stderr


@pytest.mark.parametrize(("page", "index", "source"), BLOCKS)
def test_python_block_runs(page: Path, index: int, source: str, tmp_path: Path) -> None:
    script = tmp_path / f"{page.stem.lower()}_md_block_{index + 1}.py"
    script.write_text(source, encoding="utf-8")
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "tests").symlink_to(ROOT / "tests", target_is_directory=True)
    done = run_offline(script, workdir)
    where = f"{page.relative_to(ROOT)} python block {index + 1}"
    assert done.returncode == 0, f"{where} failed:\n{done.stderr}"
    assert done.stdout.strip(), f"{where} printed nothing"


def run_offline(script: Path, workdir: Path) -> subprocess.CompletedProcess[str]:
    drop = {"COMPACTION_STORE", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"}
    env = {key: value for key, value in os.environ.items() if key not in drop}
    return subprocess.run(
        [sys.executable, "-W", "error", "-c", OFFLINE, str(script)],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


# ---------------------------------------------------------------- the transcript formats table

FORMATS_PAGE = ROOT / "docs" / "formats.md"
TABLE_HEAD = "| `--format` | also | files | module |"


def format_table() -> list[str]:
    """The rows docs/formats.md must show: the built-in formats of the registry, in detection order."""
    from compaction.importers import registry

    return [
        f"| `{f.name}` | {', '.join(f'`{a}`' for a in f.aliases) or '-'} | {f.title} | "
        f"`{f.import_file.__module__}` |"
        for f in registry.BUILT_IN
    ]


def test_the_format_table_is_the_registry() -> None:
    lines = FORMATS_PAGE.read_text(encoding="utf-8").splitlines()
    start = lines.index(TABLE_HEAD) + 2
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("|"))
    expected = "\n".join(format_table())
    assert "\n".join(lines[start:end]) == expected, f"docs/formats.md's format table should read:\n{expected}"


def test_no_page_lists_the_format_names_by_hand() -> None:
    """Pages link to the table instead: no line but the table's names three formats."""
    from compaction.importers import registry

    titles = [f.title.split(" ")[0] for f in registry.BUILT_IN]
    for page in PAGES:
        table = set(format_table()) if page == FORMATS_PAGE else set()
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
            named = [t for t in titles if re.search(rf"(?<![\w-]){re.escape(t)}(?![\w-])", line)]
            assert line in table or len(named) < 3, f"{page.name}:{number} lists formats: {line}"
