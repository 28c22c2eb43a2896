"""/healthz and /readyz: the pure assessment, the view over real Redis, and the
real Procfile processes (worker with beat, exit listener) making the console ready
and, once stopped, not ready. The worker's own output shows that it is quiet."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import time_machine

from infra import client as redis_connection
from infra import health
from infra.health import Part, assess
from testsupport.monitor import subprocess_database_url
from testsupport.processes import procfile
from testsupport.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_800_000_000.0


def parts(**kw):
    base = {
        "database": None,
        "redis": None,
        "workers": {"w1": NOW - 1},
        "sweep": NOW - 0.5,
        "exits": NOW - 1,
        "now": NOW,
        "sweep_seconds": 0.5,
    }
    base.update(kw)
    return assess(**base)


# --- the pure part -------------------------------------------------------------------------


def test_every_part_fresh_is_ready_with_ages():
    result = parts()
    assert all(p.ok for p in result.values())
    assert (result["beat"].age_seconds, result["worker"].age_seconds) == (0.5, 1.0)
    assert result["worker"].detail == "1 of 1 worker(s) fresh"
    assert health.as_json(result)["ready"] is True


def test_a_heartbeat_older_than_a_few_sweeps_is_stale_and_not_ready():
    limit = health.stale_after(0.5)
    result = parts(sweep=NOW - limit - 0.1)
    assert result["beat"].state == "stale" and result["beat"].age_seconds == pytest.approx(limit + 0.1)
    assert health.as_json(result)["ready"] is False
    # Slow sweeps allow older heartbeats: the limit follows the sweep interval.
    assert parts(sweep=NOW - 20, sweep_seconds=5)["beat"].ok


def test_missing_parts_say_so():
    result = parts(workers={}, exits=None)
    assert result["worker"] == Part("missing", None, "no Celery worker heartbeat yet (is it running?)")
    assert result["exit_listener"].state == "missing"


def test_one_fresh_worker_of_two_is_enough_and_counted():
    result = parts(workers={"w1": NOW - 1, "w2": NOW - 100})
    assert result["worker"].ok and result["worker"].detail == "1 of 2 worker(s) fresh"


def test_redis_down_leaves_the_heartbeats_unknown():
    result = parts(redis="Redis does not answer (ConnectionError)")
    assert result["redis"].state == "down"
    assert {result[n].state for n in ("worker", "beat", "exit_listener")} == {"missing"}


# --- the views over real Redis ----------------------------------------------------------------


@pytest.fixture
def clean_heartbeats(settings):
    redis_connection.forget()
    client = redis_connection.redis_client()
    for key in client.scan_iter(match=health.PREFIX + "*"):
        client.delete(key)
    yield client
    for key in client.scan_iter(match=health.PREFIX + "*"):
        client.delete(key)
    redis_connection.forget()


def test_healthz_is_cheap_and_needs_no_login(client, db, django_assert_num_queries):
    with django_assert_num_queries(0):
        r = client.get("/healthz")
    assert (r.status_code, r.json()) == (200, {"ok": True})


def test_readyz_is_503_until_every_part_has_a_fresh_heartbeat(client, db, clean_heartbeats):
    r = client.get("/readyz")
    assert r.status_code == 503 and r["Cache-Control"] == "no-store"
    body = r.json()
    assert body["ready"] is False
    assert {n: c["state"] for n, c in body["checks"].items()} == {
        "database": "ok",
        "redis": "ok",
        "worker": "missing",
        "beat": "missing",
        "exit_listener": "missing",
    }

    now = time.time()
    health.record(health.WORKER + "celery@a", now - 1)
    health.record(health.SWEEP, now - 0.2)
    health.record(health.EXITS, now - 0.5)
    body = client.get("/readyz").json()
    assert body["ready"] is True, body
    assert 0.2 <= body["checks"]["beat"]["age_seconds"] < 5

    with time_machine.travel(now + 60, tick=False):
        r = client.get("/readyz")
    assert r.status_code == 503
    assert r.json()["checks"]["beat"]["state"] == "stale" and r.json()["checks"]["beat"]["age_seconds"] >= 60


def test_readyz_reports_redis_down(client, db, settings, clean_heartbeats):
    settings.REDIS_URL = "redis://127.0.0.1:9/0"  # nothing listens on the discard port
    redis_connection.forget()
    r = client.get("/readyz")
    assert r.status_code == 503
    assert r.json()["checks"]["redis"] == {
        "state": "down",
        "age_seconds": None,
        "detail": "Redis does not answer (ConnectionError)",
    }
    assert r.json()["checks"]["database"]["state"] == "ok"


# --- the real processes ---------------------------------------------------------------------


def start(name: str, tmp_path: Path, settings, **env) -> tuple[subprocess.Popen, Path]:
    out = tmp_path / f"{name}.out"
    full = {k: v for k, v in os.environ.items() if not k.startswith("VIGIL_LOG")}
    full.update(
        {
            "REDIS_URL": settings.REDIS_URL,
            "DATABASE_URL": subprocess_database_url(),
            "VIGIL_DATA_DIR": str(tmp_path),
            "VIGIL_WORKERS": "1",
            "DJANGO_SETTINGS_MODULE": "console.settings",
            # The Procfile's `celery` and `python` are this virtualenv's, as under `make run`.
            "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
            **env,
        }
    )
    with open(out, "w") as f:
        proc = subprocess.Popen(
            ["sh", "-c", "exec " + procfile()[name]],
            cwd=ROOT,
            env=full,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return proc, out


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def wait_ready(client, seconds: float) -> dict:
    deadline = time.monotonic() + seconds
    body: dict = {}
    while time.monotonic() < deadline:
        r = client.get("/readyz")
        body = r.json()
        if r.status_code == 200:
            return body
        time.sleep(0.25)
    raise AssertionError(f"not ready within {seconds} s: {json.dumps(body, indent=1)}")


# Lines that would mean the sweep or Celery's routine chatter is printed.
ROUTINE = re.compile(r"monitoring\.tasks\.sweep|Sending due task|received|succeeded in|beat: Starting|ready\.")


@pytest.mark.django_db(transaction=True)
def test_the_procfiles_worker_and_exit_listener_make_the_console_ready_and_stay_quiet(
    client, settings, tmp_path, clean_heartbeats
):
    worker, worker_out = start("worker", tmp_path, settings)
    decider, decider_out = start("decide", tmp_path, settings)
    listener, listener_out = start("exits", tmp_path, settings)
    try:
        wait_ready(client, 60)
        # Ready with the first worker's heartbeat; then both: the sweeping one and `decide`.
        wait_until(
            lambda: client.get("/readyz").json()["checks"]["worker"]["detail"] == "2 of 2 worker(s) fresh",
            30,
            "both Procfile workers' heartbeats",
            0.25,
        )
        time.sleep(3)  # a few more sweeps: none of them may print anything
        printed = worker_out.read_text() + decider_out.read_text() + listener_out.read_text()
    finally:
        stop(listener)
        stop(decider)
        stop(worker)
    assert not ROUTINE.search(printed), printed
    # Besides the listener's one start line, only warnings (as root: Celery's, multi-line).
    records = [ln for ln in printed.splitlines() if re.match(r"\d{4}-\d\d-\d\d ", ln)]
    started = [ln for ln in records if " INFO " in ln]
    assert len(started) == 1 and started[0].endswith("listening for instance exits on channel vigil:instance-exit")
    assert all(" WARNING " in ln for ln in records if ln not in started), printed
    assert len(printed.splitlines()) <= 10, printed

    r = client.get("/readyz")
    assert r.status_code == 503
    assert r.json()["checks"]["worker"]["state"] == "missing"  # a clean shutdown removes its heartbeat
