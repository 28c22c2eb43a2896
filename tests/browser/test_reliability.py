"""The workspace Reliability page in a real browser, from ORM rows (no job
process runs): the chart's bars, the tables and the restart records agree, the
most faulty node comes first and links to its records, the period selector
switches, and axe-core finds no serious or critical violation."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from jobs.models import Job, JobStatus, NodeFault, RestartRecord
from test_log_lines import serious_violations

pytestmark = [pytest.mark.browser, pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def test_the_reliability_chart_tables_and_records_agree(page_for, alice, alice_ws, shoot):
    now = timezone.now()
    job = Job.objects.create(
        workspace=alice_ws,
        display_name="bert-flaky",
        job_type="PyTorchJob",
        user_command="true",
        status=JobStatus.RUNNING,
        created_at=now - timedelta(days=2),
    )
    plan = [
        (1, "node-b", "NCCL_ERROR", 0.5),
        (2, "node-b", "ECONNRESET", 1.5),
        (3, "node-a", "OOM", 5),
        (4, "node-b", "NCCL_ERROR", 30),
        (5, "node-c", "NCCL_ERROR", 24 * 4),
    ]  # (n, node, code, hours ago)
    for n, node, code, hours in plan:
        RestartRecord.objects.create(
            job=job,
            number=n,
            kind="job",
            attempt=n,
            new_attempt=n + 1,
            node_name=node,
            instance_name="worker-0",
            error_code=code,
            result="Succeeded",
            idempotency_key=f"relb-{job.pk}-{n}",
            restart_time=now - timedelta(hours=hours),
        )
        NodeFault.objects.create(node=node, job=job, error_code=code, created_at=now - timedelta(hours=hours))
    page = page_for(alice)
    page.goto(f"/workspaces/{alice_ws.slug}/reliability/?period=24h")
    shoot(page, "reliability-24h")
    bars = [int(c) for c in page.locator("svg.bars g.bar").evaluate_all("els => els.map(e => e.dataset.count)")]
    records = page.locator("#records tbody tr")
    assert len(bars) == 24 and sum(bars) == records.count() == 3
    assert page.locator("#restart-total").inner_text() == "3"
    assert bars[-1] == 1 and bars[-2] == 1  # the restarts 0.5 h and 1.5 h ago, in the last two hourly bars
    by_node = [
        (r.locator("td").nth(0).inner_text(), int(r.locator("td").nth(1).inner_text()))
        for r in page.locator("#by-node tbody tr").all()
    ]
    assert by_node == [("node-b", 2), ("node-a", 1)]
    assert sum(n for _, n in by_node) == sum(bars)
    # the bars' segments by cause add up to the by-cause table, and each bar to its segments
    segments = page.locator("svg.bars g.bar rect").evaluate_all(
        "els => els.map(e => [e.dataset.cause, +e.dataset.count])"
    )
    per_cause: dict[str, int] = {}
    for cause, n in segments:
        per_cause[cause] = per_cause.get(cause, 0) + n
    table = {
        r.locator("td").nth(0).inner_text().strip(): int(r.locator("td").nth(1).inner_text())
        for r in page.locator("#by-cause tbody tr").all()
    }
    assert per_cause == table == {"NCCL_ERROR": 1, "ECONNRESET": 1, "OOM": 1}
    # the nodes with the most faults, most first, each linking to its restart records
    assert page.locator("#fault-nodes tbody tr td:first-child").all_inner_texts() == ["node-b", "node-a"]
    assert serious_violations(page) == []
    page.locator("#fault-nodes tbody tr").first.get_by_role("link").first.click()
    expect(page.locator("body")).to_contain_text("node-b")
    assert "/restarts/" in page.url
    # a week: all five, node-b still first
    page.goto(f"/workspaces/{alice_ws.slug}/reliability/")
    page.get_by_role("link", name="7 d").click()
    expect(page.locator("#restart-total")).to_have_text("5")
    bars = [int(c) for c in page.locator("svg.bars g.bar").evaluate_all("els => els.map(e => e.dataset.count)")]
    assert len(bars) == 7 and sum(bars) == page.locator("#records tbody tr").count() == 5
    assert page.locator("#fault-nodes tbody tr td:first-child").all_inner_texts() == ["node-b", "node-a", "node-c"]
    shoot(page, "reliability-7d")
    assert serious_violations(page) == []
