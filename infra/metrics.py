"""Prometheus metrics for the whole console, shared by every process through Redis.

Why Redis and not prometheus_client's in-process registry or its multiprocess mode:
the numbers worth having are produced outside the web server. Restarts, failures,
latencies and sweeps are counted in Celery worker processes (a prefork pool, and in
production several workers, possibly on several machines), deliveries in whichever
worker ran the task, log lines in the daphne process that streams them. An in-process
registry in the web server would see none of those. prometheus_client's multiprocess
mode (PROMETHEUS_MULTIPROC_DIR) merges per-PID files from one shared directory, so it
covers one host only, needs the directory wiped at every deploy and grows a file per
worker PID. Every Vigil process already talks to the same Redis (broker, locks,
heartbeats), so each increment is one pipelined Redis write (HINCRBYFLOAT into a
hash per metric) and the scrape (console.metrics, the /metrics view) reads those
hashes back and renders them with prometheus_client's own metric families and
exposition format. Counters survive a
worker's restart (Prometheus handles the reset if Redis is ever flushed).

Increments are on rare paths (a decision, a sweep, a delivery, a batch of log lines),
never per log byte. Recording never raises and never holds up the work it counts:
after a Redis error it stops trying for a few seconds (a missing increment is better
than a monitor stuck on a dead Redis).

Labels are bounded: workspace slugs (staff-created), classification families and
rules (the catalog's, "user-keyword" for any user keyword), restart kinds and causes,
channel kinds, delivery statuses. Never a job id, a user, or user text.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass

from .client import redis_client

log = logging.getLogger(__name__)

PREFIX = "vigil:metrics:"
BACKOFF_SECONDS = 5.0


@dataclass(frozen=True)
class Metric:
    name: str  # the family name (a counter's samples add "_total")
    kind: str  # "counter", "histogram" or "gauge"
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()

    @property
    def samples(self) -> set[str]:
        """The sample names this family exposes (what a PromQL query may name)."""
        if self.kind == "counter":
            return {self.name + "_total"}
        if self.kind == "histogram":
            return {self.name + s for s in ("_bucket", "_sum", "_count")}
        return {self.name}


LATENCY = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
RESTART = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
SWEEP = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
LAG = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
JOBS = (0, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 5000)

METRICS = {
    m.name: m
    for m in (
        Metric(
            "vigil_jobs",
            "gauge",
            "Jobs by status and workspace (read from the database at scrape time).",
            ("workspace", "status"),
        ),
        Metric(
            "vigil_instance_failures",
            "counter",
            "Failed instances the monitor handled, by the classification's family and rule.",
            ("family", "rule"),
        ),
        Metric(
            "vigil_restarts",
            "counter",
            "Restarts decided, by kind (job, instance) and cause (the failure family, or hang, exit_hang, c4d).",
            ("kind", "cause"),
        ),
        Metric(
            "vigil_detection_latency_seconds",
            "histogram",
            "From an instance's exit to the monitor's decision on it.",
            ("action",),
            LATENCY,
        ),
        Metric(
            "vigil_restart_latency_seconds",
            "histogram",
            "From a restart decision to every instance of the new attempt running.",
            ("kind",),
            RESTART,
        ),
        Metric("vigil_hang_detections", "counter", "Hangs detected, by kind (hang, exit_hang, c4d).", ("kind",)),
        Metric(
            "vigil_monitor_sweep_duration_seconds",
            "histogram",
            "How long one monitor sweep (of one shard) took.",
            (),
            SWEEP,
        ),
        Metric("vigil_monitor_sweep_jobs", "histogram", "Jobs ticked by one monitor sweep.", (), JOBS),
        Metric(
            "vigil_monitor_sweep_lag_seconds",
            "histogram",
            "How much later than the configured interval a shard's sweep started after its previous one.",
            (),
            LAG,
        ),
        Metric(
            "vigil_monitor_last_sweep_age_seconds",
            "gauge",
            "Seconds since the stalest shard's last sweep started (grows when the beat or every worker is gone).",
        ),
        Metric(
            "vigil_monitor_quiet_seconds",
            "gauge",
            "The longest a steady running job now goes unticked, in the most stretched shard: "
            "VIGIL_MONITOR_QUIET_SECONDS, stretched while a shard is behind its schedule (more workers are due).",
        ),
        Metric(
            "vigil_notification_deliveries",
            "counter",
            "Delivery attempts by outcome (sent, retrying, failed, skipped) and channel kind.",
            ("status", "channel_kind"),
        ),
        Metric(
            "vigil_notification_delivery_latency_seconds",
            "histogram",
            "From the event to its notification being sent.",
            ("channel_kind",),
            LATENCY,
        ),
        Metric("vigil_log_viewers", "gauge", "Live log streams open in browsers and terminals."),
        Metric("vigil_log_lines_streamed", "counter", "Log lines sent to live log viewers."),
    )
}


def exported_sample_names() -> set[str]:
    return set().union(*(m.samples for m in METRICS.values()))


# --- recording (any process) -----------------------------------------------------------

_down_until = 0.0


def key_of(kind: str, name: str) -> str:
    return f"{PREFIX}{kind}:{name}"


def _field(metric: Metric, labels: dict) -> str:
    return json.dumps([str(labels.get(n, "")) for n in metric.labels])


def _write(ops) -> None:
    """Run ops(pipeline) against Redis; never raise, back off after an error."""
    global _down_until
    if time.monotonic() < _down_until:
        return
    try:
        pipe = redis_client().pipeline(transaction=False)
        ops(pipe)
        pipe.execute()
    except Exception as exc:  # noqa: BLE001 - metrics must not break the work they count
        _down_until = time.monotonic() + BACKOFF_SECONDS
        log.debug("could not record metrics: %s", exc)


def inc(name: str, amount: float = 1.0, **labels) -> None:
    metric = METRICS[name]
    _write(lambda p: p.hincrbyfloat(key_of("c", name), _field(metric, labels), amount))


def observe(name: str, value: float, **labels) -> None:
    """One histogram observation: its bucket's count (not cumulative; the scrape
    accumulates), the sum and the count, in one round trip."""
    metric = METRICS[name]
    value = max(float(value), 0.0)
    field = _field(metric, labels)
    bucket = next((str(b) for b in metric.buckets if value <= b), "+Inf")

    def ops(p):
        key = key_of("h", name)
        p.hincrbyfloat(key, json.dumps([field, bucket]), 1)
        p.hincrbyfloat(key, json.dumps([field, "sum"]), value)
        p.hincrbyfloat(key, json.dumps([field, "count"]), 1)

    _write(ops)


# --- what the code calls (one line at each place that counts) ---------------------------


def cause_of(classification, source) -> str:
    """A restart's or detection's cause: the failure family when a classification
    decided, else the detector (hang, exit_hang, c4d...)."""
    if classification is not None and classification.family:
        return classification.family
    names = {"ExitHang": "exit_hang", "ExitCode": "exit_code", "UserKeyword": "user_keyword"}
    return names.get(str(source), str(source).lower()) or "unknown"


def instance_failed(classification) -> None:
    inc("vigil_instance_failures", family=classification.family or "unclassified", rule=classification.rule)


def failure_decided(classification, exited_at, action: str) -> None:
    """The monitor decided on a failed instance (once per exit): count it, time exit -> decision."""
    instance_failed(classification)
    detected(exited_at, action)


def restart_decided(kind: str, cause: str) -> None:
    inc("vigil_restarts", kind=kind, cause=cause or "unknown")


def detected(exited_at, action: str) -> None:
    """exit -> decision; exited_at is the instance's exit (a datetime) or None."""
    if exited_at is not None:
        observe("vigil_detection_latency_seconds", time.time() - exited_at.timestamp(), action=action)


def restart_completed(kind: str, seconds: float | None) -> None:
    if seconds is not None:
        observe("vigil_restart_latency_seconds", seconds, kind=kind)


def hang_detected(kind: str) -> None:
    inc("vigil_hang_detections", kind=kind)


def sweep_done(started: float, jobs: int, interval: float, shard: int) -> None:
    """One monitor sweep (of one shard) that started at `started` (Unix time) and
    ticked `jobs` jobs. The lag is the gap since the previous sweep's start of the
    same shard (any worker's) beyond the interval the beat schedules sweeps at."""
    global _down_until
    try:
        previous = (
            redis_client().getset(f"{PREFIX}last-sweep:{shard}", repr(started))
            if time.monotonic() >= _down_until
            else None
        )
    except Exception as exc:  # noqa: BLE001
        _down_until = time.monotonic() + BACKOFF_SECONDS
        log.debug("could not record the sweep: %s", exc)
        return
    observe("vigil_monitor_sweep_duration_seconds", time.time() - started)
    observe("vigil_monitor_sweep_jobs", jobs)
    if previous is not None:
        try:
            observe("vigil_monitor_sweep_lag_seconds", max(0.0, started - float(previous) - interval))
        except ValueError:
            pass


def delivery_attempted(channel_kind: str, status: str, event_at=None) -> None:
    """One delivery attempt's outcome; event_at (the event's time) gives the latency of a sent one."""
    inc("vigil_notification_deliveries", status=status, channel_kind=channel_kind)
    if status == "sent" and event_at is not None:
        observe(
            "vigil_notification_delivery_latency_seconds", time.time() - event_at.timestamp(), channel_kind=channel_kind
        )


VIEWERS_TTL = 120  # a dead web process's viewers vanish after this long
_viewers = 0
_viewers_written = 0.0
_viewers_lock = threading.Lock()


def _viewers_key() -> str:
    return f"{PREFIX}viewers:{socket.gethostname()}:{os.getpid()}"


def log_viewers(delta: int = 0) -> None:
    """This process's open log streams, kept under a per-process key with a TTL (so a
    crashed web process does not count its viewers forever). delta=0 refreshes the
    TTL, at most every few seconds. The lock spans the count and its write, so the
    write that lands last carries the latest count."""
    global _viewers, _viewers_written
    with _viewers_lock:
        _viewers += delta
        now = time.monotonic()
        if delta or now - _viewers_written > VIEWERS_TTL / 4:
            _viewers_written = now
            count = _viewers
            _write(lambda p: p.set(_viewers_key(), count, ex=VIEWERS_TTL))


def lines_streamed(count: int) -> None:
    if count:
        inc("vigil_log_lines_streamed", count)


def in_background(fn, *args) -> None:
    """From async code (the log streams): record in a thread, never waiting for it, so
    a stalled Redis never holds up the event loop or a stream."""
    asyncio.get_running_loop().run_in_executor(None, fn, *args)
