"""Replica groups on torchft, run and watched by Vigil (issue 30): real processes.

A PyTorchJob of 2 instances submitted with --replica-groups=2 runs examples/torchft_train.py
as two groups of one process each, with the job's Lighthouse started by the local backend.
Group 1 is killed twice: once by itself in the middle of a gradient all-reduce (the case that
crashes torchft's own DDP hook in the healthy group), once by the test with SIGKILL in the
middle of training after it rejoined. Group 0's step lines must never pause for more than a
few seconds (the Lighthouse's heartbeat timeout is 1 s here), group 1 must be restarted alone
each time and rejoin the quorum, and the job must succeed with a finite loss.
"""

from __future__ import annotations

import math
import os
import re
import signal
import time
from datetime import datetime
from pathlib import Path

import pytest
from django.urls import reverse

from jobs.models import Attempt, JobEvent, JobStatus, RestartRecord
from monitoring import tick
from testsupport import factory

pytest.importorskip("torch", reason="torch is not installed (.ci/run installs torch==2.13.0)")
pytest.importorskip(
    "torchft",
    reason="torchft is not installed (.ci/run installs requirements-torchft.txt, torchft==0.2.0, after torch)",
)
pytestmark = [pytest.mark.torch, pytest.mark.django_db(transaction=True)]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "torchft_train.py"
FLAGS = (
    "--replica-groups=2 --lighthouse-heartbeat-timeout-ms=1000 "
    "--fault-tolerant-policy=OnFailure --max-num-of-same-error=3 "
    "--enable-warm-restart=True --warm-modules=torch,torch.distributed,torch._dynamo,torchft"
)
STEP = re.compile(
    r"^(\S+Z) step=(\d+) rank=\d+ group=(\d+) participants=(\d+) committed=(True|False) loss=(\S+)$", re.M
)
FINAL = re.compile(r"^\S+Z final rank=\d+ group=(\d+) step=(\d+) loss=(\S+)$", re.M)
# The healthy group waits for the dead one's heartbeat to expire (1 s) and for its own
# should_commit to time out or fail; on this shared 2-core machine a few seconds more.
MAX_PAUSE_SECONDS = 6.0


def steps_of(text: str) -> list[tuple[float, int, int, bool]]:
    return [
        (datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp(), int(step), int(parts), committed == "True")
        for ts, step, _, parts, committed, _ in STEP.findall(text)
    ]


def test_a_killed_group_restarts_alone_and_rejoins_while_the_other_keeps_stepping(
    alice, alice_ws, api_as, local_backend, tmp_path, client
):
    job = factory.submit(
        api_as(alice),
        alice_ws,
        flags=FLAGS,
        display_name="torchft-groups",
        user_command=factory.script_command(EXAMPLE),
        envs={
            "VIGIL_EXAMPLE_STEPS": "220",
            "VIGIL_EXAMPLE_SLEEP": "0.05",
            "FAULT": "sigkill_in_allreduce",
            "FAULT_GROUP": "1",
            "FAULT_STEP": "10",
            "FAULT_ONCE": str(tmp_path / "fault-fired"),
        },
        job_specs=[{"type": "Master", "pod_count": 1}, {"type": "Worker", "pod_count": 1}],
    )
    deadline = time.monotonic() + 150
    killed_by_test = False
    handle: dict = {}
    while time.monotonic() < deadline:
        tick.run_job(job.pk)
        job.refresh_from_db()
        if job.status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
            break
        attempt = Attempt.objects.filter(job=job, number=job.current_attempt).first()
        handle = attempt.backend_handle if attempt else {}
        if handle and not killed_by_test and RestartRecord.objects.filter(job=job).count() == 1:
            # After its first restart, group 1 is killed again once it is back in a joint quorum.
            log = local_backend.read_log(handle, "worker-0").decode()
            if "restarted (run 2" in log and "participants=2 committed=True" in log.split("restarted (run 2")[-1]:
                for pid in local_backend.pids(handle, "worker-0"):
                    os.kill(pid, signal.SIGKILL)
                killed_by_test = True
        time.sleep(0.1)
    events = "\n".join(f"  {e.type}: {e.message}" for e in JobEvent.objects.filter(job=job).order_by("id"))
    master = local_backend.read_log(handle, "master-0").decode()
    worker = local_backend.read_log(handle, "worker-0").decode()
    (tmp_path / "master-0.log").write_text(master)
    (tmp_path / "worker-0.log").write_text(worker)
    print("logs in", tmp_path)
    assert job.status == JobStatus.SUCCEEDED, f"{job.status}: {job.reason}\n{events}\n{worker[-3000:]}"
    assert job.current_attempt == 1  # never a whole-job restart
    assert killed_by_test, events

    records = list(RestartRecord.objects.filter(job=job).order_by("number"))
    assert [r.instance_name for r in records] == ["worker-0", "worker-0"]
    for r in records:
        assert r.kind == "instance" and r.result == "Succeeded"
        assert r.reason.startswith("Group 1 restarted alone; group 0 kept training: worker-0 failed with"), r.reason

    # Group 0 never restarted and never paused for long: not at the kill inside the
    # all-reduce (the step that did not commit), not at the kill mid-training.
    healthy = steps_of(master)
    assert "restarted (run" not in master
    assert any(not committed for _, _, _, committed in healthy)  # the errored all-reduce did not commit
    gaps = [b[0] - a[0] for a, b in zip(healthy, healthy[1:])]
    print(
        f"group 0: {len(healthy)} step lines, longest pause {max(gaps):.2f} s; restarts took "
        + ", ".join(f"{r.duration_seconds:.2f} s" for r in records)
    )
    assert max(gaps) < MAX_PAUSE_SECONDS, f"group 0 paused {max(gaps):.1f} s"
    assert any(parts == 1 for _, _, parts, _ in healthy)  # it went on alone ...
    assert healthy[-1][2] == 2  # ... and ended in the joint quorum again

    # Group 1 rejoined after each restart, at the healthy group's step (recovered from it).
    runs = worker.split("===== vigil: worker-0 restarted")
    assert len(runs) == 3
    for run in runs[1:]:
        assert any(parts == 2 and committed for _, _, parts, committed in steps_of(run)), run[-2000:]

    finals = {int(g): (int(s), float(loss)) for g, s, loss in FINAL.findall(master + worker)}
    assert finals[0][0] == finals[1][0] == 220
    assert all(math.isfinite(loss) for _, loss in finals.values())
    # The monitor read the Lighthouse: the joint quorum, group 0 alone with group 1 recovering,
    # and the joint quorum again; the job page lists them.
    quorums = [e.payload for e in JobEvent.objects.filter(job=job, type="status") if e.payload.get("kind") == "quorum"]
    assert any(q["groups"] == [0, 1] for q in quorums), quorums
    assert any(q["groups"] == [0] and q["recovering"] == [1] for q in quorums), quorums
    assert quorums[-1]["groups"] == [0, 1]
    client.force_login(alice)
    page = client.get(reverse("pages:job-detail", args=[alice_ws.slug, job.pk])).content.decode()
    assert 'id="h-groups">Replica groups' in page and "2 torchft replica groups" in page
    assert re.search(r"<td>group 0 <span class=\"muted\">\(step \d+\)</span></td>\s*<td>group 1</td>", page)
    # The Lighthouse ended with the job. Once in four fresh-clone CI runs one process of it
    # was still listed here: the zombie the shim had yet to reap (LocalBackend._processes now
    # leaves those out; jobs/tests/test_local_backend.py). A failure says what each one is.
    left = local_backend.lighthouse_pids(handle)
    assert left == [], _what_is_left(left, Path(handle["dir"]) / "lighthouse")


def _what_is_left(pids: list[int], lighthouse_dir: Path) -> str:
    """Each process still listed for the Lighthouse (its parent and command line) and the
    files of its directory: what to look at when it outlived the job."""
    import psutil

    lines = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            lines.append(f"pid {pid} ppid {p.ppid()} status {p.status()} cmd {p.cmdline()}")
        except psutil.Error as exc:
            lines.append(f"pid {pid}: {exc}")
    for f in sorted(lighthouse_dir.glob("*.json")):
        lines.append(f"{f.name}: {f.read_text()[:400]}")
    return "\n".join(lines)
