"""The entry-point loader of event types (``compaction.event_types``): classes, tuples of them,
and plugins that cannot be loaded (logged, listed, everything else working)."""

from __future__ import annotations

from importlib.metadata import EntryPoint
from typing import ClassVar

from compaction.sessions.events import SessionEvent, event_class
from compaction.sessions.plugins import (
    EVENT_TYPES_GROUP,
    PLUGIN_ERRORS,
    load_event_types,
    plugin_classes,
)


class Noted(SessionEvent, frozen=True, kw_only=True):
    TYPE: ClassVar[str] = "test-plugins/noted"
    note: str


class Tagged(SessionEvent, frozen=True, kw_only=True):
    TYPE: ClassVar[str] = "test-plugins/tagged"
    tag: str


BOTH = (Noted, Tagged)
MIXED = (Noted, 42)
NOT_AN_EVENT = 42


def point(name: str, value: str) -> EntryPoint:
    return EntryPoint(name=name, value=value, group=EVENT_TYPES_GROUP)


def test_classes_and_tuples_register() -> None:
    found = [point("both", f"{__name__}:BOTH")]
    assert load_event_types(found) == [Noted, Tagged]
    assert event_class("test-plugins/noted") is Noted
    assert event_class("test-plugins/tagged") is Tagged


def test_a_broken_plugin_is_listed_and_left_out() -> None:
    found = [
        point("missing", "no_such_module_anywhere:Thing"),
        point("wrong", f"{__name__}:NOT_AN_EVENT"),
        point("fine", f"{__name__}:Noted"),
    ]
    assert plugin_classes(EVENT_TYPES_GROUP, SessionEvent, "event type", found) == [("fine", Noted)]
    assert "ModuleNotFoundError" in PLUGIN_ERRORS[f"{EVENT_TYPES_GROUP}:missing"]
    assert "expected a subclass of" in PLUGIN_ERRORS[f"{EVENT_TYPES_GROUP}:wrong"]


class Impostor(SessionEvent, frozen=True, kw_only=True):
    TYPE: ClassVar[str] = "user/message"


def test_a_type_name_taken_by_another_class_is_refused() -> None:
    assert load_event_types([point("impostor", f"{__name__}:Impostor")]) == []
    assert "already registered" in PLUGIN_ERRORS[f"{EVENT_TYPES_GROUP}:impostor"]
    assert event_class("user/message") is not Impostor


def test_a_tuple_with_an_item_of_another_kind_is_left_out_whole() -> None:
    assert (
        plugin_classes(EVENT_TYPES_GROUP, SessionEvent, "event type", [point("mixed", f"{__name__}:MIXED")])
        == []
    )
    assert PLUGIN_ERRORS[f"{EVENT_TYPES_GROUP}:mixed"] == (
        f"plugin event type 'mixed' ({__name__}:MIXED, group {EVENT_TYPES_GROUP}) expected a subclass "
        "of compaction.sessions.events.SessionEvent (or a tuple of them), "
        f"found tuple (class {__name__}.Noted, int)"
    )
