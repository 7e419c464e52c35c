"""The audit as one self-contained HTML page: inline CSS, inline SVG, a few lines of inline script,
no network.

Per session: a timeline of the surface tokens after every event (an SVG with class ``timeline``),
each compaction marked (green: every check passed; red: a check failed) and linked to its section,
the context window and the compaction threshold drawn when known; the log-level checks; then per
compaction its checks table (class ``checks``) and its summary beside the span it shadowed. A summary
the compaction completed (``compact/summary.completion`` with an appendix) is shown in two labelled
parts: what the summarizer wrote (class ``summary-model``) and what the completion added (class
``summary-added``), with the summarizer's first draft when a repair request replaced it.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from compaction.audit.checks import Check, CompactionAudit, counted
from compaction.audit.diff import clip, message_text
from compaction.audit.report import SessionAudit
from compaction.engine.meters import HeuristicMeter, Meter
from compaction.engine.windows import header_window
from compaction.errors import EventRuleError
from compaction.handover.completion import appended, model_text
from compaction.sessions.blocks import text_of
from compaction.sessions.events import SessionEvent
from compaction.sessions.session import latest_header
from compaction.sessions.surface import Surface
from compaction.vocabulary.events import CompactSummary, Completion

WIDTH, HEIGHT = 960, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 16, 36
MAX_POINTS = 2400
SHADOWED_SHOWN = 150
ITEM_CHARS = 1500
SUMMARY_CHARS = 20000

_Scale = Callable[[float], float]


@dataclass(frozen=True)
class Limits:
    """The context window and compaction threshold drawn on the timeline (None: not drawn)."""

    window: int | None = None
    threshold_ratio: float = 0.8

    @property
    def threshold(self) -> int | None:
        return None if self.window is None else int(self.window * self.threshold_ratio)


# ---------------------------------------------------------------- data


def surface_tokens(events: Sequence[SessionEvent], meter: Meter) -> list[int]:
    """Surface tokens right after each seq (events breaking a rule are skipped, as in the audit)."""
    surface = Surface()
    prices: dict[int, int] = {}
    total = 0
    points: list[int] = []

    def lookup(seq: int) -> SessionEvent:
        return events[seq]

    for event in events:
        try:
            plan = surface.fold(event, lookup)
        except EventRuleError:
            surface.length = event.seq + 1
            points.append(total)
            continue
        if plan.on_surface:
            prices[event.seq] = meter.event(event)
            total += prices[event.seq] - sum(prices.pop(s, 0) for s in plan.shadowed)
        points.append(total)
    return points


def window_of(events: Sequence[SessionEvent]) -> int | None:
    """The context window the latest request/header declares, else the known window of its model:
    the one ``compaction compact`` assumes (:func:`~compaction.engine.windows.header_window`)."""
    found = header_window(latest_header(events))
    return None if found is None else found[0]


def _sampled(points: Sequence[int], keep: Iterable[int]) -> list[int]:
    """Seqs to plot: every seq of a short session; else an even sample plus each marked seq and
    the one before it (so every drop stays visible)."""
    if len(points) <= MAX_POINTS:
        return list(range(len(points)))
    step = len(points) / MAX_POINTS
    chosen = {int(i * step) for i in range(MAX_POINTS)} | {len(points) - 1}
    for seq in keep:
        chosen |= {s for s in (seq - 1, seq) if 0 <= s < len(points)}
    return sorted(chosen)


# ---------------------------------------------------------------- the timeline


def timeline_svg(audit: SessionAudit, limits: Limits, meter: Meter, index: int) -> str:
    events = audit.log.events
    points = surface_tokens(events, meter)
    marks = [(_mark_seq(c), c) for c in audit.compactions]
    top = max([*points, limits.window or 0, 1]) * 1.08
    last = max(len(points) - 1, 1)

    def x(seq: float) -> float:
        return LEFT + (WIDTH - LEFT - RIGHT) * seq / last

    def y(tokens: float) -> float:
        return TOP + (HEIGHT - TOP - BOTTOM) * (1 - tokens / top)

    seqs = _sampled(points, (s for s, _ in marks))
    path = " ".join(f"{x(s):.1f},{y(points[s]):.1f}" for s in seqs)
    parts = [
        f'<svg id="timeline-{index}" class="timeline" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" role="img" xmlns="http://www.w3.org/2000/svg">',
        f"<title>surface tokens per event ({meter.name} meter)</title>",
        *_axes(x, y, last, top),
        *_limit_lines(limits, x, y, last),
        f'<polyline class="tokens" fill="none" stroke="#2563eb" stroke-width="1.5" points="{path}"/>',
        *(_marker(seq, c, x, y, points) for seq, c in marks),
        "</svg>",
    ]
    return "\n".join(parts)


def _mark_seq(c: CompactionAudit) -> int:
    return c.replacement_seq if c.replacement_seq is not None else c.start_seq


def nice_step(span: float, ticks: int = 5) -> int:
    """A round tick step (1, 2 or 5 times a power of ten) giving about ``ticks`` ticks."""
    raw = max(span / ticks, 1.0)
    power = 10 ** (len(str(int(raw))) - 1)
    return int(next(m * power for m in (1, 2, 5, 10) if m * power >= raw))


def _axes(x: _Scale, y: _Scale, last: int, top: float) -> list[str]:
    bottom, left = HEIGHT - BOTTOM, LEFT
    out = [
        f'<line class="axis" x1="{left}" y1="{bottom}" x2="{WIDTH - RIGHT}" y2="{bottom}" stroke="#555"/>',
        f'<line class="axis" x1="{left}" y1="{TOP}" x2="{left}" y2="{bottom}" stroke="#555"/>',
        f'<text x="{(WIDTH + LEFT) / 2}" y="{HEIGHT - 4}" text-anchor="middle" class="label">seq</text>',
        f'<text x="{left + 8}" y="{TOP + 12}" class="label">surface tokens after each event; '
        "markers: compactions (green: checks passed; amber: a failed attempt; red: checks failed)</text>",
    ]
    step = nice_step(last)
    for seq in range(0, last + 1, step):
        out.append(f'<text x="{x(seq):.1f}" y="{bottom + 14}" text-anchor="middle" class="tick">{seq}</text>')
    step = nice_step(top)
    for tokens in range(0, int(top) + 1, step):
        out.append(
            f'<text x="{left - 6}" y="{y(tokens) + 4:.1f}" text-anchor="end" class="tick">{tokens}</text>'
        )
        out.append(
            f'<line x1="{left}" x2="{WIDTH - RIGHT}" y1="{y(tokens):.1f}" y2="{y(tokens):.1f}" '
            'stroke="#eee"/>'
        )
    return out


def _limit_lines(limits: Limits, x: _Scale, y: _Scale, last: int) -> list[str]:
    out: list[str] = []
    lines = (("window", limits.window, "#444", "6 3"), ("threshold", limits.threshold, "#d97706", "3 3"))
    for name, value, color, dash in lines:
        if value is None:
            continue
        out.append(
            f'<line class="{name}" x1="{x(0):.1f}" x2="{x(last):.1f}" y1="{y(value):.1f}" '
            f'y2="{y(value):.1f}" stroke="{color}" stroke-dasharray="{dash}"/>'
        )
        out.append(
            f'<text class="{name}-label" x="{x(last) - 4:.1f}" y="{y(value) - 4:.1f}" '
            f'text-anchor="end" fill="{color}">{name} {value}</text>'
        )
    return out


def _marker(seq: int, c: CompactionAudit, x: _Scale, y: _Scale, points: Sequence[int]) -> str:
    color = "#dc2626" if not c.passed else "#16a34a" if c.outcome == "committed" else "#d97706"
    tip = html.escape(
        f"{c.compaction_id} {c.strategy} {c.outcome} at seq {seq}: "
        f"{'all checks passed' if c.passed else 'checks failed'}"
    )
    tokens = points[seq] if seq < len(points) else 0
    return (
        f'<a href="#c-{html.escape(c.compaction_id)}" class="compaction-mark">'
        f'<line x1="{x(seq):.1f}" x2="{x(seq):.1f}" y1="{TOP}" y2="{HEIGHT - BOTTOM}" '
        f'stroke="{color}" stroke-width="1.5" opacity="0.7"/>'
        f'<circle cx="{x(seq):.1f}" cy="{y(tokens):.1f}" r="4" fill="{color}"><title>{tip}</title></circle>'
        "</a>"
    )


# ---------------------------------------------------------------- checks and spans


def checks_table(checks: Sequence[Check], caption: str, extra_class: str = "") -> str:
    rows = []
    for check in checks:
        state = "fail" if not check.passed else "pass" if check.applies else "na"
        label = {"fail": "✗ fail", "pass": "✓ pass", "na": "– n/a"}[state]
        rows.append(
            f'<tr class="{state}"><td class="name">{html.escape(check.name)}</td>'
            f'<td class="result">{label}</td><td class="evidence">{html.escape(check.evidence)}</td></tr>'
        )
    return (
        f'<table class="checks {extra_class}"><caption>{html.escape(caption)}</caption>'
        "<thead><tr><th>check</th><th>result</th><th>evidence</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _shadowed_html(events: Sequence[SessionEvent], seqs: Sequence[int]) -> str:
    parts = []
    for seq in seqs[:SHADOWED_SHOWN]:
        if not 0 <= seq < len(events):
            parts.append(f'<div class="msg missing">[{seq}] not in the log</div>')
            continue
        event = events[seq]
        text = message_text(event, ITEM_CHARS)
        parts.append(
            f'<div class="msg"><div class="who">[{seq}] {html.escape(event.TYPE)}</div>'
            f"<pre>{html.escape(text)}</pre></div>"
        )
    if len(seqs) > SHADOWED_SHOWN:
        parts.append(f'<div class="more">… {len(seqs) - SHADOWED_SHOWN} more shadowed nodes</div>')
    return "".join(parts) or '<div class="more">(nothing shadowed)</div>'


def _summary_event(events: Sequence[SessionEvent], c: CompactionAudit) -> CompactSummary | None:
    if c.summary_seq is not None and 0 <= c.summary_seq < len(events):
        summary = events[c.summary_seq]
        if isinstance(summary, CompactSummary):
            return summary
    return None


def _summary_text(events: Sequence[SessionEvent], c: CompactionAudit) -> str:
    summary = _summary_event(events, c)
    if summary is not None:
        return text_of(summary.summary)
    if c.replacement_seq is not None and 0 <= c.replacement_seq < len(events):
        return message_text(events[c.replacement_seq], SUMMARY_CHARS)
    return f"(no summary: {c.outcome}{': ' + c.error if c.error else ''})"


def _pre(css_class: str, text: str) -> str:
    return f'<pre class="{css_class}">{html.escape(clip(text, SUMMARY_CHARS))}</pre>'


def _summary_html(events: Sequence[SessionEvent], c: CompactionAudit) -> str:
    """The summary as one block; a completed one as what the summarizer wrote, then what the
    compaction added (never attributed to the summarizer)."""
    text = _summary_text(events, c)
    summary = _summary_event(events, c)
    record = summary.completion if summary is not None else None
    if summary is None or record is None or not record.appendix:
        return "<h4>summary</h4>" + _pre("summary-text", text)
    return "<h4>summary, completed by the compaction</h4>" + _completed_html(summary, record, text)


def _completed_html(summary: CompactSummary, record: Completion, text: str) -> str:
    who = "/".join(x for x in (summary.provider, summary.model) if x)
    written = model_text(text, record)
    intact = appended(written, record.appendix) == text
    model_label = (
        f"written by the summarizer ({who})"
        if intact
        else "the summary as recorded: it does not end with the recorded appendix (see the completion check)"
    )
    parts = [
        f'<h5 class="summary-label">{html.escape(model_label)}</h5>',
        _pre("summary-model", written),
        f'<h5 class="summary-label">added by the compaction ({html.escape(record.mode)} completion), '
        "not by the summarizer</h5>",
        _pre("summary-added", record.appendix),
    ]
    if record.draft is not None:
        parts += [
            "<details><summary>the summarizer's first draft, replaced after one repair request</summary>",
            _pre("summary-draft", record.draft),
            "</details>",
        ]
    return "".join(parts)


def compaction_section(events: Sequence[SessionEvent], c: CompactionAudit) -> str:
    state = "pass" if c.passed else "fail"
    who = "/".join(x for x in (c.provider, c.model) if x) or c.strategy
    title = (
        f"{c.compaction_id} · {c.strategy} · {c.outcome} · {who}"
        + (" (imported)" if c.imported else "")
        + f" · seqs {c.start_seq}..{c.end_seq if c.end_seq is not None else ''}"
    )
    tokens = f"{c.shadowed_tokens} → {c.summary_tokens} tokens" if c.shadowed_tokens is not None else ""
    return (
        f'<section class="compaction {state}" id="c-{html.escape(c.compaction_id)}">'
        f'<h3>{html.escape(title)}</h3><p class="meta">{len(c.shadowed_seqs)} shadowed nodes {tokens}</p>'
        + _warnings_html(c.warnings)
        + checks_table(c.checks, f"checks of {c.compaction_id}")
        + '<div class="side"><div class="shadowed"><h4>shadowed span</h4>'
        + _shadowed_html(events, c.shadowed_seqs)
        + '</div><div class="summary">'
        + _summary_html(events, c)
        + "</div></div></section>"
    )


def _warnings_html(warnings: Sequence[str]) -> str:
    """A passing compaction's reasons for doubt ("PASS, 2 warnings" and each warning)."""
    if not warnings:
        return ""
    items = "".join(f"<li>{html.escape(w)}</li>" for w in warnings)
    count = counted(len(warnings), "warning")
    return f'<div class="warnings"><p><strong>{count}</strong></p><ul>{items}</ul></div>'


def session_section(audit: SessionAudit, limits: Limits, meter: Meter, index: int) -> str:
    events = audit.log.events
    found = header_window(latest_header(events))
    source = "given (--window)" if limits.window else None if found is None else found[1]
    window = limits.window or (None if found is None else found[0])
    limits = Limits(window, limits.threshold_ratio)
    state = "pass" if audit.passed else "fail"
    failed = sum(not c.passed for c in audit.compactions)
    warnings = sum(len(c.warnings) for c in audit.compactions)
    badge = state.upper() + (f", {counted(warnings, 'warning')}" if warnings else "")
    note = (
        '<p class="meta">context window unknown: pass a window to draw it</p>'
        if window is None
        else f'<p class="meta">context window {window:,} ({html.escape(str(source))}), '
        f"threshold {limits.threshold:,}</p>"
    )
    return (
        f'<section class="session {state}" id="s-{audit.session_id}">'
        f'<h2>session {audit.session_id} <span class="badge {state}">{badge}</span></h2>'
        f'<p class="meta">{counted(len(events), "event")} · '
        f"{counted(len(audit.compactions), 'compaction')} · {failed} with failed checks</p>"
        + timeline_svg(audit, limits, meter, index)
        + note
        + checks_table(audit.log_checks, "log-level checks", "log-checks")
        + "".join(compaction_section(events, c) for c in audit.compactions)
        + "</section>"
    )


# ---------------------------------------------------------------- the page


def render_html(
    audits: Sequence[SessionAudit], *, limits: Limits | None = None, meter: Meter | None = None
) -> str:
    """The whole report as one HTML document."""
    limits = limits or Limits()
    meter = meter or HeuristicMeter()
    passed = all(a.passed for a in audits)
    verdict = "audit passed" if passed else "audit failed"
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    body = "".join(session_section(a, limits, meter, i) for i, a in enumerate(audits))
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>compaction audit: {verdict}</title><style>{CSS}</style></head>"
        f'<body data-passed="{str(passed).lower()}"><header><h1>compaction audit '
        f'<span class="badge {"pass" if passed else "fail"}">{verdict}</span></h1>'
        f'<p class="meta">{counted(len(audits), "session")} · generated {stamp}</p></header>'
        f"<main>{body}</main><script>{SCRIPT}</script></body></html>\n"
    )


CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1100px;padding:16px;color:#111}
h1,h2,h3{margin:.6em 0 .3em}h3{font-size:15px;font-family:ui-monospace,monospace}
.meta{color:#555;margin:.2em 0}.badge{font-size:12px;padding:2px 8px;border-radius:4px;color:#fff}
.badge.pass{background:#16a34a}.badge.fail{background:#dc2626}
.warnings{border-left:4px solid #d97706;background:#fffbeb;padding:.2em .8em;margin:.4em 0}
section.session{border-top:3px solid #ddd;margin-top:24px}
section.compaction{border:1px solid #ddd;border-left:5px solid #16a34a;padding:4px 12px;margin:14px 0}
section.compaction.fail{border-left-color:#dc2626}
svg.timeline{background:#fafafa;border:1px solid #ddd;max-width:100%;height:auto}
svg .tick{font-size:10px;fill:#555}svg .label{font-size:11px;fill:#333}svg text{font-size:11px}
table.checks{border-collapse:collapse;width:100%;margin:8px 0;font-size:13px}
table.checks caption{text-align:left;font-weight:600;padding:4px 0}
table.checks td,table.checks th{border:1px solid #ddd;padding:3px 6px;vertical-align:top;text-align:left}
table.checks tr.fail td{background:#fee2e2}table.checks tr.na td{color:#92400e}
td.name,td.result{white-space:nowrap}
.side{display:grid;grid-template-columns:1fr 1fr;gap:12px}
.side>div{max-height:520px;overflow:auto;border:1px solid #eee;padding:4px 8px;background:#fcfcfc}
.msg{border-bottom:1px dashed #e5e5e5;padding:2px 0}.who{font-weight:600;font-size:12px;color:#444}
h5.summary-label{margin:.6em 0 .2em;font-size:12px}
pre.summary-added{border-left:3px solid #d97706;padding-left:6px}
pre{white-space:pre-wrap;word-break:break-word;margin:2px 0;font-size:12px}
"""

SCRIPT = """
document.querySelectorAll('svg.timeline').forEach(function (svg) {
  var box = svg.getBoundingClientRect();
  svg.setAttribute('data-rendered-width', String(Math.round(box.width)));
  svg.setAttribute('data-marks', String(svg.querySelectorAll('.compaction-mark').length));
});
document.body.setAttribute('data-rendered', 'true');
"""
