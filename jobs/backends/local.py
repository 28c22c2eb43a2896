"""The local backend: instances are processes on this machine, each under a shim.

Layout under the data dir (option `data_dir`):

    <data>/nodes.json                    isolated nodes (atomic writes, flock'd)
    <data>/jobs/<job_id>/work/           default working directory of every attempt
    <data>/jobs/<job_id>/attempt-<n>/attempt.json          the handle, ports, placement
    <data>/jobs/<job_id>/attempt-<n>/<instance>/spec.json  what the shim runs (env, command)
                                               output.log  combined stdout+stderr
                                               state.json  shim/child PIDs + start times
                                               exit.json   exit code, signal, time
                                               stop.json   a stop was requested (run, time)
                                               shim.log    the shim's own errors

Everything the backend knows is on disk, written by the shims, so any process
(console, a Celery worker, a fresh one after a restart) can poll, stop and read
logs of any attempt: re-adoption is just reading. PIDs are trusted only when
their /proc start time matches what the shim recorded, so a recycled PID is
never taken for an instance.

Restarting one instance (Async jobs) keeps its directory: the previous run's
state.json/exit.json are kept as state.<run>.json/exit.<run>.json, a separator
line is appended to output.log and a fresh shim starts run n+1.

Virtual nodes: option `nodes` ([{"name", "slots"}]) presents this machine as
several nodes; an instance takes one slot; placement fills nodes in order,
skipping isolated and avoided nodes; when no node has a free slot the instance
is still placed on the least loaded node and its reason says it is
oversubscribed. Slots are counted within one attempt.

Environment of an instance: a few inherited variables (option `inherit_env`),
PYTHONUNBUFFERED=1 (so the log's mtime tracks output), then the attempt's env,
the instance's env, and last the framework and VIGIL_* variables, which the
user cannot override (frameworks.py says why). Nothing else of the console's
environment (REDIS_URL, SECRET_KEY, DATABASE_URL) reaches a job: the shim, not
the job, reports the exit.

As which OS user (osuser.py): when the backend runs as root, each job runs as
the workspace's `run_as` user or else option `run_as` (VIGIL_LOCAL_RUN_AS,
default `nobody`), never as root unless option `allow_root`
(VIGIL_LOCAL_ALLOW_ROOT=1). The shim stays root and drops privileges for the
job's process only. Then the tree is laid out so that a job reaches only what
is its own:

    <data>, jobs/, jobs/<job_id>/, attempt-<n>/, <instance>/   root, 0711: pass through, never list
    every file the backend or shim writes (spec.json, attempt.json,
    state/exit/stop.json, output.log, shim.log)               root, 0600
    <instance>/home/    the job's HOME, TMPDIR (home/tmp) and XDG_CACHE_HOME (home/.cache), job user, 0700
    jobs/<job_id>/work/ the default working directory, job user, 0700

Without a switch (the backend is not root, or jobs run as root on purpose)
the directories are 0700 and HOME/TMPDIR are inherited as before.

What a job may reach is asked as its user, never judged as root (issues 28, 31):
the workdir and the command's program are checked by a /bin/sh run as that user
before the launch, and the shim enters the workdir only after dropping
privileges. Two workspaces' jobs do not run as one user at once (they could
read each other's /proc/<pid>/environ) unless option `shared_run_as`
(VIGIL_SHARED_RUN_AS=1): <data>/users/<uid>.json records who runs as whom.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import random
import shlex
import shutil
import signal as signals
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from urllib.parse import urlsplit

import psutil

from core.warmstart import EntryKind, startup_env_difference, warm_entry

from . import frameworks, fr_files, osuser, shim
from .noderedis import redis_target
from .. import faults
from .base import (
    AttemptLaunch,
    Backend,
    BackendError,
    InstanceState,
    PolledInstance,
    LaunchInProgress,
    Node,
    read_log_file,
    tail_log_file,
    SAFE_NAME,
)

SHIM_PATH = shim.__file__
DEFAULT_INHERIT = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "SHELL")
LOG = "output.log"
STOP = "stop.json"
ATTEMPT = "attempt.json"
# The attempt's torchft Lighthouse (replica groups, issue 30): its shim's directory beside the instances'.
LIGHTHOUSE = "lighthouse"
LIGHTHOUSE_PROGRAM = "torchft_lighthouse"  # torchft's console script (it parses the process's own argv)
LIGHTHOUSE_QUORUM_TICK_MS = 100
LAUNCH = "launch.json"  # who claimed the attempt, and when its launch completed
NODES = "nodes.json"
USERS = "users"  # <data>/users/<uid>.json: which workspace's jobs run as that OS user (root, 0600)
# C4D from PyTorch's Flight Recorder (_flight_recorder_env): fr_files is shared with Slurm's nodes.
FR_DIR = fr_files.FR_DIR
START_GRACE = 10.0  # seconds a launched instance may stay without state.json before it is LOST
WARM = "warm"  # <job>/warm/attempt-<n>/<instance>/: the parked shim standing by for attempt n
STANDBY_NICE = 19  # parked interpreters import at the lowest priority: the running attempt comes first


# Words that make a command more than one plain program: left to the shell.
_SHELL_WORDS = frozenset(
    "! { } ( ) if then else elif fi for while until do done case esac in function time "
    ". : alias break cd command continue eval exec exit export local read readonly return "
    "set shift source test [ trap true false type ulimit umask unset wait env nohup".split()
)
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def _program(command: str) -> str | None:
    """The program a shell command line starts, when it is one plain program (leading
    NAME=value assignments skipped); None for anything else (builtins, syntax, quoting)."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        return None
    while words and _ASSIGNMENT.match(words[0]):
        words.pop(0)
    if not words or words[0] in _SHELL_WORDS or not re.fullmatch(r"[A-Za-z0-9_./+-]+", words[0]):
        return None
    return words[0]


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


class LocalBackend(Backend):
    can_dump_stacks = True
    can_isolate_nodes = True
    can_run_replica_groups = True

    def __init__(
        self,
        name: str = "local",
        *,
        data_dir: str | None = None,
        nodes: list[dict] | None = None,
        host: str = "127.0.0.1",
        grace: float = 15.0,
        kill_wait: float = 5.0,
        start_timeout: float = 10.0,
        leftover_grace: float = 2.0,
        redis_url: str | None = "",
        channel_prefix: str = "vigil",
        inherit_env: list[str] | tuple[str, ...] = DEFAULT_INHERIT,
        python: str | None = None,
        run_as: str = osuser.DEFAULT_RUN_AS,
        allow_root: bool = False,
        shared_run_as: bool = False,
        standby_linger: float = 60.0,
    ):
        super().__init__(name)
        data_dir = data_dir or os.environ.get("VIGIL_DATA_DIR") or os.path.join("var", "local-backend")
        self.data_dir = os.path.abspath(data_dir)
        self.nodes = self._check_nodes(nodes)
        self.host = host
        self.grace = self._positive("grace", grace, zero_ok=True)
        self.kill_wait = self._positive("kill_wait", kill_wait)
        self.start_timeout = self._positive("start_timeout", start_timeout)
        self.leftover_grace = self._positive("leftover_grace", leftover_grace, zero_ok=True)
        if redis_url == "":
            redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
        self.redis = self._parse_redis(redis_url, channel_prefix)
        self.inherit_env = tuple(inherit_env)
        self.python = python or sys.executable
        if not isinstance(run_as, str) or not run_as:
            raise BackendError(f"local backend option 'run_as': {run_as!r} is not an OS user name")
        self.run_as = run_as
        self.allow_root = bool(allow_root)
        self.shared_run_as = bool(shared_run_as)
        # How long a parked interpreter waits for the next attempt once the attempt it
        # stands by for has no live instance: a restart launches within seconds; a job
        # that ended (or whose console is gone) must not keep it.
        self.standby_linger = self._positive("standby_linger", standby_linger)
        os.makedirs(os.path.join(self.data_dir, "jobs"), mode=0o700, exist_ok=True)

    # -- options -------------------------------------------------------------
    @staticmethod
    def _positive(option, value, zero_ok=False):
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise BackendError(f"local backend option {option!r}: {value!r} is not a number of seconds")
        if value < 0 or (value == 0 and not zero_ok):
            raise BackendError(f"local backend option {option!r}: must be {'>= 0' if zero_ok else '> 0'}")
        return value

    @staticmethod
    def _check_nodes(nodes):
        if nodes is None:
            return [{"name": socket.gethostname() or "localhost", "slots": os.cpu_count() or 1}]
        if not isinstance(nodes, (list, tuple)) or not nodes:
            raise BackendError("local backend option 'nodes': give a non-empty list of {'name', 'slots'}")
        out, seen = [], set()
        for i, node in enumerate(nodes):
            name = node.get("name") if isinstance(node, dict) else None
            slots = node.get("slots") if isinstance(node, dict) else None
            if not isinstance(name, str) or not SAFE_NAME.match(name):
                raise BackendError(
                    f"local backend option 'nodes[{i}].name': {name!r} is not a node name "
                    "(letters, digits, '_', '.', '-')"
                )
            if not isinstance(slots, int) or isinstance(slots, bool) or slots < 1:
                raise BackendError(f"local backend option 'nodes[{i}].slots': {slots!r} is not an integer >= 1")
            if name in seen:
                raise BackendError(f"local backend option 'nodes[{i}].name': {name!r} appears twice")
            seen.add(name)
            out.append({"name": name, "slots": slots})
        return out

    @staticmethod
    def _parse_redis(url, channel_prefix):
        if not url:
            return None
        if urlsplit(url).scheme != "redis":
            raise BackendError(f"local backend option 'redis_url': {url!r} is not redis://host:port/db")
        return redis_target(url, f"{channel_prefix}:instance-exit")

    @property
    def exit_channel(self) -> str | None:
        return self.redis["channel"] if self.redis else None

    # -- paths ---------------------------------------------------------------
    def attempt_dir(self, job_id, attempt) -> str:
        return os.path.join(self.data_dir, "jobs", str(job_id), f"attempt-{int(attempt)}")

    def _instance_dir(self, handle, name) -> str:
        self.check_instance(handle, name)
        return os.path.join(handle["dir"], name)

    # -- launch --------------------------------------------------------------
    def identity(self, requested: str = "") -> osuser.RunAs:
        """Who a job of a workspace asking for `requested` ("" = nothing) runs as."""
        return osuser.resolve_run_as(requested, default=self.run_as, allow_root=self.allow_root)

    # A launch is a sequence of steps, each of which a worker death may interrupt:
    # claim (the attempt directory, launch.json naming the launcher), spec.json per
    # instance, attempt.json (the handle), each shim started, each shim ready, and
    # last launch.json marked "launched". The whole sequence runs under an flock on
    # the job's directory, which the kernel drops the moment the launcher dies, so
    # a later launch of the same attempt can tell "someone is launching it right
    # now" (the lock is held) from "its launcher died half-way" (the lock is free
    # and launch.json is not marked launched). A half-launch is completed when every
    # shim had started, and otherwise cleaned up (every shim and rank it started is
    # killed by PID) and launched again from the start.
    def launch(self, spec: AttemptLaunch) -> dict:
        self._check_spec(spec)
        who = self.identity(spec.run_as)
        self._check_workdir(spec.workdir, who)
        self._check_command(spec, who)
        attempt_dir = self.attempt_dir(spec.job_id, spec.attempt)
        self._private_dirs(os.path.dirname(attempt_dir), who)
        with self._launch_lock(spec.job_id, spec.attempt):
            if os.path.isdir(attempt_dir):
                handle = self._resume(attempt_dir)
                if handle is not None:
                    self._park_next(spec, handle)
                    return handle
            self._claim_user(spec, who, attempt_dir)
            os.mkdir(attempt_dir)  # the claim
            os.chmod(attempt_dir, _dir_mode(who))
            shim.write_json_atomic(
                os.path.join(attempt_dir, LAUNCH),
                {
                    "pid": os.getpid(),
                    "start": shim.proc_start_ticks(os.getpid()),
                    "boot_id": _BOOT_ID,
                    "claimed_at": time.time(),
                    "launched_at": None,
                },
            )
            faults.point("launch.after_claim")
            try:
                handle = self._launch_claimed(spec, attempt_dir, who)
                self._mark_launched(attempt_dir)
            except BaseException:
                self._abandon(attempt_dir)
                raise
            self._park_next(spec, handle)
            return handle

    @contextmanager
    def _launch_lock(self, job_id, attempt):
        """Held for a whole launch of one job's attempt; LaunchInProgress if another process holds it."""
        fd = os.open(os.path.dirname(self.attempt_dir(job_id, attempt)), os.O_RDONLY | os.O_DIRECTORY)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise LaunchInProgress(f"attempt {attempt} of job {job_id} is being launched by another process")
            yield
        finally:
            os.close(fd)  # drops the lock

    def _mark_launched(self, attempt_dir):
        claim = shim.read_json(os.path.join(attempt_dir, LAUNCH)) or {}
        claim["launched_at"] = time.time()
        shim.write_json_atomic(os.path.join(attempt_dir, LAUNCH), claim)

    def _resume(self, attempt_dir) -> dict | None:
        """An attempt directory exists and nobody is launching it (we hold the lock):
        the handle if it was launched, or completed now; None once a half-launch is
        cleaned up and moved aside (the caller launches afresh)."""
        claim = shim.read_json(os.path.join(attempt_dir, LAUNCH))
        handle = shim.read_json(os.path.join(attempt_dir, ATTEMPT))
        if handle is not None and (claim is None or claim.get("launched_at")):
            return handle  # launched (a directory without launch.json predates it: launched too)
        if handle is not None and all(
            any(os.path.exists(os.path.join(attempt_dir, i["name"], f)) for f in (shim.STATE, shim.EXIT))
            for i in handle["instances"]
        ):
            self._mark_launched(attempt_dir)  # every shim had started its rank: complete it
            return handle
        self._abandon(attempt_dir)
        return None

    def _private_dirs(self, job_dir: str, who: osuser.RunAs) -> None:
        """The data dir, jobs/ and the job's directory exist with the modes of the layout:
        0711 when jobs run as another user (they pass through to their own files), else 0700."""
        mode = _dir_mode(who)
        for d in (self.data_dir, os.path.join(self.data_dir, "jobs"), job_dir):
            os.makedirs(d, mode=mode, exist_ok=True)
            if os.stat(d).st_uid == os.geteuid() and (os.stat(d).st_mode & 0o777) != mode:
                os.chmod(d, mode)
        if who.switch:
            blocked = osuser.blocked_ancestor(job_dir, who)
            if blocked:
                raise BackendError(
                    f"jobs run as OS user {who.name!r}, who cannot pass through {blocked}: "
                    f"give it the search (x) permission or move the data dir "
                    f"({self.data_dir})"
                )

    def _claim_user(self, spec: AttemptLaunch, who: osuser.RunAs, attempt_dir: str) -> None:
        """Record that `who` now runs a job of spec's workspace, or refuse when a live job
        of another workspace runs as that user (issue 31): processes of one OS user read
        each other's /proc/<pid>/environ, the job's token and secret envs included. Off
        with option shared_run_as (VIGIL_SHARED_RUN_AS=1); moot without a switch (the
        console's own user, or root on purpose, is one user for every job anyway).

        <data>/users/<uid>.json maps job ids to {workspace, dir, at}, read and written
        under an flock; an entry counts while a shim of its attempt lives, or while it is
        not yet launched and younger than the start timeout (its shims may be starting),
        and is dropped otherwise."""
        if not who.switch or self.shared_run_as or not spec.workspace:
            return
        users = os.path.join(self.data_dir, USERS)
        os.makedirs(users, mode=0o700, exist_ok=True)
        path = os.path.join(users, f"{who.uid}.json")
        fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            table = shim.read_json(path) or {}
            now = time.time()
            live = {}
            for job_id, entry in table.items():
                if not isinstance(entry, dict) or job_id == str(spec.job_id):
                    continue
                dir_ = str(entry.get("dir") or "")
                # Not launched yet (no launch.json: the claim is being written right after
                # this lock is let go, or a failed try moved it aside): its shims may be starting.
                claim = (shim.read_json(os.path.join(dir_, LAUNCH)) if dir_ else None) or {}
                launching = not claim.get("launched_at")
                young = launching and now - float(entry.get("at") or 0) < self.start_timeout + 5.0
                if young or shim._any_shim_alive(dir_):
                    live[job_id] = entry
            if any(e.get("workspace") != spec.workspace for e in live.values()):
                raise BackendError(
                    f"this workspace's jobs run as OS user {who.name!r}, as a running job of another "
                    "workspace does, and one user's processes can read each other's environment "
                    "(/proc/<pid>/environ: job tokens and secret envs): give this workspace its own "
                    "OS user (its run_as, set by staff in the admin), or set VIGIL_SHARED_RUN_AS=1 "
                    "to let workspaces share it (docs/security.md)"
                )
            live[str(spec.job_id)] = {"workspace": spec.workspace, "dir": attempt_dir, "at": now}
            shim.write_json_atomic(path, live)
        finally:
            os.close(fd)

    def _job_owned_dir(self, path: str, who: osuser.RunAs) -> None:
        """A directory the job writes to: 0700 and the job user's (files moved on if the
        workspace's user changed since an earlier attempt)."""
        os.makedirs(path, mode=0o700, exist_ok=True)
        if not who.switch:
            return
        if os.stat(path).st_uid != who.uid:
            for root, dirs, files in os.walk(path):
                for name in dirs + files:
                    os.chown(os.path.join(root, name), who.uid, who.gid, follow_symlinks=False)
            os.chown(path, who.uid, who.gid)
        os.chmod(path, 0o700)

    def _abandon(self, attempt_dir):
        """A launch failed or died half-way: kill every shim and rank it started and
        move the directory aside, so that the attempt can be launched again from the
        start and the failed try stays readable."""
        self._kill_launch_processes(attempt_dir)
        parent, base = os.path.split(attempt_dir)
        aside = os.path.join(parent, f"failed-{base}-{time.time():.0f}-{os.getpid()}")
        try:
            os.rename(attempt_dir, aside)
        except OSError:
            pass

    def _kill_launch_processes(self, attempt_dir) -> list[int]:
        """SIGKILL every shim of the attempt and everything below it, found by the PIDs
        in state.json and by a shim's command line (one that had not written state.json
        yet). Shims are frozen first, so none can start a rank while we look."""
        prefix = attempt_dir.rstrip(os.sep) + os.sep
        shims, groups, pids = set(), set(), set()
        for state in (
            shim.read_json(os.path.join(attempt_dir, e, shim.STATE))
            for e in _listdir(attempt_dir)
            if os.path.isdir(os.path.join(attempt_dir, e))
        ):
            if not state:
                continue
            pgid, found = self._processes(state)
            groups.update([pgid] if pgid else [])
            pids.update(found)
            if _same_process(state.get("shim_pid"), state.get("shim_start"), state.get("boot_id")):
                shims.add(state["shim_pid"])
        for proc in psutil.process_iter(["cmdline"]):
            cmd = proc.info.get("cmdline") or []
            if SHIM_PATH in cmd and any(isinstance(a, str) and a.startswith(prefix) for a in cmd):
                shims.add(proc.pid)
        for pid in shims:
            _send(pid, signals.SIGSTOP)
        for pid in shims:
            try:
                pids.update(p.pid for p in psutil.Process(pid).children(recursive=True))
            except psutil.Error:
                pass
        for pgid in groups:
            try:
                os.killpg(pgid, signals.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in pids | shims:
            _send(pid, signals.SIGKILL)
        ticks = {pid: t for pid in pids | shims if (t := shim.proc_start_ticks(pid)) is not None}
        deadline = time.monotonic() + self.kill_wait
        while any(shim.proc_start_ticks(p) == t for p, t in ticks.items()) and time.monotonic() < deadline:
            time.sleep(0.01)
        return sorted(pids | shims)

    def abandon_launch(self, job_id, attempt: int) -> None:
        """The attempt is given up before its handle was stored: if its launcher died
        half-way, kill what it started. A launch still running is left alone: its
        caller finds the attempt stopped and stops the handle it gets."""
        attempt_dir = self.attempt_dir(job_id, attempt)
        if not os.path.isdir(attempt_dir):
            return
        try:
            with self._launch_lock(job_id, attempt):
                if os.path.isdir(attempt_dir):
                    handle = self._resume(attempt_dir)
                    if handle is not None:
                        self.stop(handle, grace=min(self.grace, 1.0))
        except LaunchInProgress:
            pass

    def _launch_claimed(self, spec: AttemptLaunch, attempt_dir: str, who: osuser.RunAs) -> dict:
        placement = self._place(spec)
        previous = shim.read_json(os.path.join(self.attempt_dir(spec.job_id, spec.attempt - 1), ATTEMPT)) or {}
        avoid = set((previous.get("ports") or {}).values()) | {(previous.get("lighthouse") or {}).get("port")}
        groups = spec.replica_groups if spec.job_type == frameworks.PYTORCH else 0
        ports = self._free_ports(len(spec.instances) + (1 if groups else 0), avoid=avoid)
        lighthouse = {"port": ports.pop(), "url": ""} if groups else None
        if lighthouse is not None:
            lighthouse["url"] = f"http://{self.host}:{lighthouse['port']}"
        placements = {
            inst.name: frameworks.Placement(
                node=placement[inst.name][0],
                host=self.host,
                port=port,
                dir=os.path.join(attempt_dir, inst.name),
                slots=1,
            )
            for inst, port in zip(spec.instances, ports)
        }
        try:
            setups = frameworks.framework_setup(
                spec.job_type,
                spec.attempt,
                spec.instances,
                placements,
                replica_groups=groups,
                lighthouse=lighthouse["url"] if lighthouse else "",
            )
        except frameworks.FrameworkError as exc:
            raise BackendError(str(exc)) from exc

        workdir = spec.workdir
        if not workdir:
            workdir = os.path.join(self.data_dir, "jobs", str(spec.job_id), "work")
            self._job_owned_dir(workdir, who)
        base = {k: os.environ[k] for k in self.inherit_env if k in os.environ}
        base["PYTHONUNBUFFERED"] = "1"
        standbys: dict[str, str] = {}  # instance -> the standby dir of the parked shim that runs it
        for inst in spec.instances:
            idir = placements[inst.name].dir
            os.mkdir(idir, _dir_mode(who))
            os.chmod(idir, _dir_mode(who))
            setup = setups[inst.name]
            for path, content in setup.files.items():
                with open(path, "w") as f:  # the MPI hostfile: the job reads it, nothing secret
                    f.write(content)
            env = frameworks.instance_environment({**base, **self._home_env(idir, who)}, spec.env, inst.env, setup.env)
            if env.get("VIGIL_C4D") == "1":
                env.update(self._flight_recorder_env(idir, env, who))
            start = self._warm_start(spec, inst, env, workdir, who) if spec.warm else {}
            if start.get("warm"):
                standbys[inst.name] = start.pop("standby")
            self._write_spec(idir, spec, inst.name, inst.command, env, workdir, run=1, who=who, start=start)
            os.close(os.open(os.path.join(idir, LOG), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))

        handle = {
            "backend": self.name,
            "job_id": str(spec.job_id),
            "attempt": spec.attempt,
            "job_type": spec.job_type,
            "dir": attempt_dir,
            "launched_at": time.time(),
            "run_as": who.name,
            "ports": {inst.name: p.port for inst, p in ((i, placements[i.name]) for i in spec.instances)},
            # PyTorch's rendezvous port (rank 0's), kept on the Attempt row; None for other frameworks.
            "master_port": (
                placements[min(spec.instances, key=lambda i: i.rank).name].port
                if spec.job_type == frameworks.PYTORCH
                else None
            ),
            "instances": [
                {
                    "name": i.name,
                    "role": i.role,
                    "index": i.index,
                    "rank": i.rank,
                    "node": placement[i.name][0],
                    "placement_reason": placement[i.name][1],
                }
                for i in spec.instances
            ],
        }
        if lighthouse is not None:
            handle["lighthouse"] = lighthouse
            if spec.warm:
                handle["warm_runs"] = list(spec.warm_modules)
            self._write_lighthouse_spec(spec, attempt_dir, lighthouse["port"], base, workdir, who)
        faults.point("launch.after_spec")
        shim.write_json_atomic(os.path.join(attempt_dir, ATTEMPT), handle)
        faults.point("launch.after_attempt_json")
        if lighthouse is not None:
            self._start_shims(handle, [LIGHTHOUSE])  # first: the groups' Managers connect to it at start
        self._start_shims(handle, [i.name for i in spec.instances], standbys)
        # Standbys not used (incompatible, or for instances that start cold) are of no further use.
        self.discard_standby(spec.job_id, keep=set(standbys.values()))
        return handle

    def _write_lighthouse_spec(self, spec: AttemptLaunch, attempt_dir, port, base, workdir, who: osuser.RunAs):
        """The attempt's torchft Lighthouse, run by a shim like an instance (its own process
        group, its log, stopped with the attempt, as the job's OS user) but not one of the
        job's instances: the monitor reads it, the policy never restarts it. It is torchft's
        `torchft_lighthouse` beside the backend's Python (option `python`), else on PATH,
        bound to this backend's host only: its HTTP port also answers "kill this replica"."""
        program = os.path.join(os.path.dirname(self.python), LIGHTHOUSE_PROGRAM)
        if not os.access(program, os.X_OK):
            program = shutil.which(LIGHTHOUSE_PROGRAM) or ""
        if not program:
            raise BackendError(
                f"--replica-groups: torchft's {LIGHTHOUSE_PROGRAM} is neither beside {self.python} nor on PATH; "
                "install torchft (pip install torchft==0.2.0) where the backend runs"
            )
        ldir = os.path.join(attempt_dir, LIGHTHOUSE)
        os.mkdir(ldir, _dir_mode(who))
        os.chmod(ldir, _dir_mode(who))
        bind = f"{socket.gethostbyname(self.host)}:{port}"
        command = " ".join(
            [
                shlex.quote(program),
                "--min_replicas=1",
                f"--bind={bind}",
                f"--heartbeat_timeout_ms={spec.lighthouse_heartbeat_timeout_ms}",
                # How long a quorum waits for a group that heartbeats but has not asked to join:
                # a restarted group heartbeats from its Manager's start, seconds before its first
                # step (torchft's default, 60 s, stalled the healthy groups 10 s at 10 s, measured
                # in bench/restart_latency.py); the heartbeat timeout bounds that pause instead.
                f"--join_timeout_ms={spec.lighthouse_heartbeat_timeout_ms}",
                f"--quorum_tick_ms={LIGHTHOUSE_QUORUM_TICK_MS}",
            ]
        )
        env = {**base, **self._home_env(ldir, who)}
        self._write_spec(ldir, spec, LIGHTHOUSE, command, env, workdir, run=1, who=who)
        os.close(os.open(os.path.join(ldir, LOG), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))

    def stop(self, handle: dict, grace: float | None = None) -> None:
        """Stop the attempt: its instances, and its Lighthouse if it has one."""
        extra = [LIGHTHOUSE] if handle.get("lighthouse") else []
        self._stop(handle, self.instance_names(handle) + extra, grace)

    def handle_for(self, job_id, attempt) -> dict:
        """The handle of an attempt from disk (re-adoption when the caller lost it)."""
        handle = shim.read_json(os.path.join(self.attempt_dir(job_id, attempt), ATTEMPT))
        if handle is None:
            raise BackendError(f"no attempt {attempt} of job {job_id} under {self.data_dir}")
        return handle

    def _check_spec(self, spec: AttemptLaunch):
        spec.check()

    def _check_workdir(self, workdir: str | None, who: osuser.RunAs) -> None:
        """The job's user must be able to enter its workdir: checked as that user (the
        backend is root and would pass through any 0700 directory), and refused with one
        message whether the path is missing or only closed to the user, so the refusal
        tells a submitter nothing about paths the job could not see (issue 31)."""
        if workdir and not osuser.can_enter(workdir, who):
            # The way out goes with it: on a root box whose repository sits under a 0700 home
            # (the README's demo, issue 28) this is the first refusal a newcomer meets.
            raise BackendError(
                f"workdir: {workdir!r} is not a directory that the job's OS user ({who.name}) can enter on this "
                "machine; " + osuser.run_as_advice(who)
            )

    def _check_command(self, spec: AttemptLaunch, who: osuser.RunAs) -> None:
        """Refuse a command whose program the job's OS user may not run, though the console
        could (issue 28: Python under a 0700 /root, run as `nobody`): the job would only
        fail with "Permission denied" at once. Asked as that user first; the console's side
        is looked up only on the console's own PATH and in its own interpreter's prefix,
        which are the operator's, so the refusal says nothing of other root-only paths.
        A command that is not one plain program (shell syntax, a builtin) is left to run."""
        if not who.switch:
            return
        console_path = os.environ.get("PATH", "") if "PATH" in self.inherit_env else ""
        for command, inst_env in {i.command: i.env for i in spec.instances}.items():
            program = _program(command)
            if program is None:
                continue
            path = inst_env.get("PATH") or spec.env.get("PATH") or console_path
            if osuser.can_find(program, path, spec.workdir or "/", who):
                continue
            found = self._console_program(program, console_path)
            if found:
                raise BackendError(
                    f"the command's program {program!r} ({found}) cannot be executed by the job's OS user: "
                    + osuser.run_as_advice(who)
                )

    def _console_program(self, program: str, console_path: str) -> str | None:
        """Where the console itself finds `program`: on its own PATH, or (a path) inside
        its interpreter's prefix; None elsewhere."""
        if "/" not in program:
            return shutil.which(program, path=console_path)
        if not os.path.isabs(program):
            return None
        real = os.path.realpath(program)
        prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, os.path.dirname(self.python))}
        if any(real == p or real.startswith(p + os.sep) for p in prefixes) and os.access(program, os.X_OK):
            return program
        return None

    def _home_env(self, idir: str, who: osuser.RunAs) -> dict:
        """For a job that runs as another user: a HOME, TMPDIR and cache of its own (the
        console's HOME is not its to write, and PyTorch, Triton and pip want one), and the
        names that say who it is. The job's own envs may still override them."""
        if not who.switch:
            return {}
        home = os.path.join(idir, "home")
        self._job_owned_dir(home, who)
        for sub in ("tmp", ".cache"):
            self._job_owned_dir(os.path.join(home, sub), who)
        return {
            "HOME": home,
            "TMPDIR": os.path.join(home, "tmp"),
            "XDG_CACHE_HOME": os.path.join(home, ".cache"),
            "USER": who.name,
            "LOGNAME": who.name,
            "SHELL": "/bin/sh",
        }

    def _flight_recorder_env(self, idir: str, env: dict, who: osuser.RunAs) -> dict:
        """C4D without code changes (core/flight_recorder.py): PyTorch's Flight Recorder on
        for every rank, NCCL's own dump on timeout into the instance's c4d/ directory, and
        Vigil's start-up hook (fr_boot.py as sitecustomize, first on PYTHONPATH) to dump
        gloo's trace there too. The job's own TORCH_* values win: it may want a bigger
        buffer for its own analysis. The hook's directory is the backend's (0755, files
        0644): the job reads it and cannot change what its other ranks run."""
        fr_dir = os.path.join(idir, FR_DIR)
        self._job_owned_dir(fr_dir, who)
        fr_files.create_request(fr_dir)  # the job's, as its directory is: fr_files writes no other
        if who.switch:
            os.chown(os.path.join(fr_dir, fr_files.REQUEST), who.uid, who.gid)
        boot = os.path.join(idir, "boot")
        return fr_files.recorder_env(fr_dir, boot, env, fr_files.install_boot(boot))

    def _write_spec(self, idir, spec, name, command, env, workdir, run, who: osuser.RunAs, start=None):
        data = {
            **(start or {}),
            "job_id": str(spec.job_id),
            "attempt": spec.attempt,
            "instance": name,
            "command": command,
            "env": env,
            "cwd": workdir,
            "run": run,
            "log": LOG,
            "leftover_grace": self.leftover_grace,
            "redis": self.redis,
            "user": (
                {"name": who.name, "uid": who.uid, "gid": who.gid, "groups": list(who.groups)} if who.switch else None
            ),
        }
        shim.write_json_atomic(os.path.join(idir, shim.SPEC), data)

    def _start_shims(self, handle, names, standbys=None):
        """Start one shim per name and wait until each has its child running; an instance
        in `standbys` is handed to its parked shim instead (cold if that fails)."""
        pending, launchers = {}, []
        for name in names:
            idir = os.path.join(handle["dir"], name)
            rfd, wfd = os.pipe()
            standby = (standbys or {}).get(name)
            if standby is not None:
                if self._hand_over(standby, idir, wfd):
                    os.close(wfd)
                    pending[rfd] = (name, None, b"")
                    continue
                spec = shim.read_json(os.path.join(idir, shim.SPEC)) or {}
                spec.pop("warm", None)
                spec["start_reason"] = "the parked interpreter did not answer"
                shim.write_json_atomic(os.path.join(idir, shim.SPEC), spec)
            shim_log_fd = os.open(os.path.join(idir, "shim.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(shim_log_fd, "ab") as shim_log:
                proc = subprocess.Popen(
                    [self.python, "-I", "-S", SHIM_PATH, idir, str(wfd)],
                    stdin=subprocess.DEVNULL,
                    stdout=shim_log,
                    stderr=shim_log,
                    pass_fds=(wfd,),
                    start_new_session=True,
                    close_fds=True,
                )
            os.close(wfd)
            launchers.append(proc)
            pending[rfd] = (name, proc, b"")
            faults.point("launch.after_shim_start", len(launchers) - 1)
        self._wait_ready(handle["dir"], pending, launchers)

    def _wait_ready(self, where, pending, launchers, count_faults=True):
        """Wait for each shim's "ok" on its ready pipe (BackendError naming those that did not)."""
        deadline = time.monotonic() + self.start_timeout
        errors, ready_count = [], 0
        try:
            while pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    errors += [
                        f"{n}: the shim did not start within {self.start_timeout:g} s" for n, _, _ in pending.values()
                    ]
                    break
                ready, _, _ = select.select(list(pending), [], [], left)
                for rfd in ready:
                    name, proc, buf = pending[rfd]
                    chunk = os.read(rfd, 4096)
                    if chunk:
                        pending[rfd] = (name, proc, buf + chunk)
                        continue
                    del pending[rfd]
                    os.close(rfd)
                    if not buf.startswith(b"ok"):
                        errors.append(
                            f"{name}: {buf.decode(errors='replace').strip() or 'the shim died'}"
                            f" (see {os.path.join(where, name, 'shim.log')})"
                        )
                    else:
                        if count_faults:
                            faults.point("launch.after_shim_ready", ready_count)
                        ready_count += 1
        finally:
            for rfd in pending:
                os.close(rfd)
        # The first shim process forks and exits at once; reap it so that a long-lived
        # worker keeps no zombie (only our own Popen objects: other children are not ours).
        for proc in launchers:
            try:
                proc.wait(timeout=self.start_timeout)
            except subprocess.TimeoutExpired:
                errors.append(f"shim launcher {proc.pid} did not exit")
        if errors:
            raise BackendError("could not start: " + "; ".join(errors), retryable=True)

    # -- warm restarts (issue 19) -------------------------------------------------
    # While attempt n runs, each instance may have a parked shim under
    # <job>/warm/attempt-<n+1>/<instance>/ whose interpreter has imported the job's
    # heavy modules (shim.park, warm_boot.py). Launching attempt n+1 hands each
    # instance to its parked shim when core.warmstart says the command and the
    # start-up environment allow it; that shim then is the instance's shim, and its
    # state.json says "start": "warm". Anything else starts cold and says why.
    def _standby_dir(self, job_id, attempt, name) -> str:
        return os.path.join(self.data_dir, "jobs", str(job_id), WARM, f"attempt-{int(attempt)}", name)

    def _standby_alive(self, park_dir) -> dict | None:
        """The parked shim's state when it is alive and still parked, else None."""
        state = shim.read_json(os.path.join(park_dir, shim.PARK_STATE))
        if not state or state.get("taken_by") or state.get("ended"):
            return None
        if not _same_process(state.get("shim_pid"), state.get("shim_start"), state.get("boot_id")):
            return None
        if not _same_process(state.get("child_pid"), state.get("child_start"), state.get("boot_id")):
            return None
        return state

    def _warm_start(self, spec: AttemptLaunch, inst, env, workdir, who: osuser.RunAs) -> dict:
        """spec.json's start fields for one instance: {"warm": what to run, "standby": dir}
        when its parked interpreter can run it, else {"start_reason": why it starts cold}."""
        decision = warm_entry(inst.command)
        if decision.entry is None:
            return {"start_reason": decision.reason}
        park_dir = self._standby_dir(spec.job_id, spec.attempt, inst.name)
        park = shim.read_json(os.path.join(park_dir, shim.PARK_SPEC))
        if park is None or self._standby_alive(park_dir) is None:
            first = " (the first attempt has none)" if spec.attempt == 1 else ""
            return {"start_reason": f"no parked interpreter was ready{first}"}
        entry = decision.entry
        python = _interpreter(entry.interpreter, env, workdir)
        if park.get("command") != inst.command:
            why = "the command changed since the interpreter was parked"
        elif park.get("cwd") != workdir:
            why = "the working directory changed since the interpreter was parked"
        elif python is None or python != park.get("python"):
            why = f"{entry.interpreter} is not the interpreter that was parked"
        elif park.get("uid") != (who.uid if who.switch else None):
            why = "the job's OS user changed since the interpreter was parked"
        else:
            why = startup_env_difference(park.get("env") or {}, env)
        if not why and entry.kind is EntryKind.SCRIPT and not os.path.isfile(os.path.join(workdir, entry.target)):
            why = f"{entry.target} is not a file in the working directory"  # the cold start reports it
        if why:
            return {"start_reason": why}
        return {
            "warm": {
                "kind": entry.kind.value,
                "target": entry.target,
                "argv": entry.argv,
                "path0": _path0(entry, workdir),
            },
            "standby": park_dir,
        }

    def _hand_over(self, park_dir, idir, ready_wfd) -> bool:
        """Give the instance to its parked shim with the ready pipe; False if it did not take it."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(2.0)
        try:
            with shim.short_socket_path(park_dir, shim.CTL) as address:
                sock.connect(address)
            shim.send_message(sock, {"instance_dir": idir}, fds=[ready_wfd])
            return True
        except OSError:
            return False
        finally:
            sock.close()

    def _park_next(self, spec: AttemptLaunch, handle: dict) -> None:
        """Park one interpreter per instance for attempt n+1 (warm restarts on). Never fails
        the launch: an instance without a standby simply restarts cold."""
        if not spec.warm:
            return
        nxt = int(handle["attempt"]) + 1
        keep = set()
        for inst in handle["instances"]:
            park_dir = self._standby_dir(spec.job_id, nxt, inst["name"])
            if self._standby_alive(park_dir) is not None:
                keep.add(park_dir)
        self.discard_standby(spec.job_id, keep=keep)
        dirs = {i["name"]: self._standby_dir(spec.job_id, nxt, i["name"]) for i in handle["instances"]}
        self._park(spec.job_id, spec.warm_modules, handle, {n: d for n, d in dirs.items() if d not in keep}, nxt)
        if handle.get("warm_runs") is not None:
            self._park_runs(handle, [i["name"] for i in handle["instances"]])

    # Replica groups restart one group within its attempt (issue 30): with warm restarts on,
    # each instance also has a parked interpreter for its own next run, under
    # <job>/warm/attempt-<n>-run-<r>/<instance>/, parked again after each restart.
    def _run_standby_dir(self, handle: dict, name: str, run: int) -> str:
        generation = f"attempt-{int(handle['attempt'])}-run-{int(run)}"
        return os.path.join(self.data_dir, "jobs", str(handle["job_id"]), WARM, generation, name)

    def _park_runs(self, handle: dict, names: list[str]) -> None:
        dirs = {}
        for name in names:
            ispec = shim.read_json(os.path.join(handle["dir"], name, shim.SPEC)) or {}
            dirs[name] = self._run_standby_dir(handle, name, int(ispec.get("run", 1)) + 1)
        self._park(handle["job_id"], tuple(handle["warm_runs"]), handle, dirs, int(handle["attempt"]))

    def _warm_run(self, handle: dict, name: str, ispec: dict) -> str | None:
        """Set `ispec` (the instance's next run) to start in its parked interpreter; the
        standby's directory, or None (then it starts cold, and `ispec` says why)."""
        if handle.get("warm_runs") is None:
            return None
        ispec.pop("warm", None)
        park_dir = self._run_standby_dir(handle, name, int(ispec["run"]))
        entry = warm_entry(ispec.get("command") or "").entry
        if entry is None or self._standby_alive(park_dir) is None:
            ispec["start_reason"] = "no parked interpreter was ready for this run"
            return None
        ispec.pop("start_reason", None)
        ispec["warm"] = {
            "kind": entry.kind.value,
            "target": entry.target,
            "argv": entry.argv,
            "path0": _path0(entry, ispec.get("cwd") or ""),
        }
        return park_dir

    def _park(self, job_id, modules, handle: dict, dirs: dict[str, str], attempt: int) -> None:
        """Park one interpreter for each instance name in `dirs`, in its directory there."""
        pending, launchers = {}, []
        for name, park_dir in dirs.items():
            ispec = shim.read_json(os.path.join(handle["dir"], name, shim.SPEC)) or {}
            decision = warm_entry(ispec.get("command") or "")
            if decision.entry is None:
                continue  # it will start cold; the next attempt's record says why
            env, cwd = ispec.get("env") or {}, ispec.get("cwd") or ""
            python = _interpreter(decision.entry.interpreter, env, cwd)
            if python is None:
                continue
            try:
                if os.path.isdir(park_dir):
                    shutil.rmtree(park_dir)
                # Every level root's and 0700 (makedirs gives the upper ones the default mode):
                # a job must not reach a parked shim's control socket, nor list the standbys.
                gen_dir = os.path.dirname(park_dir)
                for d in (os.path.dirname(gen_dir), gen_dir, park_dir):
                    os.makedirs(d, mode=0o700, exist_ok=True)
                    os.chmod(d, 0o700)
                user = ispec.get("user")
                shim.write_json_atomic(
                    os.path.join(park_dir, shim.PARK_SPEC),
                    {
                        "python": python,
                        "command": ispec.get("command"),
                        "cwd": cwd,
                        "env": env,
                        "user": user,
                        "uid": user["uid"] if user else None,
                        "modules": list(modules),
                        "nice": STANDBY_NICE,
                        "path0": _path0(decision.entry, cwd),
                        "linger": self.standby_linger,
                        "watch_dir": handle["dir"],
                        "job_id": str(job_id),
                        "attempt": attempt,
                        "instance": name,
                    },
                )
                rfd, wfd = os.pipe()
                with open(os.path.join(park_dir, "shim.log"), "ab") as shim_log:
                    proc = subprocess.Popen(
                        [self.python, "-I", "-S", SHIM_PATH, "--park", park_dir, str(wfd)],
                        stdin=subprocess.DEVNULL,
                        stdout=shim_log,
                        stderr=shim_log,
                        pass_fds=(wfd,),
                        start_new_session=True,
                        close_fds=True,
                    )
                os.close(wfd)
            except OSError:
                continue
            launchers.append(proc)
            pending[rfd] = (name, proc, b"")
        try:
            where = os.path.dirname(next(iter(dirs.values()))) if dirs else ""
            self._wait_ready(where, pending, launchers, count_faults=False)
        except BackendError:
            pass  # those standbys are missing: their instances restart cold

    def discard_standby(self, job_id, keep=frozenset()) -> list[int]:
        """End every parked shim of the job (those in `keep` excepted) and its interpreter.
        A parked shim already handed an instance is that instance's shim: left alone."""
        root = os.path.join(self.data_dir, "jobs", str(job_id), WARM)
        ended = []
        for gen in _listdir(root):
            for name in _listdir(os.path.join(root, gen)):
                park_dir = os.path.join(root, gen, name)
                if park_dir in keep:
                    continue
                state = self._standby_alive(park_dir)
                if state is None:
                    continue
                # SIGUSR1: a parked shim ends itself and its interpreter; one that was just
                # handed an instance ignores it (SIGTERM would reach that instance's rank).
                _send(state["shim_pid"], signals.SIGUSR1)
                ended.append((park_dir, state))
        deadline = time.monotonic() + self.kill_wait
        pids = []
        for park_dir, state in ended:
            while (
                _same_process(state["shim_pid"], state["shim_start"], state.get("boot_id"))
                and time.monotonic() < deadline
            ):
                time.sleep(0.01)
            now = shim.read_json(os.path.join(park_dir, shim.PARK_STATE)) or {}
            if now.get("taken_by"):
                continue  # handed an instance just before the signal: it is a rank now
            # The shim kills its interpreter, and the interpreter dies with its shim; this is
            # for a shim that was itself killed before it could.
            if _same_process(state["child_pid"], state["child_start"], state.get("boot_id")):
                _send(state["child_pid"], signals.SIGKILL)
            pids += [state["shim_pid"], state["child_pid"]]
        return pids

    def standby(self, job_id) -> list[dict]:
        """The job's live parked interpreters, with their resident memory (the job page's cost line)."""
        root = os.path.join(self.data_dir, "jobs", str(job_id), WARM)
        out = []
        for gen in sorted(_listdir(root)):
            for name in sorted(_listdir(os.path.join(root, gen))):
                state = self._standby_alive(os.path.join(root, gen, name))
                if state is None:
                    continue
                try:
                    rss = psutil.Process(state["child_pid"]).memory_info().rss
                except psutil.Error:
                    rss = None
                out.append(
                    {
                        "instance": name,
                        "attempt": int(gen.rpartition("-")[2]),
                        "pid": state["child_pid"],
                        "parked": bool(state.get("parked_at")),
                        "rss": rss,
                    }
                )
        return out

    # -- placement & ports -----------------------------------------------------
    def _place(self, spec: AttemptLaunch) -> dict[str, tuple[str, str]]:
        nodes = self.list_nodes()
        avoid = set(spec.avoid_nodes)
        usable = [n for n in nodes if n.schedulable and n.name not in avoid]
        if not usable:
            why = "; ".join(f"{n.name}: {n.reason or 'avoided by this attempt'}" for n in nodes)
            raise BackendError(f"no schedulable node for job {spec.job_id} ({why})")
        used = {n.name: 0 for n in usable}
        out = {}
        for inst in sorted(spec.instances, key=lambda i: i.rank):
            free = [n for n in usable if used[n.name] < n.slots]
            if free:
                node, reason = free[0], ""
            else:
                node = min(usable, key=lambda n: (used[n.name] + 1) / n.slots)
                reason = (
                    f"oversubscribed: node {node.name} has {node.slots} slots, {used[node.name] + 1} instances placed"
                )
            used[node.name] += 1
            out[inst.name] = (node.name, reason)
        return out

    @staticmethod
    def _free_ports(count, avoid):
        """`count` distinct free TCP ports, none in `avoid` (the previous attempt's).

        They are taken below the kernel's ephemeral range: a port from bind(0) is
        free now, but until the rank binds it (seconds later, after `import torch`)
        any outgoing connection on this machine may take it as its source port.
        """
        low = _ephemeral_low()
        candidates = list(range(max(1024, low - 12000), low)) if low > 2048 else []
        random.shuffle(candidates)
        socks, ports = [], []
        try:
            for port in candidates:
                if len(ports) == count:
                    break
                if port in avoid:
                    continue
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                try:
                    s.bind(("", port))
                except OSError:
                    s.close()
                    continue
                socks.append(s)
                ports.append(port)
            while len(ports) < count:  # no range to pick from: fall back to the kernel's choice
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.bind(("", 0))
                socks.append(s)  # held open so the next bind cannot return the same port
                port = s.getsockname()[1]
                if port not in avoid and port not in ports:
                    ports.append(port)
        finally:
            for s in socks:
                s.close()
        return ports

    # -- nodes -------------------------------------------------------------------
    @contextmanager
    def _nodes_lock(self):
        with open(os.path.join(self.data_dir, "nodes.lock"), "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _isolated(self) -> dict:
        return (shim.read_json(os.path.join(self.data_dir, NODES)) or {}).get("isolated", {})

    def list_nodes(self) -> list[Node]:
        isolated = self._isolated()
        return [
            Node(
                n["name"],
                n["slots"],
                schedulable=n["name"] not in isolated,
                reason=isolated.get(n["name"], {}).get("reason", ""),
            )
            for n in self.nodes
        ]

    def _check_node(self, name):
        if name not in {n["name"] for n in self.nodes}:
            known = ", ".join(n["name"] for n in self.nodes)
            raise BackendError(f"node: {name!r} is not a node of this backend (known: {known})")

    def isolate_node(self, name: str, reason: str) -> None:
        self._check_node(name)
        with self._nodes_lock():
            isolated = self._isolated()
            isolated[name] = {"reason": reason or "isolated", "at": time.time()}
            shim.write_json_atomic(os.path.join(self.data_dir, NODES), {"isolated": isolated})

    def restore_node(self, name: str) -> None:
        self._check_node(name)
        with self._nodes_lock():
            isolated = self._isolated()
            isolated.pop(name, None)
            shim.write_json_atomic(os.path.join(self.data_dir, NODES), {"isolated": isolated})

    # -- poll ----------------------------------------------------------------------
    def poll(self, handle: dict) -> list[PolledInstance]:
        return [self._status(handle, inst) for inst in handle["instances"]]

    def _status(self, handle, inst) -> PolledInstance:
        idir = os.path.join(handle["dir"], inst["name"])
        common = {"name": inst["name"], "role": inst["role"], "index": inst["index"], "node": inst.get("node", "")}
        try:
            last_output = os.stat(os.path.join(idir, LOG)).st_mtime
        except FileNotFoundError:
            last_output = None
        state = shim.read_json(os.path.join(idir, shim.STATE))
        ended = shim.read_json(os.path.join(idir, shim.EXIT))
        stop = shim.read_json(os.path.join(idir, STOP))
        run = (
            (shim.read_json(os.path.join(idir, shim.SPEC)) or {}).get("run", 1)
            if state is None
            else state.get("run", 1)
        )
        pid = state.get("child_pid") if state else None
        started = state.get("started_at") if state else None
        stopped = stop is not None and stop.get("run") == run
        common["start"] = (state.get("start") or "cold") if state else ""
        common["start_reason"] = (state.get("start_reason") or "") if state else ""

        if ended is not None and ended.get("run", 1) == run:
            code, sig = ended.get("exit_code"), ended.get("signal")
            if stopped:
                st, reason = InstanceState.STOPPED, "stopped on request"
            elif code == 0 and sig is None:
                st, reason = InstanceState.SUCCEEDED, ""
            else:
                st, reason = InstanceState.FAILED, ended.get("reason", "")
            return PolledInstance(
                state=st,
                exit_code=code,
                signal=sig,
                started_at=ended.get("started_at", started),
                exited_at=ended.get("exited_at"),
                last_output_at=last_output,
                reason=reason,
                pid=pid,
                **common,
            )
        if state is None:
            launched = handle.get("launched_at") or 0
            if stopped:
                return PolledInstance(
                    state=InstanceState.STOPPED,
                    reason="stopped before it started",
                    last_output_at=last_output,
                    **common,
                )
            if time.time() - launched < max(START_GRACE, self.start_timeout):
                return PolledInstance(state=InstanceState.PENDING, last_output_at=last_output, **common)
            return PolledInstance(
                state=InstanceState.LOST, reason="the shim never started", last_output_at=last_output, **common
            )
        shim_alive = _same_process(state.get("shim_pid"), state.get("shim_start"), state.get("boot_id"))
        child_alive = _same_process(pid, state.get("child_start"), state.get("boot_id"))
        running_reason = inst.get("placement_reason", "")
        if shim_alive and child_alive:
            return PolledInstance(
                state=InstanceState.RUNNING,
                started_at=started,
                last_output_at=last_output,
                reason=running_reason,
                pid=pid,
                **common,
            )
        # The shim writes exit.json the moment the child ends: look again before concluding.
        ended = shim.read_json(os.path.join(idir, shim.EXIT))
        if ended is not None and ended.get("run", 1) == run:
            return self._status(handle, inst)
        if shim_alive:  # child just ended, exit.json is being written
            return PolledInstance(
                state=InstanceState.RUNNING,
                started_at=started,
                last_output_at=last_output,
                reason=running_reason,
                pid=pid,
                **common,
            )
        if child_alive:
            return PolledInstance(
                state=InstanceState.RUNNING,
                started_at=started,
                last_output_at=last_output,
                reason="shim lost; the instance still runs but its exit code will be unknown",
                pid=pid,
                **common,
            )
        if stopped:
            return PolledInstance(
                state=InstanceState.STOPPED,
                started_at=started,
                last_output_at=last_output,
                reason="stopped on request; the shim had died, exit code unknown",
                pid=pid,
                **common,
            )
        return PolledInstance(
            state=InstanceState.LOST,
            started_at=started,
            last_output_at=last_output,
            reason="shim lost: the instance and its shim are gone and no exit was recorded "
            "(or the recorded PIDs now belong to other processes)",
            pid=pid,
            **common,
        )

    # -- stop -------------------------------------------------------------------------
    def stop_instance(self, handle: dict, name: str, grace: float | None = None) -> None:
        self.check_instance(handle, name)
        self._stop(handle, [name], grace)

    def _stop(self, handle, names, grace):
        grace = self.grace if grace is None else self._positive("grace", grace, zero_ok=True)
        targets = {}
        now = time.time()
        for name in names:
            idir = os.path.join(handle["dir"], name)
            state = shim.read_json(os.path.join(idir, shim.STATE))
            run = state.get("run", 1) if state else (shim.read_json(os.path.join(idir, shim.SPEC)) or {}).get("run", 1)
            ended = shim.read_json(os.path.join(idir, shim.EXIT))
            if ended is not None and ended.get("run", 1) == run:
                continue  # already over: its real outcome stands
            shim.write_json_atomic(os.path.join(idir, STOP), {"run": run, "requested_at": now, "grace": grace})
            if state is not None:
                targets[name] = (idir, state, run)
        if not targets:
            return
        signalled = {name: self._signal(state, signals.SIGTERM) for name, (_, state, _) in targets.items()}
        remaining = self._wait_ended(targets, grace, signalled)
        for name in remaining:
            self._signal(targets[name][1], signals.SIGKILL)
            for pid in signalled[name]:
                try:
                    os.kill(pid, signals.SIGKILL)  # a descendant that ignored SIGTERM, even if orphaned now
                except (ProcessLookupError, PermissionError):
                    pass
        remaining = self._wait_ended({n: targets[n] for n in remaining}, self.kill_wait, signalled)
        if remaining:
            raise BackendError(f"instances still running after SIGKILL: {', '.join(sorted(remaining))}", retryable=True)

    @staticmethod
    def _processes(state) -> tuple[int | None, list[int]]:
        """(process group, every verified live process of the instance except the shim)."""
        boot = state.get("boot_id")
        child, shim_pid = state.get("child_pid"), state.get("shim_pid")
        pids = []
        roots = []
        if _same_process(child, state.get("child_start"), boot):
            pids.append(child)
            roots.append(child)
        if _same_process(shim_pid, state.get("shim_start"), boot):
            roots.append(shim_pid)  # a subreaper: orphaned descendants hang below it
        for root in roots:
            try:
                for p in psutil.Process(root).children(recursive=True):
                    # psutil lists zombies too: a descendant that ended and that the shim, its
                    # subreaper, has yet to reap is not a process of the instance any more
                    # (a stopped Lighthouse's was still listed, CI, issue 30's test).
                    if p.pid not in pids and p.pid != shim_pid and shim.proc_start_ticks(p.pid) is not None:
                        pids.append(p.pid)
            except psutil.Error:
                pass
        # Signal the group only if its leader is our child (a dead leader's group may be empty
        # or, after PID reuse, someone else's; members we found are signalled one by one).
        pgid = child if child in pids else None
        return pgid, pids

    def _signal(self, state, sig) -> dict[int, int]:
        """Send `sig` to the instance's group and every verified process; return {pid: start ticks}."""
        pgid, pids = self._processes(state)
        signalled = {pid: t for pid in pids if (t := shim.proc_start_ticks(pid)) is not None}
        shim.signal_all(pgid, pids, sig)
        return signalled

    def _wait_ended(self, targets, timeout, signalled) -> list[str]:
        """Wait until each target's exit is recorded and every process we signalled is gone."""
        deadline = time.monotonic() + timeout
        remaining = list(targets)
        while True:
            still = []
            for name in remaining:
                idir, state, run = targets[name]
                if any(shim.proc_start_ticks(pid) == t for pid, t in signalled.get(name, {}).items()):
                    still.append(name)
                    continue
                ended = shim.read_json(os.path.join(idir, shim.EXIT))
                if ended is not None and ended.get("run", 1) == run:
                    continue
                _, pids = self._processes(state)
                if pids or _same_process(state.get("shim_pid"), state.get("shim_start"), state.get("boot_id")):
                    still.append(name)
            remaining = still
            if not remaining or time.monotonic() >= deadline:
                return remaining
            time.sleep(0.01)

    # -- restart one instance --------------------------------------------------------
    def restart_instance(self, handle: dict, name: str) -> dict:
        idir = self._instance_dir(handle, name)
        current = [s for s in self.poll(handle) if s.name == name][0]
        if not current.state.finished and current.state != InstanceState.PENDING:
            self._stop(handle, [name], None)
        spec = shim.read_json(os.path.join(idir, shim.SPEC))
        if spec is None:
            raise BackendError(f"instance {name}: its spec.json is missing, it cannot be restarted")
        run = int(spec.get("run", 1))
        for base in (shim.STATE, shim.EXIT, STOP):
            stem, ext = os.path.splitext(base)
            try:
                os.replace(os.path.join(idir, base), os.path.join(idir, f"{stem}.{run}{ext}"))
            except FileNotFoundError:
                pass
        log = os.path.join(idir, LOG)
        with open(log, "ab") as f:
            needs_newline = f.tell() > 0 and _last_byte(log) != b"\n"
            stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            f.write(
                (b"\n" if needs_newline else b"")
                + f"===== vigil: {name} restarted (run {run + 1} of attempt {handle['attempt']}) at {stamp} =====\n".encode()
            )
        spec["run"] = run + 1
        spec["redis"] = self.redis
        standby = self._warm_run(handle, name, spec)
        shim.write_json_atomic(os.path.join(idir, shim.SPEC), spec)
        self._start_shims(handle, [name], {name: standby} if standby else None)
        if handle.get("warm_runs") is not None:
            self._park_runs(handle, [name])  # for the run after this one
        return handle

    # -- logs ---------------------------------------------------------------------------
    def log_path(self, handle: dict, name: str) -> str | None:
        return os.path.join(self._instance_dir(handle, name), LOG)

    def read_log(self, handle: dict, name: str, offset: int = 0, limit: int | None = None) -> bytes:
        return read_log_file(self.log_path(handle, name), offset, limit)

    def tail_log(self, handle: dict, name: str, nbytes: int) -> bytes:
        return tail_log_file(self.log_path(handle, name), nbytes)

    # -- housekeeping ----------------------------------------------------------------
    def attempt_handles(self) -> list[dict]:
        """Handles of every attempt under the data dir (for re-adoption and cleanup)."""
        handles = []
        jobs_dir = os.path.join(self.data_dir, "jobs")
        for job in sorted(os.listdir(jobs_dir)) if os.path.isdir(jobs_dir) else ():
            job_dir = os.path.join(jobs_dir, job)
            for entry in sorted(os.listdir(job_dir)):
                if entry.startswith("attempt-"):
                    handle = shim.read_json(os.path.join(job_dir, entry, ATTEMPT))
                    if handle is not None:
                        handles.append(handle)
        return handles

    def stop_everything(self, grace: float = 0.5) -> list[int]:
        """Stop every instance under the data dir, then SIGKILL any shim or process
        still recorded in a state file (current or archived). Returns the PIDs killed
        in that second pass. For test teardown and for decommissioning a data dir."""
        for handle in self.attempt_handles():
            try:
                self.stop(handle, grace=grace)
            except BackendError:
                pass
        killed = []
        jobs_dir = os.path.join(self.data_dir, "jobs")
        for job in _listdir(jobs_dir):
            killed += self.discard_standby(job)
        for handle in self.attempt_handles():
            names = [i["name"] for i in handle["instances"]] + ([LIGHTHOUSE] if handle.get("lighthouse") else [])
            for name in names:
                idir = os.path.join(handle["dir"], name)
                if not os.path.isdir(idir):
                    continue
                for entry in os.listdir(idir):
                    if not (entry.startswith("state") and entry.endswith(".json")):
                        continue
                    state = shim.read_json(os.path.join(idir, entry)) or {}
                    _, pids = self._processes(state)
                    if _same_process(state.get("shim_pid"), state.get("shim_start"), state.get("boot_id")):
                        pids.append(state["shim_pid"])
                    for pid in pids:
                        try:
                            os.kill(pid, signals.SIGKILL)
                            killed.append(pid)
                        except (ProcessLookupError, PermissionError):
                            pass
        return killed

    # -- diagnostics --------------------------------------------------------------------
    def flight_recorder_dumps(self, handle: dict) -> dict[int, bytes]:
        """rank -> the newest Flight Recorder dump of that rank under the attempt's c4d/
        directories: the start-up hook's fr_<rank>.json or NCCL's own dump on timeout.
        The job writes these files: only regular files are read, never through a link,
        and at most MAX_FR_DUMP bytes of each."""
        return fr_files.read_dumps(
            os.path.join(self._instance_dir(handle, inst["name"]), FR_DIR) for inst in handle.get("instances") or ()
        )

    def request_flight_recorder_dumps(self, handle: dict, timeout: float = 3.0) -> dict[str, list[int]]:
        """Ask the hooks of the instances still running for a fresh dump (fr_files.ask_for_dumps)."""
        running = {
            s.name: os.path.join(self._instance_dir(handle, s.name), FR_DIR)
            for s in self.poll(handle)
            if s.state == InstanceState.RUNNING
        }
        return fr_files.ask_for_dumps(running, timeout) if running else {}

    def lighthouse_pids(self, handle: dict) -> list[int]:
        """The live processes of the attempt's Lighthouse ([] without one, or once it ended)."""
        if not handle.get("lighthouse"):
            return []
        state = shim.read_json(os.path.join(handle["dir"], LIGHTHOUSE, shim.STATE))
        return self._processes(state)[1] if state else []

    def pids(self, handle: dict, name: str) -> list[int]:
        idir = self._instance_dir(handle, name)
        state = shim.read_json(os.path.join(idir, shim.STATE))
        if state is None:
            return []
        return self._processes(state)[1]


def _same_process(pid, start_ticks, boot=None) -> bool:
    """Is `pid` alive and the very process that was recorded (same boot, same start time)?"""
    if not pid or start_ticks is None:
        return False
    if boot and boot != _BOOT_ID:
        return False
    return shim.proc_start_ticks(pid) == start_ticks


def _send(pid, sig) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _listdir(path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _interpreter(word: str, env: dict, cwd: str) -> str | None:
    """The interpreter /bin/sh would run for `word` with the job's PATH, as a path."""
    if "/" in word:
        path = os.path.join(cwd, word)
        return path if os.access(path, os.X_OK) else None
    return shutil.which(word, path=env.get("PATH", os.defpath))


def _path0(entry, cwd: str) -> str:
    """sys.path[0] of the cold start: the script's real directory, or the cwd for -m."""
    if entry.kind is EntryKind.MODULE:
        return os.path.abspath(cwd)
    return os.path.dirname(os.path.realpath(os.path.join(cwd, entry.target)))


def _dir_mode(who: osuser.RunAs) -> int:
    return 0o711 if who.switch else 0o700


def _last_byte(path) -> bytes:
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return b""
        f.seek(size - 1)
        return f.read(1)


_BOOT_ID = shim.boot_id()
