"""The REST API of SPEC section 8, as scripts and the SDK use it."""

import pytest

from jobs.models import ApiToken, Attempt, Job, JobEvent, JobStatus, Membership, RestartRecord, Role

pytestmark = pytest.mark.django_db(transaction=True)


def test_owner_creates_a_job_and_gets_it_back_with_its_first_attempt(alice_ws, alice, api_as, job_body):
    api = api_as(alice)
    r = api.post("/api/v1/jobs/", job_body(alice_ws), format="json")
    assert r.status_code == 201, r.content
    body = r.json()
    assert body["display_name"] == "resnet-ddp"
    assert body["job_type"] == "PyTorchJob"
    assert body["token"].startswith("vjt_")
    assert body["current_attempt"] == 1
    job = Job.objects.get(pk=body["id"])
    assert job.workspace == alice_ws
    assert Attempt.objects.filter(job=job, number=1).exists()

    got = api.get(f"/api/v1/jobs/{job.pk}/").json()
    assert got["id"] == job.pk
    assert "token" not in got
    assert got["attempt"]["number"] == 1
    names = sorted(i["name"] for i in got["attempt"]["instances"])
    assert names == ["master-0", "worker-0"]


def test_job_list_is_newest_first_and_filters_by_workspace_and_status(alice_ws, alice, api_as, job_body):
    api = api_as(alice)
    first = api.post("/api/v1/jobs/", job_body(alice_ws, display_name="first"), format="json").json()
    second = api.post("/api/v1/jobs/", job_body(alice_ws, display_name="second"), format="json").json()
    listing = api.get("/api/v1/jobs/", {"workspace": alice_ws.slug}).json()
    assert [j["id"] for j in listing["results"]][:2] == [second["id"], first["id"]]
    assert listing["count"] == 2
    Job.objects.filter(pk=first["id"]).update(status=JobStatus.FAILED)
    failed = api.get("/api/v1/jobs/", {"status": "Failed"}).json()
    assert [j["id"] for j in failed["results"]] == [first["id"]]


def test_stop_moves_the_job_to_stopped_and_records_who(alice_ws, alice, api_as, job_body):
    api = api_as(alice)
    job_id = api.post("/api/v1/jobs/", job_body(alice_ws), format="json").json()["id"]
    r = api.post(f"/api/v1/jobs/{job_id}/stop/")
    assert r.status_code == 202
    job = Job.objects.get(pk=job_id)
    assert job.status == JobStatus.STOPPED
    assert job.stop_requested is True
    assert job.stopped_by == alice
    assert JobEvent.objects.filter(job=job, message__icontains="stop requested by alice").exists()
    # A second stop changes nothing.
    assert api.post(f"/api/v1/jobs/{job_id}/stop/").status_code == 202
    assert JobEvent.objects.filter(job=job, message__icontains="stop requested").count() == 1


@pytest.mark.parametrize(
    "change, field, words",
    [
        ({"job_type": "CaffeJob"}, "job_type", "PyTorchJob"),
        ({"job_specs": [{"type": "PS", "pod_count": 1}]}, "job_specs.0.type", "Master, Worker"),
        (
            {"job_specs": [{"type": "Worker", "pod_count": 2, "resource_config": {"gpu": 6}}]},
            "job_specs.0.resource_config.gpu",
            "Invalid GPU count 6, only supported: [0 1 2 4 8 16]",
        ),
        ({"job_specs": [{"type": "Master", "pod_count": 2}]}, "job_specs.0.pod_count", "from 1 to 1"),
        ({"envs": {"1BAD": "x"}}, "envs.1BAD", "^[A-Za-z_][A-Za-z0-9_]*$"),
        ({"envs": {"LD_PRELOAD": "/tmp/x.so"}}, "envs.LD_PRELOAD", "cannot be set"),
        ({"envs": {"BASH_ENV": "/tmp/x"}}, "envs.BASH_ENV", "cannot be set"),
        ({"user_command": ""}, "user_command", "required"),
        ({"display_name": "x" * 200}, "display_name", "at most 128"),
        (
            {
                "settings": {
                    "enable_error_monitoring_in_aimaster": True,
                    "error_monitoring_args": "--job-execution-mode=Sink",
                }
            },
            "settings.error_monitoring_args",
            "--job-execution-mode",
        ),
        (
            {"settings": {"enable_error_monitoring_in_aimaster": True, "error_monitoring_args": "--no-such-flag=1"}},
            "settings.error_monitoring_args",
            "--no-such-flag",
        ),
        ({"backend": "kubernetes"}, "backend", "local"),
    ],
)
def test_bad_submissions_get_400_naming_the_field_and_store_nothing(
    alice_ws, alice, api_as, job_body, change, field, words
):
    r = api_as(alice).post("/api/v1/jobs/", job_body(alice_ws, **change), format="json")
    assert r.status_code == 400, r.content
    errors = r.json()
    assert field in errors, errors
    assert words in " ".join(errors[field])
    assert Job.objects.count() == 0


def test_the_startup_interval_is_parsed_shown_and_refused_like_the_other_flags(alice_ws, alice, api_as, job_body):
    api = api_as(alice)
    args = "--enable-job-hang-detection=True --job-hang-interval=6 --job-hang-startup-interval=45"
    r = api.post(
        "/api/v1/jobs/",
        job_body(alice_ws, settings={"enable_error_monitoring_in_aimaster": True, "error_monitoring_args": args}),
        format="json",
    )
    assert r.status_code == 201, r.content
    assert r.json()["settings"]["parsed"]["job_hang_startup_interval"] == 45
    left_out = "--enable-job-hang-detection=True --job-hang-interval=6"
    r = api.post(
        "/api/v1/jobs/",
        job_body(alice_ws, settings={"enable_error_monitoring_in_aimaster": True, "error_monitoring_args": left_out}),
        format="json",
    )
    assert r.json()["settings"]["parsed"]["job_hang_startup_interval"] is None  # derived: max(600, 6)
    bad = api.post(
        "/api/v1/jobs/",
        job_body(
            alice_ws,
            settings={
                "enable_error_monitoring_in_aimaster": True,
                "error_monitoring_args": "--job-hang-startup-interval=0",
            },
        ),
        format="json",
    )
    assert bad.status_code == 400 and "--job-hang-startup-interval" in str(bad.json())


def test_warm_restart_flags_are_parsed_shown_and_a_bad_module_list_is_a_400_naming_the_flag(
    alice_ws, alice, api_as, job_body
):
    api = api_as(alice)
    args = "--enable-job-restart=True --enable-warm-restart=True --warm-modules=torch,mypkg.models"
    r = api.post(
        "/api/v1/jobs/",
        job_body(alice_ws, settings={"enable_error_monitoring_in_aimaster": True, "error_monitoring_args": args}),
        format="json",
    )
    assert r.status_code == 201, r.content
    parsed = r.json()["settings"]["parsed"]
    assert parsed["enable_warm_restart"] is True and parsed["warm_modules"] == ["torch", "mypkg.models"]
    for bad_args, flag in (
        ("--warm-modules=torch,os/path", "--warm-modules"),
        ("--enable-warm-restart=maybe", "--enable-warm-restart"),
    ):
        bad = api.post(
            "/api/v1/jobs/",
            job_body(
                alice_ws, settings={"enable_error_monitoring_in_aimaster": True, "error_monitoring_args": bad_args}
            ),
            format="json",
        )
        assert bad.status_code == 400, bad.content
        assert bad.json()["settings.error_monitoring_args"][0].startswith(f"{flag}: ")
    assert Job.objects.count() == 1


def test_a_workspace_default_turns_warm_restarts_on_for_jobs_that_do_not_say(alice_ws, alice, api_as, job_body):
    api = api_as(alice)

    def submit(args, monitoring=True):
        r = api.post(
            "/api/v1/jobs/",
            job_body(
                alice_ws, settings={"enable_error_monitoring_in_aimaster": monitoring, "error_monitoring_args": args}
            ),
            format="json",
        )
        assert r.status_code == 201, r.content
        return Job.objects.get(pk=r.json()["id"])

    assert submit("--enable-job-restart=True").ft.enable_warm_restart is False  # the default default: off
    alice_ws.warm_restart_default = True
    alice_ws.save()
    job = submit("--enable-job-restart=True")
    assert job.ft.enable_warm_restart is True
    assert job.error_monitoring_args == "--enable-job-restart=True --enable-warm-restart=True"  # shown, cloned
    assert submit("--enable-warm-restart=False").ft.enable_warm_restart is False  # the job's word wins
    assert submit("").ft.enable_warm_restart is True
    assert submit("", monitoring=False).fault_tolerance is False  # nothing to warm without monitoring


def test_the_seeds_example_configurations_are_accepted(alice_ws, alice, api_as, job_body):
    api = api_as(alice)
    sync = "--job-execution-mode=Sync --enable-job-restart=True --max-num-of-job-restart=3 --fault-tolerant-policy=ExitCodeAndErrorMsg"
    r = api.post(
        "/api/v1/jobs/",
        job_body(alice_ws, settings={"enable_error_monitoring_in_aimaster": True, "error_monitoring_args": sync}),
        format="json",
    )
    assert r.status_code == 201, r.content
    parsed = r.json()["settings"]["parsed"]
    assert parsed["enable_job_restart"] is True and parsed["max_num_of_job_restart"] == 3
    tf = job_body(
        alice_ws,
        job_type="TFJob",
        job_specs=[{"type": "PS", "pod_count": 1}, {"type": "Worker", "pod_count": 2}],
        settings={
            "enable_error_monitoring_in_aimaster": True,
            "error_monitoring_args": "--job-execution-mode=Async --fault-tolerant-policy=OnFailure",
        },
    )
    assert api.post("/api/v1/jobs/", tf, format="json").status_code == 201
    eb = job_body(
        alice_ws,
        job_type="ElasticBatchJob",
        job_specs=[{"type": "Worker", "pod_count": 3}],
        settings={
            "enable_error_monitoring_in_aimaster": True,
            "error_monitoring_args": "--job-execution-mode=Async --fault-tolerant-policy=OnFailure",
        },
    )
    assert api.post("/api/v1/jobs/", eb, format="json").status_code == 201


def test_every_job_endpoint_is_404_across_the_workspace_boundary(alice_ws, bob_ws, alice, bob, api_as, job_body):
    job_id = api_as(alice).post("/api/v1/jobs/", job_body(alice_ws), format="json").json()["id"]
    RestartRecord.objects.create(job_id=job_id, number=1, kind="job", attempt=1, idempotency_key="k1")
    as_bob = api_as(bob)
    for suffix in ("", "attempts/", "restarts/", "events/", "diagnoses/", "logs/?instance=worker-0"):
        assert as_bob.get(f"/api/v1/jobs/{job_id}/{suffix}").status_code == 404, suffix
    for suffix in ("stop/", "reset-token/", "runtime/"):
        assert (
            as_bob.post(f"/api/v1/jobs/{job_id}/{suffix}", {"job_hang_interval": 5}, format="json").status_code == 404
        )
    assert as_bob.get("/api/v1/jobs/").json()["count"] == 0
    assert as_bob.get(f"/api/v1/workspaces/{alice_ws.pk}/").status_code == 404
    r = as_bob.post("/api/v1/jobs/", job_body(alice_ws), format="json")
    assert r.status_code == 404
    assert Job.objects.get(pk=job_id).status != JobStatus.STOPPED


def test_a_viewer_reads_but_gets_403_on_writes(alice_ws, alice, carol, api_as, job_body):
    job_id = api_as(alice).post("/api/v1/jobs/", job_body(alice_ws), format="json").json()["id"]
    as_carol = api_as(carol)
    assert as_carol.get(f"/api/v1/jobs/{job_id}/").status_code == 200
    assert as_carol.post("/api/v1/jobs/", job_body(alice_ws), format="json").status_code == 403
    assert as_carol.post(f"/api/v1/jobs/{job_id}/stop/").status_code == 403
    assert as_carol.post(f"/api/v1/jobs/{job_id}/reset-token/").status_code == 403
    assert Job.objects.count() == 1


def test_members_cannot_run_local_jobs_by_default_but_owners_can(alice_ws, dave, api_as, job_body, settings):
    r = api_as(dave).post("/api/v1/jobs/", job_body(alice_ws), format="json")
    assert r.status_code == 403
    assert "local backend" in r.json()["detail"]
    settings.VIGIL_LOCAL_SUBMIT_ROLES = ["owner", "admin", "member"]
    assert api_as(dave).post("/api/v1/jobs/", job_body(alice_ws), format="json").status_code == 201


def test_token_auth_rejects_missing_bad_and_revoked_tokens(alice_ws, alice, client):
    from rest_framework.test import APIClient

    anon = APIClient()
    assert anon.get("/api/v1/jobs/").status_code in (401, 403)
    bad = APIClient()
    bad.credentials(HTTP_AUTHORIZATION="Bearer vpt_not-a-real-token")
    assert bad.get("/api/v1/jobs/").status_code == 401
    token, raw = ApiToken.issue(alice)
    ok = APIClient()
    ok.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert ok.get("/api/v1/jobs/").status_code == 200
    assert ApiToken.objects.get(pk=token.pk).digest != raw  # only the digest is stored
    assert token.revoke() is True
    assert token.revoke() is False
    assert ok.get("/api/v1/jobs/").status_code == 401


def test_createapitoken_prints_a_working_token(alice_ws, alice):
    from io import StringIO

    from django.core.management import call_command
    from rest_framework.test import APIClient

    out = StringIO()
    call_command("createapitoken", "alice", stdout=out)
    raw = out.getvalue().strip()
    assert raw.startswith("vpt_")
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert c.get("/api/v1/workspaces/").json()["results"][0]["slug"] == "alice-lab"


def test_workspaces_list_only_the_callers_and_creating_one_makes_the_caller_owner(
    alice_ws, bob_ws, alice, api_as, settings
):
    settings.VIGIL_WORKSPACE_CREATION = "anyone"  # creation is for staff by default (tests/security)
    api = api_as(alice)
    slugs = [w["slug"] for w in api.get("/api/v1/workspaces/").json()["results"]]
    assert slugs == ["alice-lab"]
    r = api.post("/api/v1/workspaces/", {"name": "Alice Lab"}, format="json")
    assert r.status_code == 201
    assert r.json()["slug"] == "alice-lab-2"
    assert r.json()["role"] == "owner"


def test_staff_create_workspaces_and_the_setting_opens_creation_to_anyone(bob, api_as, settings, django_user_model):
    staff = django_user_model.objects.create_user("sam", "sam@example.com", "sam-password-123", is_staff=True)
    assert api_as(staff).post("/api/v1/workspaces/", {"name": "Staff made"}, format="json").status_code == 201
    settings.VIGIL_WORKSPACE_CREATION = "anyone"
    r = api_as(bob).post("/api/v1/workspaces/", {"name": "Bob's"}, format="json")
    assert r.status_code == 201, r.content
    assert Membership.objects.get(workspace__slug=r.json()["slug"], user=bob).role == Role.OWNER


def test_events_come_oldest_first_and_can_resume_after_an_id(alice_ws, alice, api_as, job_body):
    api = api_as(alice)
    job_id = api.post("/api/v1/jobs/", job_body(alice_ws), format="json").json()["id"]
    api.post(f"/api/v1/jobs/{job_id}/stop/")
    events = api.get(f"/api/v1/jobs/{job_id}/events/").json()
    ids = [e["id"] for e in events]
    assert ids == sorted(ids) and len(ids) >= 2
    later = api.get(f"/api/v1/jobs/{job_id}/events/", {"after": ids[0]}).json()
    assert [e["id"] for e in later] == ids[1:]


def test_the_hang_interval_can_be_changed_at_run_time_and_bad_values_are_named(alice_ws, alice, api_as, job_body):
    api = api_as(alice)
    job_id = api.post("/api/v1/jobs/", job_body(alice_ws), format="json").json()["id"]
    r = api.patch(f"/api/v1/jobs/{job_id}/runtime/", {"job_hang_interval": 10}, format="json")
    assert r.status_code == 200 and r.json()["hang_interval_override"] == 10
    assert (
        api.patch(f"/api/v1/jobs/{job_id}/runtime/", {"job_hang_interval": -1}, format="json").json()[
            "hang_interval_override"
        ]
        == -1
    )
    bad = api.patch(f"/api/v1/jobs/{job_id}/runtime/", {"job_hang_interval": 0}, format="json")
    assert bad.status_code == 400 and "job_hang_interval" in bad.json()


def test_the_openapi_schema_describes_the_job_endpoints(alice, api_as):
    r = api_as(alice).get("/api/schema/", HTTP_ACCEPT="application/json")
    assert r.status_code == 200
    text = r.content.decode()
    for path in ("/api/v1/jobs/", "/api/v1/jobs/{id}/stop/", "/api/v1/jobs/{id}/restarts/", "/api/v1/jobs/{id}/logs/"):
        assert path in text


def test_the_schema_describes_every_request_body_from_its_serializer(alice, api_as):
    schema = api_as(alice).get("/api/schema/", HTTP_ACCEPT="application/json").json()
    components = schema["components"]["schemas"]
    submit = components["JobSubmit"]["properties"]
    assert submit["job_specs"]["items"]["$ref"].endswith("/RoleSpec")
    assert set(components["ResourceConfig"]["properties"]) == {"cpu", "memory", "gpu"}
    assert "retryable_errors" in components["SubmissionSettings"]["properties"]
    assert "job_hang_interval" in components["Runtime"]["properties"]
    for name, fields in {
        "SdkMessage": {"content", "rank", "instance", "attempt"},
        "SdkRetryableErrors": {"keywords"},
        "SdkConfig": {"job_hang_interval"},
        "SdkProgress": {"step", "metrics"},
        "SdkC4D": {"rank", "attempt", "records"},
    }.items():
        assert fields <= set(components[name]["properties"]), name


def test_nested_serializer_errors_are_named_by_the_path_the_caller_sent():
    from jobs.inputs import flat_errors

    nested = {
        "job_specs": [{}, {"resource_config": {"gpu": ["bad"]}}],
        "settings": {"non_field_errors": ["obj"]},
        "non_field_errors": ["body"],
        "records": {0: {"op": ["empty"]}},
    }
    assert flat_errors(nested) == {
        "job_specs.1.resource_config.gpu": ["bad"],
        "settings": ["obj"],
        "non_field_errors": ["body"],
        "records.0.op": ["empty"],
    }
    assert flat_errors({"records": {0: {"op": ["empty"]}}, "keywords": {2: ["long"]}}, brackets=True) == {
        "records[0].op": ["empty"],
        "keywords[2]": ["long"],
    }
