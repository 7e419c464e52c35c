"""The import direction of ARCHITECTURE.md, pinned per package and per subpackage.

``compaction.sessions`` -> the compaction core, summarizers, strategies, audit -> ``compaction.cli``
-> ``projections`` -> ``recovery``. Nothing under ``compaction`` imports ``projections`` or
``recovery``: their commands reach the command line through entry points. ``compaction.errors`` is
the leaf every layer may import (the whole error tree, one root). aiohttp is imported only by the
model transport, ``compaction.summarizers.aiohttp_transport``. Tests at run time: a fresh interpreter
that imports only ``compaction.sessions`` reads a compacted log written by another process, and one
that imports the audit's request reconstruction, the payload builders, the summarizer registry and
the summarizer classes loads no aiohttp.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

from tests.builders import run_python
from tests.conftest import ROOT, TRANSCRIPTS

PACKAGES = ("compaction", "projections", "recovery")
CORE = "compaction"
"""The unit of the core modules directly under ``compaction/`` (basic, meters, transaction, ...)."""

# unit -> the units of ours it may import (besides itself); third-party libraries are not listed.
ALLOWED: dict[str, set[str]] = {
    "compaction.errors": set(),
    "compaction.sessions": {"compaction.errors"},
    "compaction.testing": {"compaction.errors", "compaction.sessions"},
    # The core and the summarizers know each other (the basic service defaults to the template
    # summarizer; summarizers use the instruction, meters and fidelity modules). The basic service
    # runs the pruning strategy as its first pass.
    CORE: {"compaction.errors", "compaction.sessions", "compaction.summarizers", "compaction.strategies"},
    "compaction.summarizers": {"compaction.errors", "compaction.sessions", CORE},
    "compaction.strategies": {"compaction.errors", "compaction.sessions", CORE, "compaction.summarizers"},
    "compaction.audit": {"compaction.errors", "compaction.sessions", CORE, "compaction.summarizers"},
    "compaction.cli": {
        "compaction.errors",
        "compaction.sessions",
        "compaction.testing",
        CORE,
        "compaction.summarizers",
        "compaction.strategies",
        "compaction.audit",
    },
    # The framework adapters record into sessions and compact with the core (and its summarizers).
    "compaction.integrations": {"compaction.errors", "compaction.sessions", CORE, "compaction.summarizers"},
    # projections and recovery build on the whole of compaction; neither needs the other.
    "projections": {
        "compaction.errors",
        "compaction.sessions",
        CORE,
        "compaction.summarizers",
        "compaction.strategies",
    },
    "recovery": {
        "compaction.errors",
        "compaction.sessions",
        CORE,
        "compaction.summarizers",
        "compaction.strategies",
    },
}
PLUGIN_COMMANDS = {"projections.cli", "recovery.cli"}
"""Command modules found through the ``compaction.commands`` entry points: they build a
``compaction.cli.Command``, so they (and only they, outside ``compaction.cli``) import it."""
ONLY_IN: dict[str, set[str]] = {
    "aiohttp": {"compaction.summarizers.aiohttp_transport"},
    # the agent frameworks are optional extras: only their adapters import them
    **{
        framework: {"compaction.integrations"}
        for framework in ("agents", "pydantic_ai", "langchain", "langchain_core", "langgraph")
    },
}
"""Third-party packages that only some units or modules may import."""


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit_of(module: str) -> str:
    """The layering unit of a module: a subpackage of compaction, a leaf module, or the core."""
    parts = module.split(".")
    if parts[0] != "compaction":
        return parts[0]
    if len(parts) > 1 and f"compaction.{parts[1]}" in ALLOWED:
        return f"compaction.{parts[1]}"
    return CORE


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import, ``TYPE_CHECKING`` blocks and function bodies included."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def violations(path: Path) -> list[str]:
    module = module_name(path)
    unit = unit_of(module)
    wrong: list[str] = []
    for line, imported in imports(path):
        top = imported.split(".")[0]
        if top in ONLY_IN and not {unit, module} & ONLY_IN[top]:
            wrong.append(f"line {line}: imports {imported} (only {sorted(ONLY_IN[top])} may)")
        if top not in PACKAGES:
            continue
        target = unit_of(imported)
        if target == unit or target in ALLOWED[unit]:
            continue
        if module == "compaction" and target.startswith("compaction"):
            continue  # the package facade names its public API (lazily, see compaction/__init__.py)
        if module in PLUGIN_COMMANDS and target == "compaction.cli":
            continue
        wrong.append(f"line {line}: imports {imported} ({unit} may import {sorted(ALLOWED[unit])})")
    return wrong


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_each_module_imports_only_what_its_layer_allows(path: Path) -> None:
    assert not violations(path), f"{path.relative_to(ROOT)} breaks the layering: {violations(path)}"


def test_the_checker_catches_a_wrong_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule above can fail: a sessions module that imports the core is reported."""
    fake_root = tmp_path
    bad = fake_root / "compaction" / "sessions" / "bad.py"
    bad.parent.mkdir(parents=True)
    bad.write_text("import aiohttp\nfrom compaction.meters import Meter\nfrom recovery import scan\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", fake_root)
    found = violations(bad)
    assert [w.split(":")[0] for w in found] == ["line 1", "line 2", "line 3"]


def test_every_package_and_subpackage_is_pinned() -> None:
    top = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()} - {"tests", "benchmarks"}
    assert top == set(PACKAGES)
    subpackages = {
        f"compaction.{p.name}" for p in (ROOT / "compaction").iterdir() if (p / "__init__.py").exists()
    }
    assert subpackages <= set(ALLOWED), f"unpinned subpackages: {subpackages - set(ALLOWED)}"


def test_the_wheel_installs_exactly_the_three_packages() -> None:
    from setuptools import find_packages

    config = _setuptools_find_config()
    found = find_packages(str(ROOT), include=config["include"])
    assert {name.split(".")[0] for name in found} == set(PACKAGES)
    assert "tests" not in found and "benchmarks" not in found


def _setuptools_find_config() -> dict[str, list[str]]:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    found: dict[str, list[str]] = project["tool"]["setuptools"]["packages"]["find"]
    return found


# ---------------------------------------------------------------- the bottom layer at run time

WRITER = """
import asyncio
import sys
from pathlib import Path
from compaction.basic import BasicCompactService
from compaction.config import BasicConfig
from compaction.sessions.importers import import_path
from compaction.sessions.store import SessionStore

url, transcript = sys.argv[1], Path(sys.argv[2])
with SessionStore.open(url) as store:
    imported = next(iter(import_path(transcript, "auto")))
    store.save(imported.session)
    session = store.get(imported.session.id)
    service = BasicCompactService(BasicConfig(context_window=8000, min_identifier_ratio=0.0))
    result = asyncio.run(service.compact_now(session, store=store))
    print(session.id, result is not None)
"""

READER = """
import json, sys
from uuid import UUID
from compaction.sessions.render import to_openai
from compaction.sessions.store import SessionStore

with SessionStore.open(sys.argv[1]) as store:
    session = store.get(UUID(sys.argv[2]))
    ours = ("compaction", "projections", "recovery", "aiohttp")
    loaded = sorted(m for m in sys.modules if m.startswith(ours))
    print(json.dumps({"messages": to_openai(session.derive_messages()), "modules": loaded,
                      "types": sorted(session.type_counts)}))
"""


def test_a_process_that_imports_only_sessions_reads_a_compacted_log(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    transcript = TRANSCRIPTS / "swe-agent" / "pydicom__pydicom-1458.traj"
    session_id, compacted = run_python(WRITER, url, str(transcript)).split()
    assert compacted == "True"
    read = json.loads(run_python(READER, url, session_id))
    assert "compact/end" in read["types"]
    assert not [m for m in read["modules"] if m.startswith(("projections", "recovery", "aiohttp"))]
    assert "compaction.summarizers" not in read["modules"] and "compaction.cli" not in read["modules"]
    everything = json.loads(
        run_python("import compaction.cli.main, projections, recovery\n" + READER, url, session_id)
    )
    assert read["messages"] == everything["messages"]


# ---------------------------------------------------------------- no HTTP client where none is needed

NO_AIOHTTP = """
import sys
import compaction.audit.request, compaction.summarizers.payloads, compaction.summarizers.sse
import compaction.summarizers.registry, compaction.summarizers.openai, compaction.summarizers.anthropic
from compaction.summarizers.registry import SUMMARIZERS, SummarizerOptions
from compaction.summarizers.transport import MockTransport
SUMMARIZERS.open("openai", SummarizerOptions(model="m", transport=MockTransport.scripted()))
print(sorted(m for m in sys.modules if m.startswith("aiohttp")))
"""


def test_rebuilding_requests_and_building_payloads_load_no_aiohttp() -> None:
    """The audit rebuilds request bodies in a process without aiohttp; a summarizer loads it only
    when it is built without a transport of its own."""
    assert run_python(NO_AIOHTTP).strip() == "[]"
    loaded = run_python(
        "import sys\nfrom compaction.summarizers.openai import OpenAISummarizer\n"
        "OpenAISummarizer('http://127.0.0.1:9', 'm')\nprint('aiohttp' in sys.modules)"
    )
    assert loaded.strip() == "True"
