"""Time travel: what the model saw at two points of a session, and what changed in between.

:func:`surface_diff` folds the stored log (tolerantly, see :mod:`compaction.audit.replay`) to seqs A and B and
returns a JSON-ready document: both surfaces, the nodes only one of them has, and for every
replacement between them (a compaction's checkpoint, a pruned tool result, an imported harness's
summary) the span it shadowed beside what replaced it. :func:`render_diff` prints it side by side.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from compaction.audit.replay import replay
from compaction.engine.meters import HeuristicMeter, Meter
from compaction.errors import ConfigurationError
from compaction.sessions.events import Replace, SessionEvent
from compaction.sessions.render import to_text
from compaction.sessions.session import project
from compaction.vocabulary.events import CompactPrune

Document = dict[str, Any]

TEXT_LIMIT = 4000
"""Characters of one message kept in the document (the rest is counted, not copied)."""


def message_text(event: SessionEvent, limit: int = TEXT_LIMIT) -> str:
    """The message a surface event contributes, as plain text (empty for log-only events)."""
    message = project(event)
    if message is None:
        return ""
    text = to_text([message]).split("\n", 1)[-1] if message.content else ""
    return clip(text, limit)


def clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"… ({len(text) - limit} more characters)"


def item(event: SessionEvent, meter: Meter, limit: int = TEXT_LIMIT) -> Document:
    message = project(event)
    return {
        "seq": event.seq,
        "type": event.TYPE,
        "role": message.role if message else None,
        "tokens": meter.event(event),
        "text": message_text(event, limit),
    }


def surface_diff(
    session_id: str, events: Sequence[SessionEvent], a: int, b: int, *, meter: Meter | None = None
) -> Document:
    """The surfaces right after seqs ``a`` and ``b`` (ordered so that ``a <= b``) and the changes."""
    for name, seq in (("A", a), ("B", b)):
        if not 0 <= seq < len(events):
            raise ConfigurationError(
                f"--diff {name}={seq}: session {session_id} has seqs 0..{len(events) - 1}; expected a "
                "seq in that range"
            )
    a, b = sorted((a, b))
    meter = meter or HeuristicMeter()
    before = list(replay(events[: a + 1]).surface.nodes)
    folded = replay(events[: b + 1])
    after = list(folded.surface.nodes)
    kept_a, kept_b = set(before), set(after)
    replacements = [
        _replacement(events, seq, moment.nodes, kept_b, meter)
        for seq, moment in sorted(folded.moments.items())
        if a < seq <= b
    ]
    replaced = {r["replacement"]["seq"] for r in replacements}
    return {
        "session_id": session_id,
        "a": a,
        "b": b,
        "surface_a": before,
        "surface_b": after,
        "tokens_a": sum(meter.event(events[s]) for s in before),
        "tokens_b": sum(meter.event(events[s]) for s in after),
        "removed": [s for s in before if s not in kept_b],
        "added": [s for s in after if s not in kept_a],
        "replacements": replacements,
        "appended": [item(events[s], meter) for s in after if s not in kept_a and s not in replaced],
    }


def _replacement(
    events: Sequence[SessionEvent], seq: int, nodes: Sequence[int], on_b: set[int], meter: Meter
) -> Document:
    event = events[seq]
    op = event.surface_op
    assert isinstance(op, Replace)
    shadowed = _shadowed(nodes, op)
    message = project(event)
    compaction_id = message.source.compaction_id if message else None
    kind = "compaction" if compaction_id else "replacement"
    if seq > 0 and isinstance(events[seq - 1], CompactPrune):
        kind = "prune"
    return {
        "kind": kind,
        "compaction_id": compaction_id,
        "range": [op.start, op.end],
        "shadowed": [item(events[s], meter) for s in shadowed],
        "shadowed_tokens": sum(meter.event(events[s]) for s in shadowed),
        "replacement": item(event, meter),
        "on_surface_at_b": seq in on_b,
    }


def _shadowed(nodes: Sequence[int], op: Replace) -> list[int]:
    if op.start not in nodes or op.end not in nodes:
        return []  # an invalid replacement (the audit's replace-range check reports it)
    return list(nodes[nodes.index(op.start) : nodes.index(op.end) + 1])


# ---------------------------------------------------------------- rendering

SHADOWED_ITEM_CHARS = 400
CHECKPOINT_CHARS = 3000
APPENDED_SHOWN = 20


def render_diff(document: Document, console: Console) -> None:
    console.print(_header(document))
    for replacement in document["replacements"]:
        console.print(_side_by_side(replacement))
    appended = document["appended"]
    if appended:
        console.print(Text(f"appended after seq {document['a']}: {len(appended)} nodes", style="bold"))
        for entry in appended[:APPENDED_SHOWN]:
            first = entry["text"].strip().split("\n", 1)[0]
            console.print(Text(f"  + {entry['seq']} {entry['type']}: {clip(first, 120)}", style="green"))
        if len(appended) > APPENDED_SHOWN:
            console.print(Text(f"  ... {len(appended) - APPENDED_SHOWN} more", style="dim"))


def _header(document: Document) -> Text:
    a, b = document["a"], document["b"]
    return Text.assemble(
        ("session ", "bold"),
        (document["session_id"], "bold cyan"),
        f"\nat seq {a}: {len(document['surface_a'])} nodes, {document['tokens_a']} tokens"
        f"  →  at seq {b}: {len(document['surface_b'])} nodes, {document['tokens_b']} tokens"
        f"\n{len(document['removed'])} nodes left the surface, {len(document['added'])} joined it, "
        f"{len(document['replacements'])} replacements in between",
    )


def _side_by_side(replacement: Document) -> Table:
    shadowed = replacement["shadowed"]
    new = replacement["replacement"]
    first, last = replacement["range"]
    label = replacement["kind"] + (f" {replacement['compaction_id']}" if replacement["compaction_id"] else "")
    table = Table(title=f"{label} at seq {new['seq']}", title_justify="left", expand=True)
    table.add_column(
        f"shadowed seqs {first}..{last} ({len(shadowed)} nodes, {replacement['shadowed_tokens']} tokens)",
        ratio=1,
    )
    gone = "" if replacement["on_surface_at_b"] else ", itself shadowed later"
    table.add_column(f"{new['type']} seq {new['seq']} ({new['tokens']} tokens{gone})", ratio=1)
    table.add_row(_shadowed_cell(shadowed), Text(clip(new["text"], CHECKPOINT_CHARS)))
    return table


def _shadowed_cell(shadowed: Sequence[Document]) -> RenderableType:
    lines: list[Text] = []
    for entry in shadowed:
        lines.append(Text(f"[{entry['seq']}] {entry['role'] or entry['type']}", style="bold"))
        lines.append(Text(clip(entry["text"], SHADOWED_ITEM_CHARS)))
    return Group(*lines) if lines else Text("(nothing: the range is not on the surface)", style="red")
