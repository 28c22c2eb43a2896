"""Readiness: is every part the console needs up, and recently so?

Each background part leaves a heartbeat in Redis (a key holding the Unix time,
with a TTL so a dead part's key disappears): every Celery worker's main process
(a thread, every HEARTBEAT_SECONDS), the monitor sweep when a worker runs it
(which also proves that the beat schedules it), and the exit listener. The pure
part, `assess`, turns what was read into each part's state and age; the shell,
`readiness`, reads the database, Redis and the heartbeats.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from dataclasses import asdict, dataclass

from django.conf import settings
from django.db import connection

from .client import redis_client

log = logging.getLogger(__name__)

PREFIX = "vigil:health:"
SWEEP = PREFIX + "sweep"
EXITS = PREFIX + "exit-listener"
WORKER = PREFIX + "worker:"  # + the worker's hostname
HEARTBEAT_SECONDS = 2.0
KEY_TTL_SECONDS = 300  # a part gone this long has no key: "missing"


def stale_after(sweep_seconds: float) -> float:
    """How old a heartbeat may be: a few sweeps, and a few of the parts' own beats."""
    return max(5 * sweep_seconds, 3 * HEARTBEAT_SECONDS)


@dataclass(frozen=True)
class Part:
    state: str  # "ok", "stale", "missing" or "down"
    age_seconds: float | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.state == "ok"


def _beat(name: str, when: float | None, now: float, limit: float, what: str) -> Part:
    if when is None:
        return Part("missing", None, f"no {what} heartbeat yet (is it running?)")
    age = round(max(now - when, 0.0), 3)
    if age > limit:
        return Part("stale", age, f"the last {what} heartbeat is {age:.1f} s old (limit {limit:g} s)")
    return Part("ok", age, "")


def assess(
    *,
    database: str | None,
    redis: str | None,
    workers: dict[str, float],
    sweep: float | None,
    exits: float | None,
    now: float,
    sweep_seconds: float,
) -> dict[str, Part]:
    """database/redis: None when reachable, else what went wrong. The others: Unix times."""
    limit = stale_after(sweep_seconds)
    parts = {
        "database": Part("ok") if database is None else Part("down", None, database),
        "redis": Part("ok") if redis is None else Part("down", None, redis),
    }
    if redis is not None:
        for name in ("worker", "beat", "exit_listener"):
            parts[name] = Part("missing", None, "unknown: Redis, where heartbeats are kept, is down")
        return parts
    newest = max(workers.values()) if workers else None
    worker = _beat("worker", newest, now, limit, "Celery worker")
    fresh = sum(1 for t in workers.values() if now - t <= limit)
    if workers:
        worker = Part(
            worker.state,
            worker.age_seconds,
            f"{fresh} of {len(workers)} worker(s) fresh" + (f"; {worker.detail}" if worker.detail else ""),
        )
    parts["worker"] = worker
    parts["beat"] = _beat("beat", sweep, now, limit, "monitor sweep (beat schedules it, a worker runs it)")
    parts["exit_listener"] = _beat("exit_listener", exits, now, limit, "exit listener")
    return parts


def as_json(parts: dict[str, Part]) -> dict:
    return {
        "ready": all(p.ok for p in parts.values()),
        "checks": {name: {k: v for k, v in asdict(p).items()} for name, p in parts.items()},
    }


# --- shells: Redis and the database --------------------------------------------------


def record(key: str, now: float | None = None) -> None:
    """Leave a heartbeat; never raises (a missing heartbeat is what readiness reports)."""
    try:
        redis_client().set(key, repr(time.time() if now is None else now), ex=KEY_TTL_SECONDS)
    except Exception as exc:  # noqa: BLE001 - health bookkeeping must not break the work it watches
        log.debug("could not record heartbeat %s: %s", key, exc)


def readiness() -> dict[str, Part]:
    database = None
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any failure means not ready
        database = f"the database does not answer ({type(exc).__name__})"
    redis_error, workers, sweep, exits = None, {}, None, None
    try:
        client = redis_client()
        keys = [k.decode() for k in client.scan_iter(match=WORKER + "*", count=100)]
        values = client.mget([SWEEP, EXITS, *keys])
        sweep, exits = _time(values[0]), _time(values[1])
        workers = {k[len(WORKER) :]: t for k, v in zip(keys, values[2:]) if (t := _time(v)) is not None}
    except Exception as exc:  # noqa: BLE001
        redis_error = f"Redis does not answer ({type(exc).__name__})"
    return assess(
        database=database,
        redis=redis_error,
        workers=workers,
        sweep=sweep,
        exits=exits,
        now=time.time(),
        sweep_seconds=settings.MONITOR_SWEEP_SECONDS,
    )


def _time(raw) -> float | None:
    try:
        return float(raw)
    except (TypeError, ValueError):
        return None


# --- the worker's heartbeat -----------------------------------------------------------


class WorkerHeartbeat:
    """A daemon thread in a Celery worker's main process that records the worker
    as alive every HEARTBEAT_SECONDS until the worker shuts down."""

    def __init__(self, hostname: str | None = None):
        self.key = WORKER + (hostname or socket.gethostname())
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vigil-heartbeat", daemon=True)

    def start(self) -> "WorkerHeartbeat":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            record(self.key)
            self._stop.wait(HEARTBEAT_SECONDS)

    def stop(self) -> None:
        self._stop.set()
        try:
            redis_client().delete(self.key)  # a clean shutdown is not a stale worker
        except Exception:  # noqa: BLE001
            pass
