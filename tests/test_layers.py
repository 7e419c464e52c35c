"""The layers of the three packages, pinned per unit: what each may import, read from the code and
observed at run time.

A unit is a subpackage of ``compaction`` (``compaction.sessions``, ``compaction.engine``, ...), a
module directly under it (``compaction.errors``, ``compaction.service``, ``compaction.terminal``,
``compaction.testing``), the package facade ``compaction/__init__.py`` (the unit ``compaction``),
or one of the packages above (``projections``, ``recovery``). :data:`LAYERS` stacks them bottom up:

- ``compaction.errors``, the one error tree, imports nothing of ours; nor does
  ``compaction.plugins``, the entry-point loader every plugin group uses;
- ``compaction.sessions``, the log, knows only the errors and the entry-point loader;
  ``compaction.terminal`` (tables for people) sits beside it;
- ``compaction.vocabulary``, the words every room above shares (the compact/* events, the service
  contract, the configuration, the checkpoint framing, the summarizer protocol);
  ``compaction.testing`` (scripted models) sits beside it;
- ``compaction.handover``, what a checkpoint must keep (facts, identifiers, fidelity);
- ``compaction.engine``, when and where to cut and how to commit, given a summarizer;
- ``compaction.summarizers`` and ``compaction.importers`` (transcripts into sessions, other
  harnesses' compactions through the engine), then ``compaction.strategies``;
- ``compaction.service``, the composition root: the engine with its default summarizer;
- the facade ``compaction``, ``compaction.audit`` and ``compaction.integrations``;
- ``compaction.serve``, the HTTP service over them;
- ``compaction.cli``; then ``projections`` and ``recovery``, which never import each other.

A unit may import only units of lower layers, and of those only the ones :data:`ALLOWED` names
(the tightest set the code needs); units of one layer never import each other. The facade is no
exception: its lazy ``_HOMES`` table is read as the imports it is, so it names the homes of the
public API only. The command modules of ``projections`` and ``recovery`` reach the command line
through entry points and are the only modules outside ``compaction.cli`` that import it. A few
third-party packages are confined (:data:`ONLY_IN`): aiohttp to the model transport and the HTTP
service, the agent frameworks to their adapters.

The reader (``tests/import_reader.py``) sees every import statement, relative ones included, the
``importlib.import_module`` and ``__import__`` calls with literal names, and the facade's table; an
import of a computed name is refused unless :data:`COMPUTED_IMPORTS` allows it. The unit graph
built from those imports must have no cycle, and neither may the modules of the handover (its
readers, the analysis that keeps what they read, the facts and the fidelity measures), every
import counted, a ``TYPE_CHECKING`` block's and a function body's too. At run time, a fresh
interpreter per unit imports every module of the unit and may find loaded only modules of the unit
and of the units it may import, directly or through them (plus the ``compaction`` package, which
Python imports first). With any set of extras installed: a module that needs the package of an
extra that is missing (:data:`EXTRAS`) is left out of its unit's check, and the case is reported
skipped, naming it.
The self-tests plant violations in a fake tree and check that each one is caught.
"""

from __future__ import annotations

import json
import sys
import tomllib
from collections import Counter
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest

from tests.builders import run_python
from tests.conftest import ROOT, TRANSCRIPTS
from tests.import_reader import Import, Reading, read_imports

PACKAGES = ("compaction", "projections", "recovery")
FACADE = "compaction"
"""The unit of the package facade, ``compaction/__init__.py`` alone."""

LAYERS: tuple[tuple[str, ...], ...] = (
    ("compaction.errors", "compaction.plugins"),
    ("compaction.sessions", "compaction.terminal"),
    ("compaction.vocabulary", "compaction.testing"),
    ("compaction.handover",),
    ("compaction.engine",),
    ("compaction.summarizers", "compaction.importers"),
    ("compaction.strategies",),
    ("compaction.service",),
    (FACADE, "compaction.audit", "compaction.integrations"),
    ("compaction.serve",),
    ("compaction.cli",),
    ("projections", "recovery"),
)
"""The units, bottom up: a unit may import units of lower layers only."""

ERRORS, SESSIONS, VOCABULARY = "compaction.errors", "compaction.sessions", "compaction.vocabulary"
HANDOVER, ENGINE = "compaction.handover", "compaction.engine"
PLUGINS, IMPORTERS = "compaction.plugins", "compaction.importers"

# unit -> the units of ours it may import (besides itself); third-party libraries are not listed.
ALLOWED: dict[str, set[str]] = {
    ERRORS: set(),
    # entry-point plugins of any group, generic over the type a group expects
    PLUGINS: set(),
    # the log reads its plugin groups (event types, views) with the one entry-point loader
    SESSIONS: {ERRORS, PLUGINS},
    "compaction.terminal": set(),
    VOCABULARY: {ERRORS, SESSIONS},
    "compaction.testing": {ERRORS, SESSIONS},
    HANDOVER: {ERRORS, SESSIONS, VOCABULARY},
    ENGINE: {ERRORS, SESSIONS, VOCABULARY, HANDOVER},
    # the summarizers measure with the engine's meters and keep what the handover says a
    # checkpoint must keep
    "compaction.summarizers": {ERRORS, SESSIONS, VOCABULARY, HANDOVER, ENGINE},
    "compaction.strategies": {ERRORS, SESSIONS, VOCABULARY, ENGINE},
    # transcripts into sessions; other harnesses' compactions become brackets through the engine;
    # third-party formats come through entry points
    IMPORTERS: {ERRORS, SESSIONS, ENGINE, PLUGINS},
    # the composition root; it also builds a session's service from the configuration file
    "compaction.service": {SESSIONS, VOCABULARY, ENGINE, "compaction.summarizers"},
    # the homes of the public API, named lazily by the facade's _HOMES table
    FACADE: {
        ERRORS,
        VOCABULARY,
        ENGINE,
        "compaction.summarizers",
        "compaction.strategies",
        "compaction.service",
    },
    "compaction.audit": {
        ERRORS,
        SESSIONS,
        VOCABULARY,
        HANDOVER,
        ENGINE,
        "compaction.summarizers",
        "compaction.terminal",
    },
    # the framework adapters record into sessions and compact with the basic service
    # (and build their sessions with the importers' session builder)
    "compaction.integrations": {ERRORS, SESSIONS, VOCABULARY, IMPORTERS, "compaction.service"},
    # the HTTP service: reads provider items with the importers' readers, records them with the
    # adapters' recorder, compacts with the basic service, audits with the audit
    "compaction.serve": {
        ERRORS,
        SESSIONS,
        VOCABULARY,
        ENGINE,
        IMPORTERS,
        "compaction.service",
        "compaction.audit",
        "compaction.integrations",
    },
    "compaction.cli": {
        ERRORS,
        PLUGINS,
        SESSIONS,
        IMPORTERS,
        VOCABULARY,
        ENGINE,
        "compaction.summarizers",
        "compaction.strategies",
        "compaction.service",
        "compaction.audit",
        "compaction.terminal",
        "compaction.testing",
        "compaction.serve",
    },
    "projections": {ERRORS, SESSIONS, VOCABULARY, ENGINE},
    "recovery": {ERRORS, SESSIONS, VOCABULARY, ENGINE},
}
PLUGIN_COMMANDS = {"projections.cli", "recovery.cli"}
"""Command modules found through the ``compaction.commands`` entry points: they build a
``compaction.cli.Command``, so they (and only they, outside ``compaction.cli``) import it."""
PLUGIN_HOST = "compaction.cli"
ONLY_IN: dict[str, set[str]] = {
    # and the JetStream client: nats-py's transport module imports aiohttp (for websockets) when
    # it is installed; compaction.sessions.nats.client itself never does
    "aiohttp": {
        "compaction.summarizers.aiohttp_transport",
        "compaction.sessions.nats.client",
        # the HTTP service (``compaction serve``) is an aiohttp application
        "compaction.serve",
    },
    # the agent frameworks are optional extras: only their adapters import them
    **{
        framework: {"compaction.integrations"}
        for framework in ("agents", "pydantic_ai", "langchain", "langchain_core", "langgraph")
    },
}
"""Third-party packages that only some units or modules may import."""
COMPUTED_IMPORTS: dict[str, tuple[str, ...]] = {
    # __getattr__ loads a public name from the home module its _HOMES table names (read as imports)
    FACADE: ("import_module of a computed name",),
}
"""Modules allowed an import whose name is computed at run time, and the reader's reason for each."""


# ---------------------------------------------------------------- reading the tree


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit_of(module: str) -> str:
    """The unit of a module: the facade, a subpackage or root module of compaction, or a package above."""
    parts = module.split(".")
    if parts[0] != "compaction":
        return parts[0]
    return FACADE if len(parts) == 1 else f"compaction.{parts[1]}"


def is_module(name: str) -> bool:
    """Whether ``name`` is a module or package of ours in the tree under :data:`ROOT`."""
    parts = name.split(".")
    if parts[0] not in PACKAGES:
        return False
    return (
        ROOT.joinpath(*parts).with_suffix(".py").is_file() or ROOT.joinpath(*parts, "__init__.py").is_file()
    )


def modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def reading(path: Path) -> Reading:
    return read_imports(
        path.read_text(encoding="utf-8"),
        module_name(path),
        is_package=path.name == "__init__.py",
        exists=is_module,
    )


def ours(found: list[Import]) -> Iterator[Import]:
    return (i for i in found if i.module.split(".")[0] in PACKAGES)


# ---------------------------------------------------------------- the rules


def violations(path: Path) -> list[str]:
    """Every import of the module at ``path`` that its unit may not make, as ``line N: ...``."""
    module = module_name(path)
    unit = unit_of(module)
    if unit not in ALLOWED:
        return [f"line 1: {module} belongs to {unit}, a unit the layers do not pin"]
    read = reading(path)
    wrong = _blind_spots(module, read)
    for found in read.imports:
        top = found.module.split(".")[0]
        if top in ONLY_IN and not {unit, module} & ONLY_IN[top]:
            wrong.append(f"line {found.line}: imports {found.module} (only {sorted(ONLY_IN[top])} may)")
        if top in PACKAGES and not _may_import(module, unit, unit_of(found.module)):
            wrong.append(
                f"line {found.line}: {found.how} {found.module} reaches {unit_of(found.module)} "
                f"({unit} may import {sorted(ALLOWED[unit])})"
            )
    return wrong


def _may_import(module: str, unit: str, target: str) -> bool:
    return target in {unit, *ALLOWED[unit]} or (module in PLUGIN_COMMANDS and target == PLUGIN_HOST)


def _blind_spots(module: str, read: Reading) -> list[str]:
    """The imports the reader could not resolve, but for those :data:`COMPUTED_IMPORTS` allows."""
    allowed = Counter(COMPUTED_IMPORTS.get(module, ()))
    wrong: list[str] = []
    for spot in read.blind:
        if allowed[spot.reason] > 0:
            allowed[spot.reason] -= 1
        else:
            wrong.append(f"line {spot.line}: {spot.reason}, which the layers cannot check")
    return wrong


UnitGraph = dict[str, dict[str, list[str]]]
"""unit -> imported unit -> the import sites (``path:line``) that make the edge."""


def unit_graph() -> UnitGraph:
    graph: UnitGraph = {}
    for path in modules():
        unit = unit_of(module_name(path))
        for found in ours(reading(path).imports):
            target = unit_of(found.module)
            if target != unit:
                sites = graph.setdefault(unit, {}).setdefault(target, [])
                site = f"{path.relative_to(ROOT)}:{found.line}"
                if site not in sites:
                    sites.append(site)
    return graph


def module_graph(package: str) -> UnitGraph:
    """module -> imported module -> import sites, among the modules of ``package`` (every import the
    reader sees: at module level, in a ``TYPE_CHECKING`` block, in a function body)."""
    inside = f"{package}."
    graph: UnitGraph = {}
    for path in modules():
        module = module_name(path)
        if not module.startswith(inside):
            continue
        for found in ours(reading(path).imports):
            if found.module.startswith(inside) and found.module != module:
                sites = graph.setdefault(module, {}).setdefault(found.module, [])
                site = f"{path.relative_to(ROOT)}:{found.line}"
                if site not in sites:
                    sites.append(site)
    return graph


def cycles(graph: UnitGraph) -> list[list[str]]:
    """A shortest cycle through each group of units that reach each other, as ``[a, b, ..., a]``."""
    found: list[list[str]] = []
    done: set[str] = set()
    for start in sorted(graph):
        cycle = _shortest_way_back(graph, start, done)
        if cycle is not None:
            found.append(cycle)
            done |= set(cycle)
        done.add(start)  # no cycle passes through it, or one is reported already
    return found


def _shortest_way_back(graph: UnitGraph, start: str, done: set[str]) -> list[str] | None:
    """Breadth first from ``start`` back to it, through units not in ``done``."""
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        reached: list[str] = []
        for at in frontier:
            for target in sorted(graph.get(at, {})):
                if target == start:
                    way = [at]
                    while way[-1] != start:
                        way.append(came_from[way[-1]])
                    return [*reversed(way), start]
                if target not in came_from and target not in done:
                    came_from[target] = at
                    reached.append(target)
        frontier = reached
    return None


def describe(cycle: list[str], graph: UnitGraph) -> str:
    """Each step of ``cycle`` with the import sites that make it (the first three)."""
    steps = []
    for unit, target in pairwise(cycle):
        sites = graph[unit][target]
        steps.append(f"{unit} -> {target} ({', '.join(sites[:3])}{', ...' if len(sites) > 3 else ''})")
    return "; ".join(steps)


def may_load(unit: str, imports: set[str]) -> set[str]:
    """The units a process that imports ``unit`` may hold: ``unit``, the units in ``imports`` and
    everything those may import in turn, and the facade (Python imports the package first)."""
    reach = {unit, FACADE}
    todo = list(imports)
    while todo:
        target = todo.pop()
        if target not in reach:
            reach.add(target)
            todo += ALLOWED[target]
    return reach


# ---------------------------------------------------------------- the tree as it is


def test_the_layers_point_down() -> None:
    """The table itself: every unit has a layer, and may import only units of lower layers."""
    layer = {unit: height for height, units in enumerate(LAYERS) for unit in units}
    assert len(layer) == sum(map(len, LAYERS)) and set(layer) == set(ALLOWED)
    upward = {
        (unit, target)
        for unit, targets in ALLOWED.items()
        for target in targets
        if layer[target] >= layer[unit]
    }
    assert not upward, f"units allowed to import a unit of their own layer or above: {sorted(upward)}"
    assert {unit_of(m) for m in PLUGIN_COMMANDS} <= {u for u in ALLOWED if layer[u] > layer[PLUGIN_HOST]}


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_each_module_imports_only_what_its_layer_allows(path: Path) -> None:
    assert not violations(path), f"{path.relative_to(ROOT)} breaks the layering: {violations(path)}"


def test_every_import_of_ours_names_a_module_that_exists() -> None:
    """After a move, no import (not even one the interpreter never runs) names the old place."""
    missing = [
        f"{path.relative_to(ROOT)}:{found.line}: {found.module}"
        for path in modules()
        for found in ours(reading(path).imports)
        if not is_module(found.module)
    ]
    assert not missing


def test_no_cycle_between_units() -> None:
    graph = unit_graph()
    assert graph, "the reader found no import between units"
    found = cycles(graph)
    assert not found, "import cycles between units: " + " | ".join(describe(c, graph) for c in found)


def test_no_cycle_between_the_modules_of_the_handover() -> None:
    """The handover's modules form a graph without a cycle: none imports a module that imports it
    back, not even from a function body or a ``TYPE_CHECKING`` block (the readers name the
    analysis that keeps what they read, never the reverse)."""
    graph = module_graph(HANDOVER)
    assert len(graph) > 10, "the reader found too few imports between the handover's modules"
    found = cycles(graph)
    assert not found, "import cycles in the handover: " + " | ".join(describe(c, graph) for c in found)


def test_every_package_and_subpackage_is_pinned() -> None:
    top = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()} - {"tests", "benchmarks"}
    assert top == set(PACKAGES)
    units = {unit_of(module_name(path)) for path in modules()}
    assert units == set(ALLOWED), f"unpinned: {units - set(ALLOWED)}, gone: {set(ALLOWED) - units}"


def test_the_log_reaches_up_only_by_the_topics_of_the_vocabulary() -> None:
    """The log names classes above it by topic, resolved on first use, not by import: the topics
    name the compact/* events of the vocabulary (and nothing else: the importers, which need the
    engine's foreign-compaction import, live above the engine and import it)."""
    from compaction.sessions.events import EVENT_TOPICS

    assert {topic.partition(":")[0] for topic in EVENT_TOPICS.values()} == {"compaction.vocabulary.events"}


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


# ---------------------------------------------------------------- the checker can fail

PLANTED: dict[str, tuple[str, str, str]] = {
    # (the module, its code, the start of the report the checker must make)
    "relative import upward": (
        "compaction/engine/meters.py",
        "from ..strategies import overflow\n",
        "line 1: from . compaction.strategies.overflow reaches compaction.strategies",
    ),
    "import_module in the log": (
        "compaction/sessions/store.py",
        "import importlib\n\ndef late():\n    return importlib.import_module('compaction.cli.main')\n",
        "line 4: import_module compaction.cli.main reaches compaction.cli",
    ),
    "__import__ in the handover": (
        "compaction/handover/facts.py",
        "if True:\n    registry = __import__('compaction.summarizers.registry')\n",
        "line 2: __import__ compaction.summarizers.registry reaches compaction.summarizers",
    ),
    "engine imports the strategies": (
        "compaction/engine/meters.py",
        "import compaction.strategies\n",
        "line 1: import compaction.strategies reaches compaction.strategies",
    ),
    "engine imports the summarizer registry": (
        "compaction/engine/meters.py",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from compaction.summarizers.registry import SUMMARIZERS\n",
        "line 3: from compaction.summarizers.registry reaches compaction.summarizers",
    ),
    "facade imports the command line": (
        "compaction/__init__.py",
        "import compaction.cli\n",
        "line 1: import compaction.cli reaches compaction.cli",
    ),
    "facade homes the command line": (
        "compaction/__init__.py",
        "_HOMES: dict[str, str] = {\n"
        "    'CompactionError': 'compaction.errors',\n"
        "    'main': 'compaction.cli.main',\n"
        "}\n",
        "line 3: _HOMES compaction.cli.main reaches compaction.cli",
    ),
    "relative import_module into the command line": (
        "compaction/vocabulary/config.py",
        "from importlib import import_module as load\nload('.cli.main', package='compaction')\n",
        "line 2: import_module compaction.cli.main reaches compaction.cli",
    ),
    "submodule named through the facade": (
        "compaction/engine/meters.py",
        "from compaction import strategies\n",
        "line 1: from compaction.strategies reaches compaction.strategies",
    ),
    "computed import": (
        "compaction/sessions/store.py",
        "import importlib\nimportlib.import_module('compaction.' + 'cli')\n",
        "line 2: import_module of a computed name",
    ),
    "aiohttp outside the transport": (
        "compaction/summarizers/http.py",
        "import aiohttp\n",
        "line 1: imports aiohttp (only ['compaction.serve', 'compaction.sessions.nats.client', "
        "'compaction.summarizers.aiohttp_transport'] may)",
    ),
}
"""Wrong imports planted in a fake tree, by what each one breaks: the checker must report each."""


def plant(root: Path, relative: str, source: str) -> Path:
    path = root / relative
    for package in [p for p in path.relative_to(root).parents if p != Path(".")]:
        (root / package).mkdir(parents=True, exist_ok=True)
        (root / package / "__init__.py").touch()
    path.write_text(source, encoding="utf-8")
    return path


@pytest.fixture
def fake_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tree with a few real-looking modules (so ``from compaction import strategies`` names a
    submodule), the checker pointed at it."""
    for relative in ("compaction/strategies/overflow.py", "compaction/cli/main.py", "compaction/errors.py"):
        plant(tmp_path, relative, "")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    return tmp_path


@pytest.mark.parametrize(("relative", "source", "report"), PLANTED.values(), ids=PLANTED.keys())
def test_the_checker_catches_a_wrong_import(fake_tree: Path, relative: str, source: str, report: str) -> None:
    found = violations(plant(fake_tree, relative, source))
    assert len(found) == 1 and found[0].startswith(report), found


def test_the_checker_passes_imports_that_point_down(fake_tree: Path) -> None:
    """The same forms of import, each pointing to a unit below: nothing to report."""
    good = plant(
        fake_tree,
        "compaction/engine/meters.py",
        "from . import windows\nfrom ..vocabulary import events\nimport importlib\n"
        "importlib.import_module('compaction.errors')\n__import__('compaction.handover.facts')\n"
        "from compaction import errors\n",
    )
    assert violations(good) == []
    facade = plant(fake_tree, "compaction/__init__.py", "_HOMES = {'CompactionError': 'compaction.errors'}\n")
    assert violations(facade) == []


def test_the_checker_reads_each_form_of_import(fake_tree: Path) -> None:
    path = plant(
        fake_tree,
        "compaction/engine/__init__.py",
        "from .meters import Meter\nfrom ..strategies import overflow\nimport importlib as il\n"
        "il.import_module('..cli', 'compaction.engine')\n__import__('errors', None, None, (), 2)\n",
    )
    assert [(i.line, i.module) for i in reading(path).imports] == [
        (1, "compaction.engine.meters"),
        (2, "compaction.strategies.overflow"),
        (3, "importlib"),
        (4, "compaction.cli"),
        (5, "compaction.errors"),
    ]


def test_a_cycle_between_two_units_is_reported(fake_tree: Path) -> None:
    plant(fake_tree, "compaction/engine/windows.py", "from compaction.strategies import overflow\n")
    plant(fake_tree, "compaction/strategies/overflow.py", "\n\nfrom compaction.engine import windows\n")
    graph = unit_graph()
    assert cycles(graph) == [[ENGINE, "compaction.strategies", ENGINE]]
    assert describe(cycles(graph)[0], graph) == (
        "compaction.engine -> compaction.strategies (compaction/engine/windows.py:1); "
        "compaction.strategies -> compaction.engine (compaction/strategies/overflow.py:3)"
    )


def test_a_cycle_through_a_function_level_import_is_reported(fake_tree: Path) -> None:
    plant(
        fake_tree,
        "compaction/handover/facts.py",
        "from compaction.handover.analysis import active_analysis\n",
    )
    plant(
        fake_tree,
        "compaction/handover/analysis.py",
        "def active_analysis():\n    from compaction.handover import facts\n",
    )
    plant(fake_tree, "compaction/handover/walk.py", "from compaction.handover import facts\n")
    graph = module_graph(HANDOVER)
    analysis, facts = "compaction.handover.analysis", "compaction.handover.facts"
    assert cycles(graph) == [[analysis, facts, analysis]]
    assert describe(cycles(graph)[0], graph) == (
        f"{analysis} -> {facts} (compaction/handover/analysis.py:2); "
        f"{facts} -> {analysis} (compaction/handover/facts.py:1)"
    )


# ---------------------------------------------------------------- each unit at run time

EXTRAS: dict[str, str] = {
    "nats": "nats",
    "agents": "openai-agents",
    "pydantic_ai": "pydantic-ai",
    "langchain": "langchain",
    "langchain_core": "langchain",
    "langgraph": "langchain",
    "xllamacpp": "local",
}
"""The third-party packages of the optional extras (``pip install 'event-compaction[EXTRA]'``): a
module importing one at module level cannot be loaded without it, so the run-time check leaves it
out, and says so, only when the package is missing."""

PROBE = """
import importlib, importlib.util, json, sys
extras = json.loads(sys.argv[1])
left_out = {}
for name in sys.argv[2:]:
    try:
        module = importlib.import_module(name)
        for public in getattr(module, "__all__", ()):
            getattr(module, public)  # a lazy facade loads its homes here
    except Exception as e:  # an adapter may wrap the ModuleNotFoundError in its own error
        cause = e
        while cause is not None and not isinstance(cause, ModuleNotFoundError):
            cause = cause.__cause__
        missing = (getattr(cause, "name", None) or "").split(".")[0]
        if missing not in extras or importlib.util.find_spec(missing) is not None:
            raise
        left_out[name] = missing
print(json.dumps({"loaded": sorted(sys.modules), "left_out": left_out}))
"""


def load_in_a_fresh_process(names: list[str]) -> tuple[set[str], dict[str, str]]:
    """The modules importing ``names`` loads, and those of ``names`` left out for a missing extra."""
    found = json.loads(run_python(PROBE, json.dumps(EXTRAS), *names))
    return set(found["loaded"]), found["left_out"]


def run_time_cases() -> Iterator[tuple[str, list[str], set[str]]]:
    """(case, the modules to import, the units they may load): one per unit, the plugin command
    modules apart (they alone may load the command line)."""
    by_unit: dict[str, list[str]] = {}
    for path in modules():
        by_unit.setdefault(unit_of(module_name(path)), []).append(module_name(path))
    for unit, names in sorted(by_unit.items()):
        plain = [name for name in names if name not in PLUGIN_COMMANDS]
        yield unit, plain, may_load(unit, ALLOWED[unit])
        for command in sorted(set(names) & PLUGIN_COMMANDS):
            yield command, [command], may_load(unit, ALLOWED[unit] | {PLUGIN_HOST})


@pytest.mark.parametrize(
    ("names", "permitted"), [pytest.param(names, units, id=case) for case, names, units in run_time_cases()]
)
def test_each_unit_loads_only_the_units_it_may_import(names: list[str], permitted: set[str]) -> None:
    loaded, left_out = load_in_a_fresh_process(names)
    assert set(names) - set(left_out) <= loaded
    strays = sorted(m for m in loaded if m.split(".")[0] in PACKAGES and unit_of(m) not in permitted)
    assert not strays, f"importing {names} loaded {strays}"
    confined = sorted(
        m for m in loaded if m in ONLY_IN and not {unit_of(owner) for owner in ONLY_IN[m]} & permitted
    )
    assert not confined, f"importing {names} loaded {confined}"
    if left_out:  # the rest was checked above; these modules were not
        said = "; ".join(f"{m} (needs {p}: the {EXTRAS[p]} extra)" for m, p in sorted(left_out.items()))
        pytest.skip(f"checked {len(names) - len(left_out)} of {len(names)} modules, not loadable: {said}")


def test_the_extras_named_are_the_projects_extras() -> None:
    declared = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    assert set(EXTRAS.values()) <= declared


def test_a_module_needing_a_missing_extra_is_left_out_and_said(tmp_path: Path) -> None:
    """The probe leaves out a module whose optional package is missing, and only then."""
    (tmp_path / "needs_an_extra.py").write_text("import langgraph_not_installed\n")
    (tmp_path / "broken.py").write_text("import not_an_extra_at_all\n")
    probe = f"import sys\nsys.path.insert(0, {str(tmp_path)!r})\n{PROBE}"
    extras = json.dumps({"langgraph_not_installed": "langchain"})
    found = json.loads(run_python(probe, extras, "needs_an_extra", "compaction.errors"))
    assert found["left_out"] == {"needs_an_extra": "langgraph_not_installed"}
    assert "compaction.errors" in found["loaded"]
    with pytest.raises(AssertionError, match="not_an_extra_at_all"):
        run_python(probe, extras, "broken")


def test_importing_the_session_store_loads_only_the_log() -> None:
    """The log, the errors and the entry-point loader (the store reads the event-type plugins)."""
    code = "import json, sys\nimport compaction.sessions.store\nprint(json.dumps(sorted(sys.modules)))"
    loaded = [m for m in json.loads(run_python(code)) if m.split(".")[0] in PACKAGES]
    assert "compaction.sessions.store" in loaded
    assert [
        m for m in loaded if m not in {FACADE, ERRORS, PLUGINS, SESSIONS} and not m.startswith(f"{SESSIONS}.")
    ] == []


# ---------------------------------------------------------------- the log, read by a process of the log alone

WRITER = """
import asyncio
import sys
from pathlib import Path
from compaction.service import BasicCompactService
from compaction.vocabulary.config import BasicConfig
from compaction.importers import import_path
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

def ours():
    prefixes = ("compaction", "projections", "recovery", "aiohttp")
    return sorted(m for m in sys.modules if m.startswith(prefixes))

imported = ours()
with SessionStore.open(sys.argv[1]) as store:
    session = store.get(UUID(sys.argv[2]))
    print(json.dumps({"messages": to_openai(session.derive_messages()), "imported": imported,
                      "read": ours(), "types": sorted(session.type_counts)}))
"""


def test_a_process_that_imports_only_sessions_reads_a_compacted_log(tmp_path: Path) -> None:
    """Reading resolves the compact/* event types by topic: the vocabulary loads, nothing above it
    (the entry-point loader is part of opening a store: it reads the event-type plugins)."""
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    transcript = TRANSCRIPTS / "swe-agent" / "pydicom__pydicom-1458.traj"
    session_id, compacted = run_python(WRITER, url, str(transcript)).split()
    assert compacted == "True"
    read = json.loads(run_python(READER, url, session_id))
    assert "compact/end" in read["types"]
    assert {unit_of(m) for m in read["imported"]} == {FACADE, ERRORS, PLUGINS, SESSIONS}
    assert {unit_of(m) for m in read["read"]} == {FACADE, ERRORS, PLUGINS, SESSIONS, VOCABULARY}
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
