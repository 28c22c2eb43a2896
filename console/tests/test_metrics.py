"""/metrics: a real restart of a real local-backend job, driven by the Celery sweep
task as a worker runs it, moves the counters and histograms a live server then
serves to a scraper with the token; without it or with a wrong one, nothing."""

from __future__ import annotations

import time

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from infra import metrics
from jobs.models import Job, JobStatus, RestartRecord
from monitoring import tasks
from testsupport.monitor import finished, submit_fault_once

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "scrape-token-0123456789"


@pytest.fixture
def scrape_token(settings):
    settings.VIGIL_METRICS_TOKEN = TOKEN
    settings.VIGIL_METRICS_ALLOW = []
    return TOKEN


def scrape(live_server, token=TOKEN) -> dict[tuple, float]:
    r = requests.get(live_server.url + "/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("text/plain; version=")
    samples = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples, name, **labels) -> float:
    return samples.get((name, tuple(sorted((k, str(v)) for k, v in labels.items()))), 0.0)


def total(samples, name) -> float:
    return sum(v for (n, _), v in samples.items() if n == name)


def sweep_until(job: Job, done, seconds: float = 30.0) -> Job:
    """Run the Celery sweep task (as a worker would) until done(job)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        tasks.sweep()
        job.refresh_from_db()
        if done(job):
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job.pk} is {job.status}: {job.reason}")


def test_a_real_restart_moves_the_counters_a_scraper_reads(
    live_server, scrape_token, alice, alice_ws, api_as, job_body, local_backend, tmp_path
):
    before = scrape(live_server)
    job = submit_fault_once(api_as(alice), job_body(alice_ws), tmp_path)
    job = sweep_until(job, finished)
    assert job.status == JobStatus.SUCCEEDED and job.current_attempt == 2, job.reason
    record = RestartRecord.objects.get(job=job)
    assert record.family and record.rule

    after = scrape(live_server)
    moved = lambda name, **labels: value(after, name, **labels) - value(before, name, **labels)  # noqa: E731
    assert moved("vigil_restarts_total", kind="job", cause=record.family) == 1
    assert moved("vigil_instance_failures_total", family=record.family, rule=record.rule) == 1
    assert moved("vigil_detection_latency_seconds_count", action="restart_job") == 1
    # The decision came from the exit within a few sweeps, well under 30 s.
    assert moved("vigil_detection_latency_seconds_bucket", action="restart_job", le="30.0") == 1
    assert moved("vigil_restart_latency_seconds_count", kind="job") == 1
    assert moved("vigil_restart_latency_seconds_sum", kind="job") == pytest.approx(record.duration_seconds, abs=0.01)
    assert moved("vigil_monitor_sweep_duration_seconds_count") >= 2
    assert moved("vigil_monitor_sweep_jobs_count") >= 2
    assert moved("vigil_monitor_sweep_lag_seconds_count") >= 1
    assert 0 <= value(after, "vigil_monitor_last_sweep_age_seconds") < 30
    assert value(after, "vigil_jobs", workspace="alice-lab", status="Succeeded") == 1
    # Bounded labels only: never a job id, a user or a job's name.
    names = {label for (_, labels) in after for label, _ in labels}
    assert names <= {"workspace", "status", "family", "rule", "kind", "cause", "action", "channel_kind", "le"}
    assert not any(str(job.pk) == v or "resnet" in v for (_, labels) in after for k, v in labels if k != "le")


def test_every_declared_metric_is_exported_even_before_it_moves(live_server, scrape_token):
    r = requests.get(live_server.url + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    families = {f.name: f.type for f in text_string_to_metric_families(r.text)}
    for metric in metrics.METRICS.values():
        assert metric.name.startswith("vigil_")
        assert families.get(metric.name) == metric.kind, metric.name
        if metric.kind == "histogram" or metric.name.endswith("_seconds"):
            assert metric.name.endswith("_seconds") or metric.name == "vigil_monitor_sweep_jobs"


def test_log_viewers_and_lines_streamed_are_shared_through_redis(live_server, scrape_token):
    before = scrape(live_server)
    metrics.log_viewers(1)
    try:
        metrics.lines_streamed(7)
        during = scrape(live_server)
        assert value(during, "vigil_log_viewers") == value(before, "vigil_log_viewers") + 1
        assert value(during, "vigil_log_lines_streamed_total") == value(before, "vigil_log_lines_streamed_total") + 7
    finally:
        metrics.log_viewers(-1)
    assert value(scrape(live_server), "vigil_log_viewers") == value(before, "vigil_log_viewers")


def test_no_token_is_401_and_a_wrong_one_403(live_server, scrape_token):
    url = live_server.url + "/metrics"
    r = requests.get(url, timeout=10)
    assert r.status_code == 401 and r.headers["WWW-Authenticate"].startswith("Bearer")
    assert "vigil_" not in r.text
    for header in (f"Bearer {TOKEN}x", "Bearer ", f"Basic {TOKEN}", TOKEN):
        r = requests.get(url, headers={"Authorization": header}, timeout=10)
        assert r.status_code == 403, header
        assert "vigil_" not in r.text


def test_without_a_configured_token_nobody_gets_in(live_server, settings):
    settings.VIGIL_METRICS_TOKEN = ""
    settings.VIGIL_METRICS_ALLOW = []
    url = live_server.url + "/metrics"
    assert requests.get(url, timeout=10).status_code == 401
    assert requests.get(url, headers={"Authorization": "Bearer "}, timeout=10).status_code == 403


def test_an_allowed_address_scrapes_directly_but_not_through_the_proxy(live_server, settings):
    settings.VIGIL_METRICS_TOKEN = ""
    settings.VIGIL_METRICS_ALLOW = ["127.0.0.0/8"]
    url = live_server.url + "/metrics"
    assert requests.get(url, timeout=10).status_code == 200
    # Behind nginx every request comes from 127.0.0.1: a proxied one is not let in by address.
    assert requests.get(url, headers={"X-Forwarded-For": "203.0.113.9"}, timeout=10).status_code == 401
    settings.VIGIL_METRICS_ALLOW = ["10.0.0.0/8"]
    assert requests.get(url, timeout=10).status_code == 401


def test_a_scrape_while_redis_is_down_is_a_503_not_a_500(live_server, scrape_token, monkeypatch):
    import redis

    from infra import client

    monkeypatch.setattr(client, "_client", redis.Redis.from_url("redis://127.0.0.1:9/0", socket_connect_timeout=0.5))
    r = requests.get(live_server.url + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    assert r.status_code == 503 and "unavailable" in r.text


def test_the_quiet_period_gauge_shows_the_most_stretched_shard(live_server, scrape_token, settings):
    from infra.client import redis_client

    settings.MONITOR_QUIET_SECONDS = 10
    keys = [f"vigil:monitor:quiet-stretch:{shard}" for shard in range(settings.MONITOR_SHARDS)]
    redis_client().delete(*keys)
    try:
        assert value(scrape(live_server), "vigil_monitor_quiet_seconds") == 10.0
        redis_client().set(keys[1], "2.5")  # what a sweep behind its schedule leaves
        redis_client().set(keys[2], "1.5")
        assert value(scrape(live_server), "vigil_monitor_quiet_seconds") == 25.0
    finally:
        redis_client().delete(*keys)
