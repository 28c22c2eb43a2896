"""Live pages over WebSockets (Channels).

`JobConsumer` at ws/jobs/<id>/ serves one job to members of its workspace:

  client -> {"type": "hello", "after_event": <last event id seen or null>,
             "logs": {"attempt": <n or null to follow the current attempt>,
                      "instances": [names] or null for all,
                      "offsets": {"<attempt>:<instance>": next byte offset}}}
  server -> {"type": "event", "id", ...}       backfilled after `after_event`, then live
            {"type": "status", "status", ...}  the job's status, restarts, attempt
            {"type": "diagnosis", "id", ...}
            {"type": "log", "attempt", "instance", "offset", "next_offset", "line", "next_line",
             "lines": [...]}
            {"type": "log_target", "attempt", "instance", "line" or null, "why"}

`line` is the 1-based number, counted from the start of the file, of the first
line of a batch, so the page can number every line and link to it. A client may
send "lines": {"<attempt>:<instance>": next line number} with its offsets so a
reconnect does not recount, and a "target" to open a log at one line:
{"instance", "line": N} (a permalink), {"instance", "offset": byte} (the line
the classifier used) or {"instance", "first_error": true} (the first line that
looks like an error). The stream of that instance then starts TARGET_CONTEXT
lines before the target, and a "log_target" message names the target's line
number (null with a `why` when there is no such line).

Logs are tailed per connection: every TICK seconds the consumer reads the new
bytes of each watched instance log from its byte offset, cuts them at the last
newline and sends them as one batch per instance. The client keeps
`next_offset` per (attempt, instance) and sends it again after a reconnect, so
the stream resumes exactly where it stopped: no gap, no duplicate. Events and
statuses come from monitoring.publish through the channel layer.

`WorkspaceConsumer` at ws/workspaces/<slug>/ forwards the statuses and events of
every job in a workspace (job list, dashboard).

Who may connect: asgi.py refuses foreign Origins (AllowedHostsOriginValidator)
and resolves the session; these consumers refuse anyone who is not a member of
the workspace (close before accept: the handshake fails with 403).

Who may stay: every ACCESS_CHECK_SECONDS an open socket checks its person
again, and when access has ended it sends {"type": "revoked", "code", "reason"}
and closes with that code, so the page can say why and stop reconnecting:

  4401  logged out, the session expired, or the password changed
  4403  no longer a member of the workspace (also the refusal at connect)
  4423  the account was deactivated
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections import OrderedDict
from collections.abc import Callable

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from console import metrics
from jobs.backends.base import BackendError
from jobs.inputs import json_problem

from .publish import event_message, job_group, status_message, workspace_group

TICK = 0.1  # seconds between reads of the logs
REFRESH = 1.0  # seconds between looks at the job's attempt and instances
INITIAL_TAIL_BYTES = 64 * 1024  # a first connection starts this far before the end
MAX_BATCH_BYTES = 512 * 1024  # per instance per tick
LIVE_CHECK = 2.0  # seconds between checks that Redis answers (live events on time)
DRAIN_BATCHES = 16  # at most this many batches of a finished attempt are sent before following the next
MAX_PARTIAL_LINE = 64 * 1024  # a line longer than this is sent without its newline
BACKFILL_LIMIT = 2000
SCAN_CHUNK = 1024 * 1024  # bytes read at a time when counting lines or looking for an error
TARGET_CONTEXT = 100  # lines sent before a target line
# Generic "this looks like an error" for the `e` key when the classifier left no line.
ERROR_LINE = re.compile(rb"Traceback|Error|error:")
REFUSED = 4403
SESSION_ENDED = 4401
ACCOUNT_DISABLED = 4423
ACCESS_CHECK_SECONDS = 2.0  # how long a socket may outlive its person's access


class LogCursor:
    """Reads one instance log by byte offset: from its file when the backend has a
    local path (a pread, no thread hop), else through backend.read_log."""

    def __init__(self, backend, handle: dict, name: str):
        self.backend = backend
        self.handle = handle
        self.name = name
        self.path = None
        self.fd = None
        try:
            self.path = backend.log_path(handle, name)
        except Exception:  # noqa: BLE001 - a backend without paths reads through read_log
            self.path = None

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def _open(self) -> bool:
        if self.fd is None and self.path:
            try:
                self.fd = os.open(self.path, os.O_RDONLY)
            except OSError:
                return False
        return self.fd is not None

    async def size(self) -> int | None:
        if self.path:
            try:
                return os.path.getsize(self.path)
            except OSError:
                return 0
        return None

    def read_sync(self, offset: int, limit: int) -> bytes:
        """The same read for a worker thread (line counting, error search)."""
        if self.path:
            try:
                with open(self.path, "rb") as f:
                    f.seek(offset)
                    return f.read(limit)
            except (OSError, OverflowError, ValueError):
                return b""
        return self.backend.read_log(self.handle, self.name, offset, limit)

    async def read(self, offset: int, limit: int) -> bytes:
        if self.path:
            if not self._open():
                return b""
            try:
                return os.pread(self.fd, limit, offset)
            except (OSError, OverflowError, ValueError):
                return b""  # an offset past anything a file can hold (a client's): nothing there
        return await sync_to_async(self.backend.read_log, thread_sensitive=False)(
            self.handle, self.name, offset, limit
        )


def complete_lines(data: bytes, final: bool = False) -> bytes:
    """The part of `data` that ends with a newline (all of it when a partial line
    has grown past MAX_PARTIAL_LINE or the stream is final)."""
    if final:
        return data
    cut = data.rfind(b"\n")
    if cut >= 0:
        return data[: cut + 1]
    return data if (final or len(data) >= MAX_PARTIAL_LINE) else b""


def split_lines(chunk: bytes) -> list[str]:
    text = chunk.decode("utf-8", errors="replace")
    if text.endswith("\n"):
        text = text[:-1]
    return text.split("\n")


def start_offset(size: int, head: bytes) -> int:
    """Where a first view of a long log starts: INITIAL_TAIL_BYTES before the end,
    moved forward to the start of the next whole line (`head` is the bytes there)."""
    start = max(0, size - INITIAL_TAIL_BYTES)
    if start == 0:
        return 0
    nl = head.find(b"\n")
    return start + nl + 1 if nl >= 0 else start


# --- line numbers and targets (pure over a read(offset, limit) function) ----------------

Reader = Callable[[int, int], bytes]
# Logs only grow, so a (offset, line) pair once counted stays true: the next count
# of the same file starts there instead of at byte 0.
_KNOWN_LINES: OrderedDict[str, tuple[int, int]] = OrderedDict()
_KNOWN_LIMIT = 512


def _remember(key: str | None, offset: int, line: int) -> None:
    if key is None:
        return
    have = _KNOWN_LINES.get(key)
    if have is None or have[0] < offset:
        _KNOWN_LINES[key] = (offset, line)
        _KNOWN_LINES.move_to_end(key)
        while len(_KNOWN_LINES) > _KNOWN_LIMIT:
            _KNOWN_LINES.popitem(last=False)


def line_at_offset(read: Reader, offset: int, key: str | None = None) -> int:
    """The 1-based number of the line holding byte `offset` (newlines before it + 1)."""
    pos, line = 0, 1
    have = _KNOWN_LINES.get(key) if key else None
    if have and have[0] <= offset:
        pos, line = have
    while pos < offset:
        data = read(pos, min(SCAN_CHUNK, offset - pos))
        if not data:
            break
        line += data.count(b"\n")
        pos += len(data)
    _remember(key, pos, line)
    return line


def offset_of_line(read: Reader, line: int, key: str | None = None) -> int | None:
    """The byte offset where 1-based line `line` starts, or None past the last line."""
    if line <= 1:
        return 0
    pos, at = 0, 1
    have = _KNOWN_LINES.get(key) if key else None
    if have and have[1] < line:  # `have` may sit inside its line: only later lines are found from it
        pos, at = have
    while True:
        data = read(pos, SCAN_CHUNK)
        if not data:
            return None
        count = data.count(b"\n")
        if at + count >= line:
            cut = -1
            for _ in range(line - at):
                cut = data.index(b"\n", cut + 1)
            start = pos + cut + 1
            # A line "starts" at the end of the file only if something follows.
            if not read(start, 1):
                return None
            _remember(key, start, line)
            return start
        at += count
        pos += len(data)


def count_lines(read: Reader) -> int:
    """How many lines the log has (a last line without its newline counts)."""
    pos, lines, last = 0, 0, b"\n"
    while True:
        data = read(pos, SCAN_CHUNK)
        if not data:
            return lines + (0 if last == b"\n" else 1)
        lines += data.count(b"\n")
        last = data[-1:]
        pos += len(data)


def first_match(read: Reader, pattern: re.Pattern = ERROR_LINE) -> int | None:
    """The byte offset of the start of the first line matching `pattern`, or None.
    Reads whole lines at a time, so a match is never cut at a chunk boundary."""
    pos = 0
    while True:
        data = read(pos, SCAN_CHUNK)
        if not data:
            return None
        cut = data.rfind(b"\n")
        whole = data[: cut + 1] if cut >= 0 and len(data) == SCAN_CHUNK else data  # a longer line is searched in pieces
        m = pattern.search(whole)
        if m:
            return pos + whole.rfind(b"\n", 0, m.start()) + 1
        pos += len(whole)


def resolve_target(read: Reader, target: dict, key: str | None = None) -> tuple[int | None, int, int, str]:
    """(target line or None, byte offset and line number to stream from, why) for a
    target of the log view: {"line": N}, {"offset": byte} or {"first_error": true}."""
    why = ""
    line = None
    if "line" in target:
        if offset_of_line(read, target["line"], key) is None:
            why = f"the log has {count_lines(read):,} lines"
        else:
            line = target["line"]
    elif "offset" in target:
        if target["offset"] > 0 and not read(target["offset"] - 1, 1):
            why = "the log is shorter than the recorded offset"
        else:
            line = line_at_offset(read, target["offset"], key)
    else:
        offset = first_match(read)
        if offset is None:
            why = "no line matches Traceback, Error or error:"
        else:
            line = line_at_offset(read, offset, key)
    if line is None:
        return None, 0, 1, why
    start_line = max(1, line - TARGET_CONTEXT)
    start = offset_of_line(read, start_line, key)
    return line, start or 0, start_line, why


def parse_target(raw) -> dict | None:
    """A target from a client message, or None when it is not one."""
    if not isinstance(raw, dict) or not isinstance(raw.get("instance"), str):
        return None

    def whole(v):
        return isinstance(v, int) and not isinstance(v, bool)

    out = {"instance": raw["instance"]}
    if whole(raw.get("line")) and raw["line"] >= 1:
        out["line"] = raw["line"]
    elif whole(raw.get("offset")) and raw["offset"] >= 0:
        out["offset"] = raw["offset"]
    elif raw.get("first_error") is True:
        out["first_error"] = True
    else:
        return None
    return out


@database_sync_to_async
def _job_if_member(user, job_id):
    from jobs.actions import NotFound, job_for

    if user is None or not user.is_authenticated:
        return None
    try:
        return job_for(user, job_id)
    except NotFound:
        return None


@database_sync_to_async
def _workspace_if_member(user, slug):
    from jobs.actions import NotFound, workspace_by_slug

    if user is None or not user.is_authenticated:
        return None
    try:
        return workspace_by_slug(user, slug)
    except NotFound:
        return None


class _SessionOnly:
    """What django.contrib.auth.get_user reads from a request: its session."""

    def __init__(self, session):
        self.session = session


@database_sync_to_async
def _access_lost(session_key: str | None, user_id: int, workspace_id: int) -> tuple[int, str] | None:
    """(close code, reason) when the socket's person may no longer watch this
    workspace, else None. The session is read anew from its store, as an HTTP
    request would: a logout deletes it, and a password change voids its hash."""
    from importlib import import_module

    from django.conf import settings
    from django.contrib.auth import get_user, get_user_model

    from jobs.models import Membership

    user = get_user_model().objects.filter(pk=user_id).only("is_active").first()
    if user is None or not user.is_active:
        return ACCOUNT_DISABLED, "your account was deactivated"
    if session_key is not None:
        store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
        if get_user(_SessionOnly(store)).pk != user_id:
            return SESSION_ENDED, "you logged out or your session ended"
    if not Membership.objects.filter(workspace_id=workspace_id, user_id=user_id).exists():
        return REFUSED, "you are no longer a member of this workspace"
    return None


class BoundedClientJson:
    """A client's message is JSON of bounded depth without unstorable text
    (jobs.inputs, as for every JSON endpoint); anything else is ignored like an
    unknown message type, instead of ending the socket with a RecursionError."""

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        try:
            content = json.loads(text_data) if text_data is not None else None
        except (ValueError, RecursionError):
            return
        if content is None or json_problem(content):
            return
        await self.receive_json(content, **kwargs)  # type: ignore[attr-defined]


class AccessGuard:
    """Checks an open socket's person every ACCESS_CHECK_SECONDS and ends the
    socket when access has ended (mixed into both consumers)."""

    guard_task: asyncio.Future | None = None

    def start_guard(self, workspace_id: int) -> None:
        user = self.scope.get("user")
        session = self.scope.get("session")
        session_key = getattr(session, "session_key", None) if session is not None else None
        self.guard_task = asyncio.ensure_future(self._guard(session_key, user.pk, workspace_id))

    def stop_guard(self) -> None:
        if self.guard_task is not None:
            self.guard_task.cancel()
            self.guard_task = None

    async def _guard(self, session_key, user_id: int, workspace_id: int) -> None:
        while True:
            await asyncio.sleep(ACCESS_CHECK_SECONDS)
            lost = await _access_lost(session_key, user_id, workspace_id)
            if lost is not None:
                code, reason = lost
                self.guard_task = None  # this task ends here; nothing to cancel
                await self.revoke(code, reason)
                return

    async def revoke(self, code: int, reason: str) -> None:
        await self.send_json({"type": "revoked", "code": code, "reason": reason})
        await self.close(code=code, reason=reason)


@database_sync_to_async
def _events_after(job_id: int, after: int | None) -> list[dict]:
    from jobs.models import JobEvent

    qs = JobEvent.objects.filter(job_id=job_id).order_by("id")
    if after is not None:
        qs = qs.filter(pk__gt=after)
    else:
        # A first connection gets the recent history the page did not render.
        ids = list(JobEvent.objects.filter(job_id=job_id).order_by("-id").values_list("id", flat=True)[:BACKFILL_LIMIT])
        qs = qs.filter(pk__in=ids)
    return [event_message(e) for e in qs[:BACKFILL_LIMIT]]


@database_sync_to_async
def _job_state(job_id: int) -> dict | None:
    from jobs.models import Job

    job = Job.objects.filter(pk=job_id).first()
    return status_message(job) if job else None


@database_sync_to_async
def _attempt_view(job_id: int, number: int) -> tuple[dict, list[str], str] | None:
    """(backend handle, instance names, backend name) of one attempt, or None."""
    from jobs.models import Attempt

    attempt = Attempt.objects.select_related("job").filter(job_id=job_id, number=number).first()
    if attempt is None:
        return None
    names = list(attempt.instances.order_by("rank", "role", "index").values_list("name", flat=True))
    return attempt.backend_handle or {}, names, attempt.job.backend


def _backend(name: str):
    from jobs.backends import get_backend

    return get_backend(name)


class _SentIds:
    """Ids already sent on this connection (bounded), so a live message racing a
    backfill is sent once."""

    def __init__(self, limit: int = 5000):
        self.limit = limit
        self.ids: OrderedDict[int, None] = OrderedDict()

    def add(self, event_id: int) -> bool:
        if event_id in self.ids:
            return False
        self.ids[event_id] = None
        if len(self.ids) > self.limit:
            self.ids.popitem(last=False)
        return True


class JobConsumer(BoundedClientJson, AccessGuard, AsyncJsonWebsocketConsumer):
    async def connect(self):
        self.job_id = None
        self.tail_task = None
        self.live_task = None
        self.sent = _SentIds()
        job = await _job_if_member(self.scope.get("user"), self.scope["url_route"]["kwargs"]["job_id"])
        if job is None:
            await self.close(code=REFUSED)
            return
        self.job_id = job.pk
        self.group = job_group(job.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        self.start_guard(job.workspace_id)
        self.live_task = (asyncio.ensure_future(self._watch_live())
                          if hasattr(self.channel_layer, "probe") else None)

    async def _watch_live(self) -> None:
        """Tell the page when live events may be late (Redis not answering; logs keep
        coming from files), and when they are live again, with the events it missed."""
        delayed = False
        while True:
            await self.channel_layer.probe()
            now_delayed = self.channel_layer.delayed
            if now_delayed != delayed and self.job_id is not None:
                delayed = now_delayed
                if not delayed:
                    seen = max(self.sent.ids, default=None)
                    for message in await _events_after(self.job_id, seen):
                        if self.sent.add(message["id"]):
                            await self.send_json(message)
                await self.send_json({"type": "live", "delayed": delayed})
            await asyncio.sleep(LIVE_CHECK)

    async def revoke(self, code: int, reason: str) -> None:
        # Stop reading logs and receiving events at once, before saying goodbye.
        self._stop_live()
        if self.tail_task is not None:
            self.tail_task.cancel()
            self.tail_task = None
        await self.channel_layer.group_discard(self.group, self.channel_name)
        self.job_id = None
        await super().revoke(code, reason)

    def _stop_live(self) -> None:
        if getattr(self, "live_task", None) is not None:
            self.live_task.cancel()
            self.live_task = None

    async def disconnect(self, code):
        self.stop_guard()
        self._stop_live()
        if self.tail_task is not None:
            self.tail_task.cancel()
        if self.job_id is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content, **kwargs):
        if not isinstance(content, dict) or self.job_id is None:
            return
        kind = content.get("type")
        if kind == "hello":
            after = content.get("after_event")
            after = after if isinstance(after, int) and not isinstance(after, bool) else None
            for message in await _events_after(self.job_id, after):
                if self.sent.add(message["id"]):
                    await self.send_json(message)
            state = await _job_state(self.job_id)
            if state:
                await self.send_json(state)
            self._watch_logs(content.get("logs"))
        elif kind == "logs":
            self._watch_logs(content)
        elif kind == "ping":
            await self.send_json({"type": "pong"})

    async def job_message(self, event):
        message = event["message"]
        if self.job_id is None:  # revoked: a message already on its way is dropped
            return
        if message.get("type") == "event" and not self.sent.add(message["id"]):
            return
        await self.send_json(message)

    # -- logs -----------------------------------------------------------------
    def _watch_logs(self, spec) -> None:
        if self.tail_task is not None:
            self.tail_task.cancel()
            self.tail_task = None
        if not isinstance(spec, dict):
            return
        attempt = spec.get("attempt")
        attempt = attempt if isinstance(attempt, int) and not isinstance(attempt, bool) and attempt > 0 else None
        instances = spec.get("instances")
        instances = {str(n) for n in instances} if isinstance(instances, list) else None
        offsets = {}
        for key, value in (spec.get("offsets") or {}).items() if isinstance(spec.get("offsets"), dict) else ():
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                offsets[str(key)] = value
        lines = {}
        for key, value in (spec.get("lines") or {}).items() if isinstance(spec.get("lines"), dict) else ():
            if isinstance(value, int) and not isinstance(value, bool) and value >= 1 and str(key) in offsets:
                lines[str(key)] = value
        target = parse_target(spec.get("target"))
        self.tail_task = asyncio.ensure_future(self._tail(attempt, instances, offsets, lines, target))

    async def _tail(self, fixed_attempt: int | None, only: set | None, offsets: dict,
                    lines: dict | None = None, target: dict | None = None) -> None:
        lines = {} if lines is None else lines
        loop = asyncio.get_running_loop()
        number = fixed_attempt
        cursors: dict[str, LogCursor] = {}
        view = None
        next_refresh = 0.0
        metrics.in_background(metrics.log_viewers, 1)
        try:
            if fixed_attempt is None:
                # A reconnect while following: first the end of the attempt it followed
                # (its last lines are the error), then the attempt that replaced it.
                await self._drain_earlier(only, offsets, lines)
            while True:
                now = loop.time()
                if now >= next_refresh:
                    next_refresh = now + REFRESH
                    metrics.in_background(metrics.log_viewers)  # keeps this stream counted
                    if fixed_attempt is None:
                        state = await _job_state(self.job_id)
                        if state and state["current_attempt"] and state["current_attempt"] != number:
                            if number is not None:
                                await self._drain(number, cursors, offsets, lines)
                            number = state["current_attempt"]
                            for c in cursors.values():
                                c.close()
                            cursors = {}
                    view = await _attempt_view(self.job_id, number) if number else None
                    if view is not None:
                        handle, names, backend_name = view
                        if handle:
                            try:
                                backend = _backend(backend_name)
                            except BackendError:
                                backend = None
                            for name in names if backend else ():
                                if (only is None or name in only) and name not in cursors:
                                    cursors[name] = LogCursor(backend, handle, name)
                if target is not None and target["instance"] in cursors:
                    await self._open_at(number, cursors[target["instance"]], target, offsets, lines)
                    target = None
                elif target is not None and view is not None and target["instance"] not in view[1]:
                    await self.send_json({"type": "log_target", "attempt": number, "instance": target["instance"],
                                          "line": None, "why": f"attempt {number} has no instance of that name",
                                          "missing_instance": True})
                    target = None
                for name, cursor in cursors.items():
                    try:
                        await self._send_new(number, name, cursor, offsets, lines)
                    except (BackendError, OSError):
                        # A log the backend cannot read right now is tried again next tick.
                        continue
                await asyncio.sleep(TICK)
        except asyncio.CancelledError:
            raise
        finally:
            for c in cursors.values():
                c.close()
            metrics.in_background(metrics.log_viewers, -1)

    async def _drain(self, number: int, cursors: dict, offsets: dict, lines: dict) -> None:
        """Send what is left of an attempt's logs, its last partial line included,
        before the view follows the next attempt."""
        for name, cursor in cursors.items():
            key = f"{number}:{name}"
            for _ in range(DRAIN_BATCHES):
                before = offsets.get(key)
                try:
                    await self._send_new(number, name, cursor, offsets, lines, final=True)
                except (BackendError, OSError):
                    break
                if offsets.get(key) == before:
                    break

    async def _drain_earlier(self, only: set | None, offsets: dict, lines: dict) -> None:
        state = await _job_state(self.job_id)
        current = (state or {}).get("current_attempt") or 0
        earlier = sorted({int(k.split(":", 1)[0]) for k in offsets if k.split(":", 1)[0].isdigit()})
        for number in (n for n in earlier if n < current):
            view = await _attempt_view(self.job_id, number)
            if view is None or not view[0]:
                continue
            handle, names, backend_name = view
            try:
                backend = _backend(backend_name)
            except BackendError:
                continue
            cursors = {name: LogCursor(backend, handle, name) for name in names
                       if f"{number}:{name}" in offsets and (only is None or name in only)}
            try:
                await self._drain(number, cursors, offsets, lines)
            finally:
                for c in cursors.values():
                    c.close()

    async def _open_at(self, number: int, cursor: LogCursor, target: dict, offsets: dict, lines: dict) -> None:
        """Start one instance's stream a little before the target line and say which
        line that is."""
        key = f"{number}:{cursor.name}"
        try:
            line, start, start_line, why = await sync_to_async(resolve_target, thread_sensitive=False)(
                cursor.read_sync, target, cursor.path)
        except (BackendError, OSError) as exc:
            line, why = None, f"the log could not be read ({exc})"
        if line is not None:
            offsets[key], lines[key] = start, start_line
        await self.send_json({"type": "log_target", "attempt": number, "instance": cursor.name,
                              "line": line, "why": why})

    async def _send_new(self, number: int, name: str, cursor: LogCursor, offsets: dict,
                        lines: dict | None = None, final: bool = False) -> None:
        lines = {} if lines is None else lines
        key = f"{number}:{name}"
        offset = offsets.get(key)
        if offset is None:
            size = await cursor.size()
            offset = 0
            if size and size > INITIAL_TAIL_BYTES:
                head = await cursor.read(size - INITIAL_TAIL_BYTES, INITIAL_TAIL_BYTES)
                offset = start_offset(size, head)
            offsets[key] = offset
        data = await cursor.read(offset, MAX_BATCH_BYTES)
        chunk = complete_lines(data, final=final and len(data) < MAX_BATCH_BYTES)
        if not chunk:
            return
        if key not in lines:
            lines[key] = await sync_to_async(line_at_offset, thread_sensitive=False)(cursor.read_sync, offset, cursor.path)
        line = lines[key]
        offsets[key] = offset + len(chunk)
        lines[key] = line + chunk.count(b"\n")
        metrics.in_background(metrics.lines_streamed, lines[key] - line)
        await self.send_json({
            "type": "log",
            "attempt": number,
            "instance": name,
            "offset": offset,
            "next_offset": offset + len(chunk),
            "line": line,
            "next_line": lines[key],
            "lines": split_lines(chunk),
        })


class WorkspaceConsumer(BoundedClientJson, AccessGuard, AsyncJsonWebsocketConsumer):
    """Statuses and events of every job of one workspace (job list, dashboard)."""

    async def connect(self):
        self.group = None
        workspace = await _workspace_if_member(self.scope.get("user"), self.scope["url_route"]["kwargs"]["slug"])
        if workspace is None:
            await self.close(code=REFUSED)
            return
        self.group = workspace_group(workspace.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        self.start_guard(workspace.pk)

    async def revoke(self, code: int, reason: str) -> None:
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)
            self.group = None
        await super().revoke(code, reason)

    async def disconnect(self, code):
        self.stop_guard()
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content, **kwargs):
        if isinstance(content, dict) and content.get("type") == "ping" and self.group:
            await self.send_json({"type": "pong"})

    async def job_message(self, event):
        if self.group:
            await self.send_json(event["message"])
