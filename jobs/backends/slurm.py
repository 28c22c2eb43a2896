"""The Slurm backend: an attempt is one Slurm job whose steps are the instances.

Everything goes through Slurm's own commands (sbatch, srun, squeue --json,
sacct, scancel, scontrol, sinfo --json), run with a timeout; nothing talks to
slurmctld directly. The attempt's directory lives under `log_dir`, which must be
the same path on the console and on every node (a shared filesystem): the batch
script, the supervisor (slurm_step.py) and the instances' logs and exit files
are there. That directory plus the Slurm job id in the handle is all that is
needed to re-adopt an attempt after the console restarts.

OPTIONS (settings.JOB_BACKENDS["slurm"]["OPTIONS"]), all optional but log_dir:

    log_dir            shared directory for attempts (same path on every node)
    partition, account sbatch -p / -A ("" = cluster default)
    sbatch_options     extra sbatch arguments, e.g. ["--qos=high", "--time=1-0"]
    srun_options       extra srun arguments for every instance step, e.g. ["--mem-per-cpu=4G"]
    cpus_per_instance  CPUs per instance step (1); gpus_per_instance (0 = none)
    export             sbatch --export value ("NONE": the console's env stays home)
    commands           {"sbatch": "/opt/slurm/bin/sbatch", ...} paths of the tools
    environment        extra env for the tools, e.g. {"SLURM_CONF": "/etc/slurm/x.conf"}
    use_json           ask squeue/sinfo for --json (True); False uses scontrol and sinfo's
                       text (22.05's squeue --json lists every job whatever -j says)
    command_timeout    seconds a Slurm command may take before Slurm counts as down (30)
    python             Python 3 on the nodes, for the supervisor and wrapper ("python3")
    py_spy             py-spy on the nodes, for stack dumps ("py-spy")
    grace              seconds between SIGTERM and SIGKILL when stopping (15)
    linger             seconds a finished allocation with a failure waits for a
                       restart request before it ends (60)
    port_base, port_span  instance ports (MASTER_PORT, TF) are taken from this range
    redis_url          where instances announce their exit ("" = don't); nodes must reach it
    channel_prefix     exits are published on "<prefix>:instance-exit" ("vigil")

Workspaces (AttemptLaunch.account, AttemptLaunch.run_as): a workspace's Slurm account
replaces `account`. A workspace's OS user (`run_as`) is who the allocation runs as
(sbatch --uid/--gid), which only a console running as root may ask for: the attempt's
directory is then that user's (0700), so no other cluster user reads its token or
logs, while the console (root) still reads and writes it. Otherwise every workspace's
jobs run as the console's own cluster user, and a workspace with a run_as is refused
rather than run as someone else (docs/slurm.md, docs/security.md).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from core.slurm import (
    NOT_RESPONDING,
    SLURM_FAILURE_STATES,
    SLURM_VERDICTS,
    SlurmJob,
    SlurmNode,
    is_transient,
    srun_task_signal,
    job_from_sacct,
    job_from_scontrol,
    job_from_squeue_json,
    nodes_from_sinfo_json,
    nodes_from_sinfo_text,
)

from . import fr_files, osuser
from . import slurm_step as step
from .base import (
    AttemptLaunch,
    Backend,
    BackendError,
    InstanceLaunch,
    InstanceState,
    PolledInstance,
    Node,
    read_log_file,
    tail_log_file,
)

# scancel exits with Slurm's errno truncated to a byte, at times without a word on stderr
# (seen on CI: a late stop of an ended job exited 229 silently): ESLURM_ALREADY_DONE (2021)
# and ESLURM_INVALID_JOB_ID (2017) from slurm_errno.h both mean the job is already gone.
SCANCEL_JOB_GONE = (2021 & 0xFF, 2017 & 0xFF)
# sbatch's refusal of a job that no set of the partition's nodes can satisfy (with --exclude:
# fewer nodes left than it needs), slurm_errno.h ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE.
UNSATISFIABLE = "Requested node configuration is not available"
KILL_MARGIN = 2.0  # seconds after the grace period before Slurm's SIGKILL backs the wrapper's up
HANDLE = "handle.json"
STOP = "stop.json"  # the console asked to stop the attempt (the supervisor reads it too)
SUBMITTING = "submitting.json"  # written just before sbatch: how to find the job if we die

TOOLS = ("sbatch", "srun", "squeue", "sacct", "scancel", "scontrol", "sinfo")

DEFAULTS = {
    "log_dir": "",
    "partition": "",
    "account": "",
    "sbatch_options": (),
    "srun_options": (),
    "cpus_per_instance": 1,
    "gpus_per_instance": 0,
    "slots_per_instance": 1,
    "export": "NONE",
    "commands": {},
    "environment": {},
    "command_timeout": 30.0,
    "python": "python3",
    "py_spy": "py-spy",
    "grace": 15.0,
    "linger": 60.0,
    "port_base": 29500,
    "port_span": 20000,
    "redis_url": "",
    "channel_prefix": "vigil",
    "stop_poll_interval": 0.25,
    "use_json": True,
}


def _option_error(name: str, accepted: str, value) -> BackendError:
    return BackendError(f"JOB_BACKENDS['slurm']['OPTIONS'][{name!r}] = {value!r}: expected {accepted}")


def check_options(options: dict) -> dict:
    """Merged with the defaults and checked; a bad option names itself and what it accepts."""
    unknown = sorted(set(options) - set(DEFAULTS))
    if unknown:
        raise BackendError(
            f"JOB_BACKENDS['slurm']['OPTIONS'] has unknown option(s) {', '.join(unknown)} "
            f"(accepted: {', '.join(sorted(DEFAULTS))})"
        )
    o = {**DEFAULTS, **options}
    if not o["log_dir"] or not os.path.isabs(str(o["log_dir"])):
        raise _option_error("log_dir", "an absolute path shared by the console and all nodes", o["log_dir"])
    for name in ("partition", "account", "export", "python", "py_spy", "redis_url", "channel_prefix"):
        if not isinstance(o[name], str):
            raise _option_error(name, "a string", o[name])
    for name in ("sbatch_options", "srun_options"):
        if isinstance(o[name], str) or not all(isinstance(a, str) for a in o[name]):
            raise _option_error(name, "a list of argument strings", o[name])
        o[name] = tuple(o[name])
    for name in ("cpus_per_instance", "slots_per_instance"):
        if not isinstance(o[name], int) or o[name] < 1:
            raise _option_error(name, "an integer >= 1", o[name])
    if not isinstance(o["gpus_per_instance"], int) or o["gpus_per_instance"] < 0:
        raise _option_error("gpus_per_instance", "an integer >= 0", o["gpus_per_instance"])
    for name in ("command_timeout", "grace", "linger", "stop_poll_interval"):
        if not isinstance(o[name], (int, float)) or o[name] < 0:
            raise _option_error(name, "a number of seconds >= 0", o[name])
    if (
        not isinstance(o["port_base"], int)
        or not isinstance(o["port_span"], int)
        or not (1024 <= o["port_base"] and o["port_span"] >= 1 and o["port_base"] + o["port_span"] <= 65536)
    ):
        raise _option_error(
            "port_base/port_span", "1024 <= port_base, port_base + port_span <= 65536", (o["port_base"], o["port_span"])
        )
    if not isinstance(o["commands"], dict) or set(o["commands"]) - set(TOOLS):
        raise _option_error("commands", f"a dict with keys among {', '.join(TOOLS)}", o["commands"])
    if not isinstance(o["use_json"], bool):
        raise _option_error("use_json", "True or False", o["use_json"])
    if not isinstance(o["environment"], dict):
        raise _option_error("environment", "a dict of environment variables", o["environment"])
    return o


# The part of base.py that frameworks.py needs on the nodes, from the class itself (one
# definition); base.py as a whole wants Python 3.11 (StrEnum), the nodes' Python may be older.
RUNTIME_BASE = (
    "# Written by jobs/backends/slurm.py: the part of base.py that frameworks.py needs on the nodes.\n"
    "from dataclasses import dataclass, field\n\n\n" + inspect.getsource(InstanceLaunch)
)


# -- instance status (pure) ------------------------------------------------------------------


@dataclass(frozen=True)
class InstanceFiles:
    """What the wrapper and supervisor left on disk for the instance's current run."""

    run: int
    started: dict | None  # run-<run>.json
    exited: dict | None  # exit-<run>.json
    stop_requested_at: float | None  # stop-<run>.json, or stop.json if the run had not ended by then
    last_output_at: float | None  # mtime of output.log


def instance_status(
    inst: dict, files: InstanceFiles, job: SlurmJob, batch_said: str = "", failed_nodes: frozenset = frozenset()
) -> PolledInstance:
    """One instance's status from its files and Slurm's view of the job.

    `batch_said` is the last line of the batch script's log, which explains an
    allocation that ended before its instances started (the supervisor failed).
    `failed_nodes` are the job's nodes Slurm holds down after a NODE_FAIL: the
    instances there died with their node, the others only ended with the allocation."""
    started = files.started or {}
    if job.state == "NODE_FAIL" and failed_nodes and started.get("node"):
        return _node_fail_status(inst, files, job, failed_nodes)
    lost_with = _node_lost_with(files, failed_nodes)
    if lost_with:
        # The step ended without the instance's report because its node died, and Slurm
        # has not yet failed the job for it (srun hears of the node first, CI): the node's
        # failure, not an exit without a status.
        return _node_fail_status(inst, files, job, failed_nodes | {lost_with})
    base = dict(
        name=inst["name"],
        role=inst["role"],
        index=inst["index"],
        started_at=started.get("started_at"),
        last_output_at=files.last_output_at,
        node=started.get("node", ""),
        pid=started.get("pid"),
    )
    stop_at = files.stop_requested_at
    if files.exited is not None:
        ex = files.exited
        code, sig, at = ex.get("exit_code"), ex.get("signal"), ex.get("exited_at")
        if code is None and sig is None:
            # The wrapper was killed, so srun's exit and words are all there is: "task 0:
            # Killed" with exit 137 is a SIGKILL like any other, not an exit without a status.
            sig = srun_task_signal(ex.get("reason") or "")
        if stop_at is not None:
            state = InstanceState.STOPPED
        elif code == 0:
            state = InstanceState.SUCCEEDED
        elif code is None and sig is None:
            # The wrapper never reported: Slurm's own word for the job explains it best.
            state = InstanceState.LOST
        else:
            state = InstanceState.FAILED
        reason = ex.get("reason") or ""
        if state in (InstanceState.FAILED, InstanceState.LOST) and job.state in SLURM_FAILURE_STATES - {"FAILED"}:
            # Slurm's word alone ("NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY"): classification
            # matches it whole; the node is in `node`.
            reason = job.state
            base["node"] = base["node"] or job.nodes
            state = InstanceState.FAILED if job.state == "NODE_FAIL" else state
        return PolledInstance(**base, state=state, exit_code=code, signal=sig, exited_at=at, reason=reason)
    if job.waiting:
        return PolledInstance(**base, state=InstanceState.PENDING, reason=job.reason or job.state)
    if job.active:
        if stop_at is not None and job.state == "COMPLETING":
            # Killed on request; Slurm finishes the job's bookkeeping for a few seconds more.
            return PolledInstance(**base, state=InstanceState.STOPPED, reason="stopped")
        if files.started:
            return PolledInstance(**base, state=InstanceState.RUNNING)
        why = "restart requested, step starting" if files.run > 1 else "step starting"
        return PolledInstance(**base, state=InstanceState.PENDING, reason=why)
    # The job is over and this run left no exit record.
    ended = job.end_time
    if stop_at is not None:
        return PolledInstance(**base, state=InstanceState.STOPPED, exited_at=ended, reason="stopped")
    if not job.known:
        return PolledInstance(
            **base,
            state=InstanceState.LOST,
            exited_at=ended,
            reason=f"Slurm no longer knows job {job.job_id} and the instance left no exit record",
        )
    if job.state in SLURM_VERDICTS:
        state = InstanceState.FAILED if job.state == "NODE_FAIL" else InstanceState.LOST
        base["node"] = base["node"] or job.nodes
        return PolledInstance(**base, state=state, exited_at=ended, reason=job.state)
    said = f": {batch_said}" if batch_said and not files.started else ""
    return PolledInstance(
        **base,
        state=InstanceState.LOST,
        exited_at=ended,
        reason=f"Slurm job {job.job_id} ended ({job.state}) before this instance "
        + ("reported an exit" if files.started else "started")
        + said,
    )


_SRUN_NODE_FAILURE = re.compile(r"\bNode failure on (\S+?)[;,.]?(?:\s|$)")


def unreported_exit(files: InstanceFiles) -> bool:
    """The run ended without the instance's own report (the supervisor wrote it, in srun's
    words), and nobody asked it to stop."""
    ex = files.exited
    return (
        ex is not None and files.stop_requested_at is None and ex.get("exit_code") is None and ex.get("signal") is None
    )


def _node_lost_with(files: InstanceFiles, failed_nodes: frozenset) -> str:
    """The node an unreported exit died with: the instance's own node when Slurm holds it
    down, or when srun said that node failed. "" when neither."""
    node = (files.started or {}).get("node") or ""
    if not node or not unreported_exit(files):
        return ""
    said = _SRUN_NODE_FAILURE.search((files.exited or {}).get("reason") or "")
    return node if node in failed_nodes or (said and said.group(1) == node) else ""


def _node_fail_status(inst: dict, files: InstanceFiles, job: SlurmJob, failed_nodes: frozenset) -> PolledInstance:
    """NODE_FAIL, knowing which nodes failed. An instance on a failed node was lost with
    it: its last sign of life (its last output, else its start) is when it died, well
    before the supervisor's srun heard of it, so it is the root cause and its node the
    one counted. An instance elsewhere was ended by Slurm because of that node."""
    started = files.started or {}
    node = started["node"]
    ex = files.exited or {}
    recorded = ex.get("exited_at") or job.end_time
    common = dict(
        name=inst["name"],
        role=inst["role"],
        index=inst["index"],
        started_at=started.get("started_at"),
        last_output_at=files.last_output_at,
        node=node,
        pid=started.get("pid"),
        state=InstanceState.FAILED,
        exit_code=ex.get("exit_code"),
        signal=ex.get("signal"),
    )
    if files.stop_requested_at is not None:
        return PolledInstance(**{**common, "state": InstanceState.STOPPED}, exited_at=recorded, reason="stopped")
    if node in failed_nodes:
        seen = [t for t in (files.last_output_at or started.get("started_at"), recorded) if t is not None]
        return PolledInstance(**common, exited_at=min(seen) if seen else None, reason="NODE_FAIL")
    if not ex and job.active:
        return PolledInstance(**{**common, "state": InstanceState.RUNNING})
    lost = ", ".join(sorted(failed_nodes))
    return PolledInstance(
        **common, exited_at=recorded, reason=f"NODE_FAIL: ended with the allocation when node {lost} failed"
    )


def _nodes(found: list[SlurmNode]) -> list[Node]:
    return [Node(n.name, n.slots, n.schedulable, n.reason) for n in found]


# -- the backend -------------------------------------------------------------------------------


class SlurmBackend(Backend):
    can_dump_stacks = True  # through dump_stacks(): py-spy runs on the instance's node via srun --overlap
    can_isolate_nodes = True

    def __init__(self, name: str = "slurm", **options):
        super().__init__(name=name, **options)
        self.opts = check_options(options)
        self.log_dir = Path(self.opts["log_dir"])

    @property
    def exit_channel(self) -> str:
        return f"{self.opts['channel_prefix']}:instance-exit"

    # -- running Slurm's commands --------------------------------------------------------

    def _tool(self, name: str) -> str:
        return self.opts["commands"].get(name) or name

    def _env(self) -> dict:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SQUEUE_", "SINFO_", "SACCT_")) or k == "SLURM_CONF"
        }
        env.update({str(k): str(v) for k, v in self.opts["environment"].items()})
        return env

    def _run(
        self, tool: str, *args: str, check: bool = True, timeout: float | None = None
    ) -> subprocess.CompletedProcess:
        argv = [self._tool(tool), *args]
        try:
            res = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                env=self._env(),
                timeout=timeout or self.opts["command_timeout"],
                stdin=subprocess.DEVNULL,
            )
        except FileNotFoundError:
            raise BackendError(
                f"Slurm command {argv[0]!r} not found: install the Slurm client tools on the "
                f"console host or set OPTIONS['commands'][{tool!r}]"
            ) from None
        except subprocess.TimeoutExpired:
            raise BackendError(
                f"Slurm did not answer: `{shlex.join(argv)}` took longer than "
                f"{timeout or self.opts['command_timeout']:.0f}s (is slurmctld up?)",
                retryable=True,
            ) from None
        if check and res.returncode != 0:
            raise self._refusal(argv, res)
        return res

    @staticmethod
    def _refusal(argv: list[str], res: subprocess.CompletedProcess) -> BackendError:
        text = (res.stderr or res.stdout or "").strip() or f"exit status {res.returncode}"
        transient = is_transient(text)
        what = "Slurm is unreachable or busy" if transient else "Slurm refused"
        return BackendError(f"{what}: `{shlex.join(argv[:2])} ...` said: {text[-600:]}", retryable=transient)

    # -- attempts --------------------------------------------------------------------------

    def attempt_dir(self, job_id, attempt) -> Path:
        return self.log_dir / "jobs" / str(job_id) / f"attempt-{int(attempt)}"

    @staticmethod
    def job_name(job_id, attempt) -> str:
        return f"vigil-{job_id}-a{attempt}"

    def _check_spec(self, spec: AttemptLaunch) -> None:
        spec.check()

    def _write_runtime(self, attempt_dir: Path) -> None:
        here = Path(__file__).resolve().parent
        runtime = attempt_dir / "runtime"
        pkg = runtime / "vigil_runtime"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "base.py").write_text(RUNTIME_BASE)
        shutil.copyfile(here / "frameworks.py", pkg / "frameworks.py")
        shutil.copyfile(here / "noderedis.py", pkg / "noderedis.py")
        shutil.copyfile(here / "fr_files.py", pkg / "fr_files.py")
        shutil.copyfile(here / "slurm_step.py", runtime / "slurm_step.py")

    @staticmethod
    def _install_recorder(spec: AttemptLaunch, attempt_dir: Path) -> None:
        """C4D without code changes, as the local backend does it: the start-up hook (and
        the SDK copy it injects) in the attempt's shared directory, which every node reads,
        not in the console's install path, which the nodes may not have; and each
        instance's dump directory with its request file (fr_files). The step wrapper puts
        them in the step's environment (slurm_step.run_instance)."""
        if not any(e.get("VIGIL_C4D") == "1" for e in (spec.env, *(i.env for i in spec.instances))):
            return
        fr_files.install_boot(str(attempt_dir / "runtime" / step.BOOT))
        for inst in spec.instances:
            fr_dir = step.fr_dir(str(attempt_dir), inst.name)
            os.mkdir(fr_dir, 0o700)
            fr_files.create_request(fr_dir)

    @staticmethod
    def identity(requested: str) -> osuser.RunAs | None:
        """The OS user a workspace's allocations run as, or None for the console's own."""
        if not requested:
            return None
        if os.geteuid() != 0:
            raise BackendError(
                f"the workspace's jobs must run as OS user {requested!r}, but only a console running as "
                "root may submit Slurm jobs as another user (sbatch --uid): clear the workspace's run_as, "
                "or run the console's worker as root"
            )
        return osuser.resolve_run_as(requested, allow_root=False, setting="the workspace's run_as", allow_setting="")

    def sbatch_argv(self, spec: AttemptLaunch, attempt_dir: Path, who: osuser.RunAs | None = None) -> list[str]:
        o = self.opts
        argv = [
            "--parsable",
            f"--job-name={self.job_name(spec.job_id, spec.attempt)}",
            f"--ntasks={len(spec.instances)}",
            f"--cpus-per-task={o['cpus_per_instance']}",
            f"--output={attempt_dir}/batch.log",
            f"--chdir={attempt_dir}",
            "--no-requeue",
            f"--export={o['export']}",
            f"--comment=vigil job {spec.job_id} attempt {spec.attempt}",
        ]
        if o["gpus_per_instance"]:
            argv.append(f"--gpus-per-task={o['gpus_per_instance']}")
        if o["partition"]:
            argv.append(f"--partition={o['partition']}")
        account = spec.account or o["account"]
        if account:
            argv.append(f"--account={account}")
        if who is not None:
            argv += [f"--uid={who.uid}", f"--gid={who.gid}"]
        if spec.avoid_nodes:
            argv.append("--exclude=" + ",".join(spec.avoid_nodes))
        return argv + list(o["sbatch_options"])

    def launch(self, spec: AttemptLaunch) -> dict:
        self._check_spec(spec)
        self.identity(spec.run_as)  # refuse before claiming anything
        attempt_dir = self.attempt_dir(spec.job_id, spec.attempt)
        try:
            attempt_dir.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BackendError(f"cannot create {attempt_dir.parent} under OPTIONS['log_dir']: {exc}") from exc
        try:
            attempt_dir.mkdir(mode=0o700)  # the claim: a second launch of the same attempt submits nothing
        except FileExistsError:
            return self._claimed_handle(spec, attempt_dir)
        try:
            return self._launch_claimed(spec, attempt_dir)
        except BaseException:
            self._abandon(attempt_dir)
            raise

    def _claimed_handle(self, spec: AttemptLaunch, attempt_dir: Path) -> dict:
        """The attempt was launched before (a re-delivered task): its handle, or its Slurm job
        found by name when the launching process died between sbatch and writing the handle."""
        handle = step.read_json(str(attempt_dir / HANDLE))
        if handle is not None:
            return handle
        intent = step.read_json(str(attempt_dir / SUBMITTING))
        if intent is None:
            raise BackendError(f"attempt {spec.attempt} of job {spec.job_id} is being launched", retryable=True)
        res = self._run("squeue", "--noheader", "--states=all", f"--name={intent['job_name']}", "--format=%i")
        ids = res.stdout.split()
        if ids:
            return self._write_handle(spec, attempt_dir, ids[0], intent["ports"])
        if time.time() - intent["at"] < self.opts["command_timeout"] * 2:
            raise BackendError(f"attempt {spec.attempt} of job {spec.job_id} is being launched", retryable=True)
        self._abandon(attempt_dir)  # sbatch never got through: launch afresh
        return self.launch(spec)

    def _abandon(self, attempt_dir: Path) -> None:
        """Move a failed launch aside so that the attempt can be launched again and the try stays readable."""
        aside = attempt_dir.with_name(f"failed-{attempt_dir.name}-{time.time():.0f}-{os.getpid()}")
        try:
            os.rename(attempt_dir, aside)
        except OSError:
            pass

    def _launch_claimed(self, spec: AttemptLaunch, attempt_dir: Path) -> dict:
        self._write_runtime(attempt_dir)
        (attempt_dir / "requests").mkdir()
        for inst in spec.instances:
            (attempt_dir / "instances" / inst.name).mkdir(parents=True)
            Path(step.log_file(str(attempt_dir), inst.name)).touch()
        self._install_recorder(spec, attempt_dir)
        o = self.opts
        ranked = [i.name for i in sorted(spec.instances, key=lambda i: i.rank)]
        ports = dict(
            zip(ranked, step.attempt_ports(spec.job_id, spec.attempt, len(ranked), o["port_base"], o["port_span"]))
        )
        step.write_json(
            str(attempt_dir / "attempt.json"),
            {
                **spec.to_dict(),
                "ports": ports,
                "options": {
                    k: o[k]
                    for k in (
                        "cpus_per_instance",
                        "gpus_per_instance",
                        "slots_per_instance",
                        "python",
                        "linger",
                        "redis_url",
                        "grace",
                    )
                }
                | {
                    "srun": self._tool("srun"),
                    "srun_options": list(o["srun_options"]),
                    "exit_channel": self.exit_channel,
                },
            },
        )
        script = attempt_dir / "batch.sh"
        script.write_text(
            "#!/bin/bash\n"
            f"# Vigil job {spec.job_id}, attempt {spec.attempt}: supervise one step per instance.\n"
            f"exec {shlex.quote(o['python'])} {shlex.quote(str(attempt_dir / 'runtime' / 'slurm_step.py'))}"
            f" supervise {shlex.quote(str(attempt_dir))}\n"
        )
        job_name = self.job_name(spec.job_id, spec.attempt)
        step.write_json(str(attempt_dir / SUBMITTING), {"job_name": job_name, "ports": ports, "at": time.time()})
        who = self.identity(spec.run_as)
        if who is not None:
            self._hand_over(attempt_dir, who)
        waiting_for: list[str] = []
        try:
            res = self._run("sbatch", *self.sbatch_argv(spec, attempt_dir, who), str(script))
        except BackendError as exc:
            if not spec.avoid_nodes or UNSATISFIABLE not in exc.message:
                raise
            # Without the avoided nodes the job cannot run at all (it needs every node of
            # the partition): submit it without --exclude. Slurm itself never places a job
            # on a DOWN or drained node, so the job waits until the node returns or a
            # replacement joins, instead of being refused for good.
            waiting_for = list(spec.avoid_nodes)
            plain = dataclasses.replace(spec, avoid_nodes=())
            res = self._run("sbatch", *self.sbatch_argv(plain, attempt_dir, who), str(script))
        job_id = res.stdout.strip().split(";")[0]
        if not job_id.isdigit():
            raise BackendError(f"sbatch gave no job id (said {res.stdout.strip()!r})", retryable=True)
        return self._write_handle(spec, attempt_dir, job_id, ports, waiting_for)

    @staticmethod
    def _hand_over(attempt_dir: Path, who: osuser.RunAs) -> None:
        """The allocation runs as `who`: it writes its records and logs into the attempt's
        directory, which stays 0700, so no other cluster user reads the token in it."""
        blocked = osuser.blocked_ancestor(str(attempt_dir.parent), who)
        if blocked:
            raise BackendError(
                f"the workspace's OS user {who.name!r} cannot pass through {blocked} on the "
                "way to its attempt's directory: give it the search (x) permission"
            )
        for root, dirs, files in os.walk(attempt_dir):
            for name in dirs + files:
                os.chown(os.path.join(root, name), who.uid, who.gid, follow_symlinks=False)
        os.chown(attempt_dir, who.uid, who.gid)

    def _write_handle(
        self, spec: AttemptLaunch, attempt_dir: Path, slurm_job_id: str, ports: dict, waiting_for: list | None = None
    ) -> dict:
        first = min(spec.instances, key=lambda i: i.rank).name
        avoided = [] if waiting_for else list(spec.avoid_nodes)
        handle = {
            "backend": self.name,
            "slurm_job_id": str(slurm_job_id),
            "attempt_dir": str(attempt_dir),
            "job_id": str(spec.job_id),
            "attempt": spec.attempt,
            "job_type": spec.job_type,
            "ports": ports,
            # PyTorch's rendezvous port (rank 0's), kept on the Attempt row; None for other frameworks.
            "master_port": ports[first] if spec.job_type == "PyTorchJob" else None,
            "run_as": spec.run_as or osuser.current_user(),
            # Where the attempt may not run (sbatch --exclude), or, when the job needs them,
            # the avoided nodes it waits for instead: jobs.actions.launch_attempt says which.
            "avoided_nodes": avoided,
            "waiting_for_nodes": list(waiting_for or ()),
            "instances": [
                {"name": i.name, "role": i.role, "index": i.index, "rank": i.rank, "run": 1} for i in spec.instances
            ],
        }
        step.write_json(str(attempt_dir / HANDLE), handle)
        return handle

    def handle_for(self, job_id, attempt) -> dict:
        """The handle of an attempt from disk (re-adoption when the caller lost it)."""
        handle = step.read_json(str(self.attempt_dir(job_id, attempt) / HANDLE))
        if handle is None:
            raise BackendError(f"no attempt {attempt} of job {job_id} under {self.log_dir}")
        return handle

    def attempt_handles(self) -> list[dict]:
        """Handles of every attempt under log_dir (for cleanup)."""
        handles = []
        for path in sorted((self.log_dir / "jobs").glob(f"*/attempt-*/{HANDLE}")):
            handle = step.read_json(str(path))
            if handle is not None:
                handles.append(handle)
        return handles

    def stop_everything(self, grace: float = 0.5) -> list[int]:
        """Stop every attempt under log_dir that Slurm still runs; Slurm kills what
        is left, so no PID is killed from here."""
        for handle in self.attempt_handles():
            try:
                if self.job(handle).active:
                    self.stop(handle, grace=grace)
            except BackendError:
                pass
        return []

    def job(self, handle: dict) -> SlurmJob:
        """Slurm's view of the attempt's job: squeue --json, else scontrol, else sacct."""
        job_id = str(handle["slurm_job_id"])
        res = (
            self._run("squeue", "--json", "--states=all", "-j", job_id, check=False) if self.opts["use_json"] else None
        )
        if res is not None and res.returncode == 0:
            try:
                found = job_from_squeue_json(json.loads(res.stdout), job_id)
            except json.JSONDecodeError:
                found = None
            if found:
                return found
        # Not listed, no --json in this build, or the controller is down (22.05 then still
        # exits 0 with "errors"): scontrol answers with Slurm's own words.
        res = self._run("scontrol", "show", "job", "-o", job_id, check=False)
        if res.returncode == 0:
            found = job_from_scontrol(res.stdout, job_id)
            if found:
                return found
        elif "invalid job id" not in (res.stderr or "").lower():
            raise self._refusal([self._tool("scontrol"), "show"], res)
        # Gone from the controller's memory (MinJobAge): accounting may still know.
        res = self._run("sacct", "-X", "-n", "-P", "-j", job_id, "-o", "JobID,State,Reason,NodeList", check=False)
        if res.returncode == 0:
            found = job_from_sacct(res.stdout, job_id)
            if found:
                return found
        return SlurmJob(job_id, "")

    def _files(self, handle: dict, inst: dict) -> InstanceFiles:
        d = handle["attempt_dir"]
        name = inst["name"]
        run = self._current_run(handle, name)
        stop = step.read_json(step.stop_file(d, name, run))
        whole = step.read_json(os.path.join(d, STOP))
        if stop is None and whole is not None and name not in whole.get("ended", ()):
            stop = whole  # an instance that had ended before the stop keeps its real outcome
        try:
            mtime = os.stat(step.log_file(d, name)).st_mtime
        except FileNotFoundError:
            mtime = None
        started = step.read_json(step.run_file(d, name, run))
        # An empty log has not been written to: its mtime is its creation.
        if mtime is not None and os.path.getsize(step.log_file(d, name)) == 0:
            mtime = None
        return InstanceFiles(
            run=run,
            started=started,
            exited=step.read_json(step.exit_file(d, name, run)),
            stop_requested_at=(stop or {}).get("requested_at"),
            last_output_at=mtime,
        )

    @staticmethod
    def _current_run(handle: dict, name: str) -> int:
        """The newest run asked for: from the handle, or from requests on disk (another process's)."""
        inst = Backend.check_instance(handle, name)
        run = int(inst.get("run", 1))
        d = handle["attempt_dir"]
        while os.path.exists(step.restart_request(d, name, run + 1)) or os.path.exists(
            step.restart_request(d, name, run + 1) + ".done"
        ):
            run += 1
        return run

    def poll(self, handle: dict) -> list[PolledInstance]:
        job = self.job(handle)
        said = "" if job.active else step.last_line(os.path.join(handle["attempt_dir"], "batch.log"))
        files = [self._files(handle, inst) for inst in handle["instances"]]
        # Which nodes are down matters after a NODE_FAIL, and for a run that ended without
        # its instance's report: one sinfo call, only then.
        asks = job.state == "NODE_FAIL" or any(unreported_exit(f) for f in files)
        failed = self._failed_nodes(handle) if asks else frozenset()
        return [instance_status(inst, f, job, said, failed) for inst, f in zip(handle["instances"], files)]

    def _failed_nodes(self, handle: dict) -> frozenset:
        """Which of the attempt's nodes failed: those Slurm now holds DOWN or not responding
        (a drained node was taken out on purpose, not lost). Slurm's job record names all
        the job's nodes, not the lost one."""
        allocation = step.read_json(os.path.join(handle["attempt_dir"], "allocation.json")) or {}
        mine = set(allocation.get("nodes") or ())
        try:
            return frozenset(n.name for n in self._sinfo_nodes() if n.down and n.name in mine)
        except BackendError:
            return frozenset()

    def _wait_for_exits(self, handle: dict, names: list[str], grace: float) -> bool:
        deadline = time.monotonic() + grace
        while True:
            d = handle["attempt_dir"]
            pending = [
                n
                for n in names
                if step.read_json(step.run_file(d, n, self._current_run(handle, n)))
                and not step.read_json(step.exit_file(d, n, self._current_run(handle, n)))
            ]
            if not pending:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(self.opts["stop_poll_interval"])

    def stop(self, handle: dict, grace: float | None = None) -> None:
        grace = self.opts["grace"] if grace is None else grace
        job_id = str(handle["slurm_job_id"])
        d = handle["attempt_dir"]
        if step.read_json(os.path.join(d, STOP)) is None:
            ended = [
                n
                for n in self.instance_names(handle)
                if step.read_json(step.exit_file(d, n, self._current_run(handle, n)))
            ]
            step.write_json(os.path.join(d, STOP), {"requested_at": time.time(), "grace": grace, "ended": ended})
        job = self.job(handle)
        if not job.active:
            return
        if not job.waiting:
            # TERM to every step (not the batch supervisor); it ends the job once they are done.
            self._scancel("--signal=TERM", job_id)
            # The wrappers kill after `grace` themselves; Slurm's SIGKILL is the backstop.
            if self._wait_for_exits(handle, self.instance_names(handle), grace + KILL_MARGIN):
                self._wait_for_job_end(handle, min(5.0, grace + 1))
        self._scancel("--signal=KILL", "--full", job_id)
        self._scancel(job_id)

    def _wait_for_job_end(self, handle: dict, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.job(handle).active:
            time.sleep(self.opts["stop_poll_interval"])

    def _scancel(self, *args: str) -> None:
        res = self._run("scancel", *args, check=False)
        text = (res.stderr or "").lower()
        if (
            res.returncode != 0
            and res.returncode not in SCANCEL_JOB_GONE
            and not any(w in text for w in ("already completing", "already completed", "invalid job id", "completed"))
        ):
            raise self._refusal([self._tool("scancel"), *args], res)

    def stop_instance(self, handle: dict, name: str, grace: float | None = None) -> None:
        grace = self.opts["grace"] if grace is None else grace
        d = handle["attempt_dir"]
        run = self._current_run(handle, name)
        if step.read_json(step.exit_file(d, name, run)):
            return  # already over: its real outcome stands
        step.write_json(step.stop_file(d, name, run), {"requested_at": time.time(), "grace": grace})
        started = step.read_json(step.run_file(d, name, run))
        if not started:
            return  # the supervisor will not start it
        step_id = started.get("step", "")
        self._scancel("--signal=TERM", step_id)
        if not self._wait_for_exits(handle, [name], grace + KILL_MARGIN):
            self._scancel("--signal=KILL", step_id)
            self._wait_for_exits(handle, [name], 5.0)

    def restart_instance(self, handle: dict, name: str) -> dict:
        job = self.job(handle)
        if not job.active or job.waiting:
            raise BackendError(
                f"cannot restart {name} in Slurm job {handle['slurm_job_id']}: the allocation is "
                f"{job.state or 'gone'}; restart the whole attempt instead"
            )
        d = handle["attempt_dir"]
        run = self._current_run(handle, name)
        if step.read_json(step.run_file(d, name, run)) and not step.read_json(step.exit_file(d, name, run)):
            self.stop_instance(handle, name)
        log = step.log_file(d, name)
        with open(log, "ab") as fh:
            needs_newline = fh.tell() > 0 and self.tail_log(handle, name, 1) != b"\n"
            stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            fh.write(
                (b"\n" if needs_newline else b"")
                + f"===== vigil: {name} restarted (run {run + 1} of "
                f"attempt {handle['attempt']}) at {stamp} =====\n".encode()
            )
        step.write_json(step.restart_request(d, name, run + 1), {"requested_at": time.time()})
        new = json.loads(json.dumps(handle))
        for inst in new["instances"]:
            if inst["name"] == name:
                inst["run"] = run + 1
        return new

    # -- logs ----------------------------------------------------------------------------------

    def log_path(self, handle: dict, name: str) -> str | None:
        self.check_instance(handle, name)
        return step.log_file(handle["attempt_dir"], name)

    def read_log(self, handle: dict, name: str, offset: int = 0, limit: int | None = None) -> bytes:
        return read_log_file(self.log_path(handle, name), offset, limit)

    def tail_log(self, handle: dict, name: str, nbytes: int) -> bytes:
        return tail_log_file(self.log_path(handle, name), nbytes)

    # -- nodes -------------------------------------------------------------------------------------

    def list_nodes(self) -> list[Node]:
        return _nodes(self._sinfo_nodes())

    def _sinfo_nodes(self) -> list[SlurmNode]:
        res = self._run("sinfo", "--json", check=False) if self.opts["use_json"] else None
        if res is not None and res.returncode == 0:
            try:
                data = json.loads(res.stdout)
            except json.JSONDecodeError:
                data = None  # a build without the JSON serializer prints something else
            # With the controller down, 22.05 exits 0 with "errors" and no nodes: the text
            # form below then fails with Slurm's own words.
            if isinstance(data, dict) and not data.get("errors"):
                return nodes_from_sinfo_json(data, self.opts["partition"])
        part = [f"--partition={self.opts['partition']}"] if self.opts["partition"] else []
        res = self._run("sinfo", "-h", "-N", *part, "-o", "%N|%c|%T|%E")
        return nodes_from_sinfo_text(res.stdout)

    def isolate_node(self, name: str, reason: str) -> None:
        if not reason.strip():
            raise BackendError("isolate_node: reason must name the Vigil job and diagnosis")
        text = reason if reason.lower().startswith("vigil") else f"Vigil: {reason}"
        self._run("scontrol", "update", f"NodeName={name}", "State=DRAIN", f"Reason={text}")

    def restore_node(self, name: str) -> None:
        res = self._run("scontrol", "update", f"NodeName={name}", "State=RESUME", check=False)
        if res.returncode != 0 and "invalid node state" not in (res.stderr or "").lower():
            raise self._refusal([self._tool("scontrol"), "update"], res)

    # -- diagnostics ---------------------------------------------------------------------------

    def pids(self, handle: dict, name: str) -> list[int]:
        """The instance's PID when it runs on this very host (else [], see dump_stacks)."""
        files = self._files(handle, self.check_instance(handle, name))
        started = files.started or {}
        if (
            started.get("pid")
            and not files.exited
            and started.get("node") in (socket.gethostname(), socket.gethostname().split(".")[0])
        ):
            return [int(started["pid"])]
        return []

    def flight_recorder_dumps(self, handle: dict) -> dict[int, bytes]:
        """rank -> the newest Flight Recorder dump of that rank, read from the instances'
        c4d/ directories in the attempt's shared directory, where the hook on each node
        writes them (fr_files.read_dumps: regular files only, never through a link)."""
        d = handle["attempt_dir"]
        return fr_files.read_dumps(step.fr_dir(d, inst["name"]) for inst in handle.get("instances") or ())

    def request_flight_recorder_dumps(self, handle: dict, timeout: float = 3.0) -> dict[str, list[int]]:
        """Ask the running instances' hooks, on whatever node, for a fresh dump through the
        shared directory (fr_files.ask_for_dumps) and wait for their answers."""
        d = handle["attempt_dir"]
        running = {}
        for inst in handle.get("instances") or ():
            files = self._files(handle, inst)
            if files.started and not files.exited:
                running[inst["name"]] = step.fr_dir(d, inst["name"])
        return fr_files.ask_for_dumps(running, timeout) if running else {}

    def dump_stacks(self, handle: dict, name: str, timeout: float = 30.0) -> list[dict]:
        """Stacks of the instance's Python processes, taken on its node by a step that overlaps
        the job: [{"pid", "cmdline", "stacks": py-spy's JSON threads or None, "error"}]."""
        files = self._files(handle, self.check_instance(handle, name))
        started = files.started
        if not started or files.exited:
            raise BackendError(f"{name} is not running (no stack to dump)")
        silent = [n for n in self.list_nodes() if n.name == started["node"] and n.reason == NOT_RESPONDING]
        if silent:
            # srun would wait for a node that does not answer until its timeout.
            raise BackendError(f"node {started['node']} does not answer Slurm ({NOT_RESPONDING}): no stacks of {name}")
        script = os.path.join(handle["attempt_dir"], "runtime", "slurm_step.py")
        res = self._run(
            "srun",
            "--overlap",
            f"--jobid={handle['slurm_job_id']}",
            "--ntasks=1",
            "--nodes=1",
            f"--nodelist={started['node']}",
            "--export=ALL",
            "--quiet",
            self.opts["python"],
            script,
            "stacks",
            str(started["pid"]),
            self.opts["py_spy"],
            timeout=timeout,
        )
        try:
            return json.loads(res.stdout)
        except json.JSONDecodeError:
            raise BackendError(
                f"the stack dump of {name} gave no JSON: {res.stdout[-300:]} {res.stderr[-300:]}"
            ) from None
