"""The web console's pages, through Django's test client: who may see and do
what, the submission form (fields, box, errors in place), the job page and its
parts, restart records, aggregation, log download."""

from __future__ import annotations

import html as html_lib
import io
import os
import re
import time
import zipfile
from datetime import timedelta

import pytest
from django.http import StreamingHttpResponse
from django.urls import reverse
from django.utils import timezone

from jobs import actions
from jobs.models import Diagnosis, Job, JobStatus, RestartRecord
from testsupport import factory

pytestmark = pytest.mark.django_db


def submit(user, body) -> Job:
    return factory.submit(user, body.pop("workspace"), launch=True, **body)


def record(job, n, **fields) -> RestartRecord:
    values = dict(
        job=job,
        number=n,
        kind="job",
        attempt=n,
        new_attempt=n + 1,
        node_name="node-a",
        instance_name="worker-0",
        error_code="NCCL_ERROR",
        error_message="NCCL error: unhandled system error",
        error_source="Log",
        reason=f"worker-0 failed with a retryable NCCL error (restart {n})",
        result="Succeeded",
        duration_seconds=4.2,
        idempotency_key=f"rr-{job.pk}-{n}",
    )
    values.update(fields)
    return RestartRecord.objects.create(**values)


@pytest.fixture
def job(alice, alice_ws, job_body):
    return submit(
        alice,
        job_body(
            alice_ws,
            settings={
                "enable_error_monitoring_in_aimaster": True,
                "error_monitoring_args": "--enable-job-restart=True --max-num-of-job-restart=3",
            },
        ),
    )


def snapshot(job) -> Diagnosis:
    return Diagnosis.objects.create(job=job, attempt=1, kind="stacks", summary="No suspect", data={"processes": []})


def page_urls(ws, job, rec):
    s, j = ws.slug, job.pk
    diagnosis = Diagnosis.objects.filter(job=job).first() or snapshot(job)
    return [
        reverse("pages:workspace", args=[s]),
        reverse("pages:job-list", args=[s]),
        reverse("pages:job-new", args=[s]),
        reverse("pages:job-detail", args=[s, j]),
        reverse("pages:job-row", args=[s, j]),
        reverse("pages:job-part", args=[s, j, "instances"]),
        reverse("pages:job-part", args=[s, j, "timeline"]),
        reverse("pages:restarts", args=[s, j]),
        reverse("pages:restart", args=[s, j, rec.pk]),
        reverse("pages:restarts-aggregated", args=[s, j]),
        reverse("pages:log-download", args=[s, j, 1, "worker-0"]),
        reverse("pages:attempt-logs", args=[s, j, 1]),
        reverse("pages:diagnosis", args=[s, j, diagnosis.pk]),
        reverse("pages:reliability", args=[s]),
        reverse("pages:reliability", args=[s]) + "?period=30d",
    ]


def test_a_diagnosis_page_is_404_for_an_unknown_id_or_another_jobs_snapshot(client, alice, alice_ws, job, job_body):
    other = submit(alice, job_body(alice_ws, display_name="other"))
    theirs = snapshot(other)
    client.force_login(alice)
    assert client.get(reverse("pages:diagnosis", args=[alice_ws.slug, job.pk, theirs.pk])).status_code == 404
    assert client.get(reverse("pages:diagnosis", args=[alice_ws.slug, job.pk, theirs.pk + 1000])).status_code == 404
    assert client.get(reverse("pages:diagnosis", args=[alice_ws.slug, other.pk, theirs.pk])).status_code == 200


def test_every_page_asks_a_logged_out_visitor_to_log_in(client, alice_ws, job):
    rec = record(job, 1)
    for url in page_urls(alice_ws, job, rec) + [reverse("dashboard")]:
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login")), url


def test_every_page_is_404_for_another_workspaces_user(client, bob, bob_ws, alice_ws, job):
    rec = record(job, 1)
    client.force_login(bob)
    for url in page_urls(alice_ws, job, rec):
        assert client.get(url).status_code == 404, url
    # Alice's job under Bob's own workspace slug is not found either.
    assert client.get(reverse("pages:job-detail", args=[bob_ws.slug, job.pk])).status_code == 404
    for name in ("pages:job-stop", "pages:job-token"):
        assert client.post(reverse(name, args=[alice_ws.slug, job.pk])).status_code == 404
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and not job.stop_requested


def test_a_member_sees_every_page(client, alice, alice_ws, job):
    rec = record(job, 1)
    client.force_login(alice)
    for url in page_urls(alice_ws, job, rec):
        assert client.get(url).status_code == 200, url


def test_viewer_cannot_submit_or_stop(client, carol, alice_ws, job, job_body):
    client.force_login(carol)
    new = reverse("pages:job-new", args=[alice_ws.slug])
    page = client.get(new)
    assert page.status_code == 403
    assert "viewer" in page.content.decode()
    assert client.post(new, {"display_name": "x", "job_type": "PyTorchJob"}).status_code == 403
    stop = client.post(reverse("pages:job-stop", args=[alice_ws.slug, job.pk]))
    assert stop.status_code == 403
    assert client.post(reverse("pages:job-token", args=[alice_ws.slug, job.pk])).status_code == 403
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and not job.stop_requested
    assert Job.objects.count() == 1
    # and the job page offers her no stop button
    body = client.get(reverse("pages:job-detail", args=[alice_ws.slug, job.pk])).content.decode()
    assert 'id="stop-job"' not in body


def test_owner_stops_a_job_from_its_page(client, alice, alice_ws, job, django_capture_on_commit_callbacks):
    client.force_login(alice)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("pages:job-stop", args=[alice_ws.slug, job.pk]))
    assert response.status_code == 302
    job.refresh_from_db()
    assert job.stop_requested and job.status == JobStatus.STOPPED
    assert "Stopped by alice" in client.get(response["Location"]).content.decode()


def form_data(**overrides) -> dict:
    data = {
        "display_name": "bert-pretrain",
        "job_type": "PyTorchJob",
        "backend": "local",
        "user_command": "python train.py",
        "envs": "EPOCHS=3\nLR=0.1",
        "role_0_type": "Master",
        "role_0_replicas": "1",
        "role_0_cpu": "1",
        "role_0_memory": "1Gi",
        "role_0_gpu": "0",
        "role_1_type": "Worker",
        "role_1_replicas": "2",
        "role_1_cpu": "2",
        "role_1_memory": "2Gi",
        "role_1_gpu": "1",
        "fault_tolerance": "on",
        "job_execution_mode": "Sync",
        "enable_job_restart": "on",
        "max_num_of_job_restart": "5",
        "fault_tolerant_policy": "ExitCodeAndErrorMsg",
        "max_num_of_same_error": "10",
        "max_tolerated_failure_rate": "-1",
        "enable_job_hang_detection": "on",
        "job_hang_interval": "900",
        "job_exit_hang_interval": "600",
        "c4d_log_level": "Warning",
        "c4d_hang_timeout": "10000000",
        "c4d_hang_times": "18",
        "c4d_conn_bw_check_period": "10",
        "c4d_runtime_log_level": "INFO",
        "error_monitoring_args": "",
    }
    for i in (2, 3):
        data.update({f"role_{i}_type": "", f"role_{i}_replicas": "1", f"role_{i}_cpu": "1", f"role_{i}_gpu": "0"})
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not None}


def test_owner_submits_a_job_with_fault_tolerance_and_sees_its_token_once(client, alice, alice_ws):
    client.force_login(alice)
    response = client.post(reverse("pages:job-new", args=[alice_ws.slug]), form_data())
    assert response.status_code == 302, response.content.decode()[:2000]
    job = Job.objects.get()
    assert job.fault_tolerance
    assert job.ft_config["max_num_of_job_restart"] == 5
    assert job.ft_config["enable_job_hang_detection"] is True and job.ft_config["job_hang_interval"] == 900
    assert job.envs == {"EPOCHS": "3", "LR": "0.1"}
    assert job.role_counts() == {"Master": 1, "Worker": 2}
    assert job.job_specs[1]["resource_config"]["gpu"] == 1
    first = client.get(response["Location"]).content.decode()
    token = re.search(r'<code class="token">(vjt_[^<]+)</code>', first)
    assert token and token.group(1).startswith(job.token_hint)
    assert "vjt_" not in client.get(response["Location"]).content.decode().replace(job.token_hint, "")


def _error_beside(html: str, field_id: str) -> str:
    """The error text rendered right after the input `field_id`."""
    m = re.search(rf'id="{field_id}".*?<p class="field-error" id="{field_id}-error">(.*?)</p>', html, re.S)
    assert m, f"no error beside {field_id}"
    return html_lib.unescape(re.sub(r"<[^>]+>", "", m.group(1))).strip()


def test_bad_values_show_their_errors_beside_their_fields_all_in_one_pass(client, alice, alice_ws):
    """Issue 15: a flag, an environment line, a reserved variable, a GPU count and a missing
    name are all named by one submission, each at its field (they came in three rounds)."""
    client.force_login(alice)
    response = client.post(
        reverse("pages:job-new", args=[alice_ws.slug]),
        form_data(role_1_gpu="6", job_hang_interval="0", display_name="", envs="NOT A PAIR\nPATH=/tmp"),
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert _error_beside(html, "id_job_hang_interval").endswith(
        "'0' is not accepted; use a positive whole number of seconds, at most 2592000 (30 days)"
    )
    assert _error_beside(html, "id_role_1_gpu").endswith("Invalid GPU count 6, only supported: [0 1 2 4 8 16]")
    assert "is required" in _error_beside(html, "id_display_name")
    envs = re.findall(r'<p class="field-error" id="id_envs-error">(.*?)</p>', html, re.S)
    assert len(envs) == 2 and "is not NAME=value" in envs[0] and "PATH" in envs[1], envs
    assert "Fix the 4 fields marked below" in html
    assert 'aria-invalid="true"' in html
    assert 'value="bert-pretrain"' not in html and "python train.py" in html  # values kept
    assert Job.objects.count() == 0


def test_the_startup_interval_field_is_optional_checked_like_the_flag_and_cloned(client, alice, alice_ws):
    client.force_login(alice)
    url = reverse("pages:job-new", args=[alice_ws.slug])
    assert 'id="id_job_hang_startup_interval"' in client.get(url).content.decode()
    # blank: not given, so the stored config derives it from the hang interval (900 -> 900)
    assert client.post(url, form_data(display_name="derived")).status_code == 302
    derived = Job.objects.get(display_name="derived")
    assert derived.ft_config["job_hang_startup_interval"] is None
    assert "--job-hang-startup-interval" not in derived.error_monitoring_args
    bad = client.post(url, form_data(job_hang_startup_interval="0"))
    assert bad.status_code == 400
    assert _error_beside(bad.content.decode(), "id_job_hang_startup_interval").endswith(
        "'0' is not accepted; use a positive whole number of seconds, at most 2592000 (30 days)"
    )
    assert client.post(url, form_data(display_name="given", job_hang_startup_interval="1200")).status_code == 302
    given = Job.objects.get(display_name="given")
    assert given.ft_config["job_hang_startup_interval"] == 1200
    assert "--job-hang-startup-interval=1200" in given.error_monitoring_args
    clone = client.get(url + f"?clone={given.pk}").content.decode()
    assert re.search(
        r'id="id_job_hang_startup_interval"[^>]*value="1200"|value="1200"[^>]*id="id_job_hang_startup_interval"', clone
    )


def test_the_warm_restart_fields_are_checked_like_the_flags_stored_and_cloned(client, alice, alice_ws):
    client.force_login(alice)
    url = reverse("pages:job-new", args=[alice_ws.slug])
    page = client.get(url).content.decode()
    assert 'id="id_enable_warm_restart"' in page and 'value="torch,torch.distributed,torch._dynamo"' in page
    assert client.post(url, form_data(display_name="cold")).status_code == 302  # no warm fields posted: defaults
    cold = Job.objects.get(display_name="cold")
    assert cold.ft_config["enable_warm_restart"] is False
    assert cold.ft_config["warm_modules"] == ["torch", "torch.distributed", "torch._dynamo"]
    bad = client.post(url, form_data(enable_warm_restart="on", warm_modules="torch,,numpy"))
    assert bad.status_code == 400
    assert "is not accepted; use module names separated by commas" in _error_beside(
        bad.content.decode(), "id_warm_modules"
    )
    ok = client.post(url, form_data(display_name="warm", enable_warm_restart="on", warm_modules="torch, numpy"))
    assert ok.status_code == 302
    warm = Job.objects.get(display_name="warm")
    assert warm.ft_config["enable_warm_restart"] is True and warm.ft_config["warm_modules"] == ["torch", "numpy"]
    assert "--enable-warm-restart=True --warm-modules=torch,numpy" in warm.error_monitoring_args
    clone = client.get(url + f"?clone={warm.pk}").content.decode()
    assert re.search(
        r'id="id_warm_modules"[^>]*value="torch,numpy"|value="torch,numpy"[^>]*id="id_warm_modules"', clone
    )
    assert re.search(
        r'<input[^>]*id="id_enable_warm_restart"[^>]*checked|<input[^>]*checked[^>]*id="id_enable_warm_restart"', clone
    )


def test_c4d_without_hang_detection_is_an_error_beside_the_c4d_toggle(client, alice, alice_ws):
    client.force_login(alice)
    response = client.post(
        reverse("pages:job-new", args=[alice_ws.slug]),
        form_data(enable_job_hang_detection=None, enable_c4d_hang_detection="on"),
    )
    assert response.status_code == 400
    assert "needs --enable-job-hang-detection=True" in _error_beside(
        response.content.decode(), "id_enable_c4d_hang_detection"
    )


def test_the_other_configuration_box_wins_for_the_flags_it_names(client, alice, alice_ws):
    client.force_login(alice)
    response = client.post(
        reverse("pages:job-new", args=[alice_ws.slug]),
        form_data(
            enable_job_hang_detection=None,
            error_monitoring_args="--job-execution-mode=Async --fault-tolerant-policy=OnFailure --max-num-of-job-restart 7",
        ),
    )
    assert response.status_code == 302
    job = Job.objects.get()
    assert job.ft_config["job_execution_mode"] == "Async"
    assert job.ft_config["fault_tolerant_policy"] == "OnFailure"
    assert job.ft_config["max_num_of_job_restart"] == 7  # the box, not the field's 5
    assert job.ft_config["enable_job_restart"] is True  # a field the box does not name
    # a bad flag in the box is an error beside the box, naming the flag
    response = client.post(
        reverse("pages:job-new", args=[alice_ws.slug]), form_data(error_monitoring_args="--job-hang-interval=soon")
    )
    assert "--job-hang-interval" in _error_beside(response.content.decode(), "id_error_monitoring_args")


def test_flag_preview_shows_the_combined_string_and_which_flags_the_box_overrides(client, alice, alice_ws):
    client.force_login(alice)
    html = client.post(
        reverse("pages:flags-preview", args=[alice_ws.slug]),
        form_data(error_monitoring_args="--max-num-of-job-restart=9"),
    ).content.decode()
    assert "--enable-job-restart=True" in html and "--max-num-of-job-restart=9" in html
    assert "overriding their fields" in html


def test_flag_preview_warns_of_a_hang_interval_set_with_hang_detection_off(client, alice, alice_ws):
    client.force_login(alice)
    url = reverse("pages:flags-preview", args=[alice_ws.slug])
    off = client.post(url, form_data(enable_job_hang_detection=None, job_hang_interval="600")).content.decode()
    assert "--job-hang-interval is set but Hang Detection is off" in off
    boxed = client.post(
        url,
        form_data(
            enable_job_hang_detection=None,
            job_hang_interval="1800",
            error_monitoring_args="--job-hang-startup-interval=900",
        ),
    ).content.decode()
    assert "--job-hang-startup-interval is set but Hang Detection is off" in boxed
    for quiet in (
        form_data(job_hang_interval="600"),
        form_data(enable_job_hang_detection=None, job_hang_interval="1800"),
    ):
        assert "ft-warning" not in client.post(url, quiet).content.decode()


def test_gpus_are_a_select_of_the_allowed_counts_and_another_count_gets_the_seeds_message(client, alice, alice_ws):
    client.force_login(alice)
    url = reverse("pages:job-new", args=[alice_ws.slug])
    page = client.get(url).content.decode()
    select = re.search(r'<select name="role_0_gpu".*?</select>', page, re.S).group(0)
    assert re.findall(r'<option value="(\d+)"', select) == ["0", "1", "2", "4", "8", "16"]
    bad = client.post(url, form_data(role_0_gpu="3"))
    assert bad.status_code == 400
    assert _error_beside(bad.content.decode(), "id_role_0_gpu").endswith(
        "Invalid GPU count 3, only supported: [0 1 2 4 8 16]"
    )


def test_a_member_may_not_use_the_local_backend_and_is_told_beside_the_backend(client, dave, alice_ws):
    client.force_login(dave)
    response = client.post(reverse("pages:job-new", args=[alice_ws.slug]), form_data())
    assert response.status_code == 403
    assert "local backend" in _error_beside(response.content.decode(), "id_backend")


def test_clone_fills_the_form_with_the_jobs_settings(client, alice, alice_ws, job):
    client.force_login(alice)
    html = client.get(reverse("pages:job-new", args=[alice_ws.slug]) + f"?clone={job.pk}").content.decode()
    assert 'value="resnet-ddp-copy"' in html
    assert re.search(r'id="id_fault_tolerance"[^>]*checked', html) or re.search(
        r'checked[^>]*id="id_fault_tolerance"', html
    )
    assert re.search(r'name="max_num_of_job_restart" value="3"', html)


def test_job_list_filters_by_status_and_name_and_shows_restarts_and_last_reason(client, alice, alice_ws, job, job_body):
    other = submit(alice, job_body(alice_ws, display_name="gpt-finetune"))
    Job.objects.filter(pk=other.pk).update(status=JobStatus.FAILED)
    Job.objects.filter(pk=job.pk).update(restart_count=2, status=JobStatus.RESTARTING)
    record(job, 1)
    record(job, 2, reason="worker-1 lost its node")
    client.force_login(alice)
    url = reverse("pages:job-list", args=[alice_ws.slug])
    html = client.get(url + "?status=Restarting").content.decode()
    assert "resnet-ddp" in html and "gpt-finetune" not in html
    assert ">2/3<" in html and "worker-1 lost its node" in html
    assert "↻" in html and "Restarting" in html
    html = client.get(url + "?q=gpt").content.decode()
    assert "gpt-finetune" in html and "resnet-ddp" not in html
    html = client.get(url + "?q=nothing-like-this").content.decode()
    assert "No job matches these filters" in html


def test_job_page_shows_instances_timeline_monitor_log_and_token_hint(client, alice, alice_ws, job, memory_backend):
    client.force_login(alice)
    html = client.get(reverse("pages:job-detail", args=[alice_ws.slug, job.pk])).content.decode()
    assert 'role="log"' in html and html.count('role="log"') == 1
    assert "master-0" in html and "worker-0" in html and "mem-0" in html
    assert '<svg class="timeline"' in html and "Attempt 1" in html
    assert "Job submitted by alice" in html
    assert job.token_hint in html
    assert f'data-ws="/ws/jobs/{job.pk}/"' in html
    assert 'id="hang-panel"' not in html  # no hang detection on this job: nothing to show


def test_restart_records_open_a_description_and_aggregate_by_code_source_and_node(client, alice, alice_ws, job):
    r1 = record(job, 1)
    record(job, 2, root_cause=False, instance_name="worker-1")
    record(
        job,
        3,
        error_code="CUDA_XID",
        error_source="Log",
        node_name="node-b",
        restart_time=timezone.now() + timedelta(seconds=5),
    )
    client.force_login(alice)
    html = client.get(reverse("pages:restarts", args=[alice_ws.slug, job.pk]) + f"?open={r1.pk}").content.decode()
    for label in (
        "Restarts",
        "Restart Time",
        "Node Name",
        "Instance Name",
        "Error Code",
        "Error Message",
        "Error Source",
    ):
        assert f"<dt>{label}</dt>" in html
    assert "◆</span> Root cause" in html and "◇</span> Cascade" in html
    assert f'aria-controls="rr-desc-{r1.pk}"' in html
    agg = client.get(reverse("pages:restarts-aggregated", args=[alice_ws.slug, job.pk])).content.decode()
    rows = re.findall(
        r"<tr>\s*<td class=\"mono\">(\w+)</td><td>(\w+)</td><td class=\"mono\">([\w-]+)</td>\s*"
        r"<td class=\"num\">(\d+)</td>",
        agg,
    )
    assert rows == [("NCCL_ERROR", "Log", "node-a", "2"), ("CUDA_XID", "Log", "node-b", "1")]
    assert "1 root" in agg and "1 cascade" in agg


def test_log_download_streams_the_whole_log(client, alice, alice_ws, job, memory_backend):
    handle = job.attempts.get(number=1).backend_handle
    content = "".join(f"step {i} loss {i / 7:.4f}\n" for i in range(50_000)).encode()
    memory_backend.write_log(handle, "worker-0", content)
    client.force_login(alice)
    response = client.get(reverse("pages:log-download", args=[alice_ws.slug, job.pk, 1, "worker-0"]))
    assert response.status_code == 200
    assert "attachment" in response["Content-Disposition"]
    assert b"".join(response.streaming_content) == content
    assert client.get(reverse("pages:log-download", args=[alice_ws.slug, job.pk, 1, "worker-9"])).status_code == 404
    # A times value other than 1 (or a backend without capture times) is the plain log, never an error.
    url = reverse("pages:log-download", args=[alice_ws.slug, job.pk, 1, "worker-0"])
    for times in ("0", "yes", "1"):
        odd = client.get(url + f"?times={times}")
        assert odd.status_code == 200 and b"".join(odd.streaming_content) == content, times
    assert client.get(url + "?times=%00").status_code == 400  # a NUL in the query is refused, as everywhere


def test_token_reset_shows_the_new_token_once(client, alice, alice_ws, job):
    client.force_login(alice)
    old_hint = job.token_hint
    response = client.post(reverse("pages:job-token", args=[alice_ws.slug, job.pk]), HTTP_HX_REQUEST="true")
    html = response.content.decode()
    job.refresh_from_db()
    assert job.token_hint != old_hint
    new = re.search(r'id="new-token-value">(vjt_[^<]+)<', html).group(1)
    assert new.startswith(job.token_hint)
    assert new not in client.get(reverse("pages:job-detail", args=[alice_ws.slug, job.pk])).content.decode()


def test_dashboard_counts_running_restarting_and_recently_failed_jobs(client, alice, alice_ws, job, job_body):
    failed = submit(alice, job_body(alice_ws, display_name="old-failure"))
    Job.objects.filter(pk=failed.pk).update(status=JobStatus.FAILED, finished_at=timezone.now() - timedelta(days=2))
    client.force_login(alice)
    assert client.get(reverse("dashboard"))["Location"] == reverse("pages:workspace", args=[alice_ws.slug])
    html = client.get(reverse("pages:workspace", args=[alice_ws.slug])).content.decode()
    assert re.search(r'<span class="num">1</span> <span class="badge st-running"', html)
    assert re.search(r'<span class="num">0</span> <span class="badge st-failed"', html)  # two days ago
    assert "Recent events" in html and "Attempt 1 is running." in html


def test_someone_without_a_workspace_is_told_what_to_do(client, bob):
    client.force_login(bob)
    html = client.get(reverse("dashboard")).content.decode()
    # Only staff create workspaces by default (VIGIL_WORKSPACE_CREATION): others are told whom to ask.
    assert "You are not in a workspace yet" in html and "Ask a workspace owner or admin" in html
    assert "/api/v1/workspaces/" not in html
    bob.is_staff = True
    bob.save(update_fields=["is_staff"])
    html = client.get(reverse("dashboard")).content.decode()
    assert "You are not in a workspace yet" in html and "/api/v1/workspaces/" in html


def test_hang_panel_lists_suspect_stacks_first_and_c4d_verdicts_in_words(client, alice, alice_ws, job):
    from jobs.models import Diagnosis

    frame = {"function": "all_reduce", "file": "distributed_c10d.py", "line": 2050, "path": ""}
    Diagnosis.objects.create(
        job=job,
        attempt=1,
        kind="stacks",
        summary="2 distinct stacks",
        data={
            "stacks": [
                {
                    "count": 3,
                    "suspect": False,
                    "idle": False,
                    "frames": [frame],
                    "threads": [
                        {"instance": f"worker-{i}", "rank": i, "pid": 1, "thread_id": 1, "thread_name": "MainThread"}
                        for i in range(3)
                    ],
                },
                {
                    "count": 1,
                    "suspect": True,
                    "idle": False,
                    "frames": [{"function": "compute_loss", "file": "train.py", "line": 88, "path": ""}],
                    "threads": [
                        {"instance": "worker-3", "rank": 3, "pid": 2, "thread_id": 1, "thread_name": "MainThread"}
                    ],
                },
            ]
        },
    )
    Diagnosis.objects.create(
        job=job,
        attempt=1,
        kind="c4d",
        summary="c4d",
        data={
            "verdicts": [
                {
                    "rank": 3,
                    "kind": "RankNonCommHang",
                    "severity": "Error",
                    "message": "rank 3 never entered allreduce #41",
                    "evidence": {},
                    "instance": "worker-3",
                    "node": "node-b",
                }
            ]
        },
    )
    client.force_login(alice)
    html = client.get(reverse("pages:job-part", args=[alice_ws.slug, job.pk, "diagnoses"])).content.decode()
    assert html.index("compute_loss") < html.index("all_reduce")  # the suspect (count 1) first
    assert "◆</span> Suspect" in html and "worker-0/MainThread, worker-1/MainThread" in html
    assert "RankNonCommHang" in html and "Error" in html and "never entered allreduce #41" in html


def test_an_attempts_logs_download_as_one_zip_streamed_from_disk(client, alice, alice_ws, job_body, local_backend):
    # Real processes write real files: one instance writes ~6 MB, the others a line.
    big = (
        'if [ "$VIGIL_INSTANCE" = "worker-0" ]; then head -c 4500000 /dev/urandom | base64; echo "6 MB done"; '
        'else echo "hello from $VIGIL_INSTANCE"; fi; sleep 30'
    )
    job = submit(alice, job_body(alice_ws, user_command=big))
    attempt = job.attempts.get(number=1)
    path = local_backend.log_path(attempt.backend_handle, "worker-0")
    deadline = time.monotonic() + 20
    while b"6 MB done" not in local_backend.tail_log(attempt.backend_handle, "worker-0", 100):
        assert time.monotonic() < deadline, "worker-0 did not write its 6 MB"
        time.sleep(0.1)
    client.force_login(alice)
    response = client.get(reverse("pages:attempt-logs", args=[alice_ws.slug, job.pk, 1]))
    assert response.status_code == 200
    assert isinstance(response, StreamingHttpResponse) and response.streaming
    assert response["Content-Type"] == "application/zip"
    assert f'filename="job{job.pk}-attempt1-logs.zip"' in response["Content-Disposition"]
    chunks = list(response.streaming_content)
    assert len(chunks) > 20  # produced a chunk at a time, not built whole
    archive = zipfile.ZipFile(io.BytesIO(b"".join(chunks)))
    names = sorted(archive.namelist())
    assert names == sorted(f"job{job.pk}-attempt1/{i.name}.log" for i in attempt.instances.all())
    with open(path, "rb") as f:
        assert archive.read(f"job{job.pk}-attempt1/worker-0.log") == f.read()
    assert len(archive.read(f"job{job.pk}-attempt1/worker-0.log")) > 6_000_000
    assert archive.read(f"job{job.pk}-attempt1/master-0.log") == b"hello from master-0\n"
    assert client.get(reverse("pages:attempt-logs", args=[alice_ws.slug, job.pk, 9])).status_code == 404
    actions.stop_job(alice, job)


def test_the_attempt_archive_is_404_outside_the_workspace(client, bob, alice_ws, job):
    client.force_login(bob)
    assert client.get(reverse("pages:attempt-logs", args=[alice_ws.slug, job.pk, 1])).status_code == 404


def test_a_restart_record_links_to_the_permalink_of_its_classified_line(client, alice, alice_ws, job, memory_backend):
    handle = job.attempts.get(number=1).backend_handle
    lines = [f"step {i}" for i in range(1, 300)] + ["NCCL error: unhandled system error"]
    memory_backend.write_log(handle, "worker-0", "".join(line + "\n" for line in lines))
    rec = record(job, 1, log_offset=sum(len(line) + 1 for line in lines[:-1]))
    client.force_login(alice)
    html = client.get(reverse("pages:restarts", args=[alice_ws.slug, job.pk])).content.decode()
    link = reverse("pages:log-line-at", args=[alice_ws.slug, job.pk, 1, "worker-0", rec.log_offset])
    assert f'href="{link}" data-classified-line' in html
    response = client.get(link)
    assert response.status_code == 302
    assert (
        response["Location"]
        == reverse("pages:job-detail", args=[alice_ws.slug, job.pk]) + "?attempt=1&instance=worker-0#L300"
    )
    # the job page's rows tell the `e` key where the failure is
    page = client.get(reverse("pages:job-detail", args=[alice_ws.slug, job.pk])).content.decode()
    assert f'data-failure-attempt="1" data-failure-instance="worker-0" data-failure-offset="{rec.log_offset}"' in page
    assert client.get(reverse("pages:log-line-at", args=[alice_ws.slug, job.pk, 1, "worker-9", 0])).status_code == 404


def test_the_job_page_keeps_the_log_filters_of_its_url(client, alice, alice_ws, job):
    client.force_login(alice)
    html = client.get(
        reverse("pages:job-detail", args=[alice_ws.slug, job.pk]) + "?attempt=1&instance=worker-0"
    ).content.decode()
    assert '<option value="1" selected>Attempt 1</option>' in html
    assert '<option value="worker-0" selected>worker-0</option>' in html


def test_the_archive_of_a_large_log_streams_with_flat_memory(tmp_path):
    import tracemalloc

    from jobs.views import CHUNK, attempt_archive_chunks

    path = tmp_path / "worker-0.log"
    with open(path, "wb") as f:
        for _ in range(32):
            f.write(os.urandom(1 << 20))  # 32 MB that deflate cannot shrink

    def read(offset, limit):
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(limit)

    tracemalloc.start()
    try:
        size, count = 0, 0
        for chunk in attempt_archive_chunks([("a/worker-0.log", read)]):
            size += len(chunk)
            count += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert size > 32 << 20 and count > 100
    assert peak < 8 * CHUNK, f"peak {peak} bytes while zipping 32 MB"


def test_the_e_key_knows_which_instance_failed_a_job_without_a_restart(client, alice, alice_ws, job):
    from jobs.models import EventType

    actions.record_event(
        job,
        EventType.JOB_FAILED,
        "worker-0 failed: exit code 1.",
        attempt=1,
        payload={"instance": "worker-0", "rule": "exit-code"},
    )
    client.force_login(alice)
    html = client.get(reverse("pages:job-detail", args=[alice_ws.slug, job.pk])).content.decode()
    assert 'data-failures="[{&quot;attempt&quot;: 1, &quot;instance&quot;: &quot;worker-0&quot;}]"' in html


def test_the_short_job_link_in_notifications_leads_to_the_job_page_for_members_only(
    alice_ws, bob_ws, alice, bob, client
):
    from jobs.models import Job

    job = Job.objects.create(workspace=alice_ws, display_name="short", job_type="PyTorchJob", user_command="true")
    client.force_login(alice)
    r = client.get(f"/jobs/{job.pk}/")
    assert r.status_code == 302 and r["Location"] == f"/workspaces/{alice_ws.slug}/jobs/{job.pk}/"
    client.force_login(bob)
    assert client.get(f"/jobs/{job.pk}/").status_code == 404


def test_the_job_page_shows_the_interval_in_force_and_both_suggestions_agreeing_with_the_data(
    client, alice, alice_ws, job_body, memory_backend
):
    from core import hang as core_hang
    from jobs.models import Attempt, EventType, Instance, InstanceStatus, JobEvent

    job = submit(
        alice,
        job_body(
            alice_ws,
            settings={
                "enable_error_monitoring_in_aimaster": True,
                "error_monitoring_args": "--enable-job-hang-detection=True --job-hang-interval=300",
            },
        ),
    )
    attempt = Attempt.objects.get(job=job, number=1)
    now = timezone.now()
    Attempt.objects.filter(pk=attempt.pk).update(starting_at=now - timedelta(seconds=200), first_progress_at=None)
    Instance.objects.filter(attempt=attempt).update(
        status=InstanceStatus.RUNNING, last_output_at=now - timedelta(seconds=130)
    )
    first = Instance.objects.filter(attempt=attempt).order_by("rank", "role", "index").first()
    # 40 steps of 20 s with one of 30 s: with 40 step times the p99 (nearest rank) is the
    # slowest, 30 s, so 10 x p99 = 300 s, what the job set
    lines, t = [], 0.0
    for step in range(41):
        m, s = divmod(int(t), 60)
        lines.append(f"2026-11-29T23:{m:02d}:{s:02d}.000000Z step={step} rank=0 loss=0.4\n")
        t += 30.0 if step == 7 else 20.0
    # written 130 s ago, as the rows say (the panel reads the backend's last output too)
    memory_backend.write_log(
        attempt.backend_handle, first.name, "".join(lines), now=(now - timedelta(seconds=130)).timestamp()
    )
    JobEvent.objects.create(
        job=job,
        type=EventType.SUGGESTION,
        message="The log shows an NCCL watchdog timeout of 600 s.",
        payload={"suggested_hang_interval": 450, "watchdog_timeout": 600},
        attempt=1,
    )
    expected = core_hang.suggest_from_cadence(core_hang.step_times_from_log("".join(lines)))
    assert (expected.interval, expected.steps, expected.p99_step_seconds) == (300, 40, 30.0)

    client.force_login(alice)
    url = reverse("pages:job-part", args=[alice_ws.slug, job.pk, "instances"])
    html = client.get(url).content.decode()
    status = re.search(r'<p id="hang-status" data-startup="true" data-interval="(\d+)">([^<]+)</p>', html)
    assert status and status.group(1) == "600"  # start-up: max(600, 300)
    assert status.group(2) == "Waiting for first progress: silent 2 of 10 min"
    cadence = re.search(r'id="hang-cadence" data-seconds="(\d+)" data-steps="(\d+)" data-p99="([\d.]+)"', html)
    assert cadence and (int(cadence.group(1)), int(cadence.group(2)), float(cadence.group(3))) == (
        expected.interval,
        expected.steps,
        expected.p99_step_seconds,
    )
    assert 'id="hang-watchdog" data-seconds="450"' in html
    assert 'id="hang-set" data-seconds="300"' in html and "the cadence suggestion" in html
    assert html.count("what you set") == 1 and html.index("what you set") > html.index('id="hang-cadence"')

    # after the first progress the hang interval is in force; a run-time 450 is the watchdog's
    Attempt.objects.filter(pk=attempt.pk).update(first_progress_at=now - timedelta(seconds=150))
    actions.set_hang_interval(job, 450, source="alice")
    html = client.get(url).content.decode()
    assert re.search(r'data-startup="false" data-interval="450">Making progress: silent \d+ of 7.5 min<', html)
    assert 'id="hang-set" data-seconds="450"' in html and "set at run time, the watchdog suggestion" in html
    assert html.index("what you set") > html.index('id="hang-watchdog"')


@pytest.mark.parametrize(
    "form_change, api_change, field_id, path",
    [
        ({"display_name": "x" * 129}, {"display_name": "x" * 129}, "id_display_name", "display_name"),
        (
            {"role_1_replicas": "²"},
            {"job_specs": [{"type": "Master", "pod_count": 1}, {"type": "Worker", "pod_count": "²"}]},
            "id_role_1_replicas",
            "job_specs.1.pod_count",
        ),
        ({"workdir": "relative/dir"}, {"workdir": "relative/dir"}, "id_workdir", "workdir"),
        ({"envs": "LD_PRELOAD=/tmp/x.so"}, {"envs": {"LD_PRELOAD": "/tmp/x.so"}}, "id_envs", "envs.LD_PRELOAD"),
    ],
)
def test_the_form_and_the_api_refuse_a_value_with_the_same_words(
    client, alice, alice_ws, api_as, job_body, form_change, api_change, field_id, path
):
    """One source of validation: the form has no rules of its own, JobSubmitSerializer speaks for both."""
    client.force_login(alice)
    page = client.post(reverse("pages:job-new", args=[alice_ws.slug]), form_data(**form_change))
    assert page.status_code == 400
    api = api_as(alice).post("/api/v1/jobs/", job_body(alice_ws, **api_change), format="json")
    assert api.status_code == 400, api.content
    (message,) = api.json()[path]
    assert _error_beside(page.content.decode(), field_id).endswith(message)
    assert Job.objects.count() == 0


def test_without_report_progress_the_progress_panel_reads_the_step_lines_of_the_log(
    client, alice, alice_ws, job, memory_backend
):
    """Issue 15: a job without the SDK still shows step N of M, steps/s and its loss chart."""
    handle = job.attempts.get(number=1).backend_handle
    lines = "".join(
        f"[2026-11-29 23:00:{i * 2:02d},000] INFO Step {i * 10}/800 loss {2 - i / 20:.3f}\n" for i in range(20)
    )
    memory_backend.write_log(handle, "worker-0", "Traceback line without a time\n" + lines)
    client.force_login(alice)
    html = client.get(reverse("pages:job-part", args=[alice_ws.slug, job.pk, "progress"])).content.decode()
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))
    assert "Step 190 of 800" in text and "5.00 steps/s" in text and "From the step lines of the logs" in text
    assert html.count("<polyline") == 1
