"""What a notification says: plain functions from an EventInfo (plain data, no
Django) to a title, a plain-text body, a Markdown body and the webhook's JSON.

Every message says what happened, to which job, why (when the event carries a
reason), and links to the job page."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

# Payload keys that explain an event, in the order worth showing.
REASON_KEYS = ("reason", "cause", "error_message", "detail", "diagnosis")


@dataclass(frozen=True)
class EventInfo:
    event_id: int | None
    type: str
    type_label: str
    level: str
    message: str
    created_at: datetime
    payload: dict = field(default_factory=dict)
    attempt: int | None = None
    instance: str = ""
    job_id: int | None = None
    job_name: str = ""
    job_status: str = ""
    job_url: str = ""
    workspace_slug: str = ""
    workspace_name: str = ""
    is_test: bool = False


@dataclass(frozen=True)
class Message:
    title: str
    text: str
    markdown: str
    url: str


def job_url(console_url: str, job_id) -> str:
    return f"{console_url.rstrip('/')}/jobs/{job_id}/"


def reason_of(info: EventInfo) -> str:
    payload = info.payload if isinstance(info.payload, dict) else {}
    for key in REASON_KEYS:
        value = payload.get(key)
        if isinstance(value, str) and value.strip() and value.strip() != info.message.strip():
            return value.strip()
    code = payload.get("error_code")
    return f"error code {code}" if isinstance(code, str) and code else ""


# Only what can change inline meaning. Lines never start with user text, so
# "#", "-", "+" need nothing; intraword "_" is not emphasis in CommonMark, and
# leaving it alone keeps job names like bert_large clean after Slack conversion.
_MD_SPECIAL = re.compile(r"([\\`*\[\]<>|~])")


def md_escape(text: str) -> str:
    """Backslash-escape the CommonMark punctuation that would change a name's meaning."""
    return _MD_SPECIAL.sub(r"\\\1", text)


def compose(info: EventInfo) -> Message:
    if info.is_test:
        title = f"[Vigil] Test notification for {info.workspace_name}"
        text = (
            f"This is a test notification from Vigil for workspace {info.workspace_name}.\n"
            f"{info.message}\n"
            "If you can read this, the channel works."
        )
        markdown = (
            f"**Test notification** from Vigil for workspace {md_escape(info.workspace_name)}.\n\n"
            f"{md_escape(info.message)}\n\nIf you can read this, the channel works."
        )
        return Message(title=title, text=text, markdown=markdown, url=info.job_url)

    job = f"{info.job_name} (#{info.job_id})"
    title = f"[Vigil] {info.type_label}: {job}"
    why = reason_of(info)
    where = []
    if info.attempt is not None:
        where.append(f"attempt {info.attempt}")
    if info.instance:
        where.append(f"instance {info.instance}")
    where_text = (", ".join(where).capitalize() + ". ") if where else ""
    status = f"Job status: {info.job_status}." if info.job_status else ""

    lines = [
        f"{info.type_label} on job {job} in workspace {info.workspace_name} ({info.level}).",
        f"What happened: {info.message}",
    ]
    if why:
        lines.append(f"Why: {why}")
    if where_text or status:
        lines.append((where_text + status).strip())
    lines.append(f"Job page: {info.job_url}")
    text = "\n".join(lines)

    md = [
        f"**{md_escape(info.type_label)}** on job [{md_escape(job)}]({info.job_url}) "
        f"in workspace {md_escape(info.workspace_name)} ({md_escape(info.level)}).",
        "",
        f"What happened: {md_escape(info.message)}",
    ]
    if why:
        md += ["", f"Why: {md_escape(why)}"]
    if where_text or status:
        md += ["", md_escape((where_text + status).strip())]
    return Message(title=title, text=text, markdown="\n".join(md), url=info.job_url)


def webhook_body(info: EventInfo, sent_at: datetime) -> dict:
    """The generic webhook's JSON document (see notifications.transports)."""
    message = compose(info)
    return {
        "version": 1,
        "test": info.is_test,
        "sent_at": sent_at.isoformat(),
        "event": {
            "id": info.event_id,
            "type": info.type,
            "type_label": info.type_label,
            "level": info.level,
            "message": info.message,
            "payload": info.payload,
            "attempt": info.attempt,
            "instance": info.instance,
            "created_at": info.created_at.isoformat(),
        },
        "job": None
        if info.job_id is None
        else {"id": info.job_id, "name": info.job_name, "status": info.job_status, "url": info.job_url},
        "workspace": {"slug": info.workspace_slug, "name": info.workspace_name},
        "title": message.title,
        "text": message.text,
    }
