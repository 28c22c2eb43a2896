"""The monitor as a state machine: hypothesis drives submits, instance failures and
successes, hangs, stops by a person, monitor workers that die half-way and
ordinary ticks, in any order, over several jobs at once, and checks after every
step what must always hold:

- whole-job restarts never exceed the job's budget (none at all with restarts off);
- a stopped job gets no new attempt and no restart after the stop;
- a finished job stays finished;
- after a tick that ran to the end, at most one attempt of the job is live;
- current_attempt is the number of attempts, and restart_count the number of restarts.

The backend is the in-memory one with one addition: it can be told to die (raise
WorkerKilled) inside its next stop, launch or poll, which is where a SIGKILLed
Celery worker would leave the monitor: after the restart decision committed and
before the new attempt launched, half-way through a launch, or mid-tick.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone
from hypothesis import HealthCheck, event, settings, strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from jobs import actions
from jobs.backends import get_backend, reset_backends
from jobs.backends.memory import MemoryBackend
from jobs.models import (
    FINISHED_JOB_STATUSES,
    LIVE_ATTEMPT_STATUSES,
    Attempt,
    AttemptStatus,
    Job,
    JobStatus,
    RestartKind,
    RestartRecord,
)
from monitoring import restarts, tasks, tick
from core.flags import parse_flags

pytestmark = pytest.mark.django_db(transaction=True)

SEED_SYNC = (
    "--job-execution-mode=Sync --enable-job-restart=True --max-num-of-job-restart=3 "
    "--fault-tolerant-policy=ExitCodeAndErrorMsg"
)
SEED_ASYNC = "--job-execution-mode=Async --fault-tolerant-policy=OnFailure"
HANG_INTERVAL = 20

# (job_type, roles, flags): the seed's three examples and a few edges of the budget.
CONFIGS = [
    ("PyTorchJob", [("Master", 1), ("Worker", 2)], SEED_SYNC),
    ("TFJob", [("PS", 1), ("Worker", 2)], SEED_ASYNC),
    ("ElasticBatchJob", [("Worker", 3)], SEED_ASYNC),
    (
        "PyTorchJob",
        [("Master", 1), ("Worker", 1)],
        "--job-execution-mode=Sync --enable-job-restart=True --max-num-of-job-restart=1 --fault-tolerant-policy=OnFailure",
    ),
    (
        "PyTorchJob",
        [("Master", 1), ("Worker", 1)],
        f"--enable-job-restart=True --max-num-of-job-restart=2 --enable-job-hang-detection=True "
        f"--job-hang-interval={HANG_INTERVAL} --fault-tolerant-policy=OnFailure",
    ),
    ("PyTorchJob", [("Master", 1), ("Worker", 1)], "--fault-tolerant-policy=OnFailure"),  # restarts off
    (
        "TFJob",
        [("PS", 1), ("Worker", 2)],
        SEED_ASYNC + " --enable-job-restart=True --max-num-of-job-restart=2 --max-num-of-same-error=2",
    ),
]

LOG_SNIPPETS = [
    b"",
    b"RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1331, "
    b"unhandled system error, NCCL version 2.18.1\n",
    b"RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection reset by peer [127.0.0.1]:5111\n",
    b'Traceback (most recent call last):\n  File "train.py", line 3, in <module>\n    raise ValueError("bad shape")\n'
    b"ValueError: bad shape\n",
    b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity)\n",
    b"Killed\n",
]
EXITS = [(1, None), (2, None), (137, None), (None, 9), (None, 11), (255, None)]
# Past the cascade settle window, and past RELAUNCH_AFTER (a queued attempt nobody took is re-enqueued).
TICK_OFFSETS = [restarts.CASCADE_SETTLE_SECONDS + 0.5, restarts.RELAUNCH_AFTER.total_seconds() + 1]


class WorkerKilled(Exception):
    """Where a SIGKILLed monitor worker stops: nothing after this point runs."""


class CrashableMemoryBackend(MemoryBackend):
    """The in-memory backend, plus `die_in`: the next call of that method raises."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.die_in: str | None = None

    def _maybe_die(self, where: str):
        if self.die_in == where:
            self.die_in = None
            raise WorkerKilled(f"worker killed inside backend.{where}")

    def stop(self, handle, grace=None):
        self._maybe_die("stop")
        return super().stop(handle, grace)

    def launch(self, spec):
        self._maybe_die("launch")
        return super().launch(spec)

    def poll(self, handle):
        self._maybe_die("poll")
        return super().poll(handle)


def body_for(workspace, job_type, roles, flags) -> dict:
    return {
        "workspace": workspace.slug,
        "display_name": f"sm-{job_type.lower()}",
        "job_type": job_type,
        "job_specs": [{"type": r, "pod_count": n} for r, n in roles],
        "user_command": "python train.py",
        "backend": "local",
        "settings": {"enable_error_monitoring_in_aimaster": True, "error_monitoring_args": flags},
    }


def live_attempts(job_id) -> int:
    return Attempt.objects.filter(job_id=job_id, status__in=LIVE_ATTEMPT_STATUSES).count()


def job_restarts(job_id) -> int:
    return RestartRecord.objects.filter(job_id=job_id, kind=RestartKind.JOB).count()


class MonitorMachine(RuleBasedStateMachine):
    """Filled in by the test: the person who submits and the workspace."""

    user = None
    workspace = None
    jobs = Bundle("jobs")

    def __init__(self):
        super().__init__()
        self.backend: CrashableMemoryBackend = get_backend("local")
        self.known: dict[int, dict] = {}  # job id -> what the invariants remember about it

    # -- helpers -------------------------------------------------------------------
    def current_handle(self, job_id):
        job = Job.objects.get(pk=job_id)
        attempt = Attempt.objects.filter(job=job, number=job.current_attempt).first()
        if attempt is None or not attempt.backend_handle:
            return None
        key = (str(job_id), attempt.number)
        return attempt.backend_handle if key in self.backend.attempts else None

    def tick(self, job_id, offset: float):
        """One monitor tick that runs to its end; then at most one attempt is live."""
        result = tick.run_job(job_id, now=timezone.now() + timedelta(seconds=offset))
        event(f"tick: {result.action}")
        live = live_attempts(job_id)
        assert live <= 1, (
            f"job {job_id}: {live} live attempts after a tick: "
            f"{list(Attempt.objects.filter(job_id=job_id).values_list('number', 'status'))}"
        )

    # -- rules ---------------------------------------------------------------------
    @initialize(target=jobs, config=st.sampled_from(CONFIGS))
    def first_submit(self, config):
        return self.submit(config)

    @rule(target=jobs, config=st.sampled_from(CONFIGS))
    def submit(self, config):
        job_type, roles, flags = config
        job, _ = actions.submit_job(self.user, body_for(self.workspace, job_type, roles, flags))
        cfg = parse_flags(flags)
        self.known[job.pk] = {
            "budget": cfg.max_num_of_job_restart if cfg.enable_job_restart else 0,
            "stopped_with": None,
            "finished_as": None,
        }
        return job.pk

    @rule(
        job_id=jobs,
        data=st.data(),
        log=st.sampled_from(LOG_SNIPPETS),
        exit=st.sampled_from(EXITS),
        progress=st.booleans(),
        then=st.sampled_from(["nothing", "tick", "stop", "launch", "poll"]),
    )
    def instance_fails(self, job_id, data, log, exit, progress, then):
        handle = self.current_handle(job_id)
        if handle is None:
            return
        name = data.draw(st.sampled_from([i["name"] for i in handle["instances"]]), label="instance")
        self.backend.write_log(handle, name, (b"step=3 loss=0.25\n" if progress else b"") + log)
        self.backend.finish(handle, name, exit_code=exit[0], signal=exit[1])
        if then == "tick":  # the exit announcement's immediate tick
            self.tick(job_id, TICK_OFFSETS[0])
        elif then != "nothing":  # ... whose worker dies inside backend.<then>
            self.worker_dies(job_id, then, TICK_OFFSETS[0])

    @rule(job_id=jobs, data=st.data())
    def instance_succeeds(self, job_id, data):
        handle = self.current_handle(job_id)
        if handle is None:
            return
        name = data.draw(st.sampled_from([i["name"] for i in handle["instances"]]), label="instance")
        self.backend.finish(handle, name, exit_code=0)

    @rule(job_id=jobs, data=st.data())
    def old_attempt_exits_late(self, job_id, data):
        """An exit of a superseded attempt arrives after the restart: it must change nothing."""
        job = Job.objects.get(pk=job_id)
        old = [k for k in self.backend.attempts if k[0] == str(job_id) and k[1] < job.current_attempt]
        if not old:
            return
        att = self.backend.attempts[data.draw(st.sampled_from(sorted(old)), label="old attempt")]
        name = data.draw(st.sampled_from(sorted(att.statuses)), label="instance")
        self.backend.write_log(att.handle, name, LOG_SNIPPETS[1])
        self.backend.finish(att.handle, name, exit_code=1)
        self.tick(job_id, TICK_OFFSETS[0])

    @rule(job_id=jobs, offset=st.sampled_from(TICK_OFFSETS))
    def monitor_tick(self, job_id, offset):
        self.tick(job_id, offset)

    @rule(job_id=jobs)
    def every_instance_hangs(self, job_id):
        """Nobody writes for longer than the hang interval: the tick sees it that much later."""
        self.tick(job_id, HANG_INTERVAL + 1)

    @rule(job_id=jobs)
    def sweep_runs(self, job_id):
        tasks.sweep(now=timezone.now() + timedelta(seconds=TICK_OFFSETS[0]))
        assert live_attempts(job_id) <= 1

    @rule(job_id=jobs)
    def person_stops(self, job_id):
        job = Job.objects.select_related("workspace").get(pk=job_id)
        if actions.stop_job(self.user, job):
            self.known[job_id]["stopped_with"] = (
                Attempt.objects.filter(job_id=job_id).count(),
                job_restarts(job_id),
                RestartRecord.objects.filter(job_id=job_id).count(),
            )

    @rule(job_id=jobs, where=st.sampled_from(["stop", "launch", "poll"]), offset=st.sampled_from(TICK_OFFSETS))
    def monitor_worker_dies_mid_tick(self, job_id, where, offset):
        """The worker dies at `where`; the next ticks (and the sweep) must finish its work."""
        self.worker_dies(job_id, where, offset)

    def worker_dies(self, job_id, where, offset):
        self.backend.die_in = where
        try:
            tick.run_job(job_id, now=timezone.now() + timedelta(seconds=offset))
        except WorkerKilled:
            pass
        finally:
            self.backend.die_in = None

    # -- invariants ------------------------------------------------------------------
    @invariant()
    def what_always_holds(self):
        for job_id, memo in self.known.items():
            job = Job.objects.get(pk=job_id)
            attempts = Attempt.objects.filter(job_id=job_id).count()
            restarts = job_restarts(job_id)
            assert job.current_attempt == attempts, (job_id, job.current_attempt, attempts)
            assert restarts <= memo["budget"], f"job {job_id}: {restarts} whole-job restarts, budget {memo['budget']}"
            assert attempts == restarts + 1, (job_id, attempts, restarts)
            assert job.restart_count == RestartRecord.objects.filter(job_id=job_id).count(), (
                job_id,
                job.restart_count,
                list(RestartRecord.objects.filter(job_id=job_id).values_list("kind", flat=True)),
            )
            if memo["stopped_with"] is not None:
                assert (attempts, restarts, RestartRecord.objects.filter(job_id=job_id).count()) == memo[
                    "stopped_with"
                ], f"job {job_id} was restarted after a person stopped it"
                assert job.status in (JobStatus.STOPPING, JobStatus.STOPPED, JobStatus.SUCCEEDED, JobStatus.FAILED)
            if memo["finished_as"] is not None:
                assert job.status == memo["finished_as"], f"job {job_id} left {memo['finished_as']} for {job.status}"
            elif job.status in FINISHED_JOB_STATUSES:
                memo["finished_as"] = job.status


@pytest.fixture
def crashable_backend(settings, _test_wiring):
    settings.JOB_BACKENDS = {"local": {"BACKEND": f"{__name__}.CrashableMemoryBackend", "OPTIONS": {}}}
    reset_backends()
    yield get_backend("local")
    reset_backends()


def test_monitor_keeps_its_invariants_under_any_interleaving(alice, alice_ws, crashable_backend):
    MonitorMachine.user, MonitorMachine.workspace = alice, alice_ws
    run_state_machine_as_test(
        MonitorMachine,
        settings=settings(
            max_examples=15,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        ),
    )


def test_a_worker_killed_after_the_restart_decision_leaves_exactly_one_new_attempt(alice, alice_ws, crashable_backend):
    """The window the whole idempotency design is about, as one plain story."""
    job, _ = actions.submit_job(alice, body_for(alice_ws, "PyTorchJob", [("Master", 1), ("Worker", 1)], SEED_SYNC))
    handle = Attempt.objects.get(job=job, number=1).backend_handle
    crashable_backend.write_log(handle, "worker-0", LOG_SNIPPETS[1])
    crashable_backend.finish(handle, "worker-0", exit_code=1)
    crashable_backend.die_in = "stop"  # after the decision committed, before the new attempt launched
    with pytest.raises(WorkerKilled):
        tick.run_job(job.pk, now=timezone.now() + timedelta(seconds=2))
    assert Attempt.objects.get(job=job, number=2).status == AttemptStatus.QUEUING
    tick.run_job(job.pk, now=timezone.now() + timedelta(seconds=2))  # too early to re-launch
    assert live_attempts(job.pk) == 1 and not Attempt.objects.get(job=job, number=2).backend_handle
    tick.run_job(job.pk, now=timezone.now() + restarts.RELAUNCH_AFTER + timedelta(seconds=1))
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and job.current_attempt == 2
    assert [a.status for a in Attempt.objects.filter(job=job)] == [AttemptStatus.FAILED, AttemptStatus.RUNNING]
    assert RestartRecord.objects.filter(job=job).count() == 1
    assert [(j, a) for j, a, *_ in crashable_backend.stopped] == [(str(job.pk), 1)]
    assert sum(1 for s in crashable_backend.launched if s.attempt == 2) == 1


def test_a_worker_killed_inside_the_launch_is_taken_over_by_the_sweep(alice, alice_ws, crashable_backend):
    job, _ = actions.submit_job(alice, body_for(alice_ws, "PyTorchJob", [("Master", 1), ("Worker", 1)], SEED_SYNC))
    handle = Attempt.objects.get(job=job, number=1).backend_handle
    crashable_backend.write_log(handle, "worker-0", LOG_SNIPPETS[1])
    crashable_backend.finish(handle, "worker-0", exit_code=1)
    crashable_backend.die_in = "launch"
    with pytest.raises(WorkerKilled):
        tick.run_job(job.pk, now=timezone.now() + timedelta(seconds=2))
    assert Attempt.objects.get(job=job, number=2).status == AttemptStatus.STARTING
    later = timezone.now() + actions.LAUNCH_LEASE + timedelta(seconds=5)
    with time_machine.travel(later, tick=False):
        tasks.sweep()
        tasks.sweep()
    attempt = Attempt.objects.get(job=job, number=2)
    assert attempt.backend_handle, "attempt 2 was never launched"
    assert attempt.status == AttemptStatus.RUNNING
