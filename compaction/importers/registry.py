"""The transcript formats, in the order detection asks them, and the names ``--format`` accepts.

A format module exports ``FORMAT``, a :class:`~compaction.importers.format.TranscriptFormat`; its
line below puts it in the detection order. Third-party packages add formats through the
``compaction.formats`` entry points (each names a ``TranscriptFormat``); they are asked after the
built-ins, whose names (and aliases) they cannot take. A plugin that cannot be loaded is listed all
the same: importing with it, by name, raises :class:`~compaction.errors.PluginError` saying why.
"""

from __future__ import annotations

from typing import Any

from compaction.errors import ConfigurationError, PluginError
from compaction.importers import claude_code, codex, gemini, openai_chat, openhands, pi
from compaction.importers.format import TranscriptFormat
from compaction.plugins import Plugin, load_plugins

BUILT_IN: tuple[TranscriptFormat, ...] = (
    codex.FORMAT,
    openhands.FORMAT,
    claude_code.FORMAT,
    pi.FORMAT,
    gemini.FORMAT,  # before openai: a list of {role: user | model, parts} is Gemini's
    openai_chat.FORMAT,  # last: it claims any object with a `role`, `messages` or chat `history`
)
"""The built-in formats in detection order: the first whose ``recognises`` says yes wins."""

GROUP = "compaction.formats"
"""The entry-point group of third-party formats."""


_found: list[tuple[TranscriptFormat, ...]] = []
"""The formats once read (the entry points are read once a process)."""


def formats() -> tuple[TranscriptFormat, ...]:
    """Every format, in detection order: the built-ins, then the plugins (sorted by name)."""
    if not _found:
        _found.append(_read_formats())
    return _found[0]


def _read_formats() -> tuple[TranscriptFormat, ...]:
    reserved = [name for f in BUILT_IN for name in (f.name, *f.aliases)]
    plugins = load_plugins(
        GROUP,
        TranscriptFormat,
        label="compaction.importers.TranscriptFormat",
        reserved=reserved,
        name_of=lambda f: f.name,
    )
    return (*BUILT_IN, *(p.value or _broken(p) for p in plugins))


def names() -> tuple[str, ...]:
    """The format names, in detection order."""
    return tuple(f.name for f in formats())


def aliases() -> dict[str, str]:
    """Other names of a format -> its name."""
    return {alias: f.name for f in formats() for alias in f.aliases}


def named(name: str) -> TranscriptFormat:
    """The format called ``name`` (or one of its aliases); :class:`ConfigurationError` if none is."""
    name = aliases().get(name, name)
    for found in formats():
        if found.name == name:
            return found
    every = ", ".join((*names(), *aliases()))
    raise ConfigurationError(f"unknown transcript format {name!r}; expected auto or one of {every}")


def recognised(value: Any) -> str | None:
    """The name of the first format that recognises ``value`` (a JSON document or record)."""
    return next((f.name for f in formats() if f.recognises(value)), None)


def expected() -> str:
    """What the formats look like, for errors about a file none of them recognises."""
    looks = [f.looks_like for f in formats() if f.looks_like]
    return "expected " + (", ".join(looks[:-1]) + " or " + looks[-1] if len(looks) > 1 else looks[0])


def _broken(plugin: Plugin[TranscriptFormat]) -> TranscriptFormat:
    """A stand-in that recognises nothing and, asked by name, reports why the plugin is missing."""
    message = plugin.describe("format")

    def refuse(*_: object) -> Any:
        raise PluginError(message)

    return TranscriptFormat(
        plugin.name,
        title=f"(unavailable: {plugin.problem})",
        looks_like="",
        recognises=lambda value: False,
        import_file=refuse,
    )
