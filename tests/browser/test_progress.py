"""Progress on the job page in a real browser, from ORM rows (no job process
runs): step N of M and the rate as report_progress left them, one restart
marker on the loss chart per whole-job restart record, at the step its attempt
resumed from, and axe-core with no serious or critical violation."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from jobs.models import Attempt, Job, JobStatus, RestartRecord
from test_log_lines import serious_violations

pytestmark = [pytest.mark.browser, pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def test_the_progress_panel_agrees_with_the_restart_records(page_for, alice, alice_ws, shoot):
    now = timezone.now()
    job = Job.objects.create(
        workspace=alice_ws,
        display_name="gpt-progress",
        job_type="PyTorchJob",
        user_command="true",
        status=JobStatus.RUNNING,
        current_attempt=3,
    )
    start = now.timestamp() - 600
    # (attempt, first step, steps) at 10 steps per 5 s; attempts 2 and 3 resume from a checkpoint
    for number, first, count in ((1, 0, 20), (2, 150, 10), (3, 200, 12)):
        Attempt.objects.create(
            job=job,
            number=number,
            status="Running" if number == 3 else "Failed",
            queued_at=now - timedelta(seconds=700 - number * 150),
            progress_samples=[
                [start + number * 150 + i * 5, first + i * 10, 3.0 - (first + i * 10) / 200, 5000] for i in range(count)
            ],
        )
    for n, (failed, step) in enumerate((("NCCL_ERROR", 190), ("ECONNRESET", 240)), start=1):
        RestartRecord.objects.create(
            job=job,
            number=n,
            kind="job",
            attempt=n,
            new_attempt=n + 1,
            node_name="node-a",
            instance_name="worker-0",
            error_code=failed,
            progress_step=step,
            result="Succeeded",
            idempotency_key=f"pb-{job.pk}-{n}",
            restart_time=now - timedelta(seconds=500 - n * 150),
        )
    page = page_for(alice)
    page.goto(f"/workspaces/{alice_ws.slug}/jobs/{job.pk}/")
    panel = page.locator("#part-progress")
    expect(panel.locator("#progress-step")).to_have_text("310 of 5000")
    expect(panel.locator("#progress-rate")).to_have_text("2.00 steps/s")
    marks = panel.locator("line.restart-mark")
    assert marks.count() == page.locator("#part-restarts tr.rr").count() == 2
    assert marks.evaluate_all("els => els.map(e => +e.dataset.step)") == [150, 200]
    xs = marks.evaluate_all("els => els.map(e => e.getBoundingClientRect().left)")
    assert xs == sorted(xs)  # the later resume is further right
    assert panel.locator(".restart-marks li").all_inner_texts() == [
        "NCCL_ERROR: resumed from step 150 (40 steps done again)",
        "ECONNRESET: resumed from step 200 (40 steps done again)",
    ]
    panel.scroll_into_view_if_needed()
    shoot(page, "job-progress")
    assert serious_violations(page) == []


def progress_moves(page, path: str, total: int) -> int:
    """Open a running job's page and wait, without a reload, for the Progress panel's
    step (of `total`, with a loss line) to move past the first one shown; that step."""
    page.goto(path)
    step = page.locator("#part-progress #progress-step")
    expect(step).to_contain_text(f" of {total}", timeout=20_000)
    first = int(step.inner_text().split()[0])
    expect(page.locator("#part-progress polyline.loss")).to_have_count(1)
    page.wait_for_function(
        "n => { const e = document.querySelector('#progress-step'); return e && parseInt(e.textContent) > n; }",
        arg=first,
        timeout=15_000,
    )
    return first


# Timestamped step lines with a loss and a total, as a training loop without the SDK prints them.
STEPPING = (
    'i=0; while [ $i -lt 200 ]; do echo "$(date -u +%Y-%m-%dT%H:%M:%S.%NZ) Step $i/200 loss 0.$((999 - i))"; '
    "i=$((i+1)); sleep 0.3; done"
)


def test_the_progress_panel_follows_a_running_job_without_a_reload(page_for, alice, alice_ws, job_body):
    """A real job printing step lines (no SDK): the panel's step moves while the page stays open."""
    from jobs import actions
    from testsupport.monitor import tick_until

    job, _ = actions.submit_job(alice, job_body(alice_ws, display_name="stepping", user_command=STEPPING))
    tick_until(job, lambda j: j.status == JobStatus.RUNNING)
    page = page_for(alice)
    progress_moves(page, f"/workspaces/{alice_ws.slug}/jobs/{job.pk}/", 200)
    try:
        assert page.locator("#part-progress #progress-rate").inner_text().endswith("steps/s")
    finally:
        actions.stop_job(alice, job)
        actions.finish_stop(job.pk)
