"""Real parts for crash tests: Celery workers and monitor ticks in processes of their
own, over the test database, a Redis database of their own and the real local
backend with a private data dir. Every process started here is killed by PID (its
session) at teardown, and every instance the backend started is stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from functools import partial
from types import SimpleNamespace

import pytest
import redis
from celery import Celery
from django.conf import settings as django_settings

from jobs import faults
from jobs.backends import get_backend, reset_backends
from testsupport.jobs import job_writable
from testsupport import waiting
from testsupport.monitor import subprocess_database_url

ROOT = Path(__file__).resolve().parents[2]
CELERY = ROOT / ".venv" / "bin" / "celery"
TEARDOWN_GRACE = 6.0  # seconds the worker waits for SIGTERM-ignoring ranks: the kill window
# One monitor tick in a process of its own, as the Celery task runs it (with the job lock).
TICK = (
    "import sys, django; django.setup(); from monitoring.tasks import run_job; "
    "print('tick:', run_job(int(sys.argv[1])), flush=True)"
)


SEED_SYNC = (
    "--job-execution-mode=Sync --enable-job-restart=True --max-num-of-job-restart=3 "
    "--fault-tolerant-policy=ExitCodeAndErrorMsg"
)


def submit_script_job(
    cluster,
    user,
    workspace,
    script: str,
    envs: dict,
    display_name: str,
    *,
    job_type: str = "PyTorchJob",
    roles=(("Master", 1), ("Worker", 1)),
    flags: str = SEED_SYNC,
):
    """A job (by default 2-rank PyTorch, Sync restarts) running `script` with python;
    launched in the test process (Celery is eager there). FAULT_ONCE names a file the
    script may create to fail only once."""
    from jobs import actions

    path = cluster.tmp_path / "train.py"
    path.write_text(script)
    body = {
        "workspace": workspace.slug,
        "display_name": display_name,
        "job_type": job_type,
        "job_specs": [{"type": role, "pod_count": count} for role, count in roles],
        "user_command": f"exec {sys.executable} {path}",
        "envs": {"FAULT_ONCE": str(cluster.tmp_path / "fault-fired"), **envs},
        "backend": "local",
        "settings": {"enable_error_monitoring_in_aimaster": True, "error_monitoring_args": flags},
    }
    job, _ = actions.submit_job(user, body)
    return job


# Each ask polls a backend or the database: ten times a second is often enough here.
wait_until = partial(waiting.wait_until, every=0.1)


@pytest.fixture
def private_redis_db():
    """A Redis database of the real Redis that no parallel run uses: claimed, then flushed."""
    base = django_settings.REDIS_URL.rsplit("/", 1)[0]
    claim = f"vigil-test-claim:{os.getpid()}:{uuid.uuid4().hex}"
    for db in range(15, 0, -1):
        client = redis.Redis.from_url(f"{base}/{db}")
        if client.set("vigil-test-claim", claim, nx=True, ex=900):
            if client.dbsize() == 1:
                break
            client.delete("vigil-test-claim")
        client.close()
    else:
        pytest.fail("no free Redis database (1..15) for a private Celery queue")
    url = f"{base}/{db}"
    yield url
    if client.get("vigil-test-claim") == claim.encode():
        client.flushdb()
    client.close()


@pytest.fixture
def cluster(settings, tmp_path, private_redis_db, _test_wiring, transactional_db):
    """The test process and its Celery workers share one data dir, database, Redis DB."""
    job_writable(tmp_path)  # the job's script and its fault marker are there
    data_dir = tmp_path / "data"
    settings.JOB_BACKENDS = {
        "local": {
            "BACKEND": "jobs.backends.local.LocalBackend",
            "OPTIONS": {"data_dir": str(data_dir / "local-backend"), "redis_url": private_redis_db, "grace": 2.0},
        },
    }
    reset_backends()
    backend = get_backend("local")
    env = dict(
        os.environ,
        DATABASE_URL=subprocess_database_url(),
        VIGIL_DATA_DIR=str(data_dir),
        SECRET_KEY=settings.SECRET_KEY,
        REDIS_URL=private_redis_db,
        CELERY_BROKER_URL=private_redis_db,
        VIGIL_RESTART_GRACE_SECONDS=str(TEARDOWN_GRACE),
        VIGIL_MONITOR_SWEEP_SECONDS="1",
        # tasks_done() reads Celery's "Task ... succeeded" lines, which the quiet default hides.
        VIGIL_LOG_LEVEL="INFO",
    )
    env["DJANGO_SETTINGS_MODULE"] = "console.settings"
    workers: list[subprocess.Popen] = []

    def start_worker(
        name: str, beat: bool = False, extra_env: dict | None = None, command: str = "worker"
    ) -> subprocess.Popen:
        log = open(tmp_path / f"{name}.log", "ab")
        cmd = [str(CELERY), "-A", "console", command, "--loglevel", "INFO"]
        if command == "worker":
            cmd += ["--pool", "solo", "--concurrency", "1", "-n", f"{name}@%h", "--without-mingle", "--without-gossip"]
            cmd += [
                "-Q",
                f"{django_settings.CELERY_TASK_DEFAULT_QUEUE},{django_settings.MONITOR_EXITS_QUEUE}",
            ]  # as the Procfile
        if beat or command == "beat":
            cmd += ["--schedule", str(tmp_path / f"{name}-beat-schedule")] + (["--beat"] if command == "worker" else [])
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env={**env, **(extra_env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        proc.log_path = tmp_path / f"{name}.log"  # type: ignore[attr-defined]
        workers.append(proc)
        return proc

    client = Celery("vigil-test-client", broker=private_redis_db, set_as_current=False)

    def tasks_done(task: str) -> int:
        """Deliveries of `task` the workers finished, from their logs."""
        done = 0
        for p in workers:
            log: Path = p.log_path  # type: ignore[attr-defined]
            done += sum(
                1
                for line in log.read_text(errors="replace").splitlines()
                if f"Task {task}[" in line and " succeeded in " in line
            )
        return done

    def tick_killed_at(job_id: int, fault: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """One monitor tick of the job in a process that SIGKILLs its group at `fault`."""
        marker = tmp_path / f"fault-{fault}-{uuid.uuid4().hex[:6]}"
        tick_env = dict(env, VIGIL_FAULT_POINT=faults.check(fault), VIGIL_FAULT_ONCE=str(marker))
        proc = subprocess.Popen(
            [sys.executable, "-c", TICK, str(job_id)],
            cwd=ROOT,
            env=tick_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        workers.append(proc)
        out, _ = proc.communicate(timeout=timeout)
        assert marker.exists() and proc.returncode == -signal.SIGKILL, (
            f"the tick did not die at {fault} (exit {proc.returncode}):\n{out[-3000:]}"
        )
        return subprocess.CompletedProcess(proc.args, proc.returncode, out)

    yield SimpleNamespace(
        backend=backend,
        start_worker=start_worker,
        tmp_path=tmp_path,
        tasks_done=tasks_done,
        send=lambda task, *args: client.send_task(task, args=list(args)),
        env=env,
        tick_killed_at=tick_killed_at,
        data_dir=data_dir,
    )
    try:
        for proc in workers:
            try:  # the worker and anything it forked: it leads its own session
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait(10)
    finally:
        backend.stop_everything(grace=0.2)
        client.close()
        reset_backends()
