"""Template helpers of the console: status badges (icon shape and text, never
colour alone), times (relative text, exact value on hover, localised by the
browser), durations, and the attempt timeline as server-rendered SVG."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from datetime import timezone as dt_timezone

from django import template
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

register = template.Library()

# One glyph per status, each a different shape.
STATUS_ICONS = {
    "Creating": "○",
    "Queuing": "◔",
    "Pending": "◔",
    "Starting": "◑",
    "Running": "▶",
    "Restarting": "↻",
    "Succeeded": "✓",
    "Failed": "✕",
    "Stopping": "◼",
    "Stopped": "■",
    "Lost": "?",
}
LEVEL_ICONS = {"info": "i", "warning": "!", "error": "✕"}


@register.simple_tag
def status_badge(status, live=False):
    icon = STATUS_ICONS.get(status, "•")
    return format_html(
        '<span class="badge st-{}"{}><span class="icon" aria-hidden="true">{}</span> {}</span>',
        str(status).lower(), mark_safe(' data-status-badge') if live else "", icon, status,
    )


@register.simple_tag
def level_badge(level):
    return format_html('<span class="lvl lvl-{}" title="{}"><span aria-hidden="true">{}</span>'
                       '<span class="sr-only">{}</span></span>', level, level, LEVEL_ICONS.get(level, "•"), level)


def ago_text(value: datetime, now: datetime) -> str:
    seconds = int((now - value).total_seconds())
    future = seconds < 0
    seconds = abs(seconds)
    if seconds < 60:
        text = f"{seconds}s"
    elif seconds < 3600:
        text = f"{seconds // 60}m"
    elif seconds < 86400:
        text = f"{seconds // 3600}h {seconds % 3600 // 60}m"
    else:
        text = f"{seconds // 86400}d {seconds % 86400 // 3600}h"
    return f"in {text}" if future else f"{text} ago"


@register.simple_tag
def when(value, mode="ago"):
    """<time> with the exact UTC value on hover; static/js/times.js rewrites the hover text
    (and, for mode "abs", the text) in the viewer's timezone and keeps "ago" fresh."""
    if not value:
        return mark_safe('<span class="muted">—</span>')
    exact = value.astimezone(dt_timezone.utc)
    iso = value.isoformat()
    title = exact.strftime("%Y-%m-%d %H:%M:%S UTC")
    text = ago_text(value, timezone.now()) if mode == "ago" else exact.strftime("%Y-%m-%d %H:%M:%S")
    return format_html('<time datetime="{}" title="{}" data-{}>{}</time>', iso, title, mode, text)


@register.filter
def duration(seconds):
    if seconds is None or seconds == "":
        return "—"
    seconds = float(seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, sec = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m {sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


@register.simple_tag
def restarts(job):
    budget = job.restart_budget
    if not job.fault_tolerance:
        return format_html('<span class="restarts" title="fault tolerance off">{}/–</span>', job.restart_count)
    return format_html('<span class="restarts" title="{} of {} whole-job restarts used">{}/{}</span>',
                       job.restart_count, budget, job.restart_count, budget)


# --- attempt timeline ---------------------------------------------------------------------

STAGES = ("queued", "preparing", "starting", "running", "stopping")


@dataclass(frozen=True)
class Segment:
    attempt: int
    stage: str
    start: datetime
    end: datetime


def attempt_segments(attempt, now: datetime) -> list[Segment]:
    """The stages of one attempt from its timestamps; an open stage runs to `now`
    (or to the attempt's end)."""
    marks = [
        ("queued", attempt.queued_at),
        ("preparing", attempt.preparing_at),
        ("starting", attempt.starting_at),
        ("running", attempt.running_at),
        ("stopping", attempt.stopping_at),
    ]
    present = [(stage, t) for stage, t in marks if t]
    end_of_attempt = attempt.ended_at or now
    out = []
    for i, (stage, start) in enumerate(present):
        end = present[i + 1][1] if i + 1 < len(present) else end_of_attempt
        if end < start:
            end = start
        out.append(Segment(attempt.number, stage, start, end))
    return out


def _fmt(seconds: float) -> str:
    return duration(seconds)


@register.simple_tag
def attempt_timeline(job, attempts, records, now=None):
    now = now or timezone.now()
    if not attempts:
        return mark_safe('<p class="empty">No attempt yet: the job is being created.</p>')
    rows = [(a, attempt_segments(a, now)) for a in attempts]
    t0 = min(a.queued_at for a in attempts)
    t1 = max([now if not a.ended_at else a.ended_at for a in attempts] + [t0])
    span = max((t1 - t0).total_seconds(), 1.0)
    label_w, width, row_h, top = 92, 1000, 26, 22
    plot_w = width - label_w - 150
    height = top + row_h * len(rows) + 8
    by_attempt: dict[int, list] = {}
    for r in records:
        by_attempt.setdefault(r.attempt, []).append(r)

    def x(t):
        return label_w + plot_w * ((t - t0).total_seconds() / span)

    parts = []
    desc = []
    for row, (attempt, segments) in enumerate(rows):
        y = top + row * row_h
        parts.append(format_html('<text class="tl-label" x="0" y="{}">Attempt {}</text>', y + 15, attempt.number))
        for seg in segments:
            x0, x1 = x(seg.start), x(seg.end)
            w = max(x1 - x0, 2.0)
            secs = (seg.end - seg.start).total_seconds()
            open_end = seg.end == now and not attempt.ended_at
            title = (f"Attempt {attempt.number} · {seg.stage} · {_fmt(secs)}"
                     f"{' so far' if open_end else ''} (from {seg.start:%H:%M:%S} UTC)")
            parts.append(format_html(
                '<a href="?attempt={}#logs" aria-label="{}"><rect class="seg seg-{}" x="{}" y="{}" width="{}" '
                'height="{}"><title>{}</title></rect></a>',
                attempt.number, title, seg.stage, f"{x0:.1f}", y + 3, f"{w:.1f}", row_h - 8, title))
            if w > 44:
                parts.append(format_html('<text class="seg-text" x="{}" y="{}">{}</text>', f"{x0 + 4:.1f}", y + 16,
                                         seg.stage))
        desc.append(f"Attempt {attempt.number}: {attempt.status}, "
                    + ", ".join(f"{s.stage} {_fmt((s.end - s.start).total_seconds())}" for s in segments))
        end = attempt.ended_at
        causes = by_attempt.get(attempt.number, [])
        if causes and end:
            cause = causes[-1]
            xm = x(end)
            label = cause.error_code or cause.rule or "restart"
            text = f"Restart {cause.number}: {label}"
            parts.append(format_html(
                '<g class="restart-mark"><line x1="{}" x2="{}" y1="{}" y2="{}"/>'
                '<path d="M{} {} l5 -7 h-10 z"/><text x="{}" y="{}">{}</text><title>{}</title></g>',
                f"{xm:.1f}", f"{xm:.1f}", y, y + row_h, f"{xm:.1f}", y + 2, f"{xm + 6:.1f}", y + 16, text[:28], f"{text} — {cause.reason}"))
            desc.append(f"restart {cause.number} after attempt {attempt.number}: {cause.reason}")
    # time axis: start and end
    parts.append(format_html('<text class="tl-axis" x="{}" y="12">{} UTC</text>', label_w, f"{t0:%H:%M:%S}"))
    parts.append(format_html('<text class="tl-axis" x="{}" y="12" text-anchor="end">{}</text>', label_w + plot_w,
                             f"{t1:%H:%M:%S}" + (" (now)" if t1 == now else "")))
    return format_html(
        '<svg class="timeline" viewBox="0 0 {} {}" aria-labelledby="tl-title tl-desc" '
        'preserveAspectRatio="xMinYMin meet"><title id="tl-title">Attempt timeline of {}</title>'
        '<desc id="tl-desc">{}</desc>{}</svg>',
        width, height, job.display_name, "; ".join(desc), format_html_join("", "{}", ((p,) for p in parts)))
