"""The monitor's memory of a job (MonitorState): one load, one compare-and-set save."""

import pytest

from jobs.models import Job
from monitoring.state import MonitorState

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(alice_ws):
    return Job.objects.create(workspace=alice_ws, display_name="state", job_type="PyTorchJob", user_command="true")


def test_a_saved_state_loads_back_with_its_fields(job):
    state = MonitorState.load(job)
    assert state == MonitorState()
    state.log_scan_at, state.watchdog_suggested, state.c4d_attempt = 12.5, 600, 2
    assert state.save(job)
    again = MonitorState.load(Job.objects.get(pk=job.pk))
    assert (again.log_scan_at, again.watchdog_suggested, again.c4d_attempt) == (12.5, 600, 2)
    assert again.version == 1


def test_of_two_workers_that_loaded_the_same_state_only_the_first_save_writes(job):
    first, second = MonitorState.load(Job.objects.get(pk=job.pk)), MonitorState.load(Job.objects.get(pk=job.pk))
    first.stragglers_at = 100.0
    second.stragglers_at = 101.0
    assert first.save(job) is True
    assert second.save(Job.objects.get(pk=job.pk)) is False  # a real conditional UPDATE: nothing written
    assert MonitorState.load(Job.objects.get(pk=job.pk)).stragglers_at == 100.0


def test_the_saving_worker_can_save_again_in_the_same_tick(job):
    state = MonitorState.load(job)
    state.c4d_at = 1.0
    assert state.save(job)
    later = MonitorState.load(job)  # the job object followed the first save
    later.c4d_at = 2.0
    assert later.save(job)
    assert Job.objects.get(pk=job.pk).monitor_state_version == 2


def test_keys_an_older_version_wrote_and_no_longer_uses_are_dropped(job):
    Job.objects.filter(pk=job.pk).update(monitor_state={"log_scan_at": 5.0, "retired_key": 1})
    state = MonitorState.load(Job.objects.get(pk=job.pk))
    assert state.log_scan_at == 5.0 and "retired_key" not in state.to_dict()


def test_a_chunk_saved_in_one_statement_writes_only_the_states_nobody_wrote_since(alice_ws, django_assert_num_queries):
    jobs = [
        Job.objects.create(workspace=alice_ws, display_name=f"state-{n}", job_type="PyTorchJob", user_command="true")
        for n in range(3)
    ]
    read = [Job.objects.get(pk=j.pk) for j in jobs]  # a sweep's chunk
    states = [MonitorState.load(j) for j in read]
    # Another worker ticked the middle job after the chunk was read: its claim is lost.
    other = MonitorState.load(Job.objects.get(pk=jobs[1].pk))
    other.stragglers_at = 50.0
    assert other.save(Job.objects.get(pk=jobs[1].pk))
    for n, state in enumerate(states):
        state.stragglers_at, state.log_scan_at = 100.0 + n, 200.0 + n
    with django_assert_num_queries(1):
        won = MonitorState.save_many(list(zip(states, read)))
    assert won == {jobs[0].pk, jobs[2].pk}
    stored = {j.pk: MonitorState.load(Job.objects.get(pk=j.pk)) for j in jobs}
    assert (stored[jobs[0].pk].stragglers_at, stored[jobs[0].pk].log_scan_at, stored[jobs[0].pk].version) == (
        100.0,
        200.0,
        1,
    )
    assert (stored[jobs[1].pk].stragglers_at, stored[jobs[1].pk].log_scan_at) == (50.0, None)
    assert (stored[jobs[2].pk].stragglers_at, stored[jobs[2].pk].version) == (102.0, 1)
    # The winners' job objects follow, as save's do; the loser's keeps what it read.
    assert (read[0].monitor_state_version, read[0].monitor_state["stragglers_at"]) == (1, 100.0)
    assert (read[1].monitor_state_version, states[1].version) == (0, 0)
    assert MonitorState.save_many([]) == set()
