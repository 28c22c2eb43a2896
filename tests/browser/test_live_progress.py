"""Progress of a job that only calls report_progress (it prints nothing, so no log
output would ever trigger a refresh): a real job on the local backend reports to
the daphne the browser talks to; the job page's Progress panel and the job list's
sparkline both move while their pages stay open, and afterwards they agree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from jobs import actions
from jobs.models import JobStatus
from test_progress import STEPPING, progress_moves
from testsupport.monitor import tick_until

pytestmark = [pytest.mark.browser, pytest.mark.redis, pytest.mark.django_db(transaction=True)]

SDK = Path(__file__).resolve().parents[2] / "sdk" / "src"
# Silent training: a report every 0.5 s (the SDK sends the newest at most once a second).
SILENT = (
    "python3 -c 'import time\nfrom vigil import job_monitor as jm\n"
    "for i in range(400):\n    jm.report_progress(i, loss=4.0 - i * 0.005, total_steps=400); time.sleep(0.5)\n'"
)

STEP_OF = "sel => { const e = document.querySelector(sel); return e ? parseInt(e.getAttribute('data-step') || e.textContent) : -1; }"


def sparkline_moves(page, slug: str, job, label: str, timeout: int) -> str:
    """Open the job list and wait, without a reload, for the job's sparkline to say
    `label` (a pattern) and then for its step to move on; the sparkline's selector."""
    page.goto(f"/workspaces/{slug}/jobs/")
    spark = f"#job-{job.pk} td.spark svg"
    expect(page.locator(spark)).to_have_attribute("aria-label", re.compile(label), timeout=timeout)
    was = page.evaluate(f"({STEP_OF})('{spark}')")
    page.wait_for_function(f"n => ({STEP_OF})('{spark}') > n", arg=was, timeout=timeout)
    return spark


def test_a_job_that_only_reports_progress_moves_the_panel_and_the_list_sparkline_live(
    page_for, alice, alice_ws, job_body, server, settings
):
    settings.VIGIL_CONSOLE_URL = server  # the instances' SDK reports to the console the browser reads
    job, _ = actions.submit_job(
        alice, job_body(alice_ws, display_name="silent", user_command=SILENT, envs={"PYTHONPATH": str(SDK)})
    )
    try:
        tick_until(job, lambda j: j.status == JobStatus.RUNNING)
        page = page_for(alice)
        first = progress_moves(page, f"/workspaces/{alice_ws.slug}/jobs/{job.pk}/", 400)
        # nothing was printed: what moved the panel was report_progress, not log output
        assert page.locator("#logview .ln").count() == 0

        listing = page.context.new_page()
        spark = sparkline_moves(listing, alice_ws.slug, job, r"^Loss falling from 4 to ", 15_000)
        label = listing.locator(spark).get_attribute("aria-label")
        now = listing.evaluate(f"({STEP_OF})('{spark}')")
        assert label.endswith(f"step {now} of 400")  # the words say what the line draws
    finally:
        actions.stop_job(alice, job)
        actions.finish_stop(job.pk)
    # stopped: the list and the job page, read again, show the same last step
    listing.reload()
    page.reload()
    assert listing.evaluate(f"({STEP_OF})('{spark}')") == page.evaluate(f"({STEP_OF})('#progress-step')") > first


def test_a_job_that_only_prints_step_lines_moves_its_list_sparkline_live(page_for, alice, alice_ws, job_body):
    """No SDK, so no progress message: the list reads its table again while such a job runs."""
    job, _ = actions.submit_job(alice, job_body(alice_ws, display_name="stepping", user_command=STEPPING))
    try:
        tick_until(job, lambda j: j.status == JobStatus.RUNNING)
        sparkline_moves(page_for(alice), alice_ws.slug, job, r"^Loss falling from 0\.999 to .* of 200$", 25_000)
    finally:
        actions.stop_job(alice, job)
        actions.finish_stop(job.pk)
