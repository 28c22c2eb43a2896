"""The sweep pays for changes, not for jobs (issue 17): a steady Running job is ticked at
its scheduled check (its hang deadline, its next periodic check, at most
MONITOR_QUIET_SECONDS ahead) or when an event wakes it, and costs no query of its own
in between. Real Redis (the shard leases, the exit listener's heartbeat), in-memory
backend that announces its exits as the local and Slurm backends do."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from infra import health
from infra.client import redis_client
from jobs import actions
from jobs.backends import get_backend, reset_backends
from jobs.backends.memory import MemoryBackend
from jobs.models import Attempt, EventType, Job, JobEvent, RestartRecord
from monitoring import schedule, tasks
from testsupport import factory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]

HANG = (
    "--job-execution-mode=Sync --enable-job-restart=True --max-num-of-job-restart=3 "
    "--fault-tolerant-policy=ExitCodeAndErrorMsg --enable-job-hang-detection=True --job-hang-interval=100"
)
NCCL = b"RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1331, unhandled system error, NCCL version 2.18.1\n"


class AnnouncingMemoryBackend(MemoryBackend):
    channel: str | None = None  # set by the fixture: where the exit listener listens

    @property
    def exit_channel(self) -> str | None:
        return self.channel


@pytest.fixture
def backend(settings, _test_wiring):
    settings.JOB_BACKENDS = {"local": {"BACKEND": f"{__name__}.AnnouncingMemoryBackend", "OPTIONS": {}}}
    settings.MONITOR_QUIET_SECONDS = 1000  # the deadlines below decide, not the cap
    reset_backends()
    announcing = get_backend("local")
    announcing.channel = settings.VIGIL_EXIT_CHANNEL
    yield announcing
    reset_backends()


@pytest.fixture
def listener_alive():
    """The exit listener's heartbeat, fresh: the sweep trusts the schedule."""
    health.record(health.EXITS)
    yield
    redis_client().delete(health.EXITS)


def steady_jobs(user, ws, backend, count: int, flags: str = HANG) -> list[Job]:
    """Running jobs whose ranks wrote a step line just now (first progress seen)."""
    jobs = []
    for n in range(count):
        job = factory.submit(user, ws, flags=flags, launch=True, display_name=f"steady-{n}")
        handle = Attempt.objects.get(job=job, number=1).backend_handle
        for name in backend.instance_names(handle):
            backend.write_log(handle, name, b"step=1 loss=0.5\n")
        jobs.append(job)
    return jobs


def later(seconds: float):
    return timezone.now() + timedelta(seconds=seconds)


def test_a_steady_job_costs_no_query_of_its_own_until_its_check_is_due(
    alice, alice_ws, backend, listener_alive, django_assert_max_num_queries, settings
):
    jobs = steady_jobs(alice, alice_ws, backend, 6)
    assert tasks.sweep(now=later(1)) == 6  # new: every job is ticked, then scheduled
    for job in jobs:
        job.refresh_from_db()
        # the first of its periodic checks: the log scan and stragglers, 30 s on
        assert later(25) < job.monitor_next_check_at < later(32), job.monitor_next_check_at
    # One query per shard for the list of due jobs, whatever the number of jobs.
    with django_assert_max_num_queries(settings.MONITOR_SHARDS):
        assert tasks.sweep(now=later(2)) == 0
    # Due again: each shard reads its jobs' state in five bulk queries (jobs, live attempts,
    # instances, pending restarts, the list), claims its jobs' periodic checks (the log scan
    # and stragglers) in one write and their next checks in another: none per job or instance.
    with django_assert_max_num_queries(7 * settings.MONITOR_SHARDS) as counted:
        assert tasks.sweep(now=later(31)) == 6
    print(f"{len(counted.captured_queries)} queries for a sweep of {len(jobs)} due steady jobs")


def test_an_announced_exit_is_decided_at_the_next_sweep(alice, alice_ws, backend, listener_alive):
    [job] = steady_jobs(alice, alice_ws, backend, 1)
    tasks.sweep(now=later(1))
    job.refresh_from_db()
    assert job.monitor_next_check_at > later(20)
    handle = Attempt.objects.get(job=job, number=1).backend_handle
    backend.write_log(handle, "worker-0", NCCL)
    backend.finish(handle, "worker-0", exit_code=1)
    assert tasks.sweep(now=later(2)) == 0, "unannounced, the exit waits for the job's check"
    actions.wake_monitor(job.pk)  # what the exit listener does with the announcement
    assert tasks.sweep(now=later(3)) == 1
    assert RestartRecord.objects.filter(job=job).count() == 1
    job.refresh_from_db()
    assert job.current_attempt == 2 and job.monitor_next_check_at is None


def test_a_hang_is_flagged_by_the_first_sweep_at_its_deadline(alice, alice_ws, backend, listener_alive, settings):
    settings.MONITOR_QUIET_SECONDS = 10_000
    [job] = steady_jobs(alice, alice_ws, backend, 1)
    actions.set_hang_interval(job, 20, source="the test")  # shorter than the periodic checks
    tasks.sweep(now=later(1))
    job.refresh_from_db()
    written = max(Attempt.objects.get(job=job, number=1).instances.values_list("last_output_at", flat=True))
    # exact: the interval after the last output (or the change of interval, if later)
    deadline = max(written, job.hang_interval_set_at) + timedelta(seconds=20)
    assert job.monitor_next_check_at == deadline
    assert tasks.sweep(now=deadline - timedelta(seconds=0.1)) == 0
    assert not JobEvent.objects.filter(job=job, type=EventType.HANG).exists()
    assert tasks.sweep(now=deadline) == 1
    assert JobEvent.objects.filter(job=job, type=EventType.HANG).count() == 1


def test_an_event_after_the_tick_read_the_job_is_never_scheduled_past(alice, alice_ws, backend):
    [job] = steady_jobs(alice, alice_ws, backend, 1)
    read = Job.objects.get(pk=job.pk)  # a tick's snapshot
    actions.wake_monitor(job.pk)  # an exit announced meanwhile
    schedule.store(read, later(30))
    assert Job.objects.get(pk=job.pk).monitor_next_check_at is None
    fresh = Job.objects.get(pk=job.pk)
    Job.objects.filter(pk=job.pk).update(current_attempt=2)  # another worker restarted it meanwhile
    schedule.store(fresh, later(30))
    assert Job.objects.get(pk=job.pk).monitor_next_check_at is None
    Job.objects.filter(pk=job.pk).update(current_attempt=1)
    schedule.store(fresh, later(30))
    assert Job.objects.get(pk=job.pk).monitor_next_check_at is not None


def test_a_chunk_is_scheduled_in_one_write_that_skips_the_jobs_an_event_woke(
    alice, alice_ws, backend, django_assert_num_queries
):
    jobs = steady_jobs(alice, alice_ws, backend, 3)
    read = list(Job.objects.filter(pk__in=[j.pk for j in jobs]).order_by("pk"))  # a chunk's snapshot
    woken, restarted, steady = read
    actions.wake_monitor(woken.pk)  # an exit announced after the chunk was read
    Job.objects.filter(pk=restarted.pk).update(current_attempt=2)  # another worker restarted it meanwhile
    at = {job.pk: later(10 + n) for n, job in enumerate(read)}
    with django_assert_num_queries(1):
        assert schedule.store_many([(job, at[job.pk]) for job in read]) == 1
    stored = dict(Job.objects.filter(pk__in=at).values_list("pk", "monitor_next_check_at"))
    assert stored == {woken.pk: None, restarted.pk: None, steady.pk: at[steady.pk]}
    assert schedule.store_many([]) == 0


def test_without_the_exit_listener_every_job_is_ticked_every_sweep(alice, alice_ws, backend):
    redis_client().delete(health.EXITS)
    steady_jobs(alice, alice_ws, backend, 3)
    assert tasks.sweep(now=later(1)) == 3
    assert tasks.sweep(now=later(2)) == 3, "a lost exit announcement would wait for the schedule"


def test_a_backend_that_does_not_announce_exits_is_never_scheduled(alice, alice_ws, memory_backend, listener_alive):
    [job] = steady_jobs(alice, alice_ws, memory_backend, 1)
    assert tasks.sweep(now=later(1)) == 1
    assert tasks.sweep(now=later(2)) == 1
    job.refresh_from_db()
    assert job.monitor_next_check_at is None


def test_exits_announced_on_another_channel_than_the_listeners_are_not_events(
    alice, alice_ws, backend, listener_alive, settings
):
    settings.VIGIL_EXIT_CHANNEL = "vigil-elsewhere:instance-exit"  # the listener hears another channel
    steady_jobs(alice, alice_ws, backend, 2)
    assert tasks.sweep(now=later(1)) == 2
    assert tasks.sweep(now=later(2)) == 2


def test_the_hang_panel_shows_the_silence_as_of_now_between_scheduled_ticks(alice, alice_ws, backend, listener_alive):
    from jobs.hang_panel import hang_panel

    [job] = steady_jobs(alice, alice_ws, backend, 1)
    tasks.sweep(now=later(1))
    attempt = Attempt.objects.get(job=job, number=1)
    written = max(attempt.instances.values_list("last_output_at", flat=True)).timestamp()
    backend.write_log(attempt.backend_handle, "worker-0", b"step=2 loss=0.4\n", now=written + 50)
    job.refresh_from_db()
    panel = hang_panel(job, attempt, list(attempt.instances.all()), later(0) + timedelta(seconds=55))
    assert panel is not None and panel.status is not None
    assert panel.status.silent_seconds < 10, "the panel showed the monitor's last look, not the log's last write"


def test_an_exit_announcement_wakes_the_job_and_ticks_it(alice, alice_ws, backend, listener_alive):
    import json

    from monitoring.management.commands.listen_exits import Command

    [job] = steady_jobs(alice, alice_ws, backend, 1)
    tasks.sweep(now=later(1))
    handle = Attempt.objects.get(job=job, number=1).backend_handle
    backend.write_log(handle, "worker-0", NCCL)
    backend.finish(handle, "worker-0", exit_code=1)
    later_tick = tasks.sweep(now=later(2))  # scheduled: not ticked
    Command().dispatch(json.dumps({"job_id": job.pk, "attempt": 1, "instance": "worker-0", "exit_code": 1}))
    assert later_tick == 0 and Job.objects.get(pk=job.pk).monitor_state_version > job.monitor_state_version
    # Celery is eager here: run_job ticked at once; the cascade settle window leaves the
    # decision to the sweep a second later at most.
    tasks.sweep(now=later(3))
    assert RestartRecord.objects.filter(job=job).count() == 1


def test_a_new_hang_interval_wakes_a_scheduled_job(alice, alice_ws, backend, listener_alive):
    [job] = steady_jobs(alice, alice_ws, backend, 1)
    tasks.sweep(now=later(1))
    job.refresh_from_db()
    assert job.monitor_next_check_at is not None
    actions.set_hang_interval(job, 5, source="the test")
    assert Job.objects.get(pk=job.pk).monitor_next_check_at is None
    assert tasks.sweep(now=later(2)) == 1


def test_a_steady_job_after_a_restart_costs_what_a_first_attempt_does(
    alice, alice_ws, backend, listener_alive, django_assert_max_num_queries, settings
):
    settings.MONITOR_SHARDS = 1
    [job] = steady_jobs(alice, alice_ws, backend, 1)
    handle = Attempt.objects.get(job=job, number=1).backend_handle
    backend.write_log(handle, "worker-0", NCCL)
    backend.finish(handle, "worker-0", exit_code=1)
    tasks.sweep(now=later(2))  # decided: attempt 2 launched at once
    new = Attempt.objects.get(job=job, number=2).backend_handle
    for name in backend.instance_names(new):
        backend.write_log(new, name, b"step=1 loss=0.5\n")
    tasks.sweep(now=later(3))  # attempt 2 runs: its restart record completes, the job is scheduled
    assert RestartRecord.objects.get(job=job).result == "Succeeded"
    assert Job.objects.get(pk=job.pk).monitor_next_check_at is not None
    # Due again 30 s on: the list, four bulk reads, the job's three writes; nothing about the restart.
    with django_assert_max_num_queries(5 + 3) as counted:
        assert tasks.sweep(now=later(34)) == 1
    assert not [
        q
        for q in counted.captured_queries
        if "jobs_restartrecord" in q["sql"] and "WHERE" in q["sql"] and '"new_attempt" = 2' in q["sql"]
    ], "the finished restart was looked up again"


def test_a_periodic_check_another_worker_claimed_during_the_chunk_runs_once(
    alice, alice_ws, backend, listener_alive, monkeypatch
):
    """The sweep claims a chunk's periodic checks after ticking the chunk: a worker that
    ran a job's check in between (run_job on an exit announcement) keeps it, and the
    sweep neither runs it again nor schedules the job from the state it read."""
    from monitoring import checks, tick

    jobs = steady_jobs(alice, alice_ws, backend, 3)
    tasks.sweep(now=later(1))
    ran: list[int] = []
    real = checks.check_stragglers
    monkeypatch.setattr(checks, "check_stragglers", lambda job, *a, **kw: ran.append(job.pk) or real(job, *a, **kw))
    raced = jobs[1]
    real_finish = tick.finish_periodic

    def finish_after_another_worker(tails, now, plans, stretch=1.0):
        if any(t.claim.job.pk == raced.pk for t in tails):  # the raced job's chunk
            tick.run_job(raced.pk, now)  # its own claim, one write: it wins
        return real_finish(tails, now, plans, stretch)

    monkeypatch.setattr(tick, "finish_periodic", finish_after_another_worker)
    assert tasks.sweep(now=later(32)) == 3
    assert sorted(ran) == sorted(j.pk for j in jobs), "each job's check ran once, the raced one by the other worker"
    assert len(ran) == 3
    raced.refresh_from_db()
    assert raced.monitor_next_check_at is None, "scheduled from a state read before the other worker's claim"
    for job in (jobs[0], jobs[2]):
        job.refresh_from_db()
        assert later(55) < job.monitor_next_check_at < later(63)


@pytest.fixture
def pacing_on(settings):
    """The production pace: a 10 s quiet period that may stretch to 60 s; no stretch left
    in Redis by an earlier run."""
    settings.MONITOR_QUIET_SECONDS, settings.MONITOR_QUIET_MAX_SECONDS = 10, 60
    keys = [f"vigil:monitor:quiet-stretch:{shard}" for shard in range(settings.MONITOR_SHARDS)]
    redis_client().delete(*keys)
    yield
    redis_client().delete(*keys)


def test_a_shard_behind_its_schedule_stretches_the_quiet_period_and_gives_it_back(
    alice, alice_ws, backend, listener_alive, pacing_on, caplog
):
    from monitoring import checks

    jobs = steady_jobs(alice, alice_ws, backend, 4)
    assert tasks.sweep(now=later(1)) == 4
    for job in jobs:
        job.refresh_from_db()
        assert later(5) < job.monitor_next_check_at < later(12), "on time: the configured 10 s (5-10 s)"
    # The next sweep comes 30 s after the checks were due: every shard is that far behind.
    with caplog.at_level("WARNING", logger="monitoring.schedule"):
        assert tasks.sweep(now=later(41)) == 4
    assert "behind its scheduled checks" in caplog.text
    stretches = [schedule.stretch_of(shard) for shard in range(4)]
    assert all(3.0 < s <= 6.0 for s in stretches), stretches
    for job in jobs:
        job.refresh_from_db()
        # The quiet period stretched about 4x (spread over its second half, as ever), and the
        # periodic checks claimed in this sweep 4x too (~120 s): never the 5-10 s of before.
        stretch = stretches[job.pk % 4]
        assert later(41 + 5 * stretch - 1) < job.monitor_next_check_at <= later(41 + 10 * stretch + 1)
        # The straggler check and log scan this sweep ran are not due 30 s on, as they would be unstretched.
        assert checks.periodic_due(job, later(72), log_scan=True) is not None
        assert checks.periodic_due(job, later(72), log_scan=True, stretch=stretch) is None
    # Sweeps on time give it back, slowly: one sweep 2 %, and never below the configured period.
    due_at = max(Job.objects.values_list("monitor_next_check_at", flat=True))
    shard = jobs[0].pk % 4
    assert schedule.pace(shard, stretches[shard], [due_at], due_at) == pytest.approx(stretches[shard] * 0.98)
    assert schedule.pace(shard, 1.0, [due_at], due_at) == 1.0


def test_without_a_ceiling_above_the_quiet_period_nothing_stretches(
    alice, alice_ws, backend, listener_alive, pacing_on, settings
):
    settings.MONITOR_QUIET_MAX_SECONDS = settings.MONITOR_QUIET_SECONDS
    jobs = steady_jobs(alice, alice_ws, backend, 2)
    tasks.sweep(now=later(1))
    tasks.sweep(now=later(41))
    for job in jobs:
        job.refresh_from_db()
        assert later(45) < job.monitor_next_check_at < later(52)
    assert [schedule.stretch_of(shard) for shard in range(4)] == [1.0] * 4


def test_a_stretched_shard_still_flags_a_hang_at_its_deadline(alice, alice_ws, backend, listener_alive, pacing_on):
    [job] = steady_jobs(alice, alice_ws, backend, 1)
    actions.set_hang_interval(job, 20, source="the test")
    for shard in range(4):  # every shard as far behind as it gets: 60 s periods
        redis_client().set(f"vigil:monitor:quiet-stretch:{shard}", "6.0")
    tasks.sweep(now=later(1))
    job.refresh_from_db()
    written = max(Attempt.objects.get(job=job, number=1).instances.values_list("last_output_at", flat=True))
    deadline = max(written, job.hang_interval_set_at) + timedelta(seconds=20)
    assert job.monitor_next_check_at == deadline
    assert tasks.sweep(now=deadline) == 1
    assert JobEvent.objects.filter(job=job, type=EventType.HANG).count() == 1
