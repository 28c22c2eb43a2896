"""The Slurm backend against a real single-node Slurm cluster started by the test session.

The cluster (munged, slurmctld, slurmd on 127.0.0.1, see slurm_cluster.py) is
started once per session and stopped by PID at the end; tests that need it are
marked `slurm` and skip with the reason where the daemons cannot run (not root,
binaries missing). The first tests are pure: Slurm's outputs parsed without Slurm.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pwd
import shutil
import stat
import sys
import time
from pathlib import Path

import pytest
import redis

from jobs.backends import fr_files
from jobs.backends.base import AttemptLaunch, BackendError, InstanceLaunch, InstanceState
from jobs.backends.frameworks import build_instances
from jobs.backends.osuser import resolve_run_as
from core.slurm import SlurmJob
from jobs.backends.slurm import InstanceFiles, SlurmBackend, check_options, instance_status
from jobs.backends.slurm_step import (
    allocate,
    attempt_ports,
    expand_hostlist,
    expand_tasks_per_node,
    place_instances,
)
from testsupport.jobs import let_jobs_reach
from jobs.tests.slurm_cluster import SlurmCluster, start_cluster, why_cluster_cannot_run

PY_SPY = str(Path(sys.executable).parent / "py-spy")
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
WORKER = {"name": "worker-0", "role": "Worker", "index": 0}


# -- pure: Slurm's words parsed -------------------------------------------------------------


def test_tasks_per_node_expand_and_instances_fill_nodes_in_rank_order():
    assert expand_tasks_per_node("2(x2),1") == [2, 2, 1]
    assert place_instances(["a", "b", "c"], ["n1", "n2"], [2, 1]) == {"a": "n1", "b": "n1", "c": "n2"}
    with pytest.raises(ValueError, match="2 task slots for 3 instances"):
        place_instances(["a", "b", "c"], ["n1"], [2])


def test_compressed_host_lists_expand_keeping_leading_zeros():
    assert expand_hostlist("gpu[01-03,07],cpu1,n[9-10]") == ["gpu01", "gpu02", "gpu03", "gpu07", "cpu1", "n9", "n10"]


def test_an_allocation_that_ended_before_its_instances_started_says_what_the_batch_script_said():
    files = InstanceFiles(run=1, started=None, exited=None, stop_requested_at=None, last_output_at=None)
    status = instance_status(WORKER, files, SlurmJob("8", "FAILED"), "FileNotFoundError: python3")
    assert status.state == InstanceState.LOST
    assert status.reason == "Slurm job 8 ended (FAILED) before this instance started: FileNotFoundError: python3"


def test_a_tf_job_spread_over_two_nodes_gets_the_nodes_in_tf_config(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no scontrol: the host list is expanded here
    monkeypatch.setenv("SLURM_JOB_NODELIST", "n[1-2]")
    monkeypatch.setenv("SLURM_TASKS_PER_NODE", "2,1")
    instances = build_instances("TFJob", {"Chief": 1, "Worker": 2}, "python train.py")
    for i in instances:
        (tmp_path / "instances" / i.name).mkdir(parents=True)
    spec = {
        "job_id": "tf",
        "attempt": 1,
        "job_type": "TFJob",
        "instances": [dict(vars(i)) for i in instances],
        "ports": {"chief-0": 30000, "worker-0": 30001, "worker-1": 30002},
        "options": {"slots_per_instance": 1},
    }
    allocation = allocate(str(tmp_path), spec)
    assert {n: p["node"] for n, p in allocation["placements"].items()} == {
        "chief-0": "n1",
        "worker-0": "n1",
        "worker-1": "n2",
    }
    assert json.loads(allocation["env"]["worker-1"]["TF_CONFIG"]) == {
        "cluster": {"chief": ["n1:30000"], "worker": ["n1:30001", "n2:30002"]},
        "task": {"type": "worker", "index": 1},
    }
    assert json.loads((tmp_path / "allocation.json").read_text()) == allocation


def test_each_attempt_gets_ports_other_than_the_previous_attempts():
    first = attempt_ports("job-7", 1, 4, 29500, 20000)
    second = attempt_ports("job-7", 2, 4, 29500, 20000)
    assert len(set(first)) == 4 and not set(first) & set(second)
    assert all(29500 <= p < 49500 for p in first + second)


def test_an_instance_left_without_exit_record_by_a_node_failure_is_failed_naming_the_node():
    files = InstanceFiles(
        run=0,
        started={"node": "n3", "pid": 5, "started_at": 1.0},
        exited=None,
        stop_requested_at=None,
        last_output_at=2.0,
    )
    status = instance_status(WORKER, files, SlurmJob("12", "NODE_FAIL", "", "n3"))
    assert (status.state, status.reason, status.node) == (InstanceState.FAILED, "NODE_FAIL", "n3")


def unreported(said: str, node: str = "n3") -> InstanceFiles:
    """A run the supervisor closed because srun ended without the instance's report."""
    return InstanceFiles(
        run=1,
        started={"node": node, "pid": 5, "started_at": 1.0},
        exited={"exit_code": None, "signal": None, "exited_at": 9.0, "reason": said},
        stop_requested_at=None,
        last_output_at=4.0,
    )


def test_a_run_that_died_with_its_node_before_slurm_failed_the_job_is_the_nodes_failure():
    # CI: srun heard of the node before the job became NODE_FAIL, and the supervisor wrote
    # the run's end; the poll between the two saw a RUNNING job.
    running = SlurmJob("12", "RUNNING", "", "n1,n2,n3")
    files = unreported("step ended without a report from the instance (srun exit 1)")
    status = instance_status(WORKER, files, running, failed_nodes=frozenset({"n3"}))
    assert (status.state, status.reason, status.node) == (InstanceState.FAILED, "NODE_FAIL", "n3")
    assert status.exited_at == 4.0  # its last sign of life, before srun heard of it
    # srun's own words name the node, before sinfo shows it down
    said = "step ended without a report from the instance (srun exit 1): srun: error: Node failure on n3"
    status = instance_status(WORKER, unreported(said), running)
    assert (status.state, status.reason, status.node) == (InstanceState.FAILED, "NODE_FAIL", "n3")


def test_a_run_that_ended_unreported_on_a_node_that_is_up_stays_unexplained():
    running = SlurmJob("12", "RUNNING", "", "n1,n3")
    said = "step ended without a report from the instance (srun exit 9): srun: error: Node failure on n30"
    for files, down in ((unreported(said), frozenset({"n1"})), (unreported(said, node="n1"), frozenset())):
        status = instance_status(WORKER, files, running, failed_nodes=down)
        assert (status.state, status.reason) == (InstanceState.LOST, said), files
    # stopped on request, on a node that then died: still the stop
    stopped = dataclasses.replace(unreported(said), stop_requested_at=8.0)
    assert instance_status(WORKER, stopped, running, failed_nodes=frozenset({"n3"})).state == InstanceState.STOPPED


def test_a_run_whose_wrapper_srun_saw_killed_failed_by_that_signal_unless_its_node_died():
    running = SlurmJob("12", "RUNNING", "", "n1,n3")
    said = "step ended without a report from the instance (srun exit 137): srun: error: n3: task 0: Killed"
    status = instance_status(WORKER, unreported(said), running)
    assert (status.state, status.exit_code, status.signal, status.reason) == (InstanceState.FAILED, None, 9, said)
    # the node's death explains it first: a dead node's tasks are not killed by a signal
    status = instance_status(WORKER, unreported(said), running, failed_nodes=frozenset({"n3"}))
    assert (status.state, status.reason, status.signal) == (InstanceState.FAILED, "NODE_FAIL", None)


def test_an_instance_whose_attempt_was_stopped_is_stopped_not_failed():
    files = InstanceFiles(
        run=0,
        started={"node": "n1"},
        stop_requested_at=100.0,
        last_output_at=None,
        exited={"exit_code": None, "signal": 15, "exited_at": 101.0},
    )
    assert instance_status(WORKER, files, SlurmJob("1", "COMPLETED")).state == InstanceState.STOPPED


def test_bad_options_name_the_option_and_what_is_accepted():
    with pytest.raises(BackendError, match=r"'log_dir'.*absolute path"):
        check_options({"log_dir": "relative"})
    with pytest.raises(BackendError, match=r"'srun_options'.*list of argument strings"):
        check_options({"log_dir": "/x", "srun_options": "--mem=1G"})
    with pytest.raises(BackendError, match=r"unknown option\(s\) partion"):
        check_options({"log_dir": "/x", "partion": "gpu"})


# -- against the real cluster ------------------------------------------------------------------


@pytest.fixture(scope="session")
def slurm_cluster():
    reason = why_cluster_cannot_run()
    if reason:
        pytest.skip(reason)
    cluster = start_cluster(timeout=60)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(cluster.root, ignore_errors=True)


@pytest.fixture
def backend(slurm_cluster: SlurmCluster):
    b = slurm_cluster.backend(
        python=sys.executable,
        py_spy=PY_SPY,
        grace=2,
        linger=10,
        command_timeout=20,
    )
    yield b
    # Whatever a test left behind ends with it.
    slurm_cluster.cancel_all_jobs()


def launch(backend, job_id, instances, job_type="ElasticBatchJob", **kw):
    return backend.launch(
        AttemptLaunch(job_id=job_id, attempt=kw.pop("attempt", 1), job_type=job_type, instances=tuple(instances), **kw)
    )


def wait_for(backend, handle, done, timeout=30.0, interval=0.3):
    """Poll until done(statuses) holds; returns the statuses. Fails with the last ones seen."""
    deadline = time.monotonic() + timeout
    while True:
        statuses = {s.name: s for s in backend.poll(handle)}
        if done(statuses):
            return statuses
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s; last poll: {statuses}")
        time.sleep(interval)


def wait_for_node(backend, name, done, timeout=20.0):
    deadline = time.monotonic() + timeout
    while True:
        (node,) = [n for n in backend.list_nodes() if n.name == name]
        if done(node):
            return node
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s; node {name} is {node}")
        time.sleep(0.3)


def all_finished(statuses):
    return all(s.state.finished for s in statuses.values())


def wait_for_log(backend, handle, name, text: bytes, timeout=30.0):
    deadline = time.monotonic() + timeout
    while text not in backend.read_log(handle, name):
        if time.monotonic() > deadline:
            pytest.fail(f"{name} never printed {text!r}: {backend.read_log(handle, name)!r}")
        time.sleep(0.2)


@pytest.mark.slurm
def test_two_instance_pytorch_job_succeeds_with_the_master_on_the_first_node(backend, slurm_cluster):
    instances = build_instances(
        "PyTorchJob",
        {"Master": 1, "Worker": 1},
        'echo "rank=$RANK world=$WORLD_SIZE master=$MASTER_ADDR:$MASTER_PORT procid=$SLURM_PROCID user=$GREETING"',
    )
    handle = launch(backend, "ok", instances, job_type="PyTorchJob", env={"GREETING": "hi"})
    statuses = wait_for(backend, handle, all_finished)

    assert {n: (s.state, s.exit_code, s.signal) for n, s in statuses.items()} == {
        "master-0": (InstanceState.SUCCEEDED, 0, None),
        "worker-0": (InstanceState.SUCCEEDED, 0, None),
    }
    master = statuses["master-0"]
    assert master.node == slurm_cluster.hostname
    # File times come from the kernel's coarse clock, a few ms behind time.time().
    assert master.started_at - 0.05 <= master.last_output_at <= master.exited_at + 0.05
    port = json.loads(Path(handle["attempt_dir"], "allocation.json").read_text())["placements"]["master-0"]["port"]
    for rank, name in enumerate(["master-0", "worker-0"]):
        assert backend.read_log(handle, name) == (
            f"rank={rank} world=2 master={slurm_cluster.hostname}:{port} procid={rank} user=hi\n".encode()
        )
    assert backend.tail_log(handle, "worker-0", 6) == b"er=hi\n"


@pytest.mark.parametrize(
    "code, stderr, gone",
    [
        (229, "", True),  # ESLURM_ALREADY_DONE, silently (seen on CI for a late stop)
        (225, "", True),  # ESLURM_INVALID_JOB_ID
        (1, "scancel: error: Kill job error on job id 5: Job/step already completing or completed", True),
        (1, "scancel: error: Kill job error on job id 5: Access/permission denied", False),
    ],
)
def test_scancel_of_a_job_that_is_already_gone_is_not_a_refusal(tmp_path, code, stderr, gone):
    fake = tmp_path / "scancel"
    fake.write_text(f"#!/bin/sh\necho '{stderr}' >&2\nexit {code}\n")
    fake.chmod(0o755)
    b = SlurmBackend(log_dir=str(tmp_path), commands={"scancel": str(fake)})
    if gone:
        b._scancel("--signal=TERM", "5")
    else:
        with pytest.raises(BackendError, match="Slurm refused: .*permission denied"):
            b._scancel("--signal=TERM", "5")


def test_a_workspaces_account_and_os_user_go_to_sbatch(tmp_path, monkeypatch):
    b = SlurmBackend(log_dir=str(tmp_path), account="everyone")
    spec = AttemptLaunch(
        job_id="1",
        attempt=1,
        job_type="ElasticBatchJob",
        instances=(InstanceLaunch("worker-0", "Worker", 0, 0, "true"),),
        account="team-a",
    )
    assert "--account=team-a" in b.sbatch_argv(spec, tmp_path)
    nobody = resolve_run_as("nobody", euid=0)
    argv = b.sbatch_argv(spec, tmp_path, nobody)
    assert f"--uid={nobody.uid}" in argv and f"--gid={nobody.gid}" in argv
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(BackendError, match="only a console running as root may submit Slurm jobs as another user"):
        b.launch(dataclasses.replace(spec, run_as="nobody"))
    assert not (tmp_path / "jobs").exists()  # refused before anything was claimed


@pytest.mark.slurm
@pytest.mark.skipif(os.geteuid() != 0, reason="only root may submit as another user (CI runs as root)")
def test_a_workspaces_os_user_runs_the_allocation_and_alone_reads_its_files(backend, slurm_cluster):
    let_jobs_reach(slurm_cluster.shared_dir)
    handle = launch(
        backend,
        "as-nobody",
        [InstanceLaunch("worker-0", "Worker", 0, 0, "echo uid=$(id -u)")],
        run_as="nobody",
        env={"VIGIL_JOB_TOKEN": "the-token"},
    )
    statuses = wait_for(backend, handle, all_finished)
    assert statuses["worker-0"].state == InstanceState.SUCCEEDED, (
        statuses,
        (Path(handle["attempt_dir"]) / "batch.log").read_text(errors="replace"),
        backend.read_log(handle, "worker-0"),
    )
    nobody = pwd.getpwnam("nobody").pw_uid
    assert backend.read_log(handle, "worker-0") == f"uid={nobody}\n".encode()
    attempt_dir = Path(handle["attempt_dir"])
    assert (os.stat(attempt_dir).st_uid, stat.S_IMODE(os.stat(attempt_dir).st_mode)) == (nobody, 0o700)
    token_file = attempt_dir / "attempt.json"
    assert (os.stat(token_file).st_uid, stat.S_IMODE(os.stat(token_file).st_mode)) == (nobody, 0o600)
    assert handle["run_as"] == "nobody"


@pytest.mark.slurm
def test_a_failing_instance_reports_its_exit_code_and_a_killed_one_its_signal(backend):
    handle = launch(
        backend,
        "fails",
        [
            InstanceLaunch("worker-0", "Worker", 0, 0, "echo about to fail; exit 3"),
            InstanceLaunch("worker-1", "Worker", 1, 1, "kill -KILL $$"),
            # the wrapper itself killed (a job that kills its process group): srun says so
            InstanceLaunch("worker-2", "Worker", 2, 2, "echo killing my wrapper; kill -KILL $PPID; sleep 30"),
        ],
    )
    statuses = wait_for(backend, handle, all_finished)
    wrapper = statuses.pop("worker-2")
    assert (wrapper.state, wrapper.exit_code, wrapper.signal) == (InstanceState.FAILED, None, 9), wrapper
    assert "(srun exit 137)" in wrapper.reason and "task 0: Killed" in wrapper.reason, wrapper.reason

    assert (statuses["worker-0"].state, statuses["worker-0"].exit_code, statuses["worker-0"].signal) == (
        InstanceState.FAILED,
        3,
        None,
    )
    assert (statuses["worker-1"].state, statuses["worker-1"].exit_code, statuses["worker-1"].signal) == (
        InstanceState.FAILED,
        None,
        9,
    )
    assert backend.tail_log(handle, "worker-0", 100) == b"about to fail\n"
    backend.stop(handle)  # a late stop leaves the real outcome alone
    assert [(s.state, s.exit_code, s.signal) for s in backend.poll(handle)] == [
        (InstanceState.FAILED, 3, None),
        (InstanceState.FAILED, None, 9),
        (InstanceState.FAILED, None, 9),
    ]
    with pytest.raises(BackendError, match="restart the whole attempt instead") as err:
        backend.restart_instance(handle, "worker-0")  # the allocation is gone
    assert not err.value.retryable


@pytest.mark.slurm
def test_a_hung_instance_stacks_are_dumped_on_its_node_and_stop_ends_it(backend, tmp_path):
    program = tmp_path / "hang.py"
    program.write_text(
        "import time\n\ndef stuck_in_known_function():\n    time.sleep(600)\n\n"
        "print('ready', flush=True)\nstuck_in_known_function()\n"
    )
    # Python below a shell, as `cd ... && python train.py` commands run.
    handle = launch(
        backend,
        "hangs",
        [InstanceLaunch("worker-0", "Worker", 0, 0, f"cd {tmp_path} && {sys.executable} {program}; true")],
    )
    wait_for_log(backend, handle, "worker-0", b"ready")

    (dump,) = backend.dump_stacks(handle, "worker-0")  # the shell is no Python: skipped
    assert dump["error"] == "" and str(program) in dump["cmdline"]
    frames = [f["name"] for t in dump["stacks"] for f in t["frames"]]
    assert "stuck_in_known_function" in frames

    started = time.monotonic()
    backend.stop(handle, grace=2)
    status = wait_for(backend, handle, all_finished, timeout=10)["worker-0"]
    assert time.monotonic() - started < 8
    assert status.state == InstanceState.STOPPED
    assert not backend.job(handle).active


@pytest.mark.slurm
def test_an_instance_ignoring_sigterm_is_killed_after_the_grace_period(backend, tmp_path):
    program = tmp_path / "stubborn.py"
    program.write_text(
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\ntime.sleep(60)\n"
    )
    # Below a shell that dies of the SIGTERM at once, leaving the stubborn one behind.
    handle = launch(
        backend, "stubborn", [InstanceLaunch("worker-0", "Worker", 0, 0, f"{sys.executable} {program}; true")]
    )
    wait_for_log(backend, handle, "worker-0", b"ready")
    (pid,) = [
        int(p)
        for p in Path(f"/proc/{backend.poll(handle)[0].pid}/task/{backend.poll(handle)[0].pid}/children")
        .read_text()
        .split()
    ]

    started = time.monotonic()
    backend.stop(handle, grace=1.5)
    took = time.monotonic() - started
    status = wait_for(backend, handle, all_finished, timeout=10)["worker-0"]
    assert took < 1.5 + 2 + 3  # grace, the margin before Slurm's kill, Slurm's own time
    assert status.state == InstanceState.STOPPED
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}").exists():  # the node is this host: the process must be gone
        assert time.monotonic() < deadline, f"pid {pid} survived the stop"
        time.sleep(0.1)


@pytest.mark.slurm
def test_isolating_a_node_drains_it_naming_the_job_and_restore_node_undrains_it(backend, slurm_cluster):
    node = slurm_cluster.hostname
    try:
        backend.isolate_node(node, "job 42 attempt 3: NCCL timeout on this node twice")
        (drained,) = [n for n in backend.list_nodes() if n.name == node]
        assert not drained.schedulable
        assert drained.reason == "Vigil: job 42 attempt 3: NCCL timeout on this node twice"
    finally:
        backend.restore_node(node)
    # Slurm flags a resumed node NOT_RESPONDING until its next ping of slurmd.
    restored = wait_for_node(backend, node, lambda n: n.schedulable)
    assert restored.reason == "" and restored.slots == slurm_cluster.cpus
    backend.restore_node(node)  # restoring a schedulable node is a no-op, not an error


@pytest.mark.slurm
def test_an_attempt_waiting_for_a_full_node_is_pending_with_slurms_reason(backend, slurm_cluster):
    blocker = slurm_cluster.run(
        "sbatch", "--parsable", f"--ntasks={slurm_cluster.cpus}", "--output=/dev/null", "--wrap=sleep 120"
    ).stdout.strip()
    try:
        handle = launch(backend, "waits", [InstanceLaunch("worker-0", "Worker", 0, 0, "true")])
        statuses = wait_for(backend, handle, lambda s: s["worker-0"].reason in ("Resources", "Priority"), timeout=20)
        assert statuses["worker-0"].state == InstanceState.PENDING
        backend.stop(handle, grace=1)
        assert wait_for(backend, handle, all_finished, timeout=10)["worker-0"].state == InstanceState.STOPPED
    finally:
        slurm_cluster.run("scancel", blocker, check=False)


@pytest.mark.slurm
def test_a_fresh_backend_readopts_a_running_attempt_from_its_handle(backend, slurm_cluster):
    instances = [InstanceLaunch("worker-0", "Worker", 0, 0, "echo up; sleep 2")]
    handle = launch(backend, "readopt", instances)
    wait_for_log(backend, handle, "worker-0", b"up")
    stored = json.loads(json.dumps(handle))  # as the Attempt row keeps it

    fresh = slurm_cluster.backend(
        python=sys.executable,
    )
    assert fresh.poll(stored)[0].state == InstanceState.RUNNING
    # A re-delivered launch task submits nothing new; a lost handle is found on disk.
    assert launch(fresh, "readopt", instances) == handle
    assert fresh.handle_for("readopt", 1) == handle
    assert slurm_cluster.run("squeue", "-h", "--name=vigil-readopt-a1", "-o", "%i").stdout.split() == [
        handle["slurm_job_id"]
    ]
    done = wait_for(fresh, stored, all_finished)["worker-0"]
    assert (done.state, done.exit_code) == (InstanceState.SUCCEEDED, 0)


@pytest.mark.slurm
def test_async_restart_runs_the_failed_instance_again_as_a_new_step_of_the_same_job(backend, tmp_path):
    marker = tmp_path / "failed-once"
    handle = launch(
        backend,
        "async",
        [
            InstanceLaunch("worker-0", "Worker", 0, 0, "sleep 20"),
            InstanceLaunch(
                "worker-1", "Worker", 1, 1, f"if [ -e {marker} ]; then echo second run; else touch {marker}; exit 5; fi"
            ),
        ],
    )
    first = wait_for(backend, handle, lambda s: s["worker-1"].state.finished)["worker-1"]
    assert (first.state, first.exit_code) == (InstanceState.FAILED, 5)

    handle = backend.restart_instance(handle, "worker-1")
    statuses = wait_for(backend, handle, lambda s: s["worker-1"].state == InstanceState.SUCCEEDED)
    assert statuses["worker-0"].state == InstanceState.RUNNING  # its step was left alone
    log = backend.read_log(handle, "worker-1")
    assert log.startswith(b"===== vigil: worker-1 restarted (run 2 of attempt 1) at ")
    assert log.endswith(b" =====\nsecond run\n")
    steps = [
        json.loads(p.read_text())["step"]
        for p in sorted(Path(handle["attempt_dir"], "instances", "worker-1").glob("run-*.json"))
    ]
    assert [s.split(".")[0] for s in steps] == [handle["slurm_job_id"]] * 2 and steps[0] != steps[1]
    backend.stop(handle, grace=1)
    statuses = wait_for(backend, handle, all_finished, timeout=10)
    assert (statuses["worker-0"].state, statuses["worker-1"].state) == (InstanceState.STOPPED, InstanceState.SUCCEEDED)


@pytest.mark.slurm
def test_a_node_failure_fails_the_instance_with_node_fail_and_the_node(backend, slurm_cluster):
    handle = launch(backend, "nodefail", [InstanceLaunch("worker-0", "Worker", 0, 0, "echo up; sleep 60")])
    wait_for_log(backend, handle, "worker-0", b"up")
    try:
        slurm_cluster.run(
            "scontrol", "update", f"NodeName={slurm_cluster.hostname}", "State=DOWN", "Reason=test: node lost"
        )
        status = wait_for(backend, handle, all_finished, timeout=15)["worker-0"]
    finally:
        backend.restore_node(slurm_cluster.hostname)
    assert (status.state, status.reason, status.node) == (InstanceState.FAILED, "NODE_FAIL", slurm_cluster.hostname)
    wait_for_node(backend, slurm_cluster.hostname, lambda n: n.schedulable)


@pytest.mark.slurm
def test_an_unknown_partition_is_a_permanent_refusal(slurm_cluster):
    b = slurm_cluster.backend(
        partition="no-such-partition",
    )
    with pytest.raises(BackendError) as err:
        launch(b, "refused", [InstanceLaunch("worker-0", "Worker", 0, 0, "true")])
    assert not err.value.retryable and "Invalid partition" in str(err.value)


@pytest.mark.slurm
def test_slurm_down_is_a_retryable_error_saying_so(slurm_cluster, tmp_path):
    dead = tmp_path / "dead.conf"
    dead.write_text(
        "\n".join(
            "SlurmctldPort=9" if line.startswith("SlurmctldPort=") else line
            for line in slurm_cluster.conf.read_text().splitlines()
        )
        + "\n"
    )
    b = SlurmBackend(log_dir=str(slurm_cluster.shared_dir), environment={"SLURM_CONF": str(dead)}, command_timeout=20)
    with pytest.raises(BackendError) as err:
        launch(b, "down", [InstanceLaunch("worker-0", "Worker", 0, 0, "true")])
    assert err.value.retryable
    assert "Unable to contact slurm controller" in str(err.value)


@pytest.mark.slurm
@pytest.mark.redis
def test_an_exit_on_a_node_is_announced_over_redis_after_it_is_on_disk(slurm_cluster, tmp_path):
    b = slurm_cluster.backend(
        python=sys.executable,
        redis_url=REDIS_URL,
        channel_prefix=f"vigil-test-{os.getpid()}-{tmp_path.name}",
    )
    client = redis.Redis.from_url(REDIS_URL)
    pubsub = client.pubsub()
    pubsub.subscribe(b.exit_channel)
    pubsub.get_message(timeout=1.0)  # the subscribe confirmation
    try:
        handle = launch(b, "announce", [InstanceLaunch("worker-0", "Worker", 0, 0, "exit 4")])
        message = None
        deadline = time.monotonic() + 20
        while message is None and time.monotonic() < deadline:
            message = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.5)
        assert message is not None, "no exit announcement"
        payload = json.loads(message["data"])
        [status] = b.poll(handle)  # what was announced is already on disk
    finally:
        pubsub.close()
        client.close()
        slurm_cluster.cancel_all_jobs()
    assert payload == {
        "job_id": "announce",
        "attempt": 1,
        "instance": "worker-0",
        "exit_code": 4,
        "signal": None,
        "exited_at": status.exited_at,
    }
    assert status.state == InstanceState.FAILED


@pytest.mark.slurm
def test_without_json_nodes_and_jobs_are_read_from_slurms_text_output(slurm_cluster):
    b = slurm_cluster.backend(
        python=sys.executable,
        use_json=False,
        partition=slurm_cluster.partition,
    )
    assert [(n.name, n.slots) for n in b.list_nodes()] == [(slurm_cluster.hostname, slurm_cluster.cpus)]
    try:
        handle = launch(b, "text", [InstanceLaunch("worker-0", "Worker", 0, 0, "sleep 1")])
        assert wait_for(b, handle, all_finished)["worker-0"].state == InstanceState.SUCCEEDED
        deadline = time.monotonic() + 10
        while b.job(handle).active and time.monotonic() < deadline:
            time.sleep(0.3)
        assert b.job(handle).state == "COMPLETED"  # the supervisor ends the job once all succeeded
    finally:
        slurm_cluster.cancel_all_jobs()


# -- through the console: the monitor restarts a job on Slurm ---------------------------------


def console_on_slurm(settings, slurm_cluster, **options) -> None:
    """The console's jobs with backend "slurm" go to the test cluster (reset_backends after)."""
    from jobs.backends import reset_backends

    settings.JOB_BACKENDS = {
        "local": {"BACKEND": "jobs.backends.memory.MemoryBackend", "OPTIONS": {}},
        "slurm": {
            "BACKEND": "jobs.backends.slurm.SlurmBackend",
            "OPTIONS": {
                "log_dir": str(slurm_cluster.shared_dir),
                "environment": slurm_cluster.env,
                **slurm_cluster.port_range,
                "python": sys.executable,
                "py_spy": PY_SPY,
                "command_timeout": 20,
                **options,
            },
        },
    }
    reset_backends()


@pytest.mark.django_db(transaction=True)
def test_the_ddp_example_on_slurm_restarts_through_the_console_and_its_record_names_the_node(
    slurm_cluster, settings, alice, alice_ws, api_as, job_body, tmp_path
):
    pytest.importorskip("torch", reason="torch is not installed (.ci/run installs torch==2.13.0)")
    from jobs.backends import reset_backends
    from jobs.models import Job, JobStatus, RestartRecord
    from testsupport.monitor import finished, tick_until

    console_on_slurm(settings, slurm_cluster, grace=2, linger=10)
    marker = slurm_cluster.shared_dir / f"fired-{tmp_path.name}"
    example = Path(__file__).resolve().parents[2] / "examples" / "ddp_train.py"
    try:
        r = api_as(alice).post(
            "/api/v1/jobs/",
            job_body(
                alice_ws,
                display_name="ddp-on-slurm",
                backend="slurm",
                user_command=f"{sys.executable} {example}",
                envs={
                    "VIGIL_EXAMPLE_STEPS": "8",
                    "VIGIL_EXAMPLE_PG_TIMEOUT": "120",
                    "FAULT": "nccl",
                    "FAULT_RANK": "1",
                    "FAULT_STEP": "3",
                    "FAULT_ONCE": str(marker),
                },
                settings={
                    "enable_error_monitoring_in_aimaster": True,
                    "error_monitoring_args": "--enable-job-restart=True --max-num-of-job-restart=2",
                },
            ),
            format="json",
        )
        assert r.status_code == 201, r.content
        job = tick_until(Job.objects.get(pk=r.json()["id"]), finished, seconds=150, what="finish", every=0.3)
        assert job.status == JobStatus.SUCCEEDED, job.reason
        assert job.current_attempt == 2
        record = RestartRecord.objects.get(job=job)
        assert record.instance_name == "worker-0" and record.result == "Succeeded"
        assert record.node_name == slurm_cluster.hostname, (record.node_name, slurm_cluster.hostname)
    finally:
        slurm_cluster.cancel_all_jobs()
        reset_backends()


# -- C4D without code changes on Slurm: the Flight Recorder through the step's environment ----

HOOK_PROBE = (
    "import os, sys\n"
    "hook = sys.modules.get('sitecustomize')\n"
    "print(getattr(hook, '__file__', 'no hook'))\n"
    "print(' '.join(os.environ.get(k, '-') for k in ('VIGIL_FR_DIR', 'TORCH_FR_BUFFER_SIZE', 'VIGIL_C4D_SDK')))\n"
    "print(os.environ.get('PYTHONPATH', '-'))\n"
)


@pytest.mark.slurm
@pytest.mark.skipif(os.geteuid() != 0, reason="only root may submit as another user (CI runs as root)")
def test_with_c4d_on_each_step_runs_the_hook_from_the_shared_directory_as_the_workspaces_user(backend, slurm_cluster):
    let_jobs_reach(slurm_cluster.shared_dir)
    handle = launch(
        backend,
        "c4d-env",
        [
            InstanceLaunch("worker-0", "Worker", 0, 0, f'{sys.executable} -c "$PROBE"'),
            InstanceLaunch("worker-1", "Worker", 1, 1, f'{sys.executable} -c "$PROBE"', env={"VIGIL_C4D": "0"}),
        ],
        run_as="nobody",
        env={"VIGIL_C4D": "1", "PROBE": HOOK_PROBE, "PYTHONPATH": "/opt/mine"},
    )
    statuses = wait_for(backend, handle, all_finished)
    assert {s.state for s in statuses.values()} == {InstanceState.SUCCEEDED}, statuses
    d = Path(handle["attempt_dir"])
    boot, fr = d / "runtime" / "boot", d / "instances" / "worker-0" / "c4d"
    assert backend.read_log(handle, "worker-0").decode().splitlines() == [
        str(boot / "sitecustomize.py"),
        f"{fr} 200 {boot / 'sdk'}",
        f"{boot}:/opt/mine",
    ]
    assert backend.read_log(handle, "worker-1").decode().splitlines() == ["no hook", "- - -", "/opt/mine"]
    nobody = pwd.getpwnam("nobody").pw_uid
    assert {os.stat(p).st_uid for p in (fr, fr / "request", boot / "sitecustomize.py")} == {nobody}
    assert fr_files._write_request(str(fr), "token")  # the root console may write the job's request


# Two gloo ranks that know nothing of Vigil (no import, no SDK call): rank 1 stops in its own
# computation before the fourth all_reduce, which rank 0 has entered. A plain all_reduce, not
# DDP: the recorder records whatever torch.distributed runs, DDP's C++ all-reduces included
# (monitoring/tests/test_ddp_hang_console.py shows it on the local backend), through this path.
HUNG_ALL_REDUCE = """
import time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(1)
for step in range(1, 4):
    dist.all_reduce(t)
    print(f"step={step} rank={rank}", flush=True)
def compute_forever():
    while True:
        time.sleep(1)
if rank == 1:
    compute_forever()
print(f"entering all_reduce 4 at {time.time():.3f}", flush=True)
dist.all_reduce(t)
"""
HANG_INTERVAL = 6
C4D_ARGS = (
    f"--enable-job-hang-detection=True --job-hang-interval={HANG_INTERVAL} --job-hang-startup-interval=120 "
    "--enable-c4d-hang-detection=True --c4d-log-level=Info "
    "--c4d-common-envs=C4D_HANG_TIMEOUT=2000000,C4D_HANG_TIMES=100,C4D_CONN_BW_CHECK_PERIOD=1"
)


@pytest.mark.slurm
@pytest.mark.torch
@pytest.mark.django_db(transaction=True)
def test_a_rank_hung_in_compute_on_slurm_is_named_by_c4d_from_the_flight_recorder_without_code_changes(
    slurm_cluster, settings, alice, alice_ws, api_as, job_body, live_server
):
    pytest.importorskip("torch", reason="torch is not installed (.ci/run installs torch==2.13.0)")
    from jobs.backends import get_backend, reset_backends
    from jobs.models import Diagnosis, Job, JobEvent, JobStatus
    from testsupport.monitor import finished, tick_until

    settings.VIGIL_CONSOLE_URL = live_server.url
    console_on_slurm(settings, slurm_cluster, grace=1, linger=0)
    script = slurm_cluster.shared_dir / f"hung_all_reduce_{os.getpid()}.py"  # where every node reads it
    script.write_text(HUNG_ALL_REDUCE)

    def verdicts(job):
        return [v for d in Diagnosis.objects.filter(job=job, kind="c4d").order_by("pk") for v in d.data["verdicts"]]

    try:
        r = api_as(alice).post(
            "/api/v1/jobs/",
            job_body(
                alice_ws,
                display_name="hung-on-slurm",
                backend="slurm",
                user_command=f"{sys.executable} {script}",
                settings={"enable_error_monitoring_in_aimaster": True, "error_monitoring_args": C4D_ARGS},
            ),
            format="json",
        )
        assert r.status_code == 201, r.content
        job = tick_until(Job.objects.get(pk=r.json()["id"]), verdicts, seconds=90, what="get a C4D verdict", every=0.3)
        attempt = job.attempts.get()
        backend, handle = get_backend("slurm"), attempt.backend_handle
        (entered,) = [
            float(line.rsplit(" ", 1)[1])
            for line in backend.read_log(handle, "master-0").decode().splitlines()
            if line.startswith("entering all_reduce 4 at ")
        ]
        first = Diagnosis.objects.filter(job=job, kind="c4d").order_by("pk").first()
        assert first.created_at.timestamp() - entered <= HANG_INTERVAL + 5, (first.created_at, entered)
        assert all(d.data["source"] == "flight_recorder" for d in Diagnosis.objects.filter(job=job, kind="c4d"))
        assert {(v["rank"], v["kind"], v["instance"], v["node"]) for v in verdicts(job)} == {
            (1, "RankNonCommHang", "worker-0", slurm_cluster.hostname)
        }, verdicts(job)
        assert JobEvent.objects.filter(job=job, type="c4d", payload__rank=1, payload__instance="worker-0").exists()

        # Asked for a fresh dump through the shared directory, both hooks answer: the rank
        # sleeping in its computation and the rank blocked inside gloo's all_reduce.
        assert backend.request_flight_recorder_dumps(handle, timeout=5) == {"master-0": [0], "worker-0": [1]}
        dumps = backend.flight_recorder_dumps(handle)
        assert sorted(dumps) == [0, 1]
        fr = Path(handle["attempt_dir"], "instances", "master-0", "c4d")
        assert (fr / "fr_0.json").stat().st_mtime >= (fr / "request").stat().st_mtime
        ours = (fr / "request").read_text().strip()

        # Then the hang: the monitor's diagnosis (fresh dumps, stacks through py-spy on the
        # node, C4D) before the job fails as hung.
        job = tick_until(job, finished, seconds=40, what="end as hung", every=0.3)
        assert job.status == JobStatus.FAILED and "hung" in job.reason, job.reason
        assert Diagnosis.objects.filter(job=job, kind="stacks").exists()
        asked = (fr / "request").read_text().strip()  # by the hang's diagnosis, answered by both
        assert asked != ours and [
            fr_files.answers(str(fr.parent.parent / n / "c4d"), asked) for n in ("master-0", "worker-0")
        ] == [[0], [1]]
    finally:
        slurm_cluster.cancel_all_jobs()
        reset_backends()
