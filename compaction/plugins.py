"""Entry-point plugins of one group, loaded so that a broken one reports itself and never breaks
the built-ins.

A distribution extends ``compaction`` by declaring entry points in its ``pyproject.toml``::

    [project.entry-points."compaction.formats"]
    gemini-web = "gemini_web:FORMAT"

:func:`load_plugins` reads one group: every entry point, sorted by name, is loaded and checked
against the type the group expects (and, when the group names its values, against the entry
point's name). The names of the built-ins are reserved: a plugin may add, never replace. A plugin
that cannot be loaded, or loads something else, comes back as a :class:`Plugin` with ``problem``
set, for the caller to report (the command line shows it when that plugin is used; the log's
groups log it and list it in :data:`compaction.sessions.plugins.PLUGIN_ERRORS`).

A group expects either instances of one type (``kind`` a class: a command, a format) or classes
(``kind`` a :class:`Kind`, such as :func:`subclasses`: a subclass of a base, or a tuple of them).
The groups: ``compaction.commands`` (:mod:`compaction.cli.plugins`), ``compaction.formats``
(:mod:`compaction.importers.registry`), ``compaction.event_types`` and ``compaction.projections``
(:mod:`compaction.sessions.plugins`, read by the store and by :mod:`projections`).
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


@dataclass(frozen=True)
class Kind(Generic[T]):
    """What the entry points of a group must load when it is not an instance of one type:
    ``label`` names it in a report, ``noun`` one value in the name check, ``take`` gives the
    group's value for what an entry point loaded, or None when that is not one."""

    label: str
    noun: str
    take: Callable[[object], T | None]


def subclasses(base: type[T]) -> Kind[tuple[type[T], ...]]:
    """A subclass of ``base``, or a non-empty tuple of them; the plugin's value is the tuple."""

    def take(loaded: object) -> tuple[type[T], ...] | None:
        items = loaded if isinstance(loaded, tuple) else (loaded,)
        if items and all(isinstance(item, type) and issubclass(item, base) for item in items):
            return tuple(items)
        return None

    return Kind(f"subclass of {_qualified(base)} (or a tuple of them)", f"{base.__name__} classes", take)


def load_plugins(
    group: str,
    kind: type[T] | Kind[T],
    *,
    label: str | None = None,
    reserved: Iterable[str] = (),
    name_of: Callable[[T], str] | None = None,
    found: Iterable[EntryPoint] | None = None,
) -> list[Plugin[T]]:
    """One :class:`Plugin` per entry point of ``group``, sorted by name.

    ``kind`` is what every entry point must load: an instance of a type, or a :class:`Kind`;
    ``label`` names it in the report (default: the type's or the kind's own label); ``reserved``
    are the built-ins' names, which a plugin may not take; ``name_of``, when given, is the name the
    loaded value gives itself, which must equal the entry point's. Of two entry points with one
    name the first wins. ``found`` replaces the installed entry points (tests)."""
    expected = kind if isinstance(kind, Kind) else _instances(kind)
    if label is not None:
        expected = Kind(label, expected.noun, expected.take)
    taken = set(reserved)
    plugins: dict[str, Plugin[T]] = {}
    points = entry_points(group=group) if found is None else found
    for point in sorted(points, key=lambda p: p.name):
        if point.name in taken or point.name in plugins:
            continue  # a clash is not worth refusing every other plugin over
        plugins[point.name] = _load(point, expected, name_of)
    return list(plugins.values())


def _instances(cls: type[T]) -> Kind[T]:
    return Kind(_qualified(cls), cls.__name__, lambda loaded: loaded if isinstance(loaded, cls) else None)


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _load(point: EntryPoint, kind: Kind[T], name_of: Callable[[T], str] | None) -> Plugin[T]:
    try:
        loaded = point.load()
    except Exception as error:  # any import failure of a third-party module
        return Plugin(point, None, f"cannot be loaded: {type(error).__name__}: {error}")
    value = kind.take(loaded)
    if value is None:
        return Plugin(point, None, f"expected a {kind.label}, found {_found(loaded)}")
    if name_of is not None and name_of(value) != point.name:
        return Plugin(
            point,
            None,
            f"the entry point is named {point.name!r} but its {kind.noun} is {name_of(value)!r}",
        )
    return Plugin(point, value)


def _found(loaded: object) -> str:
    """What an entry point loaded, for a report: a class by its path, a tuple by its items."""
    if isinstance(loaded, type):
        return f"class {_qualified(loaded)}"
    if isinstance(loaded, tuple):
        return f"tuple ({', '.join(_found(item) for item in loaded)})"
    return type(loaded).__name__
