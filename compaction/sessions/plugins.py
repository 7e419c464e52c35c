"""The log's plugin groups: event types (``compaction.event_types``) and views
(``compaction.projections``), read with :func:`compaction.plugins.load_plugins`.

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

:func:`plugin_classes` reads a group of classes and reports its broken plugins that way (the
``compaction.projections`` group of :mod:`projections` uses it too).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from importlib.metadata import EntryPoint
from typing import TypeVar

from compaction.plugins import load_plugins, subclasses
from compaction.sessions.events import SessionEvent, register_event_type

EVENT_TYPES_GROUP = "compaction.event_types"
PLUGIN_ERRORS: dict[str, str] = {}
"""``group:name`` of each entry point that could not be used -> why."""

T = TypeVar("T")
log = logging.getLogger("compaction.plugins")
_loaded: set[str] = set()


def plugin_classes(
    group: str, base: type[T], what: str, found: Iterable[EntryPoint] | None = None
) -> list[tuple[str, type[T]]]:
    """``(entry point name, class)`` for every class the entry points of ``group`` name (sorted by
    name): a subclass of ``base``, or a tuple of them. One that cannot be loaded, or is not such a
    class, is logged and left out (``what`` names it in the report, which :data:`PLUGIN_ERRORS`
    keeps); the first of two entry points with one name wins."""
    classes: list[tuple[str, type[T]]] = []
    for plugin in load_plugins(group, subclasses(base), found=found):
        if plugin.value is None:
            _report(group, plugin.name, plugin.describe(what))
        else:
            classes.extend((plugin.name, cls) for cls in plugin.value)
    return classes


def _report(group: str, name: str, message: str) -> None:
    PLUGIN_ERRORS[f"{group}:{name}"] = message
    log.warning("%s", message)


def load_event_types(found: Iterable[EntryPoint] | None = None) -> list[type[SessionEvent]]:
    """Register the event classes of every ``compaction.event_types`` entry point (once per
    process unless ``found`` is given); return the classes registered now."""
    if found is None and EVENT_TYPES_GROUP in _loaded:
        return []
    registered: list[type[SessionEvent]] = []
    for name, cls in plugin_classes(EVENT_TYPES_GROUP, SessionEvent, "event type", found):
        try:
            registered.append(register_event_type(cls))
        except ValueError as e:
            _report(EVENT_TYPES_GROUP, name, f"plugin event type {name!r} (group {EVENT_TYPES_GROUP}): {e}")
    if found is None:
        _loaded.add(EVENT_TYPES_GROUP)
    return registered
