"""The console in a real browser: submit with fault tolerance, watch logs arrive
live, pause and resume, stop; restart records from a real fault-injected run
driven by the monitor; errors in place; another workspace's user gets 404 and
a refused socket. Screenshots of the main pages go to test-artifacts/screenshots/."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from jobs import actions
from jobs.models import Job, JobStatus, RestartRecord
from testsupport.monitor import tick_until

pytestmark = [pytest.mark.browser, pytest.mark.redis, pytest.mark.django_db(transaction=True)]

TRAINING = 'i=0; while [ $i -lt 100000 ]; do echo "$(date +%H:%M:%S.%N) step $i loss 0.$((RANDOM % 1000))"; i=$((i+1)); sleep 0.02; done'


def test_submit_with_fault_tolerance_watch_live_logs_pause_and_stop(page_for, alice, alice_ws, shoot):
    page = page_for(alice)
    shoot(page, "dashboard-empty")
    page.click("text=Submit a job")
    page.fill("#id_display_name", "bert-live")
    page.fill("#id_user_command", TRAINING)
    page.check("#id_fault_tolerance")
    expect(page.locator("#id_enable_job_restart")).to_be_visible()
    page.check("#id_enable_job_restart")
    page.fill("#id_max_num_of_job_restart", "2")
    page.check("#id_enable_job_hang_detection")
    page.fill("#id_job_hang_interval", "600")
    page.fill("#id_error_monitoring_args", "--max-tolerated-failure-rate=0.5")
    expect(page.locator("#ft-preview")).to_contain_text("--max-num-of-job-restart=2")
    expect(page.locator("#ft-preview")).to_contain_text("--max-tolerated-failure-rate=0.5")
    shoot(page, "submit-form")
    page.click("button:has-text('Submit job')")

    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(display_name="bert-live")
    assert job.fault_tolerance and job.ft_config["max_num_of_job_restart"] == 2
    assert job.ft_config["max_tolerated_failure_rate"] == 0.5
    expect(page.locator("#new-token")).to_contain_text("vjt_")
    log = page.locator("#logview")
    expect(log.locator(".ln").first).to_be_visible(timeout=15_000)
    first = log.locator(".ln").count()
    expect(log.locator(".ln")).not_to_have_count(first, timeout=5_000)  # lines keep arriving without a reload
    text = log.inner_text()
    assert "master-0" in text and "worker-0" in text and "step" in text

    # scrolling up pauses following and counts what arrives meanwhile
    page.wait_for_timeout(800)
    log.evaluate("el => { el.scrollTop = 0; el.dispatchEvent(new Event('scroll')); }")
    expect(page.locator("#paused-bar")).to_be_visible()
    expect(page.locator("#paused-text")).to_have_text(re.compile(r"Paused, [1-9][\d,]* new lines?"), timeout=5_000)
    shoot(page, "job-page-paused")
    log.focus()
    page.keyboard.press("End")
    expect(page.locator("#paused-bar")).to_be_hidden()
    assert log.evaluate("el => el.scrollHeight - el.scrollTop - el.clientHeight") < 8

    # search the shown lines: "/" focuses, Enter moves, a bad pattern says so, Esc clears
    page.keyboard.press("/")
    expect(page.locator("#log-search")).to_be_focused()
    page.keyboard.type("step 1\\d ")
    expect(page.locator("#log-search-status")).to_have_text(re.compile(r"\d+ match"))
    page.keyboard.press("Enter")
    expect(page.locator("#log-search-status")).to_have_text(re.compile(r"^1 of \d+$"))
    expect(log.locator(".ln.cur")).to_contain_text(re.compile(r"step 1\d "))
    expect(page.locator("#paused-bar")).to_be_visible()  # looking at a match stops following
    page.fill("#log-search", "step (")
    expect(page.locator("#log-search-status")).to_contain_text("Not a valid pattern")
    page.keyboard.press("Escape")
    expect(page.locator("#log-search-status")).to_have_text("")
    page.keyboard.press("End")
    expect(page.locator("#paused-bar")).to_be_hidden()
    shoot(page, "job-page")

    page.click("#stop-job")
    expect(page.locator("#job-header .badge")).to_have_text(re.compile("Stopp(ing|ed)"), timeout=20_000)
    job.refresh_from_db()
    assert job.stop_requested and job.status in (JobStatus.STOPPING, JobStatus.STOPPED)
    expect(page.locator("#events")).to_contain_text("Stop requested by alice")

    page.goto(f"/workspaces/{alice_ws.slug}/jobs/")
    expect(page.locator(f"#job-{job.pk}")).to_contain_text("2/2" if job.restart_count == 2 else "0/2")
    shoot(page, "job-list-stopped")
    page.set_viewport_size({"width": 390, "height": 844})
    shoot(page, "job-list-stopped-phone")


FLAKY_ONCE = (
    'if [ "$VIGIL_ATTEMPT" = "1" ] && [ "$VIGIL_INSTANCE" = "worker-0" ]; then '
    'echo "epoch 0 step 1"; echo "NCCL error in: ProcessGroupNCCL.cpp:1191, unhandled system error" >&2; '
    "exit 1; fi; "
    'i=0; while [ $i -lt 100000 ]; do echo "attempt $VIGIL_ATTEMPT step $i"; i=$((i+1)); sleep 0.05; done'
)


def test_a_real_fault_restarts_the_job_live_and_fills_the_restart_records(page_for, alice, alice_ws, job_body, shoot):
    job, _ = actions.submit_job(
        alice,
        job_body(
            alice_ws,
            display_name="ddp-flaky",
            user_command=FLAKY_ONCE,
            settings={
                "enable_error_monitoring_in_aimaster": True,
                "error_monitoring_args": "--job-execution-mode=Sync --enable-job-restart=True --max-num-of-job-restart=3 "
                "--fault-tolerant-policy=ExitCodeAndErrorMsg",
            },
        ),
    )
    page = page_for(alice)
    page.goto(f"/workspaces/{alice_ws.slug}/jobs/{job.pk}/")
    expect(page.locator("#logview")).to_contain_text("NCCL error", timeout=15_000)

    # the monitor, run here, sees worker-0 fail and restarts the whole job
    tick_until(job, lambda j: j.restart_count == 1 and j.current_attempt == 2, seconds=30)
    tick_until(job, lambda j: j.status == JobStatus.RUNNING, seconds=30)
    expect(page.locator("#events")).to_contain_text("NCCL", timeout=10_000)  # pushed, not reloaded
    expect(page.locator("#job-header")).to_contain_text("1/3", timeout=10_000)
    expect(page.locator("#logview")).to_contain_text("attempt 2 step", timeout=15_000)
    # the separator between the attempts names the restart and folds attempt 2's lines
    sep = page.locator("#logview [data-attempt-sep='2'] button")
    expect(sep).to_contain_text(re.compile(r"^▾ Attempt 2 — restarted: .*worker-0"))
    expect(sep).to_have_attribute("aria-expanded", "true")
    sep.click()
    expect(sep).to_have_attribute("aria-expanded", "false")
    expect(page.locator("#logview .ln", has_text="attempt 2 step").first).to_be_hidden()
    expect(page.locator("#logview .ln", has_text="NCCL error").first).to_be_visible()  # attempt 1 stays
    shoot(page, "job-page-attempt-folded")
    # a search match inside the folded attempt unfolds it
    page.locator("#log-search").fill("attempt 2 step")
    page.locator("#log-search").press("Enter")
    expect(sep).to_have_attribute("aria-expanded", "true")
    expect(page.locator("#logview .ln.cur")).to_be_visible()
    page.locator("#log-search").press("Escape")
    page.locator("#logview").press("End")
    expect(page.locator("#part-timeline")).to_contain_text("Attempt 2")
    # the new attempt's archive link, its URL taken from the refreshed instances panel
    expect(page.locator("#log-archive")).to_have_attribute(
        "href", f"/workspaces/{alice_ws.slug}/jobs/{job.pk}/attempts/2/logs.zip"
    )
    record = RestartRecord.objects.get(job=job)
    assert record.error_code and record.instance_name == "worker-0"
    # the NCCL line decided, so the record knows where it is in the log
    assert record.log_offset is not None

    page.goto(f"/workspaces/{alice_ws.slug}/jobs/{job.pk}/restarts/")
    row = page.locator(f"#rr-{record.pk}")
    row.get_by_role("button").click()
    desc = page.locator(f"#rr-desc-{record.pk}")
    expect(desc).to_be_visible()
    for label in (
        "Restarts",
        "Restart Time",
        "Node Name",
        "Instance Name",
        "Error Code",
        "Error Message",
        "Error Source",
    ):
        expect(desc.locator("dt", has_text=re.compile(f"^{label}$"))).to_have_count(1)
    expect(desc).to_contain_text(record.error_code)
    expect(desc).to_contain_text("Root cause")
    # how sure the verdict is: the family and the line that decided (issue 13)
    verdict = desc.locator("[data-verdict]")
    expect(verdict.locator("[data-family]")).to_have_text(record.family)
    expect(verdict.locator("[data-evidence]")).to_contain_text("unhandled system error")
    shoot(page, "restart-records")
    # the owner makes the line a retryable keyword for this job, in place
    offer = verdict.locator("[data-keyword-offer]")
    offer.locator("input[name=keyword]").fill("unhandled system error")
    offer.get_by_role("button", name="Add as retryable keyword").click()
    expect(desc.locator("[data-keyword-offer]")).to_contain_text(
        '"unhandled system error" is now a retryable keyword for this job'
    )
    job.refresh_from_db()
    assert job.retryable_keywords == ["unhandled system error"]
    # the record opens the log at the line that was classified
    desc.locator("[data-classified-line]").click()
    expect(page.locator("#log-target")).to_contain_text("unhandled system error")
    expect(page).to_have_url(re.compile(r"\?attempt=1&instance=worker-0#L\d+$"))  # a permalink
    expect(page.locator("#paused-bar")).to_be_visible()
    shoot(page, "job-page-classified-line")
    page.go_back()
    page.click("text=View aggregated fault details")
    expect(page.locator("#aggregate tbody tr")).to_have_count(1)
    expect(page.locator("#aggregate")).to_contain_text(record.error_code)
    shoot(page, "restart-aggregated")

    page.goto(f"/workspaces/{alice_ws.slug}/jobs/{job.pk}/")
    expect(page.locator("#logview .ln").first).to_be_visible()
    shoot(page, "job-page-after-restart")
    # e: attempt 2 runs cleanly, so e goes to the failure that restarted it
    page.locator("#logview").focus()
    page.keyboard.press("e")
    expect(page.locator("#log-target")).to_contain_text("unhandled system error")
    expect(page.locator("#log-notice")).to_contain_text("the line the classifier used for attempt 1's")
    expect(page).to_have_url(re.compile(r"\?attempt=1&instance=worker-0#L2$"))
    page.goto(f"/workspaces/{alice_ws.slug}/jobs/{job.pk}/")
    page.set_viewport_size({"width": 390, "height": 844})
    shoot(page, "job-page-phone")
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"/workspaces/{alice_ws.slug}/")
    shoot(page, "dashboard")
    actions.stop_job(alice, job)
    actions.finish_stop(job.pk)


def test_bad_values_show_their_errors_in_place(page_for, alice, alice_ws, shoot):
    page = page_for(alice)
    page.goto(f"/workspaces/{alice_ws.slug}/jobs/new/")
    page.fill("#id_display_name", "bad-values")
    page.fill("#id_user_command", "echo hi")
    page.fill("#id_envs", "PATH=/tmp")
    page.check("#id_fault_tolerance")
    page.check("#id_enable_job_hang_detection")
    page.fill("#id_job_hang_interval", "0")
    expect(page.locator("#ft-preview")).to_contain_text("Not valid yet")
    page.click("button:has-text('Submit job')")
    expect(page.locator("#form-errors")).to_be_visible()
    # the flag's error and the submission's own, in one pass (issue 15)
    expect(page.locator("#id_job_hang_interval-error")).to_contain_text("'0' is not accepted")
    expect(page.locator("#id_envs-error")).to_contain_text("PATH cannot be set")
    expect(page.locator("#id_envs")).to_be_focused()  # the first bad field takes focus
    assert page.locator("#id_envs").get_attribute("aria-invalid") == "true"
    shoot(page, "submit-form-errors")
    assert not Job.objects.exists()


def test_another_workspaces_user_gets_404_and_a_refused_socket(page_for, alice, bob, bob_ws, alice_ws, job_body):
    job, _ = actions.submit_job(alice, job_body(alice_ws, user_command="sleep 30"))
    probe = """async (path) => await new Promise(resolve => {
        const ws = new WebSocket((location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + path);
        ws.onopen = () => { ws.close(); resolve('open'); };
        ws.onclose = () => resolve('refused');
    })"""
    page = page_for(bob)
    response = page.goto(f"/workspaces/{alice_ws.slug}/jobs/{job.pk}/")
    assert response.status == 404
    expect(page.locator("h1")).to_have_text("Not found")
    for path in (
        f"/workspaces/{alice_ws.slug}/",
        f"/workspaces/{alice_ws.slug}/jobs/",
        f"/workspaces/{alice_ws.slug}/jobs/{job.pk}/restarts/",
    ):
        assert page.goto(path).status == 404, path
    page.goto(f"/workspaces/{bob_ws.slug}/")
    assert page.evaluate(probe, f"/ws/jobs/{job.pk}/") == "refused"
    assert page.evaluate(probe, f"/ws/workspaces/{alice_ws.slug}/") == "refused"
    own = page_for(alice)
    assert own.evaluate(probe, f"/ws/jobs/{job.pk}/") == "open"
    actions.stop_job(alice, job)
    actions.finish_stop(job.pk)


def test_job_list_shows_status_changes_without_reloading(page_for, alice, alice_ws, job_body, shoot):
    job, _ = actions.submit_job(alice, job_body(alice_ws, display_name="list-live", user_command="sleep 60"))
    page = page_for(alice)
    page.goto(f"/workspaces/{alice_ws.slug}/jobs/")
    row = page.locator(f"#job-{job.pk}")
    expect(row).to_contain_text("Running")
    page.evaluate("window.__same_page = true")
    actions.stop_job(alice, job)  # here, in the test process: pushed through Redis to the page
    actions.finish_stop(job.pk)
    expect(row.locator(".badge")).to_have_text(re.compile("Stopped"), timeout=5_000)
    assert page.evaluate("window.__same_page") is True  # no reload happened
    other, _ = actions.submit_job(alice, job_body(alice_ws, display_name="list-new", user_command="sleep 60"))
    expect(page.locator(f"#job-{other.pk}")).to_be_visible(timeout=5_000)  # a new job appears too
    actions.stop_job(alice, other)
    actions.finish_stop(other.pk)


def test_the_workspace_switcher_opens_the_chosen_workspace(page_for, alice, alice_ws, bob_ws):
    from jobs.models import Membership, Role

    Membership.objects.create(workspace=bob_ws, user=alice, role=Role.VIEWER)
    page = page_for(alice)
    page.goto(f"/workspaces/{alice_ws.slug}/jobs/")
    page.select_option("#ws-switch", bob_ws.slug)
    page.wait_for_url(f"**/workspaces/{bob_ws.slug}/")
    expect(page.locator("h1")).to_have_text(bob_ws.name)
