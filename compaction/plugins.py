"""Entry-point plugins of one group, loaded so that a broken one reports itself and never breaks
the built-ins.

A distribution extends ``compaction`` by declaring entry points in its ``pyproject.toml``::

    [project.entry-points."compaction.formats"]
    gemini-web = "gemini_web:FORMAT"

:func:`load_plugins` reads one group: every entry point, sorted by name, is loaded and checked
against the type the group expects (and, when the group names its values, against the entry
point's name). The names of the built-ins are reserved: a plugin may add, never replace. A plugin
that cannot be loaded, or loads something else, comes back as a :class:`Plugin` with ``problem``
set, for the caller to report (the command line shows it when that plugin is used). The groups:
``compaction.commands`` (:mod:`compaction.cli.plugins`) and ``compaction.formats``
(:mod:`compaction.importers.registry`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Plugin(Generic[T]):
    """One entry point of a group: what it loaded, or why it could not be used."""

    point: EntryPoint
    value: T | None
    problem: str | None = None

    @property
    def name(self) -> str:
        return self.point.name

    def describe(self, what: str) -> str:
        """``plugin WHAT 'NAME' (TARGET, group GROUP) PROBLEM``: the report of a broken plugin."""
        return f"plugin {what} {self.name!r} ({self.point.value}, group {self.point.group}) {self.problem}"


def load_plugins(
    group: str,
    kind: type[T],
    *,
    label: str,
    reserved: Iterable[str] = (),
    name_of: Callable[[T], str] | None = None,
    found: Iterable[EntryPoint] | None = None,
) -> list[Plugin[T]]:
    """One :class:`Plugin` per entry point of ``group``, sorted by name.

    ``kind`` is the type every entry point must load (``label`` names it in the report);
    ``reserved`` are the built-ins' names, which a plugin may not take; ``name_of``, when given,
    is the name the loaded value gives itself, which must equal the entry point's. Of two entry
    points with one name the first wins. ``found`` replaces the installed entry points (tests)."""
    taken = set(reserved)
    plugins: dict[str, Plugin[T]] = {}
    points = entry_points(group=group) if found is None else found
    for point in sorted(points, key=lambda p: p.name):
        if point.name in taken or point.name in plugins:
            continue  # a clash is not worth refusing every other plugin over
        plugins[point.name] = _load(point, kind, label, name_of)
    return list(plugins.values())


def _load(point: EntryPoint, kind: type[T], label: str, name_of: Callable[[T], str] | None) -> Plugin[T]:
    try:
        value = point.load()
    except Exception as error:  # any import failure of a third-party module
        return Plugin(point, None, f"cannot be loaded: {type(error).__name__}: {error}")
    if not isinstance(value, kind):
        return Plugin(point, None, f"expected a {label}, found {type(value).__name__}")
    if name_of is not None and name_of(value) != point.name:
        return Plugin(
            point,
            None,
            f"the entry point is named {point.name!r} but its {kind.__name__} is {name_of(value)!r}",
        )
    return Plugin(point, value)
