"""Every page of the console in one place (issue 15): each page the URL confs
serve to a person (console.urls, jobs.page_urls, notifications.urls) at 1440x900
and at 390x844, a full-page screenshot of each in
test-artifacts/screenshots/<page>-<size>.png, axe-core (the pinned copy in
vendor/, never the network) with no serious or critical violation, and no page
wider than the phone's screen. Also the refusal a viewer gets from the job form
and the page of a person in no workspace.

Rows are made with the ORM (no job process runs: this is what the pages show and
how, not the monitor): a running job with progress, an instance, a restart and a
stack snapshot; a failed job with its verdict; a channel, a rule and deliveries."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from conftest import SCREENSHOTS
from jobs.models import Attempt, Diagnosis, Instance, Job, JobEvent, JobStatus, RestartRecord
from test_log_lines import serious_violations
from test_phone_and_forms import FAILED_REASON, REASON, notification_pages, overflow  # noqa: F401 - a fixture

pytestmark = [pytest.mark.browser, pytest.mark.redis, pytest.mark.django_db(transaction=True)]

SIZES = {"desktop": {"width": 1440, "height": 900}, "phone": {"width": 390, "height": 844}}


@pytest.fixture
def world(alice, alice_ws, notification_pages):  # noqa: F811 - the fixture imported above
    channel, rule, failed = notification_pages
    now = timezone.now()
    running = Job.objects.create(
        workspace=alice_ws,
        display_name="gpt-pretrain",
        job_type="PyTorchJob",
        user_command="python train.py --epochs 90",
        status=JobStatus.RUNNING,
        job_specs=[{"type": "Master", "pod_count": 1}, {"type": "Worker", "pod_count": 1}],
        current_attempt=2,
        fault_tolerance=True,
        restart_count=1,
        created_by=alice,
        started_at=now - timedelta(minutes=16),
    )
    start = now.timestamp() - 900  # the newest report 55 s ago
    for number in (1, 2):
        attempt = Attempt.objects.create(
            job=running,
            number=number,
            status="Running" if number == 2 else "Failed",
            queued_at=now - timedelta(seconds=1000 - number * 300),
            running_at=now - timedelta(seconds=990 - number * 300),
            ended_at=now - timedelta(seconds=360) if number == 1 else None,
            progress_samples=[
                [
                    start + number * 300 + i * 5,
                    (number - 1) * 400 + i * 10,
                    3.0 - ((number - 1) * 400 + i * 10) / 400,
                    2000,
                ]
                for i in range(50)
            ],
        )
        for rank, (role, name) in enumerate((("Master", "master-0"), ("Worker", "worker-0"))):
            Instance.objects.create(
                attempt=attempt,
                role=role,
                index=0,
                name=name,
                rank=rank,
                node="node-a",
                status="Running" if number == 2 else "Failed",
            )
    record = RestartRecord.objects.create(
        job=running,
        number=1,
        kind="job",
        attempt=1,
        new_attempt=2,
        node_name="node-a",
        instance_name="worker-0",
        error_code="ECONNRESET",
        error_message="connection reset by peer",
        reason=REASON,
        result="Succeeded",
        progress_step=480,
        duration_seconds=4.2,
        idempotency_key=f"every-{running.pk}-1",
        restart_time=now - timedelta(minutes=5),
    )
    diagnosis = Diagnosis.objects.create(
        job=running,
        attempt=1,
        kind="stacks",
        summary="2 of 2 ranks dumped; worker-0 waits in allreduce",
        data={
            "stacks": [
                {
                    "instance": "worker-0",
                    "rank": 1,
                    "suspect": True,
                    "text": 'File "train.py", line 88\n  dist.all_reduce(t)',
                }
            ]
        },
    )
    JobEvent.objects.create(job=running, type="restart", level="warning", message=REASON, attempt=1)
    failed.job_specs = [{"type": "Master", "pod_count": 1}, {"type": "Worker", "pod_count": 2}]
    failed.current_attempt, failed.created_by, failed.fault_tolerance = 1, alice, True
    failed.save()
    ended = Attempt.objects.create(
        job=failed,
        number=1,
        status="Failed",
        queued_at=now - timedelta(minutes=30),
        running_at=now - timedelta(minutes=29),
        ended_at=now - timedelta(minutes=2),
    )
    for rank, name in enumerate(("master-0", "worker-0", "worker-1")):
        Instance.objects.create(
            attempt=ended,
            role="Master" if rank == 0 else "Worker",
            index=max(0, rank - 1),
            name=name,
            rank=rank,
            node=f"node-{'ab'[rank % 2]}",
            status="Failed" if name == "worker-1" else "Stopped",
            exit_code=1 if rank == 2 else None,
        )
    JobEvent.objects.create(
        job=failed,
        type="job_failed",
        level="error",
        message=FAILED_REASON,
        attempt=1,
        payload={
            "error_source": "Log",
            "family": "nccl",
            "error_code": "NCCL_ERROR",
            "evidence": "NCCL error: unhandled system error",
            "instance": "worker-1",
        },
    )
    return {
        "running": running,
        "failed": failed,
        "record": record,
        "diagnosis": diagnosis,
        "channel": channel,
        "rule": rule,
    }


def every_page(slug: str, w: dict) -> dict[str, str]:
    ws = f"/workspaces/{slug}"
    run, rule, channel = w["running"].pk, w["rule"].pk, w["channel"].pk
    return {
        "dashboard": "/",
        "workspace": f"{ws}/",
        "job-list": f"{ws}/jobs/",
        "job-new": f"{ws}/jobs/new/",
        "job-new-clone": f"{ws}/jobs/new/?clone={run}",
        "job-running": f"{ws}/jobs/{run}/",
        "job-failed": f"{ws}/jobs/{w['failed'].pk}/",
        "restart-records": f"{ws}/jobs/{run}/restarts/",
        "restart-record": f"{ws}/jobs/{run}/restarts/{w['record'].pk}/",
        "restarts-aggregated": f"{ws}/jobs/{run}/restarts/aggregated/",
        "diagnosis": f"{ws}/jobs/{run}/diagnoses/{w['diagnosis'].pk}/",
        "reliability": f"{ws}/reliability/",
        "api-tokens": "/account/tokens/",
        "channels": f"{ws}/notifications/channels/",
        "channel-add": f"{ws}/notifications/channels/add/",
        "channel-edit": f"{ws}/notifications/channels/{channel}/edit/",
        "channel-delete": f"{ws}/notifications/channels/{channel}/delete/",
        "rules": f"{ws}/notifications/rules/",
        "rule-add": f"{ws}/notifications/rules/add/",
        "rule-edit": f"{ws}/notifications/rules/{rule}/edit/",
        "rule-delete": f"{ws}/notifications/rules/{rule}/delete/",
        "deliveries": f"{ws}/notifications/rules/{rule}/deliveries/",
        "not-found": f"{ws}/jobs/999999/",
        "api-docs": "/api/docs/",
    }


def settle(page, name: str) -> None:
    """Wait for what the page fills in after load: the parts htmx fetches, Swagger UI."""
    if name == "api-docs":
        page.locator(".opblock").first.wait_for(timeout=15_000)
    page.wait_for_load_state("networkidle")


def test_every_page_at_both_sizes_has_a_screenshot_no_serious_axe_violation_and_fits_the_phone(
    page_for, browser, server, alice, bob, carol, alice_ws, world, shoot
):
    pages = every_page(alice_ws.slug, world)
    found: dict[str, list[str]] = {}
    wide: dict[str, int] = {}
    statuses: dict[str, int] = {}
    # what a viewer who may not submit, and a person in no workspace, are shown
    others = {"forbidden": (carol, f"/workspaces/{alice_ws.slug}/jobs/new/"), "no-workspace": (bob, "/")}
    for size, viewport in SIZES.items():
        # One logged-in tab per person and size, going from page to page as a person does: a
        # login per page (two browser contexts and a password hash each) was half the test's time.
        tabs = {who: page_for(who, **viewport) for who in (alice, *(who for who, _ in others.values()))}
        visits = [(tabs[alice], name, path) for name, path in pages.items()]
        visits += [(tabs[who], name, path) for name, (who, path) in others.items()]
        for page, name, path in visits:
            response = page.goto(path)
            statuses[name] = response.status if response else 0
            settle(page, name)
            shoot(page, f"{name}-{size}")
            found[f"{name} {size}"] = serious_violations(page)
            if size == "phone":
                wide[name] = overflow(page)
        # the login form, as someone not logged in sees it
        anonymous = browser.new_context(viewport=viewport, base_url=server)
        try:
            login = anonymous.new_page()
            login.goto("/login/")
            shoot(login, f"login-{size}")
            found[f"login {size}"] = serious_violations(login)
            if size == "phone":
                wide["login"] = overflow(login)
        finally:
            anonymous.close()
    # beside the screenshots: what axe found and how wide each phone page was, page by page
    (SCREENSHOTS / "every-page.json").write_text(json.dumps({"axe": found, "phone_overflow_px": wide}, indent=1))
    assert statuses == {**dict.fromkeys(pages, 200), "not-found": 404, "forbidden": 403, "no-workspace": 200}
    assert {k: v for k, v in found.items() if v} == {}  # axe-core: no serious or critical violation anywhere
    assert {k: v for k, v in wide.items() if v > 0} == {}  # px wider than the 390 px screen
