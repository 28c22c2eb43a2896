"""Live pages over WebSockets (Channels).

`JobConsumer` at ws/jobs/<id>/ serves one job to members of its workspace:

  client -> {"type": "hello", "after_event": <last event id seen or null>,
             "logs": {"attempt": <n or null to follow the current attempt>,
                      "instances": [names] or null for all,
                      "offsets": {"<attempt>:<instance>": next byte offset},
                      "sub": <the page's number for this subscription>}}
  server -> {"type": "event", "id", ...}       backfilled after `after_event`, then live
            {"type": "status", "status", ...}  the job's status, restarts, attempt
            {"type": "diagnosis", "id", ...}
            {"type": "log", "attempt", "instance", "offset", "next_offset", "line", "next_line",
             "lines": [...], "times": [capture time per line, epoch seconds] or null, "sub"}
            {"type": "log_target", "attempt", "instance", "line" or null, "why", "sub"}
            {"type": "output", "attempt", "instances": {name: epoch seconds}}
            {"type": "progress", "job_id", "attempt", "step"}  a report_progress step kept

`line` is the 1-based number, counted from the start of the file, of the first
line of a batch, so the page can number every line and link to it. A client may
send "lines": {"<attempt>:<instance>": next line number} with its offsets so a
reconnect does not recount, and a "target" to open a log at one line:
{"instance", "line": N} (a permalink), {"instance", "offset": byte} (the line
the classifier used) or {"instance", "first_error": true} (the first line that
looks like an error). The stream of that instance then starts TARGET_CONTEXT
lines before the target, and a "log_target" message names the target's line
number (null with a `why` when there is no such line).

"output" says when each instance of the current attempt last wrote its log (the
log file's mtime, what the monitor records as last output), every REFRESH
seconds when it changed, for the Instances panel.

Logs are tailed per connection: every TICK seconds the consumer reads the new
bytes of each watched instance log from its byte offset, cuts them at the last
newline and sends them as one batch per instance. The client keeps
`next_offset` per (attempt, instance) and sends it again after a reconnect, so
the stream resumes exactly where it stopped: no gap, no duplicate. Events and
statuses come from monitoring.publish through the channel layer.

`WorkspaceConsumer` at ws/workspaces/<slug>/ forwards the statuses, events and
progress messages of every job in a workspace (job list, dashboard).

Who may connect: asgi.py refuses other origins (console.origins: scheme, host, port)
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
import time
from collections import OrderedDict
from importlib import import_module

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.contrib.auth import get_user, get_user_model
from django.http import HttpRequest

from core.logindex import INITIAL_TAIL_BYTES, complete_lines, parse_target, split_lines, start_offset
from infra import metrics
from jobs.actions import NotFound, job_for, workspace_by_slug
from jobs.backends import get_backend
from jobs.backends.base import BackendError
from jobs.inputs import json_problem
from jobs.logs import InstanceLog
from jobs.models import Attempt, Job, JobEvent, Membership

from .publish import event_message, job_group, status_message, workspace_group

TICK = 0.1  # seconds between reads of the logs
REFRESH = 1.0  # seconds between looks at the job's attempt and instances
MAX_BATCH_BYTES = 512 * 1024  # per instance per tick
LIVE_CHECK = 2.0  # seconds between checks that Redis answers (live events on time)
DRAIN_BATCHES = 16  # at most this many batches of a finished attempt are sent before following the next
BACKFILL_LIMIT = 2000
REFUSED = 4403
SESSION_ENDED = 4401
ACCOUNT_DISABLED = 4423
UNSTAMPED_WAIT = 1.0  # seconds lines wait for their capture time before going out with the log's mtime
ACCESS_CHECK_SECONDS = 2.0  # how long a socket may outlive its person's access


@database_sync_to_async
def _if_member(user, find, key):
    """What `find(user, key)` returns (jobs.actions.job_for or workspace_by_slug), or None
    when nobody is signed in or the thing is not among theirs."""
    if user is None or not user.is_authenticated:
        return None
    try:
        return find(user, key)
    except NotFound:
        return None


@database_sync_to_async
def _access_lost(session_key: str | None, user_id: int, workspace_id: int) -> tuple[int, str] | None:
    """(close code, reason) when the socket's person may no longer watch this
    workspace, else None. The session is read anew from its store, as an HTTP
    request would: a logout deletes it, and a password change voids its hash."""
    user = get_user_model().objects.filter(pk=user_id).only("is_active").first()
    if user is None or not user.is_active:
        return ACCOUNT_DISABLED, "your account was deactivated"
    if session_key is not None:
        store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
        request = HttpRequest()  # get_user reads only the request's session
        request.session = store
        if get_user(request).pk != user_id:
            return SESSION_ENDED, "you logged out or your session ended"
    if not Membership.objects.filter(workspace_id=workspace_id, user_id=user_id).exists():
        return REFUSED, "you are no longer a member of this workspace"
    return None


class BoundedClientJson(AsyncJsonWebsocketConsumer):
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
        await self.receive_json(content, **kwargs)


class AccessGuard(AsyncJsonWebsocketConsumer):
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
    job = Job.objects.filter(pk=job_id).first()
    return status_message(job) if job else None


@database_sync_to_async
def _attempt_view(job_id: int, number: int) -> tuple[dict, list[str], str] | None:
    """(backend handle, instance names, backend name) of one attempt, or None."""
    attempt = Attempt.objects.select_related("job").filter(job_id=job_id, number=number).first()
    if attempt is None:
        return None
    names = list(attempt.instances.order_by("rank", "role", "index").values_list("name", flat=True))
    return attempt.backend_handle or {}, names, attempt.job.backend


async def _read_now(log: InstanceLog, offset: int, limit: int) -> bytes:
    """A local file is read in the event loop (a pread is quick); a backend's
    read_log in a worker thread."""
    if log.path:
        return log.pread(offset, limit)
    return await sync_to_async(log.read, thread_sensitive=False)(offset, limit)


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
        # The page's number for its current log subscription, echoed on every log and
        # log_target message: batches a cancelled stream had already sent are told apart.
        self.log_sub = None
        self.live_task = None
        self.sent = _SentIds()
        job = await _if_member(self.scope.get("user"), job_for, self.scope["url_route"]["kwargs"]["job_id"])
        if job is None:
            await self.close(code=REFUSED)
            return
        self.job_id = job.pk
        self.group = job_group(job.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        self.start_guard(job.workspace_id)
        self.live_task = asyncio.ensure_future(self._watch_live()) if hasattr(self.channel_layer, "probe") else None

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
        sub = spec.get("sub")
        self.log_sub = sub if isinstance(sub, int) and not isinstance(sub, bool) else None
        self.tail_task = asyncio.ensure_future(self._tail(attempt, instances, offsets, lines, target))

    async def _tail(
        self,
        fixed_attempt: int | None,
        only: set | None,
        offsets: dict,
        lines: dict | None = None,
        target: dict | None = None,
    ) -> None:
        lines = {} if lines is None else lines
        loop = asyncio.get_running_loop()
        number = fixed_attempt
        logs: dict[str, InstanceLog] = {}
        view = None
        said_output: dict = {}
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
                    state = await _job_state(self.job_id)
                    current = (state or {}).get("current_attempt") or None
                    if fixed_attempt is None:
                        if state and state["current_attempt"] and state["current_attempt"] != number:
                            if number is not None:
                                await self._drain(number, logs, offsets, lines)
                            number = state["current_attempt"]
                            for c in logs.values():
                                c.close()
                            logs = {}
                    view = await _attempt_view(self.job_id, number) if number else None
                    if view is not None:
                        handle, names, backend_name = view
                        try:
                            backend = get_backend(backend_name) if handle else None
                        except BackendError:
                            backend = None
                        if backend is not None:
                            for name in names:
                                if (only is None or name in only) and name not in logs:
                                    logs[name] = InstanceLog(backend, handle, name)
                    if current:
                        said_output = await self._send_output(current, view if current == number else None, said_output)
                if number is None:  # no attempt yet: no view and no logs
                    await asyncio.sleep(TICK)
                    continue
                if target is not None and target["instance"] in logs:
                    await self._open_at(number, logs[target["instance"]], target, offsets, lines)
                    target = None
                elif target is not None and view is not None and target["instance"] not in view[1]:
                    await self.send_json(
                        {
                            "type": "log_target",
                            "attempt": number,
                            "instance": target["instance"],
                            "line": None,
                            "why": f"attempt {number} has no instance of that name",
                            "missing_instance": True,
                            "sub": self.log_sub,
                        }
                    )
                    target = None
                for name, log in logs.items():
                    try:
                        await self._send_new(number, name, log, offsets, lines)
                    except (BackendError, OSError):
                        # A log the backend cannot read right now is tried again next tick.
                        continue
                await asyncio.sleep(TICK)
        except asyncio.CancelledError:
            raise
        finally:
            for c in logs.values():
                c.close()
            metrics.in_background(metrics.log_viewers, -1)

    async def _send_output(self, current: int, view: tuple | None, said: dict) -> dict:
        """Tell the page when each instance of the current attempt last wrote to its
        log (every REFRESH, when it changed), whichever instances the log view shows:
        the Instances panel's "Last output" follows the logs, not the monitor's poll."""
        if view is None:
            view = await _attempt_view(self.job_id, current)
        if view is None or not view[0]:
            return said
        handle, names, backend_name = view
        try:
            backend = get_backend(backend_name)
        except BackendError:
            return said
        times = {}
        for name in names:
            when = InstanceLog(backend, handle, name).last_write()
            if when is not None:
                times[name] = when
        now = {"attempt": current, "instances": times}
        if times and now != said:
            await self.send_json({"type": "output", **now})
        return now

    async def _drain(self, number: int, logs: dict, offsets: dict, lines: dict) -> None:
        """Send what is left of an attempt's logs, its last partial line included,
        before the view follows the next attempt."""
        for name, log in logs.items():
            key = f"{number}:{name}"
            for _ in range(DRAIN_BATCHES):
                before = offsets.get(key)
                try:
                    await self._send_new(number, name, log, offsets, lines, final=True)
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
                backend = get_backend(backend_name)
            except BackendError:
                continue
            logs = {
                name: InstanceLog(backend, handle, name)
                for name in names
                if f"{number}:{name}" in offsets and (only is None or name in only)
            }
            try:
                await self._drain(number, logs, offsets, lines)
            finally:
                for c in logs.values():
                    c.close()

    async def _open_at(self, number: int, log: InstanceLog, target: dict, offsets: dict, lines: dict) -> None:
        """Start one instance's stream a little before the target line and say which
        line that is."""
        key = f"{number}:{log.name}"
        try:
            line, start, start_line, why = await sync_to_async(log.resolve, thread_sensitive=False)(target)
        except (BackendError, OSError) as exc:
            line, why = None, f"the log could not be read ({exc})"
        if line is not None:
            offsets[key], lines[key] = start, start_line
        await self.send_json(
            {
                "type": "log_target",
                "attempt": number,
                "instance": log.name,
                "line": line,
                "why": why,
                "sub": self.log_sub,
            }
        )

    async def _send_new(
        self, number: int, name: str, log: InstanceLog, offsets: dict, lines: dict | None = None, final: bool = False
    ) -> None:
        lines = {} if lines is None else lines
        key = f"{number}:{name}"
        offset = offsets.get(key)
        if offset is None:
            size = log.size()
            offset = 0
            if size and size > INITIAL_TAIL_BYTES:
                head = await _read_now(log, size - INITIAL_TAIL_BYTES, INITIAL_TAIL_BYTES)
                offset = start_offset(size, head)
            offsets[key] = offset
        data = await _read_now(log, offset, MAX_BATCH_BYTES)
        chunk = complete_lines(data, final=final and len(data) < MAX_BATCH_BYTES)
        if not chunk:
            return
        times = log.line_times(offset, chunk)
        if times is not None and None in times and not final:
            # Lines the shim has not stamped yet wait for the next tick (it stamps
            # within its interval), so live lines carry the same times as a reload;
            # lines nobody will stamp (the shim is gone) go out with the log's mtime.
            waited = time.time() - (log.last_write() or 0.0)
            if waited < UNSTAMPED_WAIT:
                keep = times.index(None)
                if keep == 0:
                    return
                chunk = chunk[: _line_end(chunk, keep)]
                times = times[:keep]
            else:
                times = [t if t is not None else log.last_write() for t in times]
        if key not in lines:
            lines[key] = await sync_to_async(log.line_at, thread_sensitive=False)(offset)
        line = lines[key]
        offsets[key] = offset + len(chunk)
        lines[key] = line + chunk.count(b"\n")
        metrics.in_background(metrics.lines_streamed, lines[key] - line)
        await self.send_json(
            {
                "type": "log",
                "attempt": number,
                "instance": name,
                "offset": offset,
                "next_offset": offset + len(chunk),
                "line": line,
                "next_line": lines[key],
                "lines": split_lines(chunk),
                "times": times,
                "sub": self.log_sub,
            }
        )


def _line_end(chunk: bytes, lines: int) -> int:
    """The length of the first `lines` lines of `chunk`."""
    pos = -1
    for _ in range(lines):
        pos = chunk.index(b"\n", pos + 1)
    return pos + 1


class WorkspaceConsumer(BoundedClientJson, AccessGuard, AsyncJsonWebsocketConsumer):
    """Statuses and events of every job of one workspace (job list, dashboard)."""

    async def connect(self):
        self.group = None
        workspace = await _if_member(
            self.scope.get("user"), workspace_by_slug, self.scope["url_route"]["kwargs"]["slug"]
        )
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
