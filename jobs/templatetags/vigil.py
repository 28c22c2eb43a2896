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

from core import delivery_errors, reasons

register = template.Library()


@register.filter
def cause_first(reason) -> str:
    """A decision's reason with its cause in front, for cells that cut it short (core.reasons)."""
    return reasons.cause_first(str(reason or ""))


@register.filter
def evidence_first(reason) -> str:
    """The job list's cut: the failure's own line ("ValueError: bad config ...") in front, not
    the catalog's rule id, which `rule_of` gives for the hover (core.reasons)."""
    return reasons.cause_first(str(reason or ""), evidence=True)


@register.filter
def rule_of(reason) -> str:
    return reasons.rule_of(str(reason or ""))


@register.filter
def readable_error(text) -> str:
    """A delivery error in a sentence (core.delivery_errors), rows stored before included."""
    return delivery_errors.readable_error(str(text or ""))


@register.filter
def pretty_payload(text) -> str:
    """A sent payload for reading: JSON indented, anything else as it was."""
    import json

    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(text or "")


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
        str(status).lower(),
        mark_safe(" data-status-badge") if live else "",
        icon,
        status,
    )


@register.simple_tag
def level_badge(level):
    return format_html(
        '<span class="lvl lvl-{}" title="{}"><span aria-hidden="true">{}</span><span class="sr-only">{}</span></span>',
        level,
        level,
        LEVEL_ICONS.get(level, "•"),
        level,
    )


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
    # No budget to count against when nothing restarts the whole job: "0/3" read as three
    # restarts still to come. Async instance restarts, if any, are still counted.
    if not job.fault_tolerance:
        return format_html('<span class="restarts" title="fault tolerance off">{}</span>', job.restart_count)
    if not job.ft.enable_job_restart:
        return format_html(
            '<span class="restarts" title="whole-job restarts off (--enable-job-restart=False)">{}</span>',
            job.restart_count,
        )
    return format_html(
        '<span class="restarts" title="{} of {} whole-job restarts used">{}/{}</span>',
        job.restart_count,
        budget,
        job.restart_count,
        budget,
    )


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


def _ms(t: datetime) -> int:
    """Epoch milliseconds, what the page's clock counts in."""
    return int(t.timestamp() * 1000)


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
            title = (
                f"Attempt {attempt.number} · {seg.stage} · {_fmt(secs)}"
                f"{' so far' if open_end else ''} (from {seg.start:%H:%M:%S} UTC)"
            )
            # data-from/data-to (epoch ms) let static/js/timeline.js redraw the bars as time
            # passes; an open stage (data-open) grows to the browser's now.
            parts.append(
                format_html(
                    '<a href="?attempt={}#logs" aria-label="{}"><rect class="seg seg-{}" x="{}" y="{}" width="{}" '
                    'height="{}" data-from="{}" data-to="{}"{}><title>{}</title></rect></a>',
                    attempt.number,
                    title,
                    seg.stage,
                    f"{x0:.1f}",
                    y + 3,
                    f"{w:.1f}",
                    row_h - 8,
                    _ms(seg.start),
                    _ms(seg.end),
                    mark_safe(" data-open") if open_end else "",
                    title,
                )
            )
            if w > 44 or open_end:
                parts.append(
                    format_html(
                        '<text class="seg-text" x="{}" y="{}" data-from="{}"{}>{}</text>',
                        f"{x0 + 4:.1f}",
                        y + 16,
                        _ms(seg.start),
                        "" if w > 44 else mark_safe(' visibility="hidden"'),
                        seg.stage,
                    )
                )
        desc.append(
            f"Attempt {attempt.number}: {attempt.status}, "
            + ", ".join(f"{s.stage} {_fmt((s.end - s.start).total_seconds())}" for s in segments)
        )
        end = attempt.ended_at
        causes = by_attempt.get(attempt.number, [])
        if causes and end:
            cause = causes[-1]
            xm = x(end)
            label = cause.error_code or cause.rule or "restart"
            text = f"Restart {cause.number}: {label}"
            # Drawn at x=0 and moved by its transform, so the page can move it as the scale changes.
            parts.append(
                format_html(
                    '<g class="restart-mark" transform="translate({} 0)" data-at="{}"><line x1="0" x2="0" y1="{}" y2="{}"/>'
                    '<path d="M0 {} l5 -7 h-10 z"/><text x="6" y="{}">{}</text><title>{}</title></g>',
                    f"{xm:.1f}",
                    _ms(end),
                    y,
                    y + row_h,
                    y + 2,
                    y + 16,
                    text[:28],
                    f"{text} — {cause.reason}",
                )
            )
            desc.append(f"restart {cause.number} after attempt {attempt.number}: {cause.reason}")
    # time axis: start and end
    parts.append(format_html('<text class="tl-axis" x="{}" y="12">{} UTC</text>', label_w, f"{t0:%H:%M:%S}"))
    parts.append(
        format_html(
            '<text class="tl-axis tl-end" x="{}" y="12" text-anchor="end">{}</text>',
            label_w + plot_w,
            f"{t1:%H:%M:%S}" + (" (now)" if t1 == now else ""),
        )
    )
    # data-live: an attempt is open, so the right edge is "now" and the page keeps it there.
    return format_html(
        '<svg class="timeline" viewBox="0 0 {} {}" aria-labelledby="tl-title tl-desc" '
        'preserveAspectRatio="xMinYMin meet" data-t0="{}" data-t1="{}" data-now="{}" data-plot-x="{}" '
        'data-plot-w="{}"{}><title id="tl-title">Attempt timeline of {}</title>'
        '<desc id="tl-desc">{}</desc>{}</svg>',
        width,
        height,
        _ms(t0),
        _ms(t1),
        _ms(now),
        label_w,
        plot_w,
        mark_safe(" data-live") if t1 == now else "",
        job.display_name,
        "; ".join(desc),
        format_html_join("", "{}", ((p,) for p in parts)),
    )
