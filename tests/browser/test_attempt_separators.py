"""The followed log of a job restarted twice, for real (local backend, the monitor
ticked here): the page that watched it live shows attempt 1's lines, "Attempt 2 —
restarted: <reason>", attempt 2's lines, "Attempt 3 — restarted: <reason>" and
attempt 3's; after a reload the same separators, with the same reasons, stand in
the same order between the same lines (the earlier attempts' ends come first)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from jobs import actions
from jobs.models import JobStatus
from testsupport.monitor import tick_until

pytestmark = [pytest.mark.browser, pytest.mark.redis, pytest.mark.django_db(transaction=True)]

# worker-0 fails attempt 1 with an NCCL error and attempt 2 with a reset connection (the same
# failure twice would be judged deterministic); master-0 waits there; attempt 3 trains.
TWICE = (
    'echo "attempt $VIGIL_ATTEMPT starts on $VIGIL_INSTANCE"; '
    'if [ "$VIGIL_ATTEMPT" -lt 3 ]; then '
    '  if [ "$VIGIL_INSTANCE" = "worker-0" ]; then sleep 0.5; '
    '    if [ "$VIGIL_ATTEMPT" = 1 ]; then echo "NCCL error in: ProcessGroupNCCL.cpp:1191, unhandled system error (attempt 1)" >&2; '
    '    else echo "RuntimeError: Connection reset by peer (attempt 2)" >&2; fi; exit 1; fi; '
    "  sleep 600; fi; "
    'i=0; while [ $i -lt 100000 ]; do echo "attempt $VIGIL_ATTEMPT step $i"; i=$((i+1)); sleep 0.2; done'
)

# The log as a reader sees it: separators by their text, and the lines of the finished
# attempts (1 and 2) in their order; attempt 3 is still growing, so only its place counts.
SHAPE = """() => {
  const out = [];
  for (const el of document.querySelectorAll('#logview > .ln')) {
    if (el.hasAttribute('data-attempt-sep')) { out.push('sep ' + el.textContent); continue; }
    if (el._a === undefined) continue;
    if (el._a >= 3) { if (out[out.length - 1] !== 'attempt 3 lines') out.push('attempt 3 lines'); continue; }
    out.push(el._a + ' ' + el._i + ': ' + el._text);
  }
  return out;
}"""


def test_the_attempt_separators_are_the_same_after_a_reload(page_for, alice, alice_ws, job_body, shoot):
    job, _ = actions.submit_job(
        alice,
        job_body(
            alice_ws,
            display_name="restarted-twice",
            user_command=TWICE,
            settings={
                "enable_error_monitoring_in_aimaster": True,
                "error_monitoring_args": "--job-execution-mode=Sync --enable-job-restart=True --max-num-of-job-restart=3 "
                "--fault-tolerant-policy=ExitCodeAndErrorMsg",
            },
        ),
    )
    try:
        page = page_for(alice)
        page.goto(f"/workspaces/{alice_ws.slug}/jobs/{job.pk}/")
        log = page.locator("#logview")
        expect(log).to_contain_text("(attempt 1)", timeout=15_000)
        tick_until(job, lambda j: j.current_attempt == 2 and j.status == JobStatus.RUNNING, seconds=30)
        expect(log).to_contain_text("(attempt 2)", timeout=15_000)
        tick_until(job, lambda j: j.current_attempt == 3 and j.status == JobStatus.RUNNING, seconds=30)
        expect(log).to_contain_text("attempt 3 step", timeout=15_000)
        seps = log.locator("[data-attempt-sep]")
        expect(seps).to_have_count(2)
        expect(seps.nth(1)).to_contain_text(re.compile(r"Attempt 3 — restarted: .*worker-0"))
        live = page.evaluate(SHAPE)
        shoot(page, "log-separators-live")

        page.reload()
        expect(log).to_contain_text("attempt 3 step", timeout=15_000)
        expect(seps).to_have_count(2)
        reloaded = page.evaluate(SHAPE)
        shoot(page, "log-separators-reloaded")
    finally:
        actions.stop_job(alice, job)
        actions.finish_stop(job.pk)
    separators = [s for s in live if s.startswith("sep ")]
    assert [re.sub(r":.*", "", s) for s in separators] == ["sep ▾ Attempt 2 — restarted", "sep ▾ Attempt 3 — restarted"]
    assert all("worker-0" in s for s in separators)  # each names the restart's reason
    assert live[-1] == "attempt 3 lines" and any("(attempt 2)" in s for s in live)
    assert reloaded == live  # the same separators, reasons, lines and order
