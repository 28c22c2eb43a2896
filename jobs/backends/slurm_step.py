"""What runs inside a Slurm allocation for the Slurm backend: the supervisor and the instance wrapper.

The Slurm backend copies this file, base.py and frameworks.py into the attempt's
directory (which every node of the cluster can read) and submits a batch script
that runs `python3 slurm_step.py supervise <attempt_dir>` on the first node.

- The supervisor decides placement within the allocation Slurm gave (block
  distribution over SLURM_JOB_NODELIST / SLURM_TASKS_PER_NODE), computes the
  framework environment with frameworks.py (MASTER_ADDR is the first node), then
  starts one `srun --exact -n1 -N1 -w <node>` step per instance and waits. It also
  picks up restart requests the console writes into `requests/` (Async jobs
  restart one instance as a new step in the same allocation), and it records an
  exit for a step whose wrapper died without writing one.
- The instance wrapper (`slurm_step.py instance <attempt_dir> <name> <run>`) runs
  the user's command with its output in the instance's log, forwards SIGTERM, and
  writes the exit code, signal and time atomically before the step ends; then it
  announces the exit on Redis when it can reach it.

Standard library only: it runs on cluster nodes, not in the console's venv.
Files of an attempt directory (all JSON written by write-to-temp + rename):

    attempt.json                      what to run (written by the backend)
    allocation.json                   placements and per-instance env (supervisor)
    stop.json                         the console asked to stop the attempt
    requests/restart-<name>-<run>.json  the console asks for run <run> of <name>
    instances/<name>/output.log       the instance's stdout+stderr, all runs
    instances/<name>/run-<run>.json   started: node, pid, step id, time
    instances/<name>/exit-<run>.json  ended: exit code, signal, time, reason
    instances/<name>/stop-<run>.json  the console asked to stop this run
    instances/<name>/srun-<run>.err   srun's own messages for the run ("Node failure on n3")
    instances/<name>/c4d/             C4D on: the Flight Recorder's dumps per rank, the
                                      console's request for a fresh one (fr_files.py)
    runtime/boot/                     C4D on: the start-up hook every step's Python runs
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import zlib

try:  # imported as part of jobs.backends
    from . import fr_files
    from .base import InstanceLaunch
    from .frameworks import Placement, framework_setup, instance_environment
    from .noderedis import publish, redis_target
except ImportError:  # run as a script from the attempt's runtime copy
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from vigil_runtime import fr_files  # type: ignore[no-redef]
    from vigil_runtime.base import InstanceLaunch  # type: ignore[no-redef]
    from vigil_runtime.frameworks import (  # type: ignore[no-redef]
        Placement,
        framework_setup,
        instance_environment,
    )
    from vigil_runtime.noderedis import publish, redis_target  # type: ignore[no-redef]

EXIT_CHANNEL = "vigil:instance-exit"
ANNOUNCE_DEADLINE = 1.0  # seconds; the exit is on disk already, the sweep finds it without Redis
POLL_INTERVAL = 0.3


# -- files ---------------------------------------------------------------------


def write_json(path: str, data: dict) -> None:
    """Write atomically: readers on other nodes see the old file or the whole new one.

    Owner-only: attempt.json holds the job's token, the rest is nobody else's business.
    The file belongs to whoever owns its directory (a root console writing a stop or
    restart request into the directory of an allocation that runs as the workspace's
    user gives it to that user, before anyone can read it)."""
    tmp = f"{path}.tmp-{socket.gethostname()}-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh)
        fh.flush()
        os.fsync(fh.fileno())
        if os.geteuid() == 0:
            st = os.stat(os.path.dirname(path) or ".")
            if st.st_uid != 0:
                os.fchown(fh.fileno(), st.st_uid, st.st_gid)
    os.replace(tmp, path)


def read_json(path: str) -> dict | None:
    try:
        with open(path) as fh:
            return json.load(fh)
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def instance_dir(attempt_dir: str, name: str) -> str:
    return os.path.join(attempt_dir, "instances", name)


def run_file(attempt_dir: str, name: str, run: int) -> str:
    return os.path.join(instance_dir(attempt_dir, name), f"run-{run}.json")


def exit_file(attempt_dir: str, name: str, run: int) -> str:
    return os.path.join(instance_dir(attempt_dir, name), f"exit-{run}.json")


def stop_file(attempt_dir: str, name: str, run: int) -> str:
    return os.path.join(instance_dir(attempt_dir, name), f"stop-{run}.json")


def log_file(attempt_dir: str, name: str) -> str:
    return os.path.join(instance_dir(attempt_dir, name), "output.log")


BOOT = "boot"  # under runtime/: the start-up hook as sitecustomize.py, and its SDK copy


def fr_dir(attempt_dir: str, name: str) -> str:
    return os.path.join(instance_dir(attempt_dir, name), fr_files.FR_DIR)


def recorder_env(attempt_dir: str, name: str, env: dict) -> dict:
    """C4D on (VIGIL_C4D=1 and the backend installed the hook): the recorder's and the
    hook's environment for this step, pointing at the attempt's shared directory. The
    previous run's dumps go first: a restarted rank counts its collectives from 1 again."""
    boot = os.path.join(attempt_dir, "runtime", BOOT)
    fr = fr_dir(attempt_dir, name)
    if env.get("VIGIL_C4D") != "1" or not os.path.isdir(boot) or not os.path.isdir(fr):
        return {}
    for entry in os.listdir(fr):
        if fr_files.FR_DUMP_NAME.match(entry) or fr_files.ANSWER_NAME.match(entry):
            try:
                os.unlink(os.path.join(fr, entry))
            except OSError:
                pass
    sdk = os.path.join(boot, "sdk")
    return fr_files.recorder_env(fr, boot, env, sdk if os.path.isdir(sdk) else None)


def restart_request(attempt_dir: str, name: str, run: int) -> str:
    return os.path.join(attempt_dir, "requests", f"restart-{name}-{run}.json")


# -- placement (pure) ---------------------------------------------------------------


def expand_tasks_per_node(text: str) -> list[int]:
    """SLURM_TASKS_PER_NODE "2(x3),1" -> [2, 2, 2, 1]."""
    out: list[int] = []
    for part in filter(None, text.split(",")):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not m:
            raise ValueError(f"SLURM_TASKS_PER_NODE: cannot read {text!r}")
        out.extend([int(m.group(1))] * int(m.group(2) or 1))
    return out


def place_instances(ranked_names: list[str], nodes: list[str], slots: list[int]) -> dict[str, str]:
    """Block distribution as Slurm does for tasks: fill the first node's slots, then the next."""
    if len(nodes) != len(slots):
        raise ValueError(f"{len(nodes)} nodes but {len(slots)} task counts")
    order = [node for node, n in zip(nodes, slots) for _ in range(n)]
    if len(order) < len(ranked_names):
        raise ValueError(f"the allocation has {len(order)} task slots for {len(ranked_names)} instances")
    return dict(zip(ranked_names, order))


def attempt_ports(job_id: str, attempt: int, count: int, base: int, span: int) -> list[int]:
    """One port per instance, different from the previous attempt's (so a lingering
    rendezvous of attempt n-1 cannot capture attempt n), spread per job."""
    offset = zlib.crc32(str(job_id).encode()) % span
    return [base + (offset + attempt * count + i) % span for i in range(count)]


# -- the supervisor ------------------------------------------------------------------


def last_line(path: str, nbytes: int = 2000) -> str:
    """The last non-empty line of a file ("" if none): the gist of an error log."""
    return last_lines(path, 1, nbytes)


def last_lines(path: str, count: int, nbytes: int = 2000) -> str:
    """The last `count` non-empty lines of a file, joined with "; " ("" if none)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - nbytes))
            lines = [ln.strip() for ln in fh.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return "; ".join(line[:300] for line in lines[-count:])


def srun_said_file(attempt_dir: str, name: str, run: int) -> str:
    """Where srun's own messages for one run of an instance go (its stderr)."""
    return os.path.join(instance_dir(attempt_dir, name), f"srun-{run}.err")


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compressed host list, "gpu[01-03,07],cpu1" -> gpu01 gpu02 gpu03 gpu07 cpu1."""
    hosts: list[str] = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]+)\])?", text):
        prefix, ranges = m.group(1), m.group(2)
        if ranges is None:
            hosts.append(prefix)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            for n in range(int(lo), int(hi or lo) + 1):
                hosts.append(f"{prefix}{n:0{len(lo)}d}")
    return hosts


def _hostnames(nodelist: str) -> list[str]:
    try:
        out = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True, timeout=30
        )
        return out.stdout.split()
    except (OSError, subprocess.SubprocessError):
        return expand_hostlist(nodelist)  # scontrol not on this node's PATH


def allocate(attempt_dir: str, spec: dict) -> dict:
    """Decide placement and environment once per attempt; written to allocation.json."""
    opts = spec["options"]
    nodes = _hostnames(os.environ["SLURM_JOB_NODELIST"])
    slots = expand_tasks_per_node(os.environ.get("SLURM_TASKS_PER_NODE", str(len(spec["instances"]))))
    instances = tuple(
        InstanceLaunch(i["name"], i["role"], i["index"], i["rank"], i["command"], i.get("env") or {})
        for i in spec["instances"]
    )
    ranked = [i.name for i in sorted(instances, key=lambda i: i.rank)]
    node_of = place_instances(ranked, nodes, slots)
    placements = {
        name: Placement(
            node=node_of[name],
            host=node_of[name],
            port=spec["ports"][name],
            dir=instance_dir(attempt_dir, name),
            slots=opts["slots_per_instance"],
        )
        for name in ranked
    }
    setup = framework_setup(spec["job_type"], spec["attempt"], instances, placements)
    for s in setup.values():
        for path, content in s.files.items():
            with open(path, "w") as fh:
                fh.write(content)
    allocation = {
        "nodes": nodes,
        "master_addr": nodes[0],
        "placements": {n: {"node": p.node, "host": p.host, "port": p.port} for n, p in placements.items()},
        "env": {n: s.env for n, s in setup.items()},
        "written_at": time.time(),
    }
    write_json(os.path.join(attempt_dir, "allocation.json"), allocation)
    return allocation


def srun_argv(attempt_dir: str, spec: dict, name: str, node: str, run: int) -> list[str]:
    opts = spec["options"]
    argv = [
        opts["srun"],
        "--export=ALL",
        "--exact",
        "--ntasks=1",
        "--nodes=1",
        f"--nodelist={node}",
        f"--cpus-per-task={opts['cpus_per_instance']}",
        f"--job-name={name}",
        "--kill-on-bad-exit=0",
        "--quiet",
        f"--output={instance_dir(attempt_dir, name)}/srun-{run}.log",
    ]
    if opts.get("gpus_per_instance"):
        argv.append(f"--gpus-per-task={opts['gpus_per_instance']}")
    argv += list(opts.get("srun_options") or ())
    argv += [opts["python"], os.path.abspath(__file__), "instance", attempt_dir, name, str(run)]
    return argv


def supervise(attempt_dir: str) -> int:
    spec = read_json(os.path.join(attempt_dir, "attempt.json"))
    if spec is None:
        print(f"vigil: no attempt.json in {attempt_dir}", file=sys.stderr)
        return 2
    os.makedirs(os.path.join(attempt_dir, "requests"), exist_ok=True)
    allocation = allocate(attempt_dir, spec)
    linger = float(spec["options"].get("linger", 0))
    steps: dict[str, tuple[int, subprocess.Popen]] = {}  # name -> (run, srun process)
    current = {i["name"]: 1 for i in spec["instances"]}
    # SIGTERM reaches the batch step only when the whole job is cancelled: let srun
    # and Slurm end the steps, and leave without waiting for them.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(143))

    def start(name: str, run: int) -> None:
        if os.path.exists(stop_file(attempt_dir, name, run)) or os.path.exists(os.path.join(attempt_dir, "stop.json")):
            write_json(
                exit_file(attempt_dir, name, run),
                {
                    "run": run,
                    "exit_code": None,
                    "signal": None,
                    "exited_at": time.time(),
                    "reason": "stopped before it started",
                },
            )
            return
        node = allocation["placements"][name]["node"]
        # srun's own words (a node failure, a step it could not launch) go to a file of this
        # run, not the batch log the instances share: they explain a step that left no exit
        # report of the instance's own.
        with open(srun_said_file(attempt_dir, name, run), "ab") as said:
            steps[name] = (
                run,
                subprocess.Popen(srun_argv(attempt_dir, spec, name, node, run), stdin=subprocess.DEVNULL, stderr=said),
            )

    for inst in spec["instances"]:
        start(inst["name"], 1)

    finished_at: float | None = None
    while True:
        for name, (run, proc) in list(steps.items()):
            rc = proc.poll()
            if rc is None:
                continue
            del steps[name]
            if read_json(exit_file(attempt_dir, name, run)) is None:
                # The wrapper was killed (SIGKILL, OOM killer), its node died or it never ran:
                # say so, in srun's words, else the last line the step printed.
                said = last_lines(srun_said_file(attempt_dir, name, run), 3) or last_line(
                    os.path.join(instance_dir(attempt_dir, name), f"srun-{run}.log")
                )
                write_json(
                    exit_file(attempt_dir, name, run),
                    {
                        "run": run,
                        "exit_code": None,
                        "signal": None,
                        "exited_at": time.time(),
                        "reason": f"step ended without a report from the instance (srun exit {rc})"
                        + (f": {said}" if said else ""),
                    },
                )
        for name in current:
            nxt = current[name] + 1
            req = restart_request(attempt_dir, name, nxt)
            if os.path.exists(req) and name not in steps:
                current[name] = nxt
                start(name, nxt)
                os.replace(req, req + ".done")
        if not steps:
            results = [read_json(exit_file(attempt_dir, n, r)) or {} for n, r in current.items()]
            all_ok = all(r.get("exit_code") == 0 for r in results)
            stopping = os.path.exists(os.path.join(attempt_dir, "stop.json"))
            finished_at = finished_at or time.time()
            if all_ok or stopping or time.time() - finished_at >= linger:
                return 0 if all_ok else 1
        else:
            finished_at = None
        time.sleep(POLL_INTERVAL)


# -- the instance wrapper ----------------------------------------------------------------


def command_argv(command) -> list[str]:
    if isinstance(command, (list, tuple)):
        return [str(c) for c in command]
    return ["/bin/sh", "-c", command]


def run_instance(attempt_dir: str, name: str, run: int) -> int:
    spec = read_json(os.path.join(attempt_dir, "attempt.json")) or {}
    allocation = read_json(os.path.join(attempt_dir, "allocation.json")) or {}
    inst = next(i for i in spec["instances"] if i["name"] == name)
    fw_env = dict(allocation["env"][name])
    if spec["job_type"] == "PyTorchJob":
        # Tools that read Slurm's task variables (Lightning, submitit) see the
        # instance's place in the job, not the single task of its own step.
        fw_env.update(
            SLURM_PROCID=fw_env["RANK"],
            SLURM_NTASKS=fw_env["WORLD_SIZE"],
            SLURM_LOCALID=fw_env["LOCAL_RANK"],
            SLURM_NODEID=fw_env["NODE_RANK"],
        )
    # Unbuffered Python output: the log's mtime is what hang detection watches.
    base = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env = instance_environment(base, spec.get("env") or {}, inst.get("env") or {}, fw_env)
    env["VIGIL_SLURM_STEP"] = f"{os.environ.get('SLURM_JOB_ID', '')}.{os.environ.get('SLURM_STEP_ID', '')}"
    env.update(recorder_env(attempt_dir, name, env))
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    workdir = spec.get("workdir") or instance_dir(attempt_dir, name)

    if os.path.exists(stop_file(attempt_dir, name, run)) or os.path.exists(os.path.join(attempt_dir, "stop.json")):
        # Asked to stop while its step was being created: do not start it at all.
        write_json(
            exit_file(attempt_dir, name, run),
            {
                "run": run,
                "exit_code": None,
                "signal": None,
                "exited_at": time.time(),
                "reason": "stopped before it started",
            },
        )
        return 0
    log = open(log_file(attempt_dir, name), "ab", buffering=0)
    started_at = time.time()  # before the child can write its first line
    try:
        # Its own process group, so that a signal reaches everything the command started;
        # and killed if this wrapper is, as Slurm's process tracking may miss orphans.
        child = subprocess.Popen(
            command_argv(inst["command"]),
            cwd=workdir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    except OSError as exc:
        log.write(f"vigil: cannot start {inst['command']!r}: {exc}\n".encode())
        write_json(
            exit_file(attempt_dir, name, run),
            {"run": run, "exit_code": 127, "signal": None, "exited_at": time.time(), "reason": f"cannot start: {exc}"},
        )
        return 127
    write_json(
        run_file(attempt_dir, name, run),
        {"run": run, "node": node, "pid": child.pid, "started_at": started_at, "step": env["VIGIL_SLURM_STEP"]},
    )

    kill_at: list[float] = []

    def forward(signum, _frame):
        _signal_group(child.pid, signum)
        if signum == signal.SIGTERM and not kill_at:
            # The grace period is enforced here, on the node: Slurm's own SIGKILL
            # (the console's backstop) may not reach processes that left the tree.
            kill_at.append(time.monotonic() + stop_grace(attempt_dir, spec, name, run))

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(signum, forward)
    while True:
        try:
            rc = child.wait(timeout=POLL_INTERVAL)
            break
        except subprocess.TimeoutExpired:
            if kill_at and time.monotonic() >= kill_at[0]:
                _signal_group(child.pid, signal.SIGKILL)
    _signal_group(child.pid, signal.SIGKILL)  # what the command left behind ends with it
    exited_at = time.time()
    log.close()
    code, sig = (None, -rc) if rc < 0 else (rc, None)
    write_json(
        exit_file(attempt_dir, name, run),
        {"run": run, "exit_code": code, "signal": sig, "exited_at": exited_at, "reason": ""},
    )
    redis = redis_target(spec["options"].get("redis_url", ""), spec["options"].get("exit_channel") or EXIT_CHANNEL)
    publish(
        redis,
        json.dumps(
            {
                "job_id": spec["job_id"],
                "attempt": spec["attempt"],
                "instance": name,
                "exit_code": code,
                "signal": sig,
                "exited_at": exited_at,
            }
        ),
        ANNOUNCE_DEADLINE,
    )
    return rc if rc >= 0 else 128 - rc


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the wrapper dies (Linux PR_SET_PDEATHSIG)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
    except Exception:  # not Linux or no libc: the process group still catches it
        pass


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def stop_grace(attempt_dir: str, spec: dict, name: str, run: int) -> float:
    """Seconds between SIGTERM and SIGKILL: as the console's stop asked, else the backend's."""
    for path in (stop_file(attempt_dir, name, run), os.path.join(attempt_dir, "stop.json")):
        asked = read_json(path)
        if asked and isinstance(asked.get("grace"), (int, float)):
            return float(asked["grace"])
    return float(spec["options"].get("grace", 15))


# -- stack dumps on the node ------------------------------------------------------------------


def descendants(root: int) -> list[int]:
    """`root` and every process below it, from /proc (the user's command may be a shell
    running Python, or a launcher with worker processes)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop(0)
        out.append(pid)
        todo.extend(sorted(children.get(pid, ())))
    return out


def dump_stacks(root: int, py_spy: str, timeout: float = 10.0) -> list[dict]:
    """py-spy's JSON stacks of every Python process of the instance; other processes are skipped."""
    result = []
    for pid in descendants(root):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        try:
            done = subprocess.run(
                [py_spy, "dump", "--json", "--pid", str(pid)], capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            result.append(
                {"pid": pid, "cmdline": cmdline, "stacks": None, "error": f"py-spy took longer than {timeout:g} s"}
            )
            continue
        except OSError as exc:
            return [{"pid": root, "cmdline": "", "stacks": None, "error": f"cannot run {py_spy}: {exc}"}]
        if done.returncode == 0:
            try:
                result.append({"pid": pid, "cmdline": cmdline, "stacks": json.loads(done.stdout), "error": ""})
                continue
            except json.JSONDecodeError:
                pass
        try:
            exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
        except OSError:
            exe = ""
        if "python version" in done.stderr.lower() and "python" not in exe.lower():
            continue  # a shell or a launcher that is not Python: nothing to dump
        first = next((ln for ln in done.stderr.splitlines() if ln.strip()), "no output")
        result.append({"pid": pid, "cmdline": cmdline, "stacks": None, "error": first.strip()})
    return result


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "supervise":
        return supervise(argv[1])
    if len(argv) >= 4 and argv[0] == "instance":
        return run_instance(argv[1], argv[2], int(argv[3]))
    if len(argv) >= 3 and argv[0] == "stacks":
        print(json.dumps(dump_stacks(int(argv[1]), argv[2])))
        return 0
    print(
        "usage: slurm_step.py supervise <attempt_dir> | instance <attempt_dir> <name> <run> | stacks <pid> <py-spy>",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
