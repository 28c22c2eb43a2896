"""`--replica-groups=N` (issue 30) as a job option: the flag string, the API and the form.
The flag parser takes 2 to 1024; the serializer, which knows the roles, checks that N divides
the job's instances and that the job is a PyTorchJob, with a 400 naming the field."""

from __future__ import annotations

import pytest
from django.urls import reverse

from core.flags import FlagError, parse_flags
from jobs.models import Job
from jobs.tests.test_pages import form_data

pytestmark = pytest.mark.django_db


def _body(job_body, ws, args, workers=3):
    return job_body(
        ws,
        job_specs=[
            {"type": "Master", "pod_count": 1, "resource_config": {"cpu": 1, "memory": "1Gi", "gpu": 0}},
            {"type": "Worker", "pod_count": workers, "resource_config": {"cpu": 1, "memory": "1Gi", "gpu": 0}},
        ],
        settings={"enable_error_monitoring_in_aimaster": True, "error_monitoring_args": args},
    )


def test_the_flag_takes_two_groups_or_more_and_renders_back():
    config = parse_flags("--replica-groups=4 --lighthouse-heartbeat-timeout-ms=1000")
    assert (config.replica_groups, config.lighthouse_heartbeat_timeout_ms) == (4, 1000)
    assert parse_flags(config.to_flags()) == config
    assert parse_flags("").replica_groups == 0
    for bad in ("--replica-groups=1", "--replica-groups=0", "--replica-groups=two", "--replica-groups=1025"):
        with pytest.raises(FlagError) as exc:
            parse_flags(bad)
        assert exc.value.flag == "--replica-groups"


def test_the_api_accepts_groups_that_divide_the_instances(alice_ws, alice, api_as, job_body):
    r = api_as(alice).post("/api/v1/jobs/", _body(job_body, alice_ws, "--replica-groups=2"), format="json")
    assert r.status_code == 201, r.content
    assert r.json()["settings"]["parsed"]["replica_groups"] == 2
    assert Job.objects.get().ft.replica_groups == 2


@pytest.mark.parametrize(
    "args, workers, expected",
    [
        ("--replica-groups=3", 3, "--replica-groups: 3 does not divide the job's 4 instances"),
        ("--replica-groups=8", 3, "--replica-groups: 8 does not divide the job's 4 instances"),
        ("--replica-groups=1", 3, "--replica-groups: '1' is not accepted; use a whole number from 2"),
        ("--replica-groups=-2", 3, "--replica-groups: '-2' is not accepted"),
    ],
)
def test_the_api_refuses_groups_that_do_not_split_the_job_naming_the_field(
    alice_ws, alice, api_as, job_body, args, workers, expected
):
    r = api_as(alice).post("/api/v1/jobs/", _body(job_body, alice_ws, args, workers), format="json")
    assert r.status_code == 400, r.content
    assert r.json()["settings.error_monitoring_args"][0].startswith(expected)
    assert Job.objects.count() == 0


def test_the_api_refuses_replica_groups_for_a_job_that_is_not_pytorch(alice_ws, alice, api_as, job_body):
    body = job_body(
        alice_ws,
        job_type="ElasticBatchJob",
        job_specs=[{"type": "Worker", "pod_count": 2, "resource_config": {"cpu": 1, "memory": "1Gi", "gpu": 0}}],
        settings={"enable_error_monitoring_in_aimaster": True, "error_monitoring_args": "--replica-groups=2"},
    )
    r = api_as(alice).post("/api/v1/jobs/", body, format="json")
    assert r.status_code == 400, r.content
    assert "for a PyTorchJob only" in r.json()["settings.error_monitoring_args"][0]
    assert Job.objects.count() == 0


def test_the_form_field_sets_the_groups_and_a_bad_count_is_refused(client, alice, alice_ws):
    client.force_login(alice)
    url = reverse("pages:job-new", args=[alice_ws.slug])
    bad = client.post(url, form_data(replica_groups="2", role_1_replicas="2"))  # 3 instances
    assert bad.status_code == 400
    assert "does not divide the job&#x27;s 3 instances" in bad.content.decode()
    assert Job.objects.count() == 0
    ok = client.post(url, form_data(replica_groups="3", role_1_replicas="2", lighthouse_heartbeat_timeout_ms="1000"))
    assert ok.status_code == 302, ok.content.decode()[:2000]
    job = Job.objects.get()
    assert (job.ft.replica_groups, job.ft.lighthouse_heartbeat_timeout_ms) == (3, 1000)


def test_a_backend_that_starts_no_lighthouse_refuses_replica_groups(alice_ws, alice, api_as, job_body, settings):
    settings.JOB_BACKENDS = {
        "local": {"BACKEND": "jobs.backends.memory.MemoryBackend", "OPTIONS": {}},
        "slurm": {"BACKEND": "jobs.backends.slurm.SlurmBackend", "OPTIONS": {}},
    }
    body = _body(job_body, alice_ws, "--replica-groups=2")
    body["backend"] = "slurm"
    r = api_as(alice).post("/api/v1/jobs/", body, format="json")
    assert r.status_code == 400, r.content
    assert "the 'slurm' backend cannot run replica groups" in r.json()["settings.error_monitoring_args"][0]
    assert Job.objects.count() == 0


def test_a_clone_shows_no_groups_as_a_blank_field_and_groups_as_their_number():
    from jobs.forms import config_to_initial

    assert config_to_initial(parse_flags(""))["replica_groups"] == ""  # "0" would not submit again
    assert config_to_initial(parse_flags("--replica-groups=2"))["replica_groups"] == "2"
