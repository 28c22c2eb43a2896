"""Fault -> training resumed: Vigil's whole-job restart against torchrun's (a benchmark, not a test).

The job: examples/ddp_train.py with 4 ranks (CPU, gloo), 30 steps of about 50 ms.
At the line "step=10 rank=1" of the first attempt, this script SIGKILLs rank 1
from outside (its PID is in its "start ... pid=" line) and notes the time. The
figure is the time from that kill to the moment all four ranks of the new attempt
have logged a step (the latest of their first step lines, stamped by the ranks
themselves); the job then runs to its end and must succeed.

- Vigil: the real Procfile path. A private redis-server, then the Procfile's
  `worker` (celery worker --beat, prefork, 2 processes) and `exits` (manage.py
  listen_exits) processes, on a throwaway SQLite database in a temporary
  VIGIL_DATA_DIR. The job (PyTorchJob, 1 Master + 3 Workers) is submitted with
  jobs.actions.submit_job, flags --job-execution-mode=Sync --enable-job-restart=True
  --max-num-of-job-restart=3 --fault-tolerant-policy=ExitCodeAndErrorMsg, on the
  real local backend. Breakdown from the database: decision (RestartRecord time),
  attempt launched (Attempt.starting_at).
- torchrun --standalone --nproc-per-node=4 --max-restarts=3 on the same script,
  twice: "torchrun (shared store)" with default settings (one rendezvous TCP store
  for all restarts), and "torchrun (fresh store)" with
  TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (PEERS.md: the shared store makes restarts
  die or hang while connecting).

- Vigil warm (issue 19): the same Vigil path and flags plus --enable-warm-restart=True
  --warm-modules=torch,torch.distributed,torch._dynamo (DistributedDataParallel imports
  torch._dynamo, and with it sympy, some 800 modules, when it is constructed: without it
  a warm rank still spent ~9 s of its restart there; the default list has it since): while attempt 1 runs,
  the local backend parks one interpreter per rank for attempt 2, and the restart
  hands the ranks to them. The kill waits until every parked interpreter has done
  its imports (a restart hours into training finds them parked; one seconds into
  it may not), so this arm trains more steps (WARM_STEPS) to still be running
  then, and kills rank 1 at its first step line from step 10 on once they are
  parked. Printed with it: how many ranks of attempt 2 started warm, and the memory
  the standby holds at the kill (RSS and USS of the parked interpreters, summed).

- Vigil replica groups (issue 30): examples/torchft_train.py (torchft 0.2.0, gloo, CPU) with
  the same ranks as --replica-groups=WORLD groups of one rank, the job's Lighthouse at
  --lighthouse-heartbeat-timeout-ms=1000, warm restarts on, policy OnFailure. The last
  group's rank is SIGKILLed at its first step line from step 10 on once its parked
  interpreter for its next run is ready; Vigil restarts that group alone. "Resumed" is
  the kill until the restarted group's first committed step in a quorum of every group.

Goodput lost per fault, in rank-seconds of training not done or redone:
  - a whole-job restart (Vigil, Vigil warm, torchrun): WORLD x (resumed + the training
    done since the last checkpoint, which is recomputed). With a checkpoint every
    --checkpoint-every seconds of training (default 60) and a fault at a random moment,
    that is half the interval on average: WORLD x (resumed + 60 / 2);
  - one group's failure and recovery: the failed group's ranks x (kill -> rejoined; it
    heals from a peer's weights, nothing is recomputed) + each healthy rank's pause (its
    longest gap between step lines around the fault, less its median step time) + one
    step of every rank for the step whose all-reduce failed and did not commit.
  Target: the group's loss under 10 % of a whole-job warm restart's.

Runs alternate (Vigil, Vigil warm, Vigil replica groups, torchrun shared, torchrun fresh) so that load on
the machine falls on all alike. A run that does not resume within --timeout counts
as "never resumed" and is left out of the median.

Run:  .venv/bin/python bench/restart_latency.py [--runs 5] [--timeout 60] [--only vigil|warm|groups|torchrun]
      [--checkpoint-every 60]   (the replica-group arm needs torchft==0.2.0: pip install -r requirements-torchft.txt)
--quick (CI, tests/test_benches.py): one run of each arm with 2 ranks, the same lines; a
start-up check, not a measurement.
Targets: Vigil's median at most 1.0x torchrun's; Vigil warm's at most 0.5x torchrun
(fresh store)'s, and its worst run no slower than Vigil cold's worst.
"""

from __future__ import annotations

import _path  # first: the repository root on sys.path (bench/_path.py)
import argparse
import os
import platform
import re
import shlex
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import psutil

ROOT = _path.ROOT

PYTHON = str(_path.BIN / "python")
TORCHRUN = str(_path.BIN / "torchrun")
SCRIPT = str(ROOT / "examples" / "ddp_train.py")
WORLD = 4
KILL_AT = "step=10 rank=1 "
FLAGS = (
    "--job-execution-mode=Sync --enable-job-restart=True --max-num-of-job-restart=3 "
    "--fault-tolerant-policy=ExitCodeAndErrorMsg"
)
TRAIN_ENV = {"VIGIL_EXAMPLE_STEPS": "30", "VIGIL_EXAMPLE_SLEEP": "0.05", "VIGIL_EXAMPLE_PG_TIMEOUT": "60"}
WARM_FLAGS = FLAGS + " --enable-warm-restart=True --warm-modules=torch,torch.distributed,torch._dynamo"
WARM_STEPS = "400"  # 20 s of steps: attempt 1 still trains when its standby has imported torch
GROUP_SCRIPT = str(ROOT / "examples" / "torchft_train.py")
GROUP_FLAGS = (
    "--replica-groups={groups} --lighthouse-heartbeat-timeout-ms=1000 --fault-tolerant-policy=OnFailure "
    "--enable-warm-restart=True --warm-modules=torch,torch.distributed,torch._dynamo,torchft"
)
GROUP_ENV = {"VIGIL_EXAMPLE_STEPS": "400", "VIGIL_EXAMPLE_SLEEP": "0.05"}
GROUP_LINE = re.compile(r"^(\S+Z) step=(\d+) rank=\d+ group=(\d+) participants=(\d+) committed=(True|False)")
CHECKPOINT_EVERY = 60.0
LINE = re.compile(r"^(?:\[[^\]]*\]:)?(\S+Z) (start|step=\d+) rank=(\d+)(?:.* pid=(\d+))?")


def parse(line: str):
    """(epoch, 'start'|'step', rank, pid) of a ddp_train line, or None."""
    m = LINE.match(line.strip())
    if not m:
        return None
    stamp = datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=None)
    epoch = (stamp - datetime(1970, 1, 1)).total_seconds()
    kind = "start" if m.group(2) == "start" else "step"
    return epoch, kind, int(m.group(3)), int(m.group(4)) if m.group(4) else None


def machine_line() -> str:
    import torch

    return (
        f"{platform.node()} {platform.platform()}, {os.cpu_count()} CPUs, python {platform.python_version()}, "
        f"torch {torch.__version__}"
    )


def wait_until(predicate, timeout, every=0.01):
    """The first truthy value, or None on timeout (reported as a figure, not raised)."""
    from testsupport.waiting import poll_until  # importable: bench/_path.py put ROOT on sys.path

    return poll_until(predicate, timeout, every)


# --- Vigil: Django on a throwaway database, the Procfile's processes -------------------------------


class VigilStack:
    """A private Redis, a temporary data dir with a migrated SQLite database, the
    Procfile's worker and exits processes; Django set up in this process too."""

    def __init__(self, extra_env: dict | None = None):
        from console.devredis import PrivateRedis

        self.tmp = tempfile.mkdtemp(prefix="vigil-bench-")
        from testsupport.jobs import let_jobs_reach

        let_jobs_reach(self.tmp)  # run as root, the jobs run as nobody (docs/security.md)
        self.redis = PrivateRedis().start()
        self.env = dict(
            os.environ,
            VIGIL_DATA_DIR=self.tmp,
            REDIS_URL=self.redis.url,
            CELERY_BROKER_URL=self.redis.url,
            DJANGO_SETTINGS_MODULE="console.settings",
            VIGIL_CONSOLE_URL="http://127.0.0.1:9",
            **(extra_env or {}),
        )
        self.env.pop("DATABASE_URL", None)
        self.env["PATH"] = f"{_path.BIN}:{self.env.get('PATH', '')}"
        os.environ.update(
            {
                k: self.env[k]
                for k in (
                    "VIGIL_DATA_DIR",
                    "REDIS_URL",
                    "CELERY_BROKER_URL",
                    "DJANGO_SETTINGS_MODULE",
                    "VIGIL_CONSOLE_URL",
                )
            }
        )
        os.environ.pop("DATABASE_URL", None)
        for k, v in (extra_env or {}).items():
            os.environ[k] = v
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0, interactive=False)
        from django.contrib.auth import get_user_model

        from jobs.access import backend_permission
        from jobs.models import Membership, Role, Workspace

        self.owner = get_user_model().objects.create_user("bench", "bench@example.com", "bench-password-123")
        self.owner.user_permissions.add(backend_permission("local"))  # the site permission to run jobs
        self.workspace = Workspace.objects.create(name="Bench", slug="bench")
        Membership.objects.create(workspace=self.workspace, user=self.owner, role=Role.OWNER)
        self.procs: list[subprocess.Popen] = []
        self.commands = {}
        for line in (ROOT / "Procfile").read_text().splitlines():
            name, _, cmd = line.partition(":")
            if name.strip() in ("worker", "decide", "exits"):
                cmd = cmd.strip().replace("var/celerybeat-schedule", f"{self.tmp}/celerybeat-schedule")
                cmd = re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m: self.env.get(m.group(1), m.group(2)), cmd)
                self.commands[name.strip()] = cmd
                log = open(Path(self.tmp) / f"{name.strip()}.log", "ab")
                self.procs.append(
                    subprocess.Popen(
                        shlex.split(cmd),
                        cwd=ROOT,
                        env=self.env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
                log.close()
        from infra import health

        # Their heartbeats (what /readyz reads): the worker runs, the exit listener is subscribed.
        ok = wait_until(lambda: all(health.readiness()[part].ok for part in ("worker", "exit_listener")), 60, 0.2)
        if not ok:
            raise RuntimeError(
                "the Celery worker or the exit listener did not start:\n"
                + (Path(self.tmp) / "worker.log").read_text()[-3000:]
            )

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)
        try:
            from jobs.backends import get_backend

            get_backend("local").stop_everything(grace=0.5)
        except Exception as exc:  # noqa: BLE001 - cleanup must go on
            print(f"  (cleanup: {exc})")
        self.redis.stop()
        import shutil

        if os.environ.get("BENCH_KEEP"):
            print(f"  kept {self.tmp} (BENCH_KEEP)")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def submit(self, name: str, flags: str, command: str, env: dict, roles=None):
        from jobs import actions

        roles = roles or (("Master", 1), ("Worker", WORLD - 1))  # WORLD as --quick left it

        body = {
            "workspace": self.workspace.slug,
            "display_name": name,
            "job_type": "PyTorchJob",
            "job_specs": [{"type": r, "pod_count": n} for r, n in roles],
            "user_command": command,
            "envs": env,
            "backend": "local",
            "settings": {"enable_error_monitoring_in_aimaster": True, "error_monitoring_args": flags},
        }
        job, _ = actions.submit_job(self.owner, body)
        return job


def handle_of(job, number, timeout=60):
    from jobs.models import Attempt

    return wait_until(
        lambda: Attempt.objects.filter(job=job, number=number).values_list("backend_handle", flat=True).first() or None,
        timeout,
        0.02,
    )


class LogFollower:
    """Reads new lines of one instance's output.log."""

    def __init__(self, path):
        self.path, self.offset, self.buf = path, 0, b""

    def lines(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        self.buf += data
        *done, self.buf = self.buf.split(b"\n")
        return [d.decode(errors="replace") for d in done]


def standby_states(stack: VigilStack, job) -> list[dict]:
    """The parked interpreters' states for attempt 2 (jobs/backends/shim.py --park)."""
    import json

    from jobs.backends import get_backend

    root = Path(get_backend("local").data_dir) / "jobs" / str(job.pk) / "warm" / "attempt-2"
    out = []
    for d in sorted(root.iterdir()) if root.is_dir() else ():
        try:
            out.append(json.loads((d / "park-state.json").read_text()))
        except (OSError, ValueError):
            pass
    return out


def standby_memory(states: list[dict]) -> dict:
    """Summed RSS and USS (bytes) of the parked interpreters, and how many were measured."""
    rss = uss = n = 0
    for state in states:
        try:
            info = psutil.Process(state["child_pid"]).memory_full_info()
        except (psutil.Error, KeyError):
            continue
        rss, uss, n = rss + info.rss, uss + info.uss, n + 1
    return {"rss": rss, "uss": uss, "n": n}


def vigil_run(stack: VigilStack, i: int, timeout: float, warm: bool = False) -> dict:
    from jobs.models import Attempt, Instance, Job, JobStatus, RestartRecord

    env = dict(TRAIN_ENV, VIGIL_EXAMPLE_STEPS=WARM_STEPS) if warm else dict(TRAIN_ENV)
    job = stack.submit(
        f"restart-latency-{'warm-' if warm else ''}{i}", WARM_FLAGS if warm else FLAGS, f"exec {PYTHON} {SCRIPT}", env
    )
    h1 = handle_of(job, 1)
    if not h1:
        return {"error": "attempt 1 was not launched"}
    rank_dir = {inst["rank"]: Path(h1["dir"]) / inst["name"] / "output.log" for inst in h1["instances"]}
    follow = LogFollower(rank_dir[1])
    pid = None
    t_kill = None
    memory = None
    deadline = time.monotonic() + 180
    step_re = re.compile(r" step=(\d+) rank=1 ")
    while t_kill is None and time.monotonic() < deadline:
        for line in follow.lines():
            p = parse(line)
            if p and p[1] == "start":
                pid = p[3]
            m = step_re.search(line)
            if not (m and int(m.group(1)) >= 10 and pid) or (not warm and KILL_AT not in line):
                continue
            if warm:
                states = standby_states(stack, job)
                if len(states) < WORLD or not all(st.get("parked_at") for st in states):
                    continue  # not parked yet: a later step
                memory = standby_memory(states)
            t_kill = time.time()
            os.kill(pid, signal.SIGKILL)
            break
        time.sleep(0.005)
    if t_kill is None:
        return {"error": "rank 1 never reached step 10" + (" with its standby parked" if warm else "")}
    h2 = handle_of(job, 2, timeout)
    if not h2:
        return {"error": f"no attempt 2 within {timeout:g} s", "kill": t_kill}
    firsts = {}
    followers = {inst["rank"]: LogFollower(Path(h2["dir"]) / inst["name"] / "output.log") for inst in h2["instances"]}
    deadline = time.monotonic() + timeout
    while len(firsts) < WORLD and time.monotonic() < deadline:
        for rank, f in followers.items():
            for line in f.lines():
                p = parse(line)
                if p and p[1] == "step" and rank not in firsts:
                    firsts[rank] = p[0]
        time.sleep(0.01)
    done = wait_until(lambda: Job.objects.get(pk=job.pk).status in (JobStatus.SUCCEEDED, JobStatus.FAILED), 90, 0.2)
    job.refresh_from_db()
    record = RestartRecord.objects.filter(job=job).first()
    a2 = Attempt.objects.get(job=job, number=2)
    out = {
        "kill": t_kill,
        "status": job.status if done else f"{job.status} (timed out)",
        "attempts": Attempt.objects.filter(job=job).count(),
        "decision": record.restart_time.timestamp() - t_kill if record else None,
        "launched": a2.starting_at.timestamp() - t_kill if a2.starting_at else None,
    }
    if warm:
        out["warm_ranks"] = Instance.objects.filter(attempt=a2, start="warm").count()
        out["memory"] = memory
    if len(firsts) < WORLD:
        out["error"] = f"only ranks {sorted(firsts)} of attempt 2 logged a step within {timeout:g} s"
        return out
    out["resumed"] = max(firsts.values()) - t_kill
    return out


def _epoch(stamp: str) -> float:
    return (datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ") - datetime(1970, 1, 1)).total_seconds()


def group_steps(path: Path) -> list[tuple[float, int, int, bool]]:
    """(time, step, participants, committed) of each step line of a torchft_train log."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        m = GROUP_LINE.match(line)
        if m:
            out.append((_epoch(m.group(1)), int(m.group(2)), int(m.group(4)), m.group(5) == "True"))
    return out


def group_run(stack: VigilStack, i: int, timeout: float) -> dict:
    """One replica group killed and restarted alone; the goodput lost (module docstring)."""
    from jobs.models import Instance, Job, JobStatus, RestartRecord

    groups = WORLD
    job = stack.submit(
        f"restart-latency-groups-{i}",
        GROUP_FLAGS.format(groups=groups),
        f"exec {PYTHON} {GROUP_SCRIPT}",
        dict(GROUP_ENV),
    )
    h1 = handle_of(job, 1)
    if not h1:
        return {"error": "attempt 1 was not launched"}
    logs = {inst["rank"]: Path(h1["dir"]) / inst["name"] / "output.log" for inst in h1["instances"]}
    victim = max(logs)
    name = next(inst["name"] for inst in h1["instances"] if inst["rank"] == victim)
    park = Path(h1["dir"]).parent / "warm" / "attempt-1-run-2" / name / "park-state.json"
    from jobs.backends import get_backend

    backend = get_backend("local")
    t_kill = None
    deadline = time.monotonic() + 180
    while t_kill is None and time.monotonic() < deadline:
        steps = group_steps(logs[victim]) if logs[victim].exists() else []
        ready = park.exists() and "parked_at" in park.read_text(errors="replace")
        if steps and steps[-1][1] >= 10 and steps[-1][2] == groups and ready:
            pids = backend.pids(h1, name)
            t_kill = time.time()
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            break
        time.sleep(0.01)
    if t_kill is None:
        return {"error": f"group {victim} never reached step 10 in a full quorum with its standby parked"}

    def rejoined():
        text = logs[victim].read_text(errors="replace")
        if "restarted (run 2" not in text:
            return None
        after = text.split("restarted (run 2", 1)[1]
        for line in after.splitlines():
            m = GROUP_LINE.match(line)
            if m and m.group(5) == "True" and int(m.group(4)) == groups:
                return _epoch(m.group(1))
        return None

    t_back = wait_until(rejoined, timeout, 0.02)
    done = wait_until(lambda: Job.objects.get(pk=job.pk).status in (JobStatus.SUCCEEDED, JobStatus.FAILED), 120, 0.2)
    job.refresh_from_db()
    record = RestartRecord.objects.filter(job=job).first()
    out = {
        "kill": t_kill,
        "status": job.status if done else f"{job.status} (timed out)",
        "attempts": job.current_attempt,
        "decision": record.restart_time.timestamp() - t_kill if record else None,
        "launched": (record.completed_at.timestamp() - t_kill) if record and record.completed_at else None,
        "warm_ranks": Instance.objects.filter(attempt__job=job, name=name, start="warm").count(),
        "reason": record.reason if record else "",
    }
    if t_back is None:
        out["error"] = f"group {victim} did not rejoin a full quorum within {timeout:g} s"
        return out
    out["resumed"] = t_back - t_kill
    pauses, step_time = [], []
    for rank, path in logs.items():
        if rank == victim:
            continue
        steps = group_steps(path)
        gaps = [b[0] - a[0] for a, b in zip(steps, steps[1:])]
        typical = statistics.median(gaps) if gaps else 0.0
        step_time.append(typical)
        near = [b[0] - a[0] for a, b in zip(steps, steps[1:]) if t_kill - 1 <= b[0] <= t_back + 2]
        pauses.append(max(0.0, max(near, default=typical) - typical))
    uncommitted = WORLD * (statistics.median(step_time) if step_time else 0.0)
    out["pause"] = max(pauses, default=0.0)
    out["lost"] = 1 * out["resumed"] + sum(pauses) + uncommitted
    return out


# --- torchrun ------------------------------------------------------------------------------------------


def torchrun_run(fresh_store: bool, timeout: float) -> dict:
    env = dict(os.environ, **TRAIN_ENV, PYTHONUNBUFFERED="1")
    env.pop("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", None)
    if fresh_store:
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    proc = subprocess.Popen(
        [TORCHRUN, "--standalone", f"--nproc-per-node={WORLD}", "--max-restarts=3", SCRIPT],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        text=True,
        bufsize=1,
    )
    lines: list[tuple[float, str]] = []
    seen_pids: set[int] = set()  # every rank of every attempt: torchrun puts each in its own session
    state = {"pid": {}, "kill": None}
    killed = threading.Event()

    def read():
        for line in proc.stdout:
            lines.append((time.time(), line))
            p = parse(line)
            if p and p[1] == "start":
                state["pid"][p[2]] = p[3]
                seen_pids.add(p[3])
            if state["kill"] is None and KILL_AT in line and 1 in state["pid"]:
                state["kill"] = time.time()
                os.kill(state["pid"][1], signal.SIGKILL)
                killed.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        if not killed.wait(90):
            return {"error": "rank 1 never reached step 10"}
        t_kill = state["kill"]

        def resumed():
            starts, firsts = {}, {}
            for _, line in list(lines):
                p = parse(line)
                if not p or p[0] < t_kill:
                    continue
                if p[1] == "start":
                    starts[p[2]] = p[0]
                elif p[1] == "step" and p[2] in starts and p[2] not in firsts:
                    firsts[p[2]] = p[0]
            return firsts if len(firsts) == WORLD else None

        firsts = wait_until(resumed, timeout, 0.02)
        try:
            code = proc.wait(90 if firsts else 1)
        except subprocess.TimeoutExpired:
            code = "timed out"
        out = {"kill": t_kill, "status": f"exit {code}"}
        if not firsts:
            tail = "".join(text for _, text in lines[-6:]).strip().replace("\n", " | ")[-400:]
            out["error"] = f"never resumed within {timeout:g} s ({tail})"
            return out
        out["resumed"] = max(firsts.values()) - t_kill
        return out
    finally:
        try:
            seen_pids.update(c.pid for c in psutil.Process(proc.pid).children(recursive=True))
        except psutil.Error:
            pass
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        for pid in seen_pids:  # ranks outlive a SIGKILLed torchrun: each is killed by its PID
            try:
                if psutil.Process(pid).cmdline()[-1:] == [SCRIPT]:
                    os.kill(pid, signal.SIGKILL)
            except (psutil.Error, ProcessLookupError):
                pass


# --- main ----------------------------------------------------------------------------------------------


def summary(name, results):
    ok = [r["resumed"] for r in results if "resumed" in r]
    bad = len(results) - len(ok)
    if not ok:
        return name, None, f"{name:<26} no run resumed ({bad} of {len(results)} never did)"
    return (
        name,
        statistics.median(ok),
        (
            f"{name:<26} median {statistics.median(ok):6.2f} s  min {min(ok):6.2f}  max {max(ok):6.2f}  "
            f"n={len(ok)}" + (f"  never resumed: {bad} of {len(results)}" if bad else "")
        ),
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds after the kill to give up on a run")
    parser.add_argument(
        "--only", choices=["vigil", "warm", "groups", "torchrun"], default=None, help="one arm (vigil: Vigil cold only)"
    )
    parser.add_argument(
        "--checkpoint-every",
        type=float,
        default=CHECKPOINT_EVERY,
        help="seconds of training between checkpoints, for the goodput lost by a whole-job restart (default 60)",
    )
    parser.add_argument("--quick", action="store_true", help="one run of each arm with 2 ranks (CI: that it starts)")
    args = parser.parse_args()
    if args.quick:
        args.runs = 1
        globals()["WORLD"] = 2

    print(f"restart latency: SIGKILL of rank 1 at step 10 -> all {WORLD} ranks of the new attempt logged a step")
    print(f"  machine: {machine_line()}")
    print(f"  job: {SCRIPT} with {TRAIN_ENV}, {WORLD} ranks (gloo, CPU); {args.runs} runs per system, interleaved")
    print(f"  load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    results = {
        "Vigil": [],
        "Vigil warm": [],
        "Vigil replica groups": [],
        "torchrun (shared store)": [],
        "torchrun (fresh store)": [],
    }
    try:
        import torchft  # noqa: F401 - the replica-group arm runs only where it is installed

        with_groups = True
    except ImportError:
        with_groups = False
        print("  replica groups: SKIPPED, torchft is not installed (pip install -r requirements-torchft.txt)")
    stack = None
    try:
        if args.only in (None, "vigil", "warm", "groups"):
            stack = VigilStack()
            print(
                f"  Vigil: Procfile processes {stack.commands}, private Redis {stack.redis.url}, "
                f"throwaway data dir {stack.tmp}; flags {FLAGS}"
            )
        print(
            f"  torchrun: --standalone --nproc-per-node={WORLD} --max-restarts=3; 'shared store' = defaults, "
            "'fresh store' = TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1\n"
        )
        for i in range(args.runs):
            runs = []
            if stack and args.only in (None, "vigil"):
                runs.append(("Vigil", lambda: vigil_run(stack, i, args.timeout)))
            if stack and args.only in (None, "warm"):
                runs.append(("Vigil warm", lambda: vigil_run(stack, i, args.timeout, warm=True)))
            if stack and args.only in (None, "groups") and with_groups:
                runs.append(("Vigil replica groups", lambda: group_run(stack, i, args.timeout)))
            if args.only in (None, "torchrun"):
                runs.append(("torchrun (shared store)", lambda: torchrun_run(False, args.timeout)))
                runs.append(("torchrun (fresh store)", lambda: torchrun_run(True, args.timeout)))
            for name, run in runs:
                r = run()
                results[name].append(r)
                extra = ""
                if "decision" in r and r["decision"] is not None:
                    what = "group restarted" if "pause" in r else "attempt 2 launched"
                    extra = f"  (decision +{r['decision']:.3f} s, {what} +{r['launched']:.3f} s, job {r['status']})"
                    if "pause" in r:
                        extra += (
                            f"  [healthy groups' longest pause {r['pause']:.2f} s; {r['warm_ranks']} warm; "
                            f"record: {r['reason'][:70]!r}]"
                        )
                    elif "warm_ranks" in r:
                        mem = r.get("memory") or {}
                        extra += (
                            f"  [{r['warm_ranks']} of {WORLD} ranks warm; standby "
                            f"{mem.get('n', 0)} interpreters RSS {mem.get('rss', 0) / 2**20:.0f} MiB, "
                            f"USS {mem.get('uss', 0) / 2**20:.0f} MiB]"
                        )
                elif "status" in r:
                    extra = f"  ({r['status']})"
                got = f"{r['resumed']:6.2f} s" if "resumed" in r else f"FAILED: {r.get('error')}"
                print(f"  run {i + 1} {name:<26} {got}{extra}", flush=True)
    finally:
        if stack:
            stack.close()
    print("\nfault -> all ranks of the new attempt training:")
    medians = {}
    for name, rs in results.items():
        if rs:
            n, med, text = summary(name, rs)
            medians[n] = med
            print("  " + text)
    v = medians.get("Vigil")
    for peer in ("torchrun (shared store)", "torchrun (fresh store)"):
        if v and medians.get(peer):
            print(
                f"  Vigil / {peer}: {v / medians[peer]:.2f}x  (target <= 1.0x: "
                f"{'MET' if v <= medians[peer] else 'MISSED'})"
            )
    w, fresh = medians.get("Vigil warm"), medians.get("torchrun (fresh store)")
    if w and fresh:
        print(
            f"  Vigil warm / torchrun (fresh store): {w / fresh:.2f}x  (target <= 0.5x: "
            f"{'MET' if w <= 0.5 * fresh else 'MISSED'})"
        )
    worst = {n: max((r["resumed"] for r in rs if "resumed" in r), default=None) for n, rs in results.items()}
    if worst.get("Vigil warm") is not None and worst.get("Vigil") is not None:
        print(
            f"  worst run: Vigil warm {worst['Vigil warm']:.2f} s, Vigil cold {worst['Vigil']:.2f} s "
            f"(target: warm no slower: {'MET' if worst['Vigil warm'] <= worst['Vigil'] else 'MISSED'})"
        )
    ckpt = args.checkpoint_every
    print(
        f"\ngoodput lost per fault (rank-seconds not done or redone; a whole-job restart also "
        f"recomputes the training since the last checkpoint: one every {ckpt:g} s of training, "
        f"{ckpt / 2:g} s on average at a random fault, x {WORLD} ranks):"
    )
    lost = {}
    for name, rs in results.items():
        if name == "Vigil replica groups":
            figures = [r["lost"] for r in rs if "lost" in r]
            how = (
                f"the killed group's 1 rank x its downtime + the {WORLD - 1} healthy ranks' pauses + 1 uncommitted step"
            )
        else:
            figures = [WORLD * (r["resumed"] + ckpt / 2) for r in rs if "resumed" in r]
            how = f"{WORLD} ranks x (resumed + {ckpt / 2:g} s)"
        if figures:
            lost[name] = statistics.median(figures)
            print(f"  {name:<26} median {lost[name]:8.2f} rank-s  n={len(figures)}  ({how})")
    g, warm_lost = lost.get("Vigil replica groups"), lost.get("Vigil warm")
    if g is not None and warm_lost:
        print(
            f"  Vigil replica groups / Vigil warm (whole job): {g / warm_lost:.1%}  (target < 10%: "
            f"{'MET' if g < 0.1 * warm_lost else 'MISSED'})"
        )
    print(f"  load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
