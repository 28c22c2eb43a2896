"""A throwaway Slurm cluster on 127.0.0.1, for the Slurm backend's tests.

Everything lives in one temporary directory: munge key and socket, slurm.conf,
state and spool dirs, logs. The daemons (munged, slurmctld -D, slurmd -D) are
child processes of the test session and are stopped by their PIDs. Non-default
ports keep it from clashing with a system Slurm on the same host.

By default one node named after the host. With `nodes=N` (N >= 2) it is a real
multi-node cluster on one machine, Slurm's multiple-slurmd mode: nodes n1..nN,
each its own `slurmd -N nK` with its own port, all at 127.0.0.1; `kill_node`
makes one of them die as a machine does (its slurmd, slurmstepds and tasks),
`freeze_node` stops them (a node that is cut off while its processes live on).

Run it by hand for development: `python jobs/tests/slurm_cluster.py [N]` prints the
SLURM_CONF to export and keeps the cluster up until Ctrl-C.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobs.backends.slurm import SlurmBackend

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "squeue", "sinfo", "scontrol", "scancel")
# 22.05 resolves config only through SLURM_CONF or DNS SRV; the cluster sets
# SLURM_CONF for clients, so a missing binary is the only reason not to run.
CLUSTER_CPUS = 8  # more than the host has: several single-cpu steps at once.


class ClusterUnavailable(RuntimeError):
    """The daemons cannot run here (not root, binaries missing)."""


def why_cluster_cannot_run() -> str | None:
    if os.geteuid() != 0:
        return "the Slurm test cluster needs root to run slurmd and munged"
    missing = [b for b in DAEMONS + CLIENTS if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]
    if missing:
        return "Slurm binaries missing: " + ", ".join(missing) + " (apt-get install -y slurm-wlm munge)"
    return None


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    sbin = Path("/usr/sbin", name)
    if sbin.exists():
        return str(sbin)
    raise ClusterUnavailable(f"{name} not found")


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


@dataclass
class SlurmCluster:
    root: Path
    hostname: str = field(default_factory=lambda: socket.gethostname().split(".")[0])
    cpus: int = CLUSTER_CPUS
    partition: str = "vigil"
    nodes: int = 1  # >= 2: multiple-slurmd mode, nodes n1..nN
    slurmd_timeout: int = 30  # seconds before a silent node is DOWN (node-death tests: 5)
    message_timeout: int = 10
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    last_client_error: str = ""  # why the last sinfo here failed (in timeout messages)

    @property
    def node_names(self) -> list[str]:
        return [self.hostname] if self.nodes == 1 else [f"n{i}" for i in range(1, self.nodes + 1)]

    @staticmethod
    def daemon(node: str) -> str:
        return f"slurmd-{node}"

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        # Apart from the key, and reachable by every user as /run/munge is: steps that
        # run as a workspace's OS user (sbatch --uid) authenticate through it too.
        return self.root / "munge-run" / "munge.socket"

    @property
    def shared_dir(self) -> Path:
        """Where instance logs go; 'shared' trivially on one node."""
        return self.root / "shared"

    @property
    def env(self) -> dict[str, str]:
        """Environment for Slurm client commands pointed at this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    @property
    def port_range(self) -> dict[str, int]:
        """The backend's instance ports for jobs on this cluster, below the local backend's
        range and the kernel's ephemeral one: every node of this cluster is this machine, so
        the default range (29500 up) meets the local backend's DDP jobs of the other test
        shard and outgoing connections' source ports (a PostgreSQL run: attempt 2 of the
        DDP example on Slurm failed with address-in-use)."""
        return {"port_base": 10000, "port_span": 10000}

    def backend(self, **options: Any) -> SlurmBackend:
        """A Slurm backend for this cluster: its shared directory, its SLURM_CONF and its ports."""
        from jobs.backends.slurm import SlurmBackend

        return SlurmBackend(
            log_dir=str(self.shared_dir),
            environment=self.env,
            port_base=self.port_range["port_base"],
            port_span=self.port_range["port_span"],
            **options,
        )

    def client_env(self) -> dict[str, str]:
        env = dict(os.environ)
        # A Slurm job's own variables would confuse clients run from inside one.
        for key in list(env):
            if key.startswith(("SLURM_", "SBATCH_", "SRUN_", "SQUEUE_", "SINFO_")):
                del env[key]
        env.update(self.env)
        return env

    # -- bring-up -------------------------------------------------------------

    def write_files(self) -> None:
        for sub in ("munge", "munge-run", "state", "spool", "log", "shared"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root / "munge", 0o700)
        os.chmod(self.root / "munge-run", 0o755)
        os.chmod(self.root, 0o711)  # others pass through to slurm.conf and the socket, never list
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        ctld_port, *node_ports = _free_ports(1 + self.nodes)
        r = self.root
        if self.nodes == 1:
            node_lines = f"NodeName={self.hostname} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory=1000 State=UNKNOWN\n"
        else:
            # Multiple-slurmd mode: every node on this host, each slurmd on its own port.
            node_lines = "".join(
                f"NodeName={name} NodeHostname={self.hostname} NodeAddr=127.0.0.1 Port={port} "
                f"CPUs={self.cpus} RealMemory=1000 State=UNKNOWN\n"
                for name, port in zip(self.node_names, node_ports)
            )
        nodelist = ",".join(self.node_names)
        self.conf.write_text(f"""\
# Generated by jobs/tests/slurm_cluster.py for the Slurm backend's tests.
ClusterName=vigiltest
SlurmctldHost={self.hostname}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={node_ports[0]}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd-%n.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
# Trust the configured CPUs even where the host has fewer cores.
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=300
KillWait=5
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout={self.slurmd_timeout}
MessageTimeout={self.message_timeout}
{node_lines}PartitionName={self.partition} Nodes={nodelist} Default=YES MaxTime=INFINITE State=UP
""")

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.out", "ab")
        try:
            self.processes[name] = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.client_env(),
                cwd=self.root,
                start_new_session=True,
            )
        finally:
            log.close()

    def _wait_for(self, what: str, ready, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.processes.items():
                if proc.poll() is not None:
                    raise ClusterUnavailable(
                        f"{name} exited with {proc.returncode} while waiting for {what}; log:\n{self.log_tail(name)}"
                    )
            if ready():
                return
            time.sleep(0.2)
        raise ClusterUnavailable(
            f"timed out after {timeout:.0f}s waiting for {what}; nodes {self.node_states()}, last client error "
            f"{self.last_client_error!r}; logs:\n" + "\n".join(self.log_tail(n) for n in self.processes)
        )

    def log_tail(self, name: str, nbytes: int = 3000) -> str:
        out = []
        for path in (self.root / "log" / f"{name}.out", self.root / "log" / f"{name}.log"):
            if path.exists():
                out.append(f"--- {path.name}\n" + path.read_bytes()[-nbytes:].decode(errors="replace"))
        return "\n".join(out)

    def run(self, *argv: str, check: bool = True, timeout: float = 20) -> subprocess.CompletedProcess:
        return subprocess.run(argv, env=self.client_env(), capture_output=True, text=True, timeout=timeout, check=check)

    def node_state(self, node: str | None = None) -> str:
        try:
            res = self.run("sinfo", "-h", "-N", "-n", node or self.hostname, "-o", "%T", check=False, timeout=10)
        except subprocess.TimeoutExpired:
            self.last_client_error = "sinfo took longer than 10 s"
            return ""
        if res.returncode != 0:
            self.last_client_error = f"sinfo exited {res.returncode}: {res.stderr.strip()[-500:]}"
        return res.stdout.strip() if res.returncode == 0 else ""

    def node_states(self) -> dict[str, str]:
        try:
            res = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False, timeout=10)
        except subprocess.TimeoutExpired:
            return {}
        return dict(line.split() for line in res.stdout.splitlines() if line.strip()) if res.returncode == 0 else {}

    def all_idle(self) -> bool:
        states = self.node_states()
        return sorted(states) == sorted(self.node_names) and set(states.values()) == {"idle"}

    def wait_until_idle(self, timeout: float = 60) -> None:
        self._wait_for("every node to be idle in sinfo", self.all_idle, timeout)

    def start_node(self, node: str) -> None:
        (self.root / "spool" / node).mkdir(parents=True, exist_ok=True)
        self._spawn(self.daemon(node), [_binary("slurmd"), "-D", "-f", str(self.conf), "-N", node])

    # -- a node that dies or is cut off ----------------------------------------------------

    def node_pids(self, node: str) -> list[int]:
        """Every process of `node`: its slurmd, whatever Slurm started there (found by
        SLURMD_NODENAME in the environment: the tasks, and commands in sessions of their
        own such as the instance wrapper's), and the slurmstepds above those (slurmstepd
        runs in its own session, under init, with no node name on it)."""
        proc = self.processes.get(self.daemon(node))
        found = [proc.pid] if proc is not None and proc.poll() is None else []
        parents: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            pid = int(entry)
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    stat = fh.read()
                parents[pid] = int(stat[stat.rindex(")") + 2 :].split()[1])
                with open(f"/proc/{pid}/environ", "rb") as fh:
                    env = fh.read().split(b"\0")
            except (OSError, ValueError):
                continue
            if f"SLURMD_NODENAME={node}".encode() in env:
                found.append(pid)
        for pid in list(found):
            ppid = parents.get(pid)
            if ppid is None or ppid in found:
                continue
            try:
                with open(f"/proc/{ppid}/comm") as fh:
                    if fh.read().strip() == "slurmstepd":
                        found.append(ppid)
            except OSError:
                continue
        return found

    def _signal_node(self, node: str, signum: int) -> list[int]:
        pids = self.node_pids(node)
        for pid in pids:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass
        return pids

    def kill_node(self, node: str) -> list[int]:
        """The node dies: its slurmd, its slurmstepds and its tasks at once (killing slurmd
        alone leaves the steps running). Everything is stopped first, the slurmstepds before
        their tasks, then killed: a real node's death is one instant, and a slurmstepd that
        outlived its task by a moment told srun "task 0: Killed" (a CI run under load), which
        no dead node says. Returns the PIDs killed."""
        pids = self.node_pids(node)
        for signum in (signal.SIGSTOP, signal.SIGKILL):
            for pid in reversed(pids):  # node_pids lists the slurmstepds last
                try:
                    os.kill(pid, signum)
                except ProcessLookupError:
                    pass
        proc = self.processes.pop(self.daemon(node), None)
        if proc is not None:
            proc.wait(timeout=10)
        return pids

    def freeze_node(self, node: str) -> list[int]:
        """The node is cut off: SIGSTOP to its slurmd, slurmstepds and tasks. Its processes
        live on (memory, sockets open) but nothing on it answers or moves, as when its
        network is gone; `thaw_node` lets them go on."""
        return self._signal_node(node, signal.SIGSTOP)

    def thaw_node(self, node: str) -> list[int]:
        return self._signal_node(node, signal.SIGCONT)

    def revive_node(self, node: str, timeout: float = 60) -> None:
        """A dead node comes back (a fresh slurmd; ReturnToService=2 makes it idle again)."""
        if self.daemon(node) not in self.processes:
            self.start_node(node)
        if self.node_state(node) != "idle":
            self.run("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)
        self._wait_for(f"node {node} to be idle again", lambda: self.node_state(node) == "idle", timeout)

    def start(self, timeout: float = 60) -> None:
        self.write_files()
        self._spawn(
            "munged",
            [
                _binary("munged"),
                "--foreground",
                "--force",
                f"--socket={self.munge_socket}",
                f"--key-file={self.root}/munge/munge.key",
                f"--log-file={self.root}/log/munged.log",
                f"--pid-file={self.root}/munge/munged.pid",
                f"--seed-file={self.root}/munge/munged.seed",
            ],
        )
        self._wait_for("the munge socket", self.munge_socket.exists, 15)
        self._spawn("slurmctld", [_binary("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        for node in self.node_names:
            self.start_node(node)
        self.wait_until_idle(timeout)

    def cancel_all_jobs(self, timeout: float = 20) -> None:
        """Cancel every job and wait until slurmd has ended their processes."""
        if self.processes.get("slurmctld") is None or self.processes["slurmctld"].poll() is not None:
            return
        try:
            self.run("scancel", "--full", "--signal=KILL", "--state=RUNNING", "--user=root", check=False)
            self.run("scancel", "--user=root", check=False)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                res = self.run("squeue", "-h", "-o", "%i %T", check=False)
                if res.returncode == 0 and not res.stdout.strip():
                    return
                time.sleep(0.5)
        except subprocess.TimeoutExpired:
            pass

    def stop(self) -> None:
        self.cancel_all_jobs()
        # A frozen node would not stop: let it go on first.
        for node in self.node_names:
            if self.nodes > 1:
                self.thaw_node(node)
        # slurmd first so no step outlives its daemon; then the controller; munge last.
        for name in [self.daemon(n) for n in self.node_names] + ["slurmctld", "munged"]:
            proc = self.processes.get(name)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self.processes.clear()

    def sinfo_json(self) -> dict:
        return json.loads(self.run("sinfo", "--json").stdout)


def start_cluster(
    root: Path | None = None, timeout: float = 60, nodes: int = 1, slurmd_timeout: int = 30, message_timeout: int = 10
) -> SlurmCluster:
    reason = why_cluster_cannot_run()
    if reason:
        raise ClusterUnavailable(reason)
    cluster = SlurmCluster(
        root=Path(root or tempfile.mkdtemp(prefix="vigil-slurm-")),
        nodes=nodes,
        slurmd_timeout=slurmd_timeout,
        message_timeout=message_timeout,
    )
    try:
        cluster.start(timeout=timeout)
    except BaseException:
        cluster.stop()
        raise
    return cluster


if __name__ == "__main__":
    import sys

    c = start_cluster(nodes=int(sys.argv[1]) if len(sys.argv) > 1 else 1)
    # A background shell ignores SIGINT: let SIGTERM stop the cluster too.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    print(f"export SLURM_CONF={c.conf}\nshared dir: {c.shared_dir}\nCtrl-C stops the cluster.", flush=True)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        c.stop()
