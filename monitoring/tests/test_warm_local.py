"""Warm restarts through the console on real processes (issue 19): a job with
--enable-warm-restart fails once, the monitor restarts it, the new attempt's ranks are
the parked interpreters, the job page says so, and a stop leaves no parked process."""

import json
import os
import re
import textwrap
import time

import pytest
from django.urls import reverse

from jobs import actions
from jobs.models import Instance, JobStatus
from jobs.backends.shim import PARK_STATE, proc_start_ticks
from testsupport import factory
from testsupport.monitor import finished, tick_until

pytestmark = pytest.mark.django_db(transaction=True)

FLAGS = "--enable-job-restart=True --fault-tolerant-policy=OnFailure --enable-warm-restart=True --warm-modules=decimal"
SCRIPT = textwrap.dedent("""
    import os, sys
    print("attempt", os.environ["VIGIL_ATTEMPT"], "decimal parked:", "decimal" in sys.modules, flush=True)
    if os.environ["VIGIL_ATTEMPT"] == "1" and os.environ["VIGIL_INSTANCE"] == "worker-0":
        sys.exit(1)
    if os.environ.get("WAIT"):
        import time
        time.sleep(60)
""")


@pytest.fixture
def api(alice, api_as):
    return api_as(alice)


def parked(backend, job, number):
    root = os.path.join(backend.data_dir, "jobs", str(job.pk), "warm", f"attempt-{number}")
    out = []
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else ():
        try:
            with open(os.path.join(root, name, PARK_STATE)) as f:
                out.append(json.load(f))
        except (OSError, ValueError):
            pass
    return out


def test_a_restart_runs_in_the_parked_interpreters_and_the_page_says_warm(
    api, client, alice, alice_ws, local_backend, tmp_path
):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    job = factory.submit(api, alice_ws, flags=FLAGS, user_command=factory.script_command(script))
    job = tick_until(job, finished, seconds=60)
    assert job.status == JobStatus.SUCCEEDED, job.reason
    logs = {
        (a.number, n): local_backend.read_log(a.backend_handle, n)
        for a in job.attempts.all()
        for n in ("master-0", "worker-0")
    }
    assert job.current_attempt == 2, logs
    starts = {(i.attempt.number, i.name): (i.start, i.start_reason) for i in Instance.objects.filter(attempt__job=job)}
    assert starts[(1, "master-0")][0] == "cold" and "first attempt" in starts[(1, "master-0")][1]
    assert starts[(2, "master-0")] == ("warm", "") and starts[(2, "worker-0")] == ("warm", "")
    handle = job.attempts.get(number=2).backend_handle
    assert b"decimal parked: True" in local_backend.read_log(handle, "worker-0")
    client.force_login(alice)
    page = client.get(reverse("pages:job-detail", args=[alice_ws.slug, job.pk])).content.decode()
    assert page.count('data-start="warm"') == 2


def wait_for(predicate, seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not true within {seconds} s")


def test_the_page_shows_the_standby_and_a_stopped_job_keeps_no_parked_interpreter(
    api, client, alice, alice_ws, local_backend, tmp_path
):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    job = factory.submit(
        api, alice_ws, flags=FLAGS, user_command=factory.script_command(script), envs={"WAIT": "1"}, launch=True
    )
    states = wait_for(
        lambda: (s := parked(local_backend, job, 2)) and len(s) == 2 and all(x.get("parked_at") for x in s) and s, 30
    )
    pids = [(s[k], s[k.replace("pid", "start")]) for s in states for k in ("shim_pid", "child_pid")]
    assert all(proc_start_ticks(p) == t for p, t in pids)
    client.force_login(alice)
    page = client.get(reverse("pages:job-detail", args=[alice_ws.slug, job.pk])).content.decode()
    assert "Warm standby for attempt 2: 2 parked interpreters (2 with their imports done)," in page
    assert re.search(r"[0-9.]+\xa0(MB|KB|GB) resident", page)
    actions.stop_job(alice, job)
    actions.finish_stop(job.pk)  # the stop task may have run it already
    job.refresh_from_db()
    assert job.status == JobStatus.STOPPED
    wait_for(lambda: not any(proc_start_ticks(p) == t for p, t in pids), 10)
