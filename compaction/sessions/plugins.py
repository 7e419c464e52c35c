"""Event types from other packages, found through the ``compaction.event_types`` entry points.

A distribution adds its own session event types by declaring, in its ``pyproject.toml``::

    [project.entry-points."compaction.event_types"]
    owner = "acme_owner.events:OwnerSet"

where the target is a :class:`~compaction.sessions.events.SessionEvent` subclass with its own
``TYPE`` (or a tuple of them). Every process that opens a store (:meth:`SessionStore.open
<compaction.sessions.store.SessionStore.open>`, so the ``compaction`` command and the projection
runner too) registers them once (:func:`load_event_types`), so their rows decode there as they do
in the process that wrote them. A plugin that cannot be loaded is logged and listed in
:data:`PLUGIN_ERRORS`; the rows of its types then read as
:class:`~compaction.sessions.events.UnknownEvent`, and nothing else changes.

:func:`entry_point_classes` is the one loader, generic over the group and the expected type (the
``compaction.projections`` group of :mod:`projections` uses it too).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from importlib.metadata import EntryPoint, entry_points
from typing import TypeVar

from compaction.sessions.events import SessionEvent, register_event_type

EVENT_TYPES_GROUP = "compaction.event_types"
PLUGIN_ERRORS: dict[str, str] = {}
"""``group:name`` of each entry point that could not be loaded -> why."""

T = TypeVar("T")
log = logging.getLogger("compaction.plugins")
_loaded: set[str] = set()


def entry_point_classes(
    group: str, base: type[T], found: Iterable[EntryPoint] | None = None
) -> dict[str, type[T]]:
    """Every class the entry points of ``group`` name, by entry point name (sorted): a subclass
    of ``base``, or a tuple of them (the second and later named ``NAME.1``, ...). One that cannot
    be loaded, or is not such a class, is logged and left out (its reason in
    :data:`PLUGIN_ERRORS`); the first of two entry points with one name wins."""
    objects: dict[str, type[T]] = {}
    points = entry_points(group=group) if found is None else found
    for point in sorted(points, key=lambda p: p.name):
        if point.name in objects:
            continue
        try:
            loaded = point.load()
        except Exception as error:  # any import failure of a third-party module
            _broken(group, point, f"cannot be loaded: {type(error).__name__}: {error}")
            continue
        items = loaded if isinstance(loaded, tuple) else (loaded,)
        for index, item in enumerate(items):
            if not (isinstance(item, type) and issubclass(item, base)):
                _broken(group, point, f"expected {_name(base)}, found {item!r}")
                continue
            objects[point.name if index == 0 else f"{point.name}.{index}"] = item
    return objects


def _name(base: type) -> str:
    return f"a subclass of {base.__module__}.{base.__qualname__} (or a tuple of them)"


def _broken(group: str, point: EntryPoint, reason: str) -> None:
    message = f"plugin {point.name!r} ({point.value}, group {group}) {reason}"
    PLUGIN_ERRORS[f"{group}:{point.name}"] = message
    log.warning("%s", message)


def load_event_types(found: Iterable[EntryPoint] | None = None) -> list[type[SessionEvent]]:
    """Register the event classes of every ``compaction.event_types`` entry point (once per
    process unless ``found`` is given); return the classes registered now."""
    if found is None and EVENT_TYPES_GROUP in _loaded:
        return []
    registered: list[type[SessionEvent]] = []
    for name, cls in entry_point_classes(EVENT_TYPES_GROUP, SessionEvent, found).items():
        try:
            registered.append(register_event_type(cls))
        except ValueError as e:
            PLUGIN_ERRORS[f"{EVENT_TYPES_GROUP}:{name}"] = str(e)
            log.warning("plugin %r (group %s): %s", name, EVENT_TYPES_GROUP, e)
    if found is None:
        _loaded.add(EVENT_TYPES_GROUP)
    return registered
