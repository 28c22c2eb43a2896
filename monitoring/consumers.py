"""Live pages over WebSockets (Channels).

`JobConsumer` at ws/jobs/<id>/ serves one job to members of its workspace:

  client -> {"type": "hello", "after_event": <last event id seen or null>,
             "logs": {"attempt": <n or null to follow the current attempt>,
                      "instances": [names] or null for all,
                      "offsets": {"<attempt>:<instance>": next byte offset}}}
  server -> {"type": "event", "id", ...}       backfilled after `after_event`, then live
            {"type": "status", "status", ...}  the job's status, restarts, attempt
            {"type": "diagnosis", "id", ...}
            {"type": "log", "attempt", "instance", "offset", "next_offset", "lines": [...]}

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
"""

from __future__ import annotations

import asyncio
import os
from collections import OrderedDict

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from jobs.backends.base import BackendError

from .publish import event_message, job_group, status_message, workspace_group

TICK = 0.1  # seconds between reads of the logs
REFRESH = 1.0  # seconds between looks at the job's attempt and instances
INITIAL_TAIL_BYTES = 64 * 1024  # a first connection starts this far before the end
MAX_BATCH_BYTES = 512 * 1024  # per instance per tick
MAX_PARTIAL_LINE = 64 * 1024  # a line longer than this is sent without its newline
BACKFILL_LIMIT = 2000
REFUSED = 4403


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

    async def read(self, offset: int, limit: int) -> bytes:
        if self.path:
            if not self._open():
                return b""
            return os.pread(self.fd, limit, offset)
        return await sync_to_async(self.backend.read_log, thread_sensitive=False)(
            self.handle, self.name, offset, limit
        )


def complete_lines(data: bytes, final: bool = False) -> bytes:
    """The part of `data` that ends with a newline (all of it when a partial line
    has grown past MAX_PARTIAL_LINE or the stream is final)."""
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
    from jobs.actions import NotFound, workspace_for

    if user is None or not user.is_authenticated:
        return None
    try:
        return workspace_for(user, slug)
    except NotFound:
        return None


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


class JobConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        self.job_id = None
        self.tail_task = None
        self.sent = _SentIds()
        job = await _job_if_member(self.scope.get("user"), self.scope["url_route"]["kwargs"]["job_id"])
        if job is None:
            await self.close(code=REFUSED)
            return
        self.job_id = job.pk
        self.group = job_group(job.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        if self.tail_task is not None:
            self.tail_task.cancel()
        if self.job_id is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content, **kwargs):
        if not isinstance(content, dict):
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
        self.tail_task = asyncio.ensure_future(self._tail(attempt, instances, offsets))

    async def _tail(self, fixed_attempt: int | None, only: set | None, offsets: dict) -> None:
        loop = asyncio.get_running_loop()
        number = fixed_attempt
        cursors: dict[str, LogCursor] = {}
        view = None
        next_refresh = 0.0
        try:
            while True:
                now = loop.time()
                if now >= next_refresh:
                    next_refresh = now + REFRESH
                    if fixed_attempt is None:
                        state = await _job_state(self.job_id)
                        if state and state["current_attempt"] and state["current_attempt"] != number:
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
                for name, cursor in cursors.items():
                    try:
                        await self._send_new(number, name, cursor, offsets)
                    except (BackendError, OSError):
                        # A log the backend cannot read right now is tried again next tick.
                        continue
                await asyncio.sleep(TICK)
        except asyncio.CancelledError:
            raise
        finally:
            for c in cursors.values():
                c.close()

    async def _send_new(self, number: int, name: str, cursor: LogCursor, offsets: dict) -> None:
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
        chunk = complete_lines(data)
        if not chunk:
            return
        offsets[key] = offset + len(chunk)
        await self.send_json({
            "type": "log",
            "attempt": number,
            "instance": name,
            "offset": offset,
            "next_offset": offset + len(chunk),
            "lines": split_lines(chunk),
        })


class WorkspaceConsumer(AsyncJsonWebsocketConsumer):
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

    async def disconnect(self, code):
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content, **kwargs):
        if isinstance(content, dict) and content.get("type") == "ping":
            await self.send_json({"type": "pong"})

    async def job_message(self, event):
        await self.send_json(event["message"])
