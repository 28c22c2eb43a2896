"""The job list's Reason and Restarts cells (issue 28, point 4): a failed job shows the line a
person recognises from their log ("ValueError: bad config: ..."), not the catalog's rule id,
which stays on hover; a job whose whole-job restarts are off shows its restarts as a count,
not against a budget ("0", never "0/3")."""

from __future__ import annotations

import html as html_lib
import re

import pytest
from django.urls import reverse

from core.classify import FailureInput, classify_failure
from core.flags import FaultToleranceConfig
from core.policy import InstanceFailure, JobHistory, decide
from core.reasons import cause_first, rule_of
from jobs.models import Job, JobStatus
from testsupport import factory

TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 3, in <module>\n'
    '    raise ValueError("bad config: hidden_dim must be > 0")\n'
    "ValueError: bad config: hidden_dim must be > 0\n"
)
EVIDENCE = "ValueError: bad config: hidden_dim must be > 0"


def policy_reason(enable_job_restart: bool) -> str:
    """The sentence the monitor records, from the real classifier and policy (not a copy)."""
    classification = classify_failure(FailureInput(exit_code=1, signal=None, log_tail=TRACEBACK))
    failure = InstanceFailure("worker-0", "Worker", 0, "node-a", classification)
    return decide(FaultToleranceConfig(enable_job_restart=enable_job_restart), JobHistory(), failure).reason


def row(html: str, job: Job) -> str:
    found = re.search(rf'<tr id="job-{job.pk}".*?</tr>', html, re.S)
    assert found, html
    return found.group(0)


@pytest.mark.django_db
def test_failed_job_shows_the_evidence_line_with_the_rule_id_on_hover_and_restarts_off_as_a_count(
    client, alice, alice_ws, job_body
):
    def submit(name: str, args: str) -> Job:
        body = job_body(
            alice_ws,
            display_name=name,
            settings={"enable_error_monitoring_in_aimaster": True, "error_monitoring_args": args},
        )
        return factory.submit(alice, body.pop("workspace"), launch=True, **body)

    off = submit("restarts-off", "--enable-job-restart=False")
    on = submit("restarts-on", "--enable-job-restart=True --max-num-of-job-restart=3")
    reason = policy_reason(enable_job_restart=False)
    Job.objects.filter(pk=off.pk).update(status=JobStatus.FAILED, reason=reason)
    client.force_login(alice)
    html = client.get(reverse("pages:job-list", args=[alice_ws.slug])).content.decode()

    failed = row(html, off)
    cell = re.search(r'<td class="reason" title="([^"]*)">([^<]*)</td>', failed)
    assert cell, failed
    title, shown = html_lib.unescape(cell.group(1)), html_lib.unescape(cell.group(2))
    assert shown.startswith(f"{EVIDENCE} on worker-0"), shown
    assert "python-exception" not in shown
    assert title.startswith("python-exception — "), title  # the rule id on hover, then the decision
    assert reason in title

    restarts = lambda r: re.search(r'<span class="restarts"[^>]*>([^<]*)</span>', r).group(1)  # noqa: E731
    assert restarts(failed) == "0"  # whole-job restarts off: nothing to count against
    assert restarts(row(html, on)) == "0/3"


@pytest.mark.parametrize(
    "reason, shown, rule",
    [
        (
            # A message with parentheses of its own is read to its matching close.
            "Not restarted: worker-2 failed with signal-sigsegv (Crashed with SIGSEGV (signal 11)), which a "
            "restart cannot fix.",
            "Crashed with SIGSEGV (signal 11) on worker-2 — not restarted",
            "signal-sigsegv",
        ),
        (
            "Restarting the whole job (restart 1 of 3): worker-0 failed with a retryable error: ECONNRESET "
            "(connection reset by peer).",
            "connection reset by peer on worker-0 — restart 1 of 3",
            "ECONNRESET",
        ),
        (  # no message: the rule id is all there is to show
            "Not restarted: worker-0 failed with CUDA_OOM, which a restart cannot fix.",
            "CUDA_OOM on worker-0 — not restarted",
            "CUDA_OOM",
        ),
        ("The backend could not start attempt 1: no such partition", None, ""),
    ],
)
def test_evidence_first_reads_the_message_and_rule_of_the_rule(reason, shown, rule):
    assert cause_first(reason, evidence=True) == (reason if shown is None else shown)
    assert rule_of(reason) == rule


def test_the_policys_sentence_gives_its_evidence_and_rule():
    reason = policy_reason(enable_job_restart=True)
    assert cause_first(reason, evidence=True) == f"{EVIDENCE} on worker-0 — not restarted"
    assert rule_of(reason) == "python-exception"
