"""The local backend with real processes: shims, exits, signals, stop, re-adoption, Redis."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest
import redis

from jobs import faults
from testsupport.jobs import job_writable, let_jobs_reach
from testsupport.waiting import wait_until
from jobs.backends import get_backend, reset_backends
from jobs.backends.base import AttemptLaunch, BackendError, InstanceLaunch, InstanceState, LaunchInProgress
from jobs.backends.frameworks import build_instances
from jobs.backends.local import LocalBackend
from jobs.backends.shim import proc_start_ticks

REPO = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Backends:
    """Makes LocalBackends over one private data dir; at teardown stops every
    instance and SIGKILLs every shim and process recorded on disk, by PID."""

    def __init__(self, data_dir: Path):
        self.data_dir = data_dir
        self.prefix = f"vigil-test-{uuid.uuid4().hex[:12]}"
        self.made: list[LocalBackend] = []
        self.extra_pids: list[int] = []

    def __call__(self, **options) -> LocalBackend:
        options.setdefault("data_dir", str(self.data_dir))
        options.setdefault("redis_url", None)
        options.setdefault("channel_prefix", self.prefix)
        options.setdefault("grace", 1.0)
        options.setdefault("nodes", [{"name": "node-a", "slots": 4}, {"name": "node-b", "slots": 4}])
        backend = LocalBackend(**options)
        self.made.append(backend)
        return backend

    def teardown(self):
        cleaner = LocalBackend(data_dir=str(self.data_dir), redis_url=None)
        cleaner.stop_everything(grace=0.2)
        for pid in self.extra_pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def backends(tmp_path):
    let_jobs_reach(tmp_path)
    made = Backends(tmp_path / "data")
    yield made
    made.teardown()


def attempt(
    command: str | dict, job_id="job1", number=1, job_type="ElasticBatchJob", replicas=None, env=None, **kw
) -> AttemptLaunch:
    replicas = replicas or {"Worker": 1}
    return AttemptLaunch(job_id, number, job_type, build_instances(job_type, replicas, command), env or {}, **kw)


def wait_finished(backend, handle, timeout=5.0):
    return wait_until(lambda: (s := backend.poll(handle)) and all(x.state.finished for x in s) and s, timeout)


def by_name(statuses):
    return {s.name: s for s in statuses}


def test_launch_starts_every_instance_with_its_own_log_in_the_attempt_layout(backends):
    backend = backends()
    handle = backend.launch(attempt('echo "hello from $VIGIL_INSTANCE"', replicas={"Worker": 3}))

    statuses = wait_finished(backend, handle)

    assert [s.state for s in statuses] == [InstanceState.SUCCEEDED] * 3
    for i in range(3):
        name = f"worker-{i}"
        path = backends.data_dir / "jobs" / "job1" / "attempt-1" / name / "output.log"
        assert backend.log_path(handle, name) == str(path)
        assert backend.read_log(handle, name) == f"hello from {name}\n".encode()
        assert (path.parent / "state.json").exists() and (path.parent / "exit.json").exists()


def test_exit_codes_zero_and_one_are_recorded_as_succeeded_and_failed(backends):
    backend = backends()
    handle = backend.launch(
        attempt(
            {"Master": "exit 0", "Worker": "echo boom >&2; exit 1"},
            job_type="PyTorchJob",
            replicas={"Master": 1, "Worker": 1},
        )
    )

    status = by_name(wait_finished(backend, handle))

    assert (status["master-0"].state, status["master-0"].exit_code, status["master-0"].signal) == (
        InstanceState.SUCCEEDED,
        0,
        None,
    )
    assert (status["worker-0"].state, status["worker-0"].exit_code, status["worker-0"].signal) == (
        InstanceState.FAILED,
        1,
        None,
    )
    assert backend.tail_log(handle, "worker-0", 100) == b"boom\n"
    assert status["worker-0"].exited_at >= status["worker-0"].started_at


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSEGV])
def test_a_process_killed_by_a_signal_is_recorded_with_that_signal_and_no_exit_code(backends, sig):
    backend = backends()
    # exec: the instance's own process (not a shell around it) dies by the signal.
    handle = backend.launch(attempt(f"exec {sys.executable} -c 'import os, signal; os.kill(os.getpid(), {int(sig)})'"))

    [status] = wait_finished(backend, handle)

    assert (status.state, status.exit_code, status.signal) == (InstanceState.FAILED, None, int(sig))


def test_stop_kills_grandchildren_in_the_group_and_those_that_left_it(backends):
    backend = backends()
    pidfile = Path(job_writable(backends.data_dir.parent / "shared")) / "pids"
    handle = backend.launch(
        attempt(f"sleep 30 & echo $! >> {pidfile}; setsid sleep 31 & echo $! >> {pidfile}; sleep 32")
    )
    grandchildren = wait_until(
        lambda: (
            pidfile.exists() and len(pidfile.read_text().split()) == 2 and [int(p) for p in pidfile.read_text().split()]
        )
    )
    procs = [psutil.Process(p) for p in grandchildren]
    assert all(p.is_running() for p in procs)

    started = time.monotonic()
    backend.stop(handle, grace=2.0)

    assert time.monotonic() - started < 2.0  # they all obey SIGTERM: no waiting for the grace period
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in procs)
    [status] = backend.poll(handle)
    assert status.state == InstanceState.STOPPED and status.signal == signal.SIGTERM


def test_stop_sends_sigkill_once_the_grace_period_is_over(backends):
    backend = backends()
    handle = backend.launch(attempt("trap '' TERM; echo ready; while :; do sleep 0.05; done"))
    wait_until(lambda: backend.read_log(handle, "worker-0") == b"ready\n")

    started = time.monotonic()
    backend.stop(handle, grace=0.3)
    took = time.monotonic() - started

    [status] = backend.poll(handle)
    assert 0.3 <= took < 3.0
    assert (status.state, status.signal) == (InstanceState.STOPPED, signal.SIGKILL)


def test_an_instance_that_already_exited_keeps_its_outcome_when_the_attempt_is_stopped(backends):
    backend = backends()
    handle = backend.launch(attempt({"Worker": "exit 3"}, replicas={"Worker": 1}))
    wait_finished(backend, handle)

    backend.stop(handle, grace=0.1)

    [status] = backend.poll(handle)
    assert (status.state, status.exit_code) == (InstanceState.FAILED, 3)


def test_the_shim_outlives_its_launcher_and_a_fresh_backend_adopts_the_instance(backends):
    spec = attempt("echo started; sleep 30")
    script = (
        "import json, sys\n"
        "from jobs.backends.local import LocalBackend\n"
        "from jobs.backends.base import AttemptLaunch\n"
        f"b = LocalBackend(data_dir={str(backends.data_dir)!r}, redis_url=None)\n"
        f"h = b.launch(AttemptLaunch.from_dict(json.loads({json.dumps(json.dumps(spec.to_dict()))})))\n"
        "print(json.dumps(h))\n"
    )
    launcher = subprocess.Popen(
        [sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    out, err = launcher.communicate(timeout=30)
    assert launcher.returncode == 0, err  # the launching process is gone
    handle = json.loads(out)

    fresh = backends()
    [status] = fresh.poll(handle)

    assert status.state == InstanceState.RUNNING and status.pid
    state = json.loads((backends.data_dir / "jobs/job1/attempt-1/worker-0/state.json").read_text())
    shim = psutil.Process(state["shim_pid"])
    assert shim.is_running() and shim.ppid() != launcher.pid
    assert os.getsid(shim.pid) != os.getsid(0)  # its own session: the launcher's (ours) can die
    assert fresh.handle_for("job1", 1) == handle
    fresh.stop(handle, grace=1.0)
    [status] = fresh.poll(handle)
    assert status.state == InstanceState.STOPPED
    assert wait_until(lambda: not shim.is_running() or shim.status() == psutil.STATUS_ZOMBIE)


def test_a_recycled_pid_is_not_mistaken_for_the_instance(backends):
    backend = backends()
    handle = backend.launch(attempt("true"))
    wait_finished(backend, handle)
    stranger = subprocess.Popen(["sleep", "30"])
    backends.extra_pids.append(stranger.pid)
    idir = backends.data_dir / "jobs/job1/attempt-1/worker-0"
    (idir / "exit.json").unlink()
    state = json.loads((idir / "state.json").read_text())
    ticks = proc_start_ticks(stranger.pid)
    state.update(shim_pid=stranger.pid, shim_start=ticks - 1, child_pid=stranger.pid, child_start=ticks - 1)
    (idir / "state.json").write_text(json.dumps(state))

    [status] = backend.poll(handle)
    backend.stop(handle, grace=0.2)

    assert status.state == InstanceState.LOST
    assert "shim lost" in status.reason
    assert backend.pids(handle, "worker-0") == []
    assert stranger.poll() is None  # the stop did not touch the unrelated process
    stranger.kill()
    stranger.wait()


def test_a_descendant_that_ended_and_awaits_its_reaper_is_not_listed_as_a_process(backends):
    # Between a stopped instance's last process ending and the shim (its subreaper) reaping
    # it, psutil still lists it as the shim's child: a zombie. The backend's processes of the
    # instance leave it out, as its wait for the stop already did (issue 30's CI: a stopped
    # Lighthouse read as still running). The "shim" here is a live shell that holds a child
    # that has exited and is not reaped while the shell sleeps.
    backend = backends()
    handle = backend.launch(attempt("true"))
    wait_finished(backend, handle)
    holder = subprocess.Popen(["sh", "-c", "sleep 0.1 & exec sleep 30"])
    backends.extra_pids.append(holder.pid)
    [child] = wait_until(lambda: psutil.Process(holder.pid).children(), what="the holder's child")
    wait_until(lambda: child.status() == psutil.STATUS_ZOMBIE, what="its child to end unreaped")
    idir = backends.data_dir / "jobs/job1/attempt-1/worker-0"
    state = json.loads((idir / "state.json").read_text())
    state.update(shim_pid=holder.pid, shim_start=proc_start_ticks(holder.pid))
    (idir / "state.json").write_text(json.dumps(state))

    assert child.pid in [p.pid for p in psutil.Process(holder.pid).children(recursive=True)]
    assert backend.pids(handle, "worker-0") == []
    holder.kill()
    holder.wait()


def test_every_instance_gets_exactly_its_pytorch_variables(backends):
    backend = backends()
    dump = 'printf "%s %s %s %s %s %s" "$MASTER_ADDR" "$MASTER_PORT" "$WORLD_SIZE" "$RANK" "$LOCAL_RANK" "$NODE_RANK"'
    handle = backend.launch(attempt(dump, job_type="PyTorchJob", replicas={"Master": 1, "Worker": 5}))
    wait_finished(backend, handle)

    port = handle["ports"]["master-0"]
    assert handle["master_port"] == port
    seen = {i["name"]: backend.read_log(handle, i["name"]).decode() for i in handle["instances"]}
    # 4 slots per node: master-0..worker-2 fill node-a, worker-3 and worker-4 go to node-b.
    assert seen == {
        "master-0": f"127.0.0.1 {port} 6 0 0 0",
        "worker-0": f"127.0.0.1 {port} 6 1 1 0",
        "worker-1": f"127.0.0.1 {port} 6 2 2 0",
        "worker-2": f"127.0.0.1 {port} 6 3 3 0",
        "worker-3": f"127.0.0.1 {port} 6 4 0 1",
        "worker-4": f"127.0.0.1 {port} 6 5 1 1",
    }


def test_every_instance_gets_exactly_its_tf_config(backends):
    backend = backends()
    handle = backend.launch(
        attempt(
            'printf "%s" "$TF_CONFIG"', job_type="TFJob", replicas={"Chief": 1, "PS": 1, "Worker": 2, "Evaluator": 1}
        )
    )
    wait_finished(backend, handle)

    p = handle["ports"]
    cluster = {
        "chief": [f"127.0.0.1:{p['chief-0']}"],
        "ps": [f"127.0.0.1:{p['ps-0']}"],
        "worker": [f"127.0.0.1:{p['worker-0']}", f"127.0.0.1:{p['worker-1']}"],
        "evaluator": [f"127.0.0.1:{p['evaluator-0']}"],
    }
    for inst in handle["instances"]:
        got = json.loads(backend.read_log(handle, inst["name"]))
        assert got == {"cluster": cluster, "task": {"type": inst["role"].lower(), "index": inst["index"]}}
    assert len(set(p.values())) == 5


def test_the_mpi_launcher_finds_a_hostfile_with_the_workers_slots(backends):
    backend = backends()
    handle = backend.launch(
        attempt(
            'cat "$OMPI_MCA_orte_default_hostfile"; echo "np=$VIGIL_MPI_NUM_PROCS"',
            job_type="MPIJob",
            replicas={"Launcher": 1, "Worker": 3},
        )
    )
    wait_finished(backend, handle)

    assert backend.read_log(handle, "launcher-0") == b"127.0.0.1 slots=3\nnp=3\n"


def test_a_new_attempt_never_reuses_the_previous_attempts_master_port(backends):
    backend = backends()
    ports = []
    for n in (1, 2, 3):
        handle = backend.launch(attempt("true", number=n, job_type="PyTorchJob", replicas={"Master": 1, "Worker": 1}))
        ports.append(handle["master_port"])
    assert ports[0] != ports[1] and ports[1] != ports[2]


def test_user_env_reaches_the_instance_but_cannot_override_framework_variables(backends):
    backend = backends()
    handle = backend.launch(
        attempt(
            'printf "%s %s %s" "$RANK" "$MY_FLAG" "$VIGIL_JOB_ID"',
            job_type="PyTorchJob",
            replicas={"Master": 1},
            env={"RANK": "7", "MY_FLAG": "on", "VIGIL_JOB_ID": "j"},
        )
    )
    wait_finished(backend, handle)
    assert backend.read_log(handle, "master-0") == b"0 on j"


def test_a_10_mb_line_and_binary_bytes_do_not_break_reading_the_log(backends):
    backend = backends()
    code = (
        "import sys; w = sys.stdout.buffer.write; w(bytes(range(256)) * 4); "
        "w(b'x' * (10 * 1024 * 1024)); w(b'\\xff\\xfe\\x00 tail end')"
    )
    handle = backend.launch(attempt(f'{sys.executable} -c "{code}"'))
    wait_finished(backend, handle, timeout=10)

    whole = backend.read_log(handle, "worker-0")
    assert len(whole) == 1024 + 10 * 1024 * 1024 + len(b"\xff\xfe\x00 tail end")
    assert backend.tail_log(handle, "worker-0", 11) == b"\xfe\x00 tail end"
    assert backend.read_log(handle, "worker-0", offset=0, limit=256) == bytes(range(256))
    assert backend.read_log(handle, "worker-0", offset=len(whole) - 3) == b"end"
    assert backend.read_log(handle, "worker-0", offset=len(whole) + 10) == b""


def test_the_last_output_time_follows_the_log(backends):
    backend = backends()
    handle = backend.launch(attempt("echo one; sleep 0.4; echo two; sleep 30"))
    first = wait_until(lambda: backend.read_log(handle, "worker-0") == b"one\n" and backend.poll(handle)[0])
    second = wait_until(lambda: backend.read_log(handle, "worker-0") == b"one\ntwo\n" and backend.poll(handle)[0])
    assert second.last_output_at - first.last_output_at >= 0.3
    assert second.state == InstanceState.RUNNING


@pytest.mark.redis
def test_an_exit_is_on_disk_and_announced_over_redis_within_milliseconds(backends):
    backend = backends(redis_url=REDIS_URL)
    client = redis.Redis.from_url(REDIS_URL)
    pubsub = client.pubsub()
    pubsub.subscribe(backend.exit_channel)
    pubsub.get_message(timeout=1.0)  # the subscribe confirmation
    try:
        handle = backend.launch(attempt("sleep 0.2; date +%s.%N; exit 3", job_id="job-redis"))
        message = None
        deadline = time.monotonic() + 5
        while message is None and time.monotonic() < deadline:
            message = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.5)
        received = time.time()
    finally:
        pubsub.close()
        client.close()
    assert message is not None, "no exit announcement"
    payload = json.loads(message["data"])
    assert {k: payload[k] for k in ("job_id", "attempt", "instance", "exit_code", "signal")} == {
        "job_id": "job-redis",
        "attempt": 1,
        "instance": "worker-0",
        "exit_code": 3,
        "signal": None,
    }
    [status] = backend.poll(handle)
    assert status.state == InstanceState.FAILED and status.exited_at == payload["exited_at"]
    child_exit = float(backend.read_log(handle, "worker-0"))
    assert received - child_exit < 0.5


def test_with_redis_down_the_exit_is_still_recorded_on_disk_promptly(backends):
    backend = backends(redis_url=f"redis://127.0.0.1:{closed_port()}/0")
    handle = backend.launch(attempt("sleep 0.2; date +%s.%N; exit 5"))

    [status] = wait_finished(backend, handle)
    noticed = time.time()

    assert (status.state, status.exit_code) == (InstanceState.FAILED, 5)
    child_exit = float(backend.read_log(handle, "worker-0"))
    assert status.exited_at - child_exit < 0.2
    assert noticed - child_exit < 0.5
    state = json.loads((backends.data_dir / "jobs/job1/attempt-1/worker-0/state.json").read_text())
    wait_until(lambda: proc_start_ticks(state["shim_pid"]) != state["shim_start"], timeout=1.0)  # shim done


def test_restarting_one_instance_starts_a_fresh_process_and_marks_the_log(backends):
    backend = backends()
    handle = backend.launch(attempt("echo run $VIGIL_INDEX; sleep 30", replicas={"Worker": 2}))
    before = by_name(wait_until(lambda: all(s.pid for s in backend.poll(handle)) and backend.poll(handle)))
    wait_until(lambda: backend.read_log(handle, "worker-1").endswith(b"run 1\n"))

    handle = backend.restart_instance(handle, "worker-1")

    after = by_name(backend.poll(handle))
    assert after["worker-1"].state == InstanceState.RUNNING and after["worker-1"].pid != before["worker-1"].pid
    assert after["worker-0"].pid == before["worker-0"].pid  # the peer is untouched
    assert (
        not psutil.pid_exists(before["worker-1"].pid)
        or psutil.Process(before["worker-1"].pid).status() == psutil.STATUS_ZOMBIE
    )
    log = wait_until(lambda: (b := backend.read_log(handle, "worker-1")).count(b"run 1\n") == 2 and b)
    lines = log.splitlines()
    assert lines[0] == b"run 1" and lines[1].startswith(b"===== vigil: worker-1 restarted (run 2 of attempt 1)")
    idir = backends.data_dir / "jobs/job1/attempt-1/worker-1"
    assert (idir / "state.1.json").exists() and (idir / "exit.1.json").exists()


def test_a_restarted_instance_that_fails_again_reports_its_new_exit(backends):
    backend = backends()
    handle = backend.launch(attempt('exit "$((3 + $(grep -c restarted output.log 2>/dev/null || echo 0)))"'))
    [first] = wait_finished(backend, handle)
    handle = backend.restart_instance(handle, "worker-0")
    [second] = wait_finished(backend, handle)
    assert first.exit_code == 3 and second.state == InstanceState.FAILED and second.exited_at > first.exited_at


def test_pids_lists_the_instance_processes_for_stack_dumps(backends):
    backend = backends()
    handle = backend.launch(attempt("sleep 30 & sleep 31"))

    def names():
        # A forked shell shows its parent's command line until it execs sleep.
        try:
            return sorted(psutil.Process(p).cmdline()[0] for p in backend.pids(handle, "worker-0"))
        except psutil.Error:
            return []

    assert wait_until(lambda: names() == ["/bin/sh", "sleep", "sleep"]), names()
    assert backend.can_dump_stacks


def test_an_isolated_node_is_avoided_by_later_attempts_and_remembered(backends):
    backend = backends()
    backend.isolate_node("node-a", "C4D: rank 2 hung in allreduce")

    nodes = {n.name: n for n in backends().list_nodes()}  # a fresh object reads it from disk
    handle = backend.launch(attempt("true", replicas={"Worker": 2}))

    assert (nodes["node-a"].schedulable, nodes["node-a"].reason) == (False, "C4D: rank 2 hung in allreduce")
    assert nodes["node-b"].schedulable
    assert {i["node"] for i in handle["instances"]} == {"node-b"}
    backend.restore_node("node-a")
    assert all(n.schedulable for n in backend.list_nodes())


def test_an_attempt_can_avoid_nodes_and_fails_clearly_when_none_is_left(backends):
    backend = backends()
    handle = backend.launch(attempt("true", replicas={"Worker": 2}, avoid_nodes=("node-b",)))
    assert {i["node"] for i in handle["instances"]} == {"node-a"}
    with pytest.raises(BackendError, match="no schedulable node"):
        backend.launch(attempt("true", number=2, avoid_nodes=("node-a", "node-b")))


def test_instances_beyond_the_slots_are_placed_anyway_and_say_so(backends):
    backend = backends(nodes=[{"name": "tiny", "slots": 1}])
    handle = backend.launch(attempt("sleep 30", replicas={"Worker": 2}))
    status = by_name(backend.poll(handle))
    assert status["worker-0"].reason == ""
    assert status["worker-1"].node == "tiny" and "oversubscribed" in status["worker-1"].reason


def test_launching_the_same_attempt_twice_starts_nothing_new(backends):
    backend = backends()
    first = backend.launch(attempt("sleep 30"))
    again = backend.launch(attempt("sleep 30"))
    assert again == first
    assert sorted(p.name for p in (backends.data_dir / "jobs/job1/attempt-1").iterdir()) == [
        "attempt.json",
        "launch.json",
        "worker-0",
    ]


def test_the_instance_runs_in_the_job_workdir_shared_by_attempts(backends):
    backend = backends()
    h1 = backend.launch(attempt("echo saved > checkpoint.txt"))
    wait_finished(backend, h1)
    h2 = backend.launch(attempt("cat checkpoint.txt", number=2))
    wait_finished(backend, h2)
    assert backend.read_log(h2, "worker-0") == b"saved\n"


def test_bad_options_and_specs_get_errors_naming_the_field(backends):
    with pytest.raises(BackendError, match=r"nodes\[0\]\.slots"):
        backends(nodes=[{"name": "a", "slots": 0}])
    with pytest.raises(BackendError, match="grace"):
        backends(grace="soon")
    backend = backends()
    with pytest.raises(BackendError, match="job_id"):
        backend.launch(attempt("true", job_id="../etc"))
    with pytest.raises(BackendError, match="workdir"):
        backend.launch(attempt("true", workdir="/does/not/exist"))
    with pytest.raises(BackendError, match="instance 'worker-9'"):
        backend.read_log(backend.launch(attempt("true")), "worker-9")


def test_get_backend_builds_the_configured_backend_once(settings, tmp_path, backends):
    settings.JOB_BACKENDS = {
        "local": {
            "BACKEND": "jobs.backends.local.LocalBackend",
            "OPTIONS": {"data_dir": str(backends.data_dir), "redis_url": None},
        }
    }
    reset_backends()
    try:
        backend = get_backend("local")
        assert isinstance(backend, LocalBackend) and get_backend("local") is backend
        assert backend.data_dir == str(backends.data_dir)
        with pytest.raises(BackendError, match="no backend 'k8s'"):
            get_backend("k8s")
    finally:
        reset_backends()


def test_importing_the_backends_does_not_touch_django_settings():
    code = "import sys, jobs.backends, jobs.backends.local, jobs.backends.memory; print('django.conf' in sys.modules)"
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_a_launch_that_fails_half_way_can_be_tried_again(backends):
    backend = backends()
    with pytest.raises(BackendError, match="instances.role"):
        backend.launch(AttemptLaunch("job1", 1, "PyTorchJob", (InstanceLaunch("ps-0", "PS", 0, 0, "true"),)))
    handle = backend.launch(attempt("true"))
    [status] = wait_finished(backend, handle)
    assert status.state == InstanceState.SUCCEEDED
    assert any(p.name.startswith("failed-attempt-1-") for p in (backends.data_dir / "jobs/job1").iterdir())


# --- a launcher killed at each step of the launch (jobs.faults) -------------------------


def launch_killed_at(backends, spec, fault: str) -> None:
    """Launch `spec` in a process of its own that SIGKILLs itself at the fault point."""
    script = (
        "import json, sys\n"
        "from jobs.backends.local import LocalBackend\n"
        "from jobs.backends.base import AttemptLaunch\n"
        f"b = LocalBackend(data_dir={str(backends.data_dir)!r}, redis_url=None, grace=1.0)\n"
        f"b.launch(AttemptLaunch.from_dict(json.loads({json.dumps(json.dumps(spec.to_dict()))})))\n"
    )
    env = dict(os.environ, VIGIL_FAULT_POINT=faults.check(fault))
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        start_new_session=True,
    )
    assert out.returncode == -signal.SIGKILL, (out.returncode, out.stderr)
    assert f"vigil fault point {fault}" in out.stderr


def processes_under(data_dir: Path) -> set[int]:
    """Every live shim or rank whose command line or environment points into the data dir."""
    found = set()
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if any(str(data_dir) in a for a in p.info["cmdline"] or ()) or p.environ().get("VIGIL_TEST_DATA") == str(
                data_dir
            ):
                found.add(p.pid)
        except psutil.Error:
            pass
    return found


def ranks(backends, n=2):
    return attempt("exec sleep 60", replicas={"Worker": n}, env={"VIGIL_TEST_DATA": str(backends.data_dir)})


def test_a_shim_whose_launcher_died_runs_on_and_the_next_launch_completes_the_attempt(backends):
    spec = ranks(backends, n=1)
    launch_killed_at(backends, spec, "launch.after_shim_start")
    idir = backends.data_dir / "jobs/job1/attempt-1/worker-0"
    state = wait_until(
        lambda: json.loads((idir / "state.json").read_text()) if (idir / "state.json").exists() else None
    )
    # Its ready pipe broke, yet it keeps its rank and stays the one to record the exit.
    wait_until(lambda: b"the launcher is gone" in (idir / "shim.log").read_bytes())
    assert proc_start_ticks(state["shim_pid"]) == state["shim_start"]

    backend = backends()
    handle = backend.launch(spec)  # every shim had started: completed, nothing started twice
    [status] = backend.poll(handle)
    assert status.state == InstanceState.RUNNING and status.pid == state["child_pid"]
    assert not any(p.name.startswith("failed-") for p in (backends.data_dir / "jobs/job1").iterdir())
    backend.stop(handle, grace=1.0)
    [status] = backend.poll(handle)
    assert status.state == InstanceState.STOPPED and status.signal == signal.SIGTERM  # the shim recorded it


@pytest.mark.parametrize(
    "fault", ["launch.after_claim", "launch.after_spec", "launch.after_attempt_json", "launch.after_shim_start"]
)
def test_a_launch_killed_half_way_is_cleaned_up_and_launched_again_from_the_start(backends, fault):
    spec = ranks(backends)
    launch_killed_at(backends, spec, fault)
    expected = 2 if fault == "launch.after_shim_start" else 0  # shim 0 and its rank, which outlive the launcher
    time.sleep(0.2)
    wait_until(lambda: len(processes_under(backends.data_dir)) == expected)
    before = processes_under(backends.data_dir)

    backend = backends()
    handle = backend.launch(spec)
    statuses = backend.poll(handle)
    assert [s.state for s in statuses] == [InstanceState.RUNNING] * 2
    assert not before & processes_under(backends.data_dir), "a rank of the half-launch still runs"
    live = {s.pid for s in statuses} | {
        json.loads((Path(handle["dir"]) / n / "state.json").read_text())["shim_pid"] for n in ("worker-0", "worker-1")
    }
    assert processes_under(backends.data_dir) == live  # two shims, two ranks, nothing else
    aside = [p.name for p in (backends.data_dir / "jobs/job1").iterdir() if p.name.startswith("failed-attempt-1-")]
    assert len(aside) == 1
    assert backend.launch(spec) == handle  # launched now: a third call returns it


def test_a_launch_in_progress_in_another_process_is_left_to_it(backends):
    backend = backends()
    job_dir = backends.data_dir / "jobs" / "job1"
    job_dir.mkdir(parents=True)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            f"fd = os.open({str(job_dir)!r}, os.O_RDONLY)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(LaunchInProgress, match="being launched by another process"):
            backend.launch(ranks(backends))
    finally:
        holder.kill()
        holder.wait(5)
    handle = backend.launch(ranks(backends))  # its holder died: the lock went with it
    assert [s.state for s in backend.poll(handle)] == [InstanceState.RUNNING] * 2


def test_abandoning_a_half_launched_attempt_kills_what_it_started(backends):
    spec = ranks(backends)
    launch_killed_at(backends, spec, "launch.after_shim_start")
    wait_until(lambda: len(processes_under(backends.data_dir)) == 2)
    backends().abandon_launch("job1", 1)
    assert processes_under(backends.data_dir) == set()
    backends().abandon_launch("job1", 1)  # nothing left to do; no error


def test_the_shim_stamps_every_line_with_its_capture_time_without_slowing_a_fast_printer(backends):
    from jobs.logs import InstanceLog

    backend = backends()
    before = time.time()
    # 20,000 lines as fast as the shell prints them, then a pause and one more.
    handle = backend.launch(
        attempt('i=0; while [ $i -lt 20000 ]; do echo "line $i"; i=$((i+1)); done; sleep 0.5; echo "after the pause"')
    )
    wait_finished(backend, handle, timeout=30)
    log = InstanceLog(backend, handle, "worker-0")
    data = log.read(0, None)
    times = log.line_times(0, data)
    assert times is not None and len(times) == 20001 and None not in times
    assert times == sorted(times) and before <= times[0] <= times[-1] <= time.time()
    assert times[-1] - times[-2] >= 0.4  # the pause is in the times, not smoothed away
    # one record per look at the log, not one per line
    assert os.path.getsize(log.path + ".times") < 16 * 20001 / 10


FR_PROBE = (
    "import os, sys\n"
    "print(' '.join(os.environ.get(k, '-') for k in ('TORCH_FR_BUFFER_SIZE', 'TORCH_NCCL_TRACE_BUFFER_SIZE',\n"
    "      'TORCH_NCCL_DUMP_ON_TIMEOUT')))\n"
    "print(os.environ.get('PYTHONPATH', '-'))\n"
    "print(os.environ.get('TORCH_FR_DUMP_TEMP_FILE', '-'), os.environ.get('VIGIL_FR_DIR', '-'))\n"
    "print('hook' if 'sitecustomize' in sys.modules and sys.modules['sitecustomize'].__file__.endswith('/boot/sitecustomize.py') else 'no hook')\n"
    "print(os.environ.get('VIGIL_C4D_SDK', '-'))\n"
    "d = os.environ.get('VIGIL_FR_DIR')\n"
    "if d:\n"
    "    open(os.path.join(d, 'fr_3.json'), 'wb').write(b'written by the job')\n"
    "    os.symlink('/etc/hostname', os.path.join(d, 'nccl_trace_rank_5'))\n"
    "    open(os.path.join(d, 'unrelated.txt'), 'wb').write(b'x')\n"
)


def test_c4d_on_gives_every_rank_the_flight_recorder_and_the_hook_and_the_dumps_are_read_back(backends):
    """C4D without code changes: the recorder's variables (the job's own value wins), the
    start-up hook first on PYTHONPATH before the job's own entries, and the dumps read back
    by rank, never through a link the job planted."""
    backend = backends()
    cmd = f'{sys.executable} -c "$PROBE"'
    handle = backend.launch(
        attempt(
            cmd,
            job_type="PyTorchJob",
            replicas={"Master": 1},
            env={"VIGIL_C4D": "1", "PROBE": FR_PROBE, "PYTHONPATH": "/opt/mine", "TORCH_FR_BUFFER_SIZE": "5000"},
        )
    )
    wait_finished(backend, handle)
    idir = Path(handle["dir"]) / "master-0"
    lines = backend.read_log(handle, "master-0").decode().splitlines()
    assert lines[0] == "5000 200 1"
    assert lines[1] == f"{idir / 'boot'}:/opt/mine"
    assert lines[2] == f"{idir / 'c4d' / 'nccl_trace_rank_'} {idir / 'c4d'}"
    assert lines[3] == "hook"
    # The SDK's C4D modules, which the hook injects where the job has no vigil: this
    # checkout's, the backend's files (0644 in a 0755 directory).
    sdk = idir / "boot" / "sdk" / "vigil"
    assert lines[4] == str(sdk.parent)
    repo_sdk = Path(__file__).resolve().parents[2] / "sdk" / "src" / "vigil"
    assert sorted(p.name for p in sdk.iterdir()) == ["__init__.py", "_client.py", "c4d.py", "job_monitor.py"]
    assert all(
        p.read_bytes() == (repo_sdk / p.name).read_bytes() and stat.S_IMODE(p.stat().st_mode) == 0o644
        for p in sdk.iterdir()
    )
    assert stat.S_IMODE(sdk.stat().st_mode) == 0o755
    assert backend.flight_recorder_dumps(handle) == {3: b"written by the job"}

    plain = backend.launch(
        attempt(cmd, job_id="job2", job_type="PyTorchJob", replicas={"Master": 1}, env={"PROBE": FR_PROBE})
    )
    wait_finished(backend, plain)
    assert backend.read_log(plain, "master-0").decode().splitlines() == ["- - -", "-", "- -", "no hook", "-"]
    assert backend.flight_recorder_dumps(plain) == {}


ONE_GLOO_RANK = (
    "import time, torch, torch.distributed as dist\n"
    "dist.init_process_group('gloo')\n"
    "dist.all_reduce(torch.ones(1))\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


@pytest.mark.torch
def test_a_running_rank_answers_the_consoles_request_for_a_fresh_dump(backends):
    pytest.importorskip("torch", reason="torch is not installed (.ci/run installs torch==2.13.0)")
    backend = backends()
    handle = backend.launch(
        attempt(
            f'{sys.executable} -c "$PROGRAM"',
            job_type="PyTorchJob",
            replicas={"Master": 1},
            env={"VIGIL_C4D": "1", "PROGRAM": ONE_GLOO_RANK},
        )
    )
    wait_until(lambda: b"ready" in backend.read_log(handle, "master-0"), 60)
    fr = Path(handle["dir"]) / "master-0" / "c4d"
    assert (fr / "request").stat().st_uid == fr.stat().st_uid  # the job's, as its directory
    asked = time.time()
    assert backend.request_flight_recorder_dumps(handle, timeout=5) == {"master-0": [0]}
    assert (fr / "fr_0.json").stat().st_mtime >= asked - 0.05  # the kernel's coarse clock
    [entry] = json.loads(backend.flight_recorder_dumps(handle)[0])["entries"]
    assert (entry["profiling_name"], entry["collective_seq_id"]) == ("gloo:all_reduce", 1)
    backend.stop(handle, grace=0.2)
    assert backend.request_flight_recorder_dumps(handle, timeout=5) == {}  # nothing runs: nothing asked
