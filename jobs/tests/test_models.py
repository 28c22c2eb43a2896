"""State changes are compare-and-set: a stale transition says it did not happen."""

import pytest

from core.flags import ExecutionMode, parse_flags
from jobs.models import Attempt, Instance, Job, JobStatus, compare_and_set

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(alice_ws):
    return Job.objects.create(workspace=alice_ws, display_name="cas", job_type="PyTorchJob", user_command="true")


def test_a_transition_from_the_current_status_happens_once(job):
    assert job.transition(JobStatus.CREATING, JobStatus.QUEUING) is True
    assert job.status == JobStatus.QUEUING
    stale = Job.objects.get(pk=job.pk)
    stale.status = JobStatus.CREATING  # a worker holding an old copy
    assert stale.transition(JobStatus.CREATING, JobStatus.RUNNING) is False
    assert stale.status == JobStatus.CREATING  # the copy is not changed either
    assert Job.objects.get(pk=job.pk).status == JobStatus.QUEUING


def test_a_stopped_job_is_not_resurrected_by_a_late_transition(job):
    assert job.transition(JobStatus.CREATING, JobStatus.STOPPED, stop_requested=True)
    for late in (JobStatus.RUNNING, JobStatus.RESTARTING, JobStatus.FAILED):
        assert job.transition((JobStatus.CREATING, JobStatus.QUEUING, JobStatus.RUNNING), late) is False
    assert Job.objects.get(pk=job.pk).status == JobStatus.STOPPED


def test_attempts_and_instances_change_state_by_compare_and_set_too(job):
    attempt = Attempt.objects.create(job=job, number=1)
    assert attempt.transition("Queuing", "Starting") is True
    assert Attempt.objects.get(pk=attempt.pk).transition("Queuing", "Starting") is False
    inst = Instance.objects.create(attempt=attempt, role="Worker", index=0, name="worker-0")
    assert compare_and_set(Instance, inst.pk, "Pending", "Running") is True
    assert compare_and_set(Instance, inst.pk, "Pending", "Failed") is False
    assert Instance.objects.get(pk=inst.pk).status == "Running"


def test_only_one_attempt_of_a_number_can_exist(job):
    from django.db import IntegrityError, transaction

    Attempt.objects.create(job=job, number=1)
    with pytest.raises(IntegrityError), transaction.atomic():
        Attempt.objects.create(job=job, number=1)


def test_a_token_records_its_use_at_most_once_a_minute(alice):
    """Issue 20, 4: a write per request would queue every read behind a busy SQLite writer."""
    import time_machine
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from jobs.models import ApiToken

    token, raw = ApiToken.issue(alice)
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        assert ApiToken.authenticate(raw).pk == token.pk
        first = ApiToken.objects.get(pk=token.pk).last_used_at
        assert first == start
    with time_machine.travel(start + ApiToken.LAST_USED_EVERY - timezone.timedelta(seconds=1), tick=False):
        with CaptureQueriesContext(connection) as queries:
            assert ApiToken.authenticate(raw).pk == token.pk
        assert not [q for q in queries.captured_queries if q["sql"].lstrip().upper().startswith("UPDATE")]
        assert ApiToken.objects.get(pk=token.pk).last_used_at == first
    later = start + ApiToken.LAST_USED_EVERY + timezone.timedelta(seconds=1)
    with time_machine.travel(later, tick=False):
        ApiToken.authenticate(raw)
        assert ApiToken.objects.get(pk=token.pk).last_used_at == later


def test_a_transition_stamps_updated_at_on_a_job_only(job):
    before = Job.objects.get(pk=job.pk).updated_at
    assert job.transition(JobStatus.CREATING, JobStatus.QUEUING)
    assert Job.objects.get(pk=job.pk).updated_at > before
    attempt = Attempt.objects.create(job=job, number=1)
    assert attempt.transition("Queuing", "Starting", reason="launching")
    assert attempt.reason == "launching" and Attempt.objects.get(pk=attempt.pk).reason == "launching"


def test_ft_is_the_parsed_flags_and_follows_a_changed_config(job):
    assert job.ft.max_num_of_job_restart == 3 and job.restart_budget == 3  # the flags' defaults
    job.ft_config = parse_flags(
        "--job-execution-mode=Sync --enable-job-restart=True --max-num-of-job-restart=5"
    ).to_dict()
    assert job.ft.job_execution_mode is ExecutionMode.SYNC
    assert job.restart_budget == 5
