"""The SDK endpoints (jobs.sdk) through DRF's APIClient: what each call does to
the job, who may call, the limits that protect the console, finished jobs."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.cache import cache
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st
from rest_framework.test import APIClient

from jobs.models import Attempt, C4DReport, EventType, Job, JobEvent, JobStatus, Workspace
from jobs.sdk.auth import processes_of
from jobs.sdk.views import C4D_RECORDS_KEPT_PER_RANK, merge_c4d_records
from monitoring.failures import keywords_of

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_rate_limit():
    """The throttle counts calls in the cache; every test starts with none."""
    cache.clear()
    yield
    cache.clear()


def make_job(workspace, *, status=JobStatus.RUNNING, attempts=1, job_specs=None, **fields) -> tuple[Job, str]:
    job = Job.objects.create(
        workspace=workspace,
        display_name="resnet",
        job_type="PyTorchJob",
        job_specs=job_specs or [{"type": "Worker", "pod_count": 2}],
        user_command="python train.py",
        status=status,
        current_attempt=attempts,
        **fields,
    )
    for n in range(1, attempts + 1):
        Attempt.objects.create(job=job, number=n)
    return job, job.reset_token()


@pytest.fixture
def ws():
    """A workspace with nobody in it: the SDK calls need no person (and no slow password hashing)."""
    return Workspace.objects.create(name="Lab", slug="lab")


@pytest.fixture
def job_and_token(ws):
    return make_job(ws)


@pytest.fixture
def job(job_and_token):
    return job_and_token[0]


def sdk_client(token: str | None) -> APIClient:
    client = APIClient()
    if token is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


@pytest.fixture
def sdk(job_and_token):
    return sdk_client(job_and_token[1])


def post(client, job_id, endpoint, body):
    return client.post(f"/api/v1/sdk/jobs/{job_id}/{endpoint}/", body, format="json")


def events(job, type_):
    return list(JobEvent.objects.filter(job=job, type=type_).order_by("id"))


# --- what each call does ---------------------------------------------------------------


def test_a_custom_message_becomes_an_info_event_naming_the_rank_that_sent_it(sdk, job):
    r = post(
        sdk, job.pk, "messages", {"content": "The training loss for the job is NaN.", "rank": 3, "instance": "worker-3"}
    )
    assert r.status_code == 201, r.content
    [event] = events(job, EventType.CUSTOM_MESSAGE)
    assert r.json() == {"id": event.pk}
    assert event.message == "The training loss for the job is NaN."
    assert event.level == "info" and event.attempt == 1 and event.instance == "worker-3"
    assert event.payload == {"source": "SDK (rank 3)", "rank": 3, "instance": "worker-3"}


def test_a_message_that_names_no_sender_comes_from_the_sdk_of_the_current_attempt(ws):
    job, token = make_job(ws, attempts=2)
    r = post(sdk_client(token), job.pk, "messages", {"content": "checkpoint saved"})
    assert r.status_code == 201
    [event] = events(job, EventType.CUSTOM_MESSAGE)
    assert (event.attempt, event.instance, event.payload) == (2, "", {"source": "SDK"})


def test_keywords_replace_the_sdk_list_and_the_monitor_matches_them_beside_the_jobs_own(ws):
    job, token = make_job(ws, retryable_keywords=["from settings"])
    sdk = sdk_client(token)
    r = post(sdk, job.pk, "retryable-errors", {"keywords": ["connect timeout", "error_yyy", "error_zzz"], "rank": 0})
    assert r.status_code == 200, r.content
    assert r.json() == {"keywords": ["connect timeout", "error_yyy", "error_zzz"], "changed": True}
    r = post(sdk, job.pk, "retryable-errors", {"keywords": ["error_qqq", "error_qqq"]})
    assert r.status_code == 200
    job.refresh_from_db()
    assert job.sdk_retryable_keywords == ["error_qqq"]  # replaced, not added to; duplicates once
    assert job.retryable_keywords == ["from settings"]
    assert keywords_of(job) == ("from settings", "error_qqq")
    said = [e.message for e in events(job, EventType.DECISION)]
    assert said == [
        "Retryable error keywords set by SDK (rank 0): 'connect timeout', 'error_yyy', 'error_zzz'.",
        "Retryable error keywords set by SDK: 'error_qqq'.",
    ]


def test_every_rank_sending_the_same_keywords_writes_one_event(sdk, job):
    for rank in range(4):
        assert post(sdk, job.pk, "retryable-errors", {"keywords": ["error_yyy"], "rank": rank}).status_code == 200
    assert len(events(job, EventType.DECISION)) == 1


def test_an_empty_keyword_list_clears_the_sdk_keywords(sdk, job):
    post(sdk, job.pk, "retryable-errors", {"keywords": ["error_yyy"]})
    r = post(sdk, job.pk, "retryable-errors", {"keywords": []})
    assert r.status_code == 200
    job.refresh_from_db()
    assert job.sdk_retryable_keywords == []
    assert events(job, EventType.DECISION)[-1].message == "Retryable error keywords cleared by SDK."


def test_config_sets_the_hang_interval_the_monitor_uses_with_the_rank_as_source(sdk, job):
    r = post(sdk, job.pk, "config", {"job_hang_interval": 10, "rank": 1})
    assert r.status_code == 200, r.content
    assert r.json() == {"job_hang_interval": 10, "changed": True}
    job.refresh_from_db()
    assert job.hang_interval_override == 10
    assert job.hang_interval_set_at is not None  # the monitor counts silence from here
    [event] = events(job, EventType.DECISION)
    assert event.message == "Hang interval set to 10 s by SDK (rank 1)."
    assert event.payload == {"job_hang_interval": 10, "source": "SDK (rank 1)"}


def test_minus_one_suspends_hang_detection_and_a_repeat_writes_nothing(sdk, job):
    for _ in range(3):
        assert post(sdk, job.pk, "config", {"job_hang_interval": -1}).status_code == 200
    job.refresh_from_db()
    assert job.hang_interval_override == -1
    assert [e.message for e in events(job, EventType.DECISION)] == ["Hang detection suspended by SDK."]


@pytest.mark.parametrize(
    "body, field",
    [
        ({"job_hang_interval": 0}, "job_hang_interval"),
        ({"job_hang_interval": -2}, "job_hang_interval"),
        ({"job_hang_interval": "ten"}, "job_hang_interval"),
        ({"job_hang_interval": True}, "job_hang_interval"),
        ({"job_hang_interval": 2.5}, "job_hang_interval"),
        ({"job_hang_interval": None}, "job_hang_interval"),
        ({}, "job_hang_interval"),
        ({"job_hang_interval": 10, "max_num_of_job_restart": 9}, "max_num_of_job_restart"),
    ],
)
def test_bad_config_is_refused_naming_the_field_and_changes_nothing(sdk, job, body, field):
    r = post(sdk, job.pk, "config", body)
    assert r.status_code == 400
    assert r.json()["field"] == field and r.json()["detail"]
    job.refresh_from_db()
    assert job.hang_interval_override is None


def test_progress_marks_the_attempt_once_and_moves_the_jobs_last_step(sdk, job):
    scheduled = timezone.now() + timedelta(seconds=600)
    Job.objects.filter(pk=job.pk).update(monitor_next_check_at=scheduled)  # a steady job's next tick
    r = post(sdk, job.pk, "progress", {"step": 5, "metrics": {"loss": 0.31, "step_time": 1}})
    assert r.status_code == 202, r.content
    attempt = Attempt.objects.get(job=job, number=1)
    first = attempt.first_progress_at
    assert first is not None and attempt.made_progress
    # The start-up interval ended: the monitor is woken (the hang deadline moved).
    assert Job.objects.get(pk=job.pk).monitor_next_check_at is None
    Job.objects.filter(pk=job.pk).update(monitor_next_check_at=scheduled)
    assert post(sdk, job.pk, "progress", {"step": 6}).status_code == 202
    attempt.refresh_from_db()
    job.refresh_from_db()
    assert attempt.first_progress_at == first  # the first progress stays the first
    assert job.last_progress_step == 6 and job.last_progress_at >= first
    assert job.monitor_next_check_at == scheduled  # a later step changes no deadline


def test_progress_reports_give_the_hang_interval_suggestion_from_their_cadence(ws):
    """Where no log has timestamped step lines, the cadence comes from report_progress: the
    time and step of each report that went past the newest kept step (two ranks report the
    same steps), as core.hang.suggest_from_cadence reads them."""
    import time_machine
    from core import hang as core_hang
    from jobs.hang_panel import hang_panel

    from core.flags import parse_flags

    job, token = make_job(
        ws,
        fault_tolerance=True,
        ft_config=parse_flags("--enable-job-hang-detection=True --job-hang-interval=300").to_dict(),
    )
    sdk = sdk_client(token)
    start, t, expected = timezone.now(), 0.0, []
    for step in range(41):  # 20 s a step, one of 30 s: 10 x p99 = 300 s
        with time_machine.travel(start + timedelta(seconds=t), tick=False):
            for rank in (0, 1):
                assert post(sdk, job.pk, "progress", {"step": step, "rank": rank}).status_code == 202
        expected.append((start.timestamp() + t, step))
        t += 30.0 if step == 7 else 20.0
    attempt = Attempt.objects.get(job=job, number=1)
    assert [(round(a, 3), s) for a, s in attempt.progress_samples] == [(round(a, 3), s) for a, s in expected]

    panel = hang_panel(job, attempt, [], start + timedelta(seconds=t))
    assert panel is not None and panel.cadence == core_hang.suggest_from_cadence(expected)
    assert (panel.cadence.interval, panel.cadence.steps, panel.cadence_instance) == (300, 40, "report_progress")
    assert panel.which == "cadence"  # the 300 s the job set is this suggestion


def test_progress_from_an_older_attempt_marks_that_attempt_and_not_the_current_one(ws):
    job, token = make_job(ws, attempts=2)
    r = post(sdk_client(token), job.pk, "progress", {"step": 9, "attempt": 1})
    assert r.status_code == 202 and r.json()["attempt"] == 1
    old, current = Attempt.objects.filter(job=job).order_by("number")
    assert old.made_progress and not current.made_progress and current.first_progress_at is None
    job.refresh_from_db()
    assert job.last_progress_step is None


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "step"),
        ({"step": -1}, "step"),
        ({"step": "7"}, "step"),
        ({"step": 1, "metrics": [1, 2]}, "metrics"),
        ({"step": 1, "metrics": {"loss": "nan"}}, "metrics.loss"),
        ({"step": 1, "attempt": 3}, "attempt"),
    ],
)
def test_bad_progress_is_refused_naming_the_field(sdk, job, body, field):
    r = post(sdk, job.pk, "progress", body)
    assert (r.status_code, r.json()["field"]) == (400, field)
    attempt = Attempt.objects.get(job=job, number=1)
    assert not attempt.made_progress and attempt.progress_samples == []


def test_c4d_keeps_one_report_per_rank_where_a_later_exit_replaces_the_open_record(sdk, job):
    open_ = {
        "rank": 1,
        "attempt": 1,
        "records": [
            {"seq": 1, "op": "all_reduce", "enter": 100.0, "exit": 100.5},
            {"seq": 2, "op": "all_reduce", "enter": 101.0, "exit": None},
        ],
    }
    assert post(sdk, job.pk, "c4d", open_).status_code == 202
    closed = {"rank": 1, "attempt": 1, "records": [{"seq": 2, "op": "all_reduce", "enter": 101.0, "exit": 101.2}]}
    r = post(sdk, job.pk, "c4d", closed)
    assert r.status_code == 202 and r.json() == {"rank": 1, "attempt": 1, "kept": 2}
    assert post(sdk, job.pk, "c4d", {"rank": 0, "attempt": 0, "records": []}).status_code == 202
    report = C4DReport.objects.get(job=job, attempt=1, rank=1)
    assert report.records == [
        {"seq": 1, "op": "all_reduce", "enter": 100.0, "exit": 100.5},
        {"seq": 2, "op": "all_reduce", "enter": 101.0, "exit": 101.2},
    ]
    # attempt 0 is the SDK's "not known": the current attempt.
    assert sorted(C4DReport.objects.filter(job=job).values_list("attempt", "rank")) == [(1, 0), (1, 1)]


def test_c4d_keeps_only_the_newest_window_of_records_per_rank(sdk, job):
    records = [{"seq": s, "op": "broadcast", "enter": float(s), "exit": s + 0.1} for s in range(1, 2501)]
    assert post(sdk, job.pk, "c4d", {"rank": 0, "attempt": 1, "records": records}).status_code == 202
    kept = C4DReport.objects.get(job=job, rank=0).records
    assert len(kept) == C4D_RECORDS_KEPT_PER_RANK
    assert kept[0]["seq"] == 501 and kept[-1]["seq"] == 2500


@pytest.mark.parametrize(
    "body, field",
    [
        ({"attempt": 1, "records": []}, "rank"),
        ({"rank": -1, "attempt": 1, "records": []}, "rank"),
        ({"rank": 0, "attempt": 1}, "records"),
        ({"rank": 0, "attempt": 1, "records": [{"seq": 1, "op": "", "enter": 1.0, "exit": None}]}, "records[0].op"),
        ({"rank": 0, "attempt": 1, "records": [{"seq": 1, "op": "x", "enter": 2.0, "exit": 1.0}]}, "records[0].exit"),
        ({"rank": 0, "attempt": 1, "records": [{"seq": "a", "op": "x", "enter": 1.0}]}, "records[0].seq"),
        ({"rank": 0, "attempt": 7, "records": []}, "attempt"),
        ({"rank": 0, "attempt": 1, "records": [{"seq": 1, "op": "x", "enter": 1.0}] * 5001}, "records"),
    ],
)
def test_bad_c4d_reports_are_refused_naming_the_field(sdk, job, body, field):
    r = post(sdk, job.pk, "c4d", body)
    assert (r.status_code, r.json()["field"]) == (400, field), r.content
    assert not C4DReport.objects.filter(job=job).exists()


@given(st.lists(st.lists(st.integers(min_value=0, max_value=60), max_size=30), max_size=6))
def test_merged_c4d_records_are_the_highest_seqs_once_each_with_the_latest_report(batches):
    kept: list[dict] = []
    latest: dict[int, int] = {}
    for b, seqs in enumerate(batches):
        kept = merge_c4d_records(kept, [{"seq": s, "op": "x", "enter": float(b), "exit": None} for s in seqs], cap=10)
        latest.update({s: b for s in seqs})
    assert [r["seq"] for r in kept] == sorted(latest)[-10:]
    assert all(r["enter"] == latest[r["seq"]] for r in kept)


# --- who may call ------------------------------------------------------------------------


def test_a_token_on_another_jobs_endpoints_gets_404_and_changes_nothing_there(ws):
    other_ws = Workspace.objects.create(name="Other", slug="other")
    mine, token = make_job(ws)
    theirs, _ = make_job(other_ws)
    sdk = sdk_client(token)
    for endpoint, body in [
        ("messages", {"content": "hi"}),
        ("config", {"job_hang_interval": 5}),
        ("retryable-errors", {"keywords": ["x"]}),
        ("progress", {"step": 1}),
        ("c4d", {"rank": 0, "attempt": 1, "records": []}),
    ]:
        r = post(sdk, theirs.pk, endpoint, body)
        assert r.status_code == 404, (endpoint, r.content)
        assert "only its own job" in r.json()["detail"]
    assert post(sdk, "not-a-number", "messages", {"content": "hi"}).status_code == 404
    theirs.refresh_from_db()
    assert theirs.hang_interval_override is None and theirs.sdk_retryable_keywords == []
    assert not JobEvent.objects.filter(job=theirs).exists() and not C4DReport.objects.exists()


def test_a_reset_token_is_refused_at_once_and_the_new_one_works(alice_ws, alice, api_as):
    job, old = make_job(alice_ws)
    r = api_as(alice).post(f"/api/v1/jobs/{job.pk}/reset-token/")
    assert r.status_code == 200, r.content
    new = r.json()["token"]
    refused = post(sdk_client(old), job.pk, "messages", {"content": "from the old token"})
    assert refused.status_code == 401 and "reset" in refused.json()["detail"]
    assert refused["WWW-Authenticate"] == "Bearer"
    assert post(sdk_client(new), job.pk, "messages", {"content": "from the new token"}).status_code == 201
    assert [e.message for e in events(job, EventType.CUSTOM_MESSAGE)] == ["from the new token"]


@pytest.mark.parametrize("header", [None, "Bearer", "Bearer vjt_", "Bearer vjt_made-up", "Token vjt_x", "Basic YTpi"])
def test_calls_without_a_valid_job_token_get_401(job, header):
    client = APIClient()
    if header is not None:
        client.credentials(HTTP_AUTHORIZATION=header)
    r = post(client, job.pk, "messages", {"content": "hi"})
    assert r.status_code == 401 and r.json()["detail"]
    assert not JobEvent.objects.filter(job=job).exists()


def test_a_personal_api_token_does_not_reach_the_sdk_endpoints(job, alice, api_as):
    r = post(api_as(alice), job.pk, "messages", {"content": "hi"})
    assert r.status_code == 401 and "personal API token" in r.json()["detail"]


def test_a_browser_session_does_not_reach_the_sdk_endpoints(job, alice):
    client = APIClient(enforce_csrf_checks=False)
    client.force_login(alice)
    assert client.get("/api/v1/jobs/").status_code == 200  # the session itself works
    r = post(client, job.pk, "messages", {"content": "hi"})
    assert r.status_code == 401
    assert not JobEvent.objects.filter(job=job).exists()


# --- limits ----------------------------------------------------------------------------


def test_a_message_of_4096_characters_is_taken_and_one_more_is_refused(sdk, job):
    assert post(sdk, job.pk, "messages", {"content": "é" * 4096}).status_code == 201
    r = post(sdk, job.pk, "messages", {"content": "x" * 4097})
    assert r.status_code == 400
    assert r.json() == {"detail": "content is 4097 characters; at most 4096 are accepted.", "field": "content"}
    assert len(events(job, EventType.CUSTOM_MESSAGE)) == 1


@pytest.mark.parametrize("body", [{}, {"content": ""}, {"content": "   "}, {"content": 42}])
def test_a_message_needs_content(sdk, job, body):
    r = post(sdk, job.pk, "messages", body)
    assert (r.status_code, r.json()["field"]) == (400, "content")


def test_100_keywords_of_256_characters_are_taken_and_more_are_refused(sdk, job):
    most = [f"{i:03d}" + "k" * 253 for i in range(100)]
    assert post(sdk, job.pk, "retryable-errors", {"keywords": most}).status_code == 200
    r = post(sdk, job.pk, "retryable-errors", {"keywords": most + ["one more"]})
    assert r.status_code == 400
    assert r.json() == {"detail": "101 keywords given; at most 100 are accepted.", "field": "keywords"}
    r = post(sdk, job.pk, "retryable-errors", {"keywords": ["ok", "k" * 257]})
    assert r.status_code == 400
    assert r.json() == {"detail": "keywords[1] is 257 characters; at most 256 are accepted.", "field": "keywords[1]"}
    r = post(sdk, job.pk, "retryable-errors", {"keywords": "error_yyy"})
    assert (r.status_code, r.json()["field"]) == (400, "keywords")
    job.refresh_from_db()
    assert job.sdk_retryable_keywords == most


@pytest.mark.parametrize(
    "endpoint, raw, field",
    [
        ("messages", '{"content": "loss is NaN\\u0000"}', "content"),
        ("messages", '{"content": "half an emoji \\ud83d"}', "content"),
        ("messages", '{"content": "ok", "instance": "worker-0\\u0000"}', "instance"),
        ("retryable-errors", '{"keywords": ["fine", "nul\\u0000"]}', "keywords[1]"),
        (
            "c4d",
            '{"rank": 0, "attempt": 1, "records": [{"seq": 1, "op": "all\\udc00", "enter": 1.0, "exit": null}]}',
            "records[0].op",
        ),
    ],
)
def test_text_the_database_cannot_store_is_refused_naming_the_field(sdk, job, endpoint, raw, field):
    r = sdk.post(f"/api/v1/sdk/jobs/{job.pk}/{endpoint}/", raw, content_type="application/json")
    assert (r.status_code, r.json()["field"]) == (400, field), r.content
    assert not JobEvent.objects.filter(job=job).exists() and not C4DReport.objects.exists()


def test_a_body_beyond_the_endpoints_size_is_refused_before_it_is_read(sdk, job):
    r = post(sdk, job.pk, "messages", {"content": "x" * 4000, "padding": "y" * 70_000})
    assert r.status_code == 413 and r.json()["field"] == "body"
    assert not events(job, EventType.CUSTOM_MESSAGE)


def test_a_body_that_is_not_a_json_object_is_refused(sdk, job):
    r = post(sdk, job.pk, "messages", ["not", "an", "object"])
    assert (r.status_code, r.json()["field"]) == (400, "body")
    r = sdk.post(f"/api/v1/sdk/jobs/{job.pk}/messages/", "{not json", content_type="application/json")
    assert r.status_code == 400 and "JSON" in r.json()["detail"]


def test_over_the_rate_a_job_gets_429_with_retry_after_and_other_jobs_are_not_slowed(settings, ws):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"sdk": "3/min"}}
    busy, busy_token = make_job(ws, job_specs=[{"type": "Master", "pod_count": 1}])
    calm, calm_token = make_job(ws, job_specs=[{"type": "Master", "pod_count": 1}])
    sdk = sdk_client(busy_token)
    codes = [post(sdk, busy.pk, "messages", {"content": f"m{i}"}).status_code for i in range(3)]
    assert codes == [201, 201, 201]
    r = post(sdk, busy.pk, "progress", {"step": 1})  # every endpoint counts towards the job's rate
    assert r.status_code == 429
    assert 1 <= int(r["Retry-After"]) <= 60
    assert r.json()["detail"].startswith(
        f"rate limit: job {busy.pk} may make 3/min SDK calls per process (1 process counted); retry after"
    )
    assert post(sdk_client(calm_token), calm.pk, "messages", {"content": "hi"}).status_code == 201
    assert len(events(busy, EventType.CUSTOM_MESSAGE)) == 3


def test_the_rate_grows_with_the_jobs_processes_so_a_large_job_is_not_starved(settings, ws):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"sdk": "2/min"}}
    # 2 workers with 2 GPUs each: torchrun starts 4 ranks.
    job, token = make_job(
        ws,
        job_specs=[
            {"type": "Master", "pod_count": 1},
            {"type": "Worker", "pod_count": 2, "resource_config": {"gpu": 2}},
        ],
    )
    sdk = sdk_client(token)
    codes = [post(sdk, job.pk, "progress", {"step": i}).status_code for i in range(11)]
    assert codes == [202] * 10 + [429]  # 2 per process, 5 processes


@pytest.mark.parametrize(
    "specs, n",
    [
        ([], 1),
        ([{"type": "Worker", "pod_count": 3}], 3),
        ([{"type": "Master", "pod_count": 1}, {"type": "Worker", "pod_count": 2, "resource_config": {"gpu": 8}}], 17),
        ([{"type": "Worker", "pod_count": "x"}], 1),
        ([{"type": "Worker", "pod_count": 10_000}], 4096),
    ],
)
def test_processes_of_a_job_count_one_per_instance_or_per_gpu(specs, n):
    assert processes_of(specs) == n


# --- finished jobs ---------------------------------------------------------------------


def test_a_stopping_job_takes_messages_and_reports_but_refuses_config_with_409(ws):
    status = JobStatus.STOPPING
    job, token = make_job(ws, status=status)
    sdk = sdk_client(token)
    assert post(sdk, job.pk, "messages", {"content": "saved the final checkpoint"}).status_code == 201
    assert post(sdk, job.pk, "progress", {"step": 100}).status_code == 202
    assert post(sdk, job.pk, "c4d", {"rank": 0, "attempt": 1, "records": []}).status_code == 202
    for endpoint, body in [("config", {"job_hang_interval": 60}), ("retryable-errors", {"keywords": ["x"]})]:
        r = post(sdk, job.pk, endpoint, body)
        assert r.status_code == 409, endpoint
        assert r.json()["detail"].startswith(f"job {job.pk} is {status}; its configuration can no longer change")
    job.refresh_from_db()
    assert job.hang_interval_override is None and job.sdk_retryable_keywords == []


@pytest.mark.parametrize("status", [JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED])
def test_a_finished_jobs_token_writes_nothing_and_every_endpoint_answers_409(ws, status):
    from jobs.models import C4DReport, JobEvent

    job, token = make_job(ws, status=status)
    events = JobEvent.objects.filter(job=job).count()
    sdk = sdk_client(token)
    for endpoint, body in [
        ("messages", {"content": "saved the final checkpoint"}),
        ("progress", {"step": 100}),
        ("c4d", {"rank": 0, "attempt": 1, "records": []}),
        ("config", {"job_hang_interval": 60}),
        ("retryable-errors", {"keywords": ["x"]}),
    ]:
        r = post(sdk, job.pk, endpoint, body)
        assert r.status_code == 409, endpoint
        assert r.json()["detail"].startswith(f"job {job.pk} is {status}; "), r.json()
    job.refresh_from_db()
    assert JobEvent.objects.filter(job=job).count() == events
    assert not C4DReport.objects.filter(job=job).exists() and job.last_progress_step is None


def test_the_openapi_schema_describes_the_sdk_endpoints_and_their_job_token(alice, api_as):
    r = api_as(alice).get("/api/schema/", HTTP_ACCEPT="application/json")
    assert r.status_code == 200
    schema = r.json()
    for endpoint in ("messages", "retryable-errors", "config", "progress", "c4d"):
        operation = schema["paths"][f"/api/v1/sdk/jobs/{{job_id}}/{endpoint}/"]["post"]
        assert operation["security"] == [{"jobToken": []}]
        assert "requestBody" in operation and "429" in operation["responses"]
    assert schema["components"]["securitySchemes"]["jobToken"]["scheme"] == "bearer"


def test_report_progress_keeps_loss_and_total_and_refuses_a_bad_total(ws):
    job, token = make_job(ws)
    sdk = sdk_client(token)
    assert post(sdk, job.pk, "progress", {"step": 1}).status_code == 202
    assert post(sdk, job.pk, "progress", {"step": 2, "metrics": {"loss": 0.5}}).status_code == 202
    assert post(sdk, job.pk, "progress", {"step": 3, "metrics": {"loss": 0.4, "total_steps": 900}}).status_code == 202
    bad = post(sdk, job.pk, "progress", {"step": 4, "metrics": {"total_steps": 0}})
    assert bad.status_code == 400 and "total_steps" in bad.content.decode()
    samples = Attempt.objects.get(job=job, number=1).progress_samples
    assert [s[1:] for s in samples] == [[1], [2, 0.5], [3, 0.4, 900]]
