"""A node dies under a three-node job: time to Vigil's restart decision and to training again (a benchmark, not a test).

The cluster: jobs/tests/slurm_cluster.py in Slurm's multiple-slurmd mode, nodes n1..n3 on
127.0.0.1 with SlurmdTimeout=5 and MessageTimeout=3 (root, Debian's slurm-wlm and munge).
Vigil runs as in production: bench/restart_latency.py's VigilStack (a private Redis, a
throwaway SQLite database, the Procfile's `worker` with its 1 s beat sweep and `exits`)
with the slurm backend from the environment (VIGIL_SLURM=1, VIGIL_SLURM_SBATCH_OPTIONS=
--spread-job so the three ranks take one node each; exits are not announced through Redis,
whose URL the stack learns only once it runs: the sweep reads the job's state, as it must for
a node whose ranks can announce nothing).

The job: PyTorchJob, 1 Master + 2 Workers, --enable-job-restart=True; every rank prints a
line stamped with its own clock every 0.2 s, forever. Once all three print, this script
kills node n3 as a machine dies (SIGKILL to its slurmd, its slurmstepds and its tasks) and
notes the time. Figures, per run:
- node death -> n3 DOWN in sinfo (polled here every 0.2 s): Slurm's detection, the floor;
- node death -> Vigil's restart decision (the RestartRecord's time);
- node death -> training again: the latest first line of attempt 2's three ranks (their
  own stamps), which run on n1 and n2 (sbatch --exclude=n3).
The peer, in the same run: Slurm's own requeue (JobRequeue): the same ranks as one
`sbatch --requeue --spread-job -n3` job whose srun runs them; node death -> the requeued
job's ranks printing again (SLURM_RESTART_COUNT=1), and when Slurm let it start (its
EligibleTime: Slurm holds a requeued job back about two minutes). Between runs n3 is revived.
A run that does not train again within --timeout counts as "never", out of the median.

Run:  .venv/bin/python bench/node_loss.py [--runs 3] [--timeout 90]
--quick (CI, tests/test_benches.py): one run of each arm, and the peer's figure is only when
Slurm lets the requeued job start (EligibleTime), not waited for; a start-up check.
"""

from __future__ import annotations

import _path  # noqa: F401  (first: the repository root on sys.path (bench/_path.py))
import argparse
import os
import platform
import re
import shlex
import statistics
import sys
import time
from pathlib import Path

from restart_latency import VigilStack, wait_until

from jobs.backends import slurm_step as step
from jobs.tests.slurm_cluster import SlurmCluster, start_cluster, why_cluster_cannot_run

RANK = 'while true; do echo "$(date +%s.%N) alive rank=$RANK"; sleep 0.2; done'
PEER_RANK = (
    'while true; do echo "$(date +%s.%N) alive rank=$SLURM_PROCID restart=${SLURM_RESTART_COUNT:-0}"; sleep 0.2; done'
)
FLAGS = "--job-execution-mode=Sync --enable-job-restart=True --max-num-of-job-restart=3"
ALIVE = re.compile(r"^(\d+\.\d+) alive rank=(\d+)(?: restart=(\d+))?")


def first_lines(path: Path, restart: str | None = None) -> dict[int, float]:
    """Each rank's first line in the file (with SLURM_RESTART_COUNT `restart`, for the peer)."""
    out: dict[int, float] = {}
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return out
    for line in text.splitlines():
        m = ALIVE.match(line.strip())
        if m and (restart is None or m.group(3) == restart):
            out.setdefault(int(m.group(2)), float(m.group(1)))
    return out


def down_after(cluster: SlurmCluster, died: float, timeout: float) -> float | None:
    seen = wait_until(lambda: "down" in cluster.node_state("n3"), timeout, 0.2)
    return time.time() - died if seen else None


def vigil_run(stack: VigilStack, cluster: SlurmCluster, i: int, timeout: float) -> dict:
    from jobs import actions
    from jobs.models import Attempt, RestartRecord

    body = {
        "workspace": stack.workspace.slug,
        "display_name": f"node-loss-{i}",
        "job_type": "PyTorchJob",
        "job_specs": [{"type": "Master", "pod_count": 1}, {"type": "Worker", "pod_count": 2}],
        "user_command": RANK,
        "envs": {},
        "backend": "slurm",
        "settings": {"enable_error_monitoring_in_aimaster": True, "error_monitoring_args": FLAGS},
    }
    job, _ = actions.submit_job(stack.owner, body)

    def logs(number: int) -> list[Path]:
        handle = Attempt.objects.filter(job=job, number=number).values_list("backend_handle", flat=True).first()
        if not handle:
            return []
        return [Path(handle["attempt_dir"], "instances", inst["name"], "output.log") for inst in handle["instances"]]

    def all_printing(number: int) -> dict[int, float] | None:
        firsts: dict[int, float] = {}
        for path in logs(number):
            firsts.update(first_lines(path))
        return firsts if len(firsts) == 3 else None

    try:
        if not wait_until(lambda: all_printing(1), 60, 0.1):
            return {"error": "attempt 1 never had three ranks printing"}
        died = time.time()
        cluster.kill_node("n3")
        down = down_after(cluster, died, timeout)
        record = wait_until(lambda: RestartRecord.objects.filter(job=job).first(), timeout, 0.05)
        again = wait_until(lambda: all_printing(2), timeout, 0.1)
        nodes = sorted((step.read_json(str(p.with_name("run-1.json"))) or {}).get("node", "?") for p in logs(2))
        return {
            "down": down,
            "decision": record.restart_time.timestamp() - died if record else None,
            "training": max(again.values()) - died if again else None,
            "where": ",".join(nodes),
            "error": "" if record and again else "no restart decision" if not record else "attempt 2 never trained",
        }
    finally:
        actions.stop_job(stack.owner, job)


def eligible_at(cluster: SlurmCluster, job_id: str) -> float | None:
    """When Slurm lets the requeued job start again (its EligibleTime; Slurm holds a
    requeued job back for about two minutes, Reason=BeginTime)."""
    text = cluster.run("scontrol", "show", "job", "-o", job_id, check=False).stdout
    if "JobState=PENDING" not in text or "Restarts=0" in text or "EligibleTime=" not in text:
        return None  # not requeued yet (its old EligibleTime is the first start's)
    stamp = text.split("EligibleTime=")[1].split()[0]
    try:
        return time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def peer_run(cluster: SlurmCluster, i: int, timeout: float, wait: bool) -> dict:
    """Slurm's own requeue on the same node death: no Vigil involved."""
    log = cluster.shared_dir / f"peer-{i}.log"
    script = cluster.shared_dir / f"peer-{i}.sh"
    script.write_text(f"#!/bin/bash\nsrun --ntasks=3 bash -c {shlex.quote(PEER_RANK)}\n")
    res = cluster.run(
        "sbatch",
        "--parsable",
        "--requeue",
        "--spread-job",
        "--ntasks=3",
        "--open-mode=append",
        f"--output={log}",
        str(script),
    )
    job_id = res.stdout.strip().split(";")[0]
    try:
        if not wait_until(lambda: len(first_lines(log, "0")) == 3, 60, 0.1):
            return {"error": "the peer's three ranks never printed"}
        died = time.time()
        cluster.kill_node("n3")
        down = down_after(cluster, died, timeout)
        eligible = wait_until(lambda: eligible_at(cluster, job_id), timeout, 0.2)
        again = None
        if wait:
            # The hold-off is Slurm's; wait it out (plus the time to schedule and start).
            patience = (eligible - time.time() if eligible else 0) + timeout
            again = wait_until(
                lambda: first_lines(log, "1") if len(first_lines(log, "1")) == 3 else None, patience, 0.1
            )
        return {
            "down": down,
            "eligible": eligible - died if eligible else None,
            "training": max(again.values()) - died if again else None,
            "error": ""
            if again or not wait
            else "the requeued job did not train again within its hold-off plus the timeout",
        }
    finally:
        cluster.run("scancel", job_id, check=False)


def revive(cluster: SlurmCluster) -> None:
    cluster.cancel_all_jobs()
    if cluster.node_state("n3") != "idle":
        cluster.revive_node("n3")
    cluster.wait_until_idle(60)


def fmt(v: float | None) -> str:
    return "never" if v is None else f"{v:5.1f} s"


def median(rows: list[dict], key: str) -> str:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return f"{statistics.median(vals):5.1f} s (n={len(vals)})" if vals else "none"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=90.0)
    ap.add_argument("--quick", action="store_true", help="one run of each arm (CI)")
    args = ap.parse_args()
    if args.quick:
        args.runs = 1
    reason = why_cluster_cannot_run()
    if reason:
        print(f"node loss: cannot start the Slurm cluster here: {reason}")
        return 2
    print("node loss: a three-node job (one rank per node) loses node n3 (slurmd, slurmstepds, tasks SIGKILLed)")
    print(
        f"machine: {platform.node()} {platform.platform()}, {os.cpu_count()} CPUs, python {platform.python_version()}, "
    )
    cluster = start_cluster(nodes=3, slurmd_timeout=5, message_timeout=3)
    print("slurm: " + cluster.run("sinfo", "--version").stdout.strip())
    stack = None
    try:
        print(f"cluster: {', '.join(cluster.node_names)} in multiple-slurmd mode, SlurmdTimeout=5, MessageTimeout=3")
        stack = VigilStack(
            {
                "VIGIL_SLURM": "1",
                "VIGIL_SLURM_LOG_DIR": str(cluster.shared_dir),
                "VIGIL_SLURM_SBATCH_OPTIONS": "--spread-job",
                "SLURM_CONF": str(cluster.conf),
            }
        )
        from jobs.access import backend_permission

        stack.owner.user_permissions.add(backend_permission("slurm"))
        vigil, peer = [], []
        for i in range(1, args.runs + 1):
            v = vigil_run(stack, cluster, i, args.timeout)
            revive(cluster)
            p = peer_run(cluster, i, args.timeout, wait=not args.quick)
            revive(cluster)
            vigil.append(v)
            peer.append(p)
            print(
                f"run {i} Vigil  : n3 down {fmt(v.get('down'))}, decision {fmt(v.get('decision'))}, "
                f"training again {fmt(v.get('training'))} on {v.get('where') or '-'} {v.get('error', '')}"
            )
            waited = fmt(p.get("training")) if not args.quick else "not waited for (--quick)"
            print(
                f"run {i} Slurm requeue: n3 down {fmt(p.get('down'))}, requeued job eligible "
                f"{fmt(p.get('eligible'))}, training again {waited} {p.get('error', '')}"
            )
        print(f"node death -> n3 DOWN in Slurm: median {median(vigil + peer, 'down')}")
        print(f"node death -> Vigil's restart decision: median {median(vigil, 'decision')}")
        print(
            f"node death -> training again: Vigil median {median(vigil, 'training')}, "
            f"Slurm requeue median {median(peer, 'training')} (eligible to start: median {median(peer, 'eligible')})"
        )
        print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    finally:
        if stack is not None:
            stack.close()
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
