"""The job page's "Dump stacks now" button (issue 14): a member takes a stack
snapshot of a running job, the same as the API's POST .../diagnoses/stacks/, and
the snapshot appears on the page live, through the job socket, with its suspect.
A viewer gets no button. And the hang's restart record: cause, next step, the
suspect's last log line and a link to the snapshot that named it."""

from __future__ import annotations

import sys
import textwrap
import time

import pytest
from playwright.sync_api import expect

from jobs import actions
from jobs.models import Diagnosis, JobStatus
from testsupport.jobs import job_writable
from testsupport.monitor import tick_until

pytestmark = [pytest.mark.browser, pytest.mark.redis, pytest.mark.django_db(transaction=True)]

# worker-0 is stuck in its own function while the others sit in theirs: one suspect.
HUNG = textwrap.dedent("""
    import os, time
    def stuck_in_data_loader():
        time.sleep(600)
    def wait_for_peers():
        time.sleep(600)
    print("step=1", flush=True)
    if os.environ["VIGIL_INSTANCE"] == "worker-0":
        stuck_in_data_loader()
    else:
        wait_for_peers()
""")


def test_dump_stacks_now_adds_a_snapshot_live_naming_the_suspect(
    page_for, alice, carol, dave, alice_ws, job_body, tmp_path, shoot
):
    script = job_writable(tmp_path / "jobs") / "hung.py"
    script.write_text(HUNG)
    job, _ = actions.submit_job(
        alice,
        job_body(
            alice_ws,
            display_name="hung",
            user_command=f"{sys.executable} {script}",
            job_specs=[{"type": "Master", "pod_count": 1}, {"type": "Worker", "pod_count": 2}],
        ),
    )
    tick_until(job, lambda j: j.status == JobStatus.RUNNING, seconds=30)
    page = page_for(dave)  # a member: members and up may take a snapshot
    page.goto(f"/workspaces/{alice_ws.slug}/jobs/{job.pk}/")
    panel = page.locator("#part-diagnoses")
    expect(panel).to_contain_text("No diagnoses")
    # Let the interpreters reach their functions before the dump.
    deadline = time.monotonic() + 20
    while b"step=1" not in actions.get_backend_for(job).tail_log(
        job.attempts.get(number=1).backend_handle, "worker-0", 100
    ):
        assert time.monotonic() < deadline, "worker-0 never started"
        time.sleep(0.2)

    panel.get_by_role("button", name="Dump stacks now").click()
    # The page is not reloaded: the snapshot arrives through the socket.
    snapshot = panel.locator("li[id^=dg-]")
    expect(snapshot).to_have_count(1, timeout=30_000)
    expect(snapshot).to_contain_text("on_demand")
    expect(panel.locator("[data-culprit]")).to_contain_text("worker-0 (rank 1) is in stuck_in_data_loader")
    expect(panel.locator("table.stacks")).to_contain_text("Suspect")
    diagnosis = Diagnosis.objects.get(job=job)
    assert diagnosis.trigger == "on_demand" and page.locator(f"#dg-{diagnosis.pk}").is_visible()
    shoot(page, "dump-stacks-now")

    # A viewer sees the snapshot but gets no button.
    viewer = page_for(carol)
    viewer.goto(f"/workspaces/{alice_ws.slug}/jobs/{job.pk}/")
    expect(viewer.locator("#part-diagnoses li[id^=dg-]")).to_have_count(1)
    expect(viewer.get_by_role("button", name="Dump stacks now")).to_have_count(0)
    actions.stop_job(alice, job)
    actions.finish_stop(job.pk)


def test_the_hang_restart_record_shows_cause_next_step_and_links_to_the_snapshot(
    page_for, alice, alice_ws, job_body, tmp_path, shoot
):
    from jobs.models import RestartRecord

    script = job_writable(tmp_path / "jobs") / "hung.py"
    script.write_text(HUNG)
    job, _ = actions.submit_job(
        alice,
        job_body(
            alice_ws,
            display_name="hung",
            user_command=f"{sys.executable} {script}",
            job_specs=[{"type": "Master", "pod_count": 1}, {"type": "Worker", "pod_count": 2}],
            settings={
                "enable_error_monitoring_in_aimaster": True,
                "error_monitoring_args": "--enable-job-restart=True --max-num-of-job-restart=1 --enable-job-hang-detection=True "
                "--job-hang-interval=2",
            },
        ),
    )
    tick_until(job, lambda j: j.current_attempt == 2, seconds=60)
    record = RestartRecord.objects.get(job=job)
    page = page_for(alice)
    page.goto(f"/workspaces/{alice_ws.slug}/jobs/{job.pk}/restarts/{record.pk}/")
    facts = page.locator("section.panel dl.record")
    expect(facts).to_contain_text(
        "worker-0 stopped making progress in `stuck_in_data_loader` while master-0 "
        "and worker-1 were in `wait_for_peers`."
    )
    expect(facts).to_contain_text("Next step")
    expect(facts.locator("[data-last-line]")).to_have_text("step=1")
    shoot(page, "hang-restart-record")
    facts.locator("[data-snapshot-link]").click()
    expect(page.locator("[data-culprit]")).to_contain_text("worker-0 (rank 1) is in stuck_in_data_loader")
    expect(page.locator("table.stacks")).to_contain_text("Suspect")
    actions.stop_job(alice, job)
    actions.finish_stop(job.pk)
