"""The repeated-failure guard on real processes (issue 26): a job that prints step lines and
never imports the SDK, failing the same way at the same step on every attempt, is stopped after
one futile restart; a flaky one is restarted and trains."""

import html
import re
import textwrap

import pytest

from core.classify import FailureInput, classify_failure
from core.kinds import verdict_of
from jobs.models import RestartRecord
from jobs.models import JobStatus
from testsupport import factory
from testsupport.jobs import job_writable
from testsupport.monitor import finished, tick_until

pytestmark = pytest.mark.django_db(transaction=True)

ARGS = (
    "--job-execution-mode=Sync --enable-job-restart=True --max-num-of-job-restart=3 "
    "--fault-tolerant-policy=ExitCodeAndErrorMsg"
)
# No SDK import: progress is only the step lines. The failure is the user's own code raising
# an error the catalog restarts on (a connection reset), with this run's pid in it.
SCRIPT = textwrap.dedent(
    """
    import os, sys
    marker = os.path.join(os.environ["MARKERS"], "failed-once")
    for step in range(1, 6):
        print(f"step {step} loss={1.0 / step:.3f}", flush=True)
        if step == 4 and (os.environ["MODE"] == "always" or not os.path.exists(marker)):
            open(marker, "w").close()
            raise ConnectionResetError(f"[Errno 104] Connection reset by peer (pid {os.getpid()})")
    """
)
# What the job's log ends with when it fails (Python's traceback, its last line).
_FAILURE_TAIL = (
    'step 4 loss=0.250\nTraceback (most recent call last):\n  File "train.py", line 8, in <module>\n'
    "ConnectionResetError: [Errno 104] Connection reset by peer (pid 4242)\n"
)


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    job_writable(tmp_path / "markers")
    return path


def _submit(api, ws, script, mode):
    return factory.submit(
        api,
        ws,
        user_command=factory.script_command(script),
        envs={"MODE": mode, "MARKERS": str(script.parent / "markers")},
        settings={"enable_error_monitoring_in_aimaster": True, "error_monitoring_args": ARGS},
    )


def test_a_step_line_job_failing_the_same_way_each_attempt_is_stopped_after_one_futile_restart(
    alice, alice_ws, api_as, local_backend, script, client
):
    job = tick_until(_submit(api_as(alice), alice_ws, script, "always"), finished, seconds=30)
    assert job.status == JobStatus.FAILED, job.reason
    assert job.current_attempt == 2  # one restart, then the guard
    assert "the same failure at the same point twice: likely deterministic" in job.reason
    assert "at step 4" in job.reason
    record = RestartRecord.objects.get(job=job)
    # The kind is the committed counts' (core/verdict_counts.json), which move as the corpus
    # grows: read it from the core for the job's own last line rather than pin a word.
    expected = verdict_of(classify_failure(FailureInput(1, None, _FAILURE_TAIL)))
    assert expected.restarts  # the premise: the first failure is restarted, by kind and catalog
    assert (record.failure_step, record.failure_phase, record.verdict_kind) == (4, "training", str(expected.kind))
    # the job page's restart record shows the kind, where it failed and the reason with its counts
    client.force_login(alice)
    page = client.get(f"/workspaces/{alice_ws.slug}/jobs/{job.pk}/restarts/{record.pk}/").content.decode()
    assert f"<dd data-verdict-kind>{expected.kind} · failed at step 4</dd>" in page
    # counted by one of the line's finer keys (errno, class or family), never by the bare rule
    assert expected.basis
    counted = f"{expected.kind}: transient in {expected.retryable_reports} of {expected.reports} public reports of "
    assert re.search(re.escape(counted) + re.escape(html.escape(expected.basis)), page), expected.reason


def test_a_flaky_step_line_job_is_restarted_and_trains(alice, alice_ws, api_as, local_backend, script):
    job = tick_until(_submit(api_as(alice), alice_ws, script, "once"), finished, seconds=30)
    assert job.status == JobStatus.SUCCEEDED, job.reason
    assert job.current_attempt == 2
    assert RestartRecord.objects.get(job=job).failure_step == 4


# The format of a real saved log (somethingpluto/security_front, src/utils/readFile.js): the
# step counts again from 0 each epoch and no total is printed. Attempt 1 fails at epoch 1's
# step 3; attempts 2 and 3 at epoch 2's step 1, further on though its step number is lower.
# (The job's two instances each fail so; a counter file they shared raced in CI.)
PER_EPOCH_SCRIPT = textwrap.dedent(
    """
    import os
    # the attempt as the console numbers it: every instance of the job fails at the same point
    fail_at = (1, 3) if os.environ["VIGIL_ATTEMPT"] == "1" else (2, 1)
    for epoch in range(1, 4):
        for step in range(5):
            print(f"Epoch: {epoch:2d} step: {step:2d} loss: {1.0 / (epoch * 5 + step):.2f}", flush=True)
            if (epoch, step) == fail_at:
                raise ConnectionResetError(f"[Errno 104] Connection reset by peer (pid {os.getpid()})")
    """
)


def test_a_step_counted_again_each_epoch_is_further_on_in_a_later_epoch(alice, alice_ws, api_as, local_backend, script):
    script.write_text(PER_EPOCH_SCRIPT)
    job = tick_until(_submit(api_as(alice), alice_ws, script, "always"), finished, seconds=45)
    assert job.status == JobStatus.FAILED, job.reason
    # restarted after epoch 1's step 3 and after epoch 2's step 1 (further on), stopped at the second
    assert job.current_attempt == 3, job.reason
    assert "the same failure at the same point twice" in job.reason and "at epoch 2, step 1" in job.reason
    records = RestartRecord.objects.filter(job=job).order_by("attempt")
    assert [(r.failure_epoch, r.failure_step, r.failure_phase) for r in records] == [
        (1, 3, "training"),
        (2, 1, "training"),
    ]
