"""Nodes that really die, on a real three-node Slurm cluster (issue 29).

One cluster for the module: Slurm's multiple-slurmd mode, nodes n1..n3 on 127.0.0.1
(jobs/tests/slurm_cluster.py), SlurmdTimeout=5 so that a dead node is DOWN in about
12 s. A node "dies" by SIGKILL to its slurmd, its slurmstepds and its tasks (found by
the node's process tree); it is "cut off" by SIGSTOP to the same processes. Every
daemon is stopped by its PID at the end. Cases that need the same node death share it
(two jobs run side by side through one death) to keep the module's time down.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from jobs.tests.slurm_cluster import SlurmCluster, start_cluster, why_cluster_cannot_run

pytestmark = pytest.mark.slurm

NODES = ["n1", "n2", "n3"]
# Attempt 1 runs until the test lets it finish (a marker on the shared directory); every
# rank prints twice a second, so the log of a rank on a dead node stops when it dies.
RANK_SCRIPT = (
    "while [ ! -e {marker} ]; do echo alive $RANK on $SLURMD_NODENAME; sleep 0.5; done; "
    "echo done $RANK on $SLURMD_NODENAME"
)


@pytest.fixture(scope="module")
def cluster():
    reason = why_cluster_cannot_run()
    if reason:
        pytest.skip(reason)
    c = start_cluster(nodes=3, slurmd_timeout=5, message_timeout=3)
    try:
        yield c
    finally:
        c.stop()
        shutil.rmtree(c.root, ignore_errors=True)


@pytest.fixture
def revive(cluster: SlurmCluster):
    """Every node a test killed or froze comes back for the next test."""
    yield
    for node in NODES:
        cluster.thaw_node(node)
    cluster.cancel_all_jobs()
    for node in NODES:
        state = cluster.node_state(node)
        if any(w in state for w in ("down", "drain", "*")) or cluster.daemon(node) not in cluster.processes:
            cluster.revive_node(node)
    cluster.wait_until_idle(60)


def slurm_backends(cluster: SlurmCluster, **extra) -> dict:
    def one(*sbatch: str) -> dict:
        return {
            "BACKEND": "jobs.backends.slurm.SlurmBackend",
            "OPTIONS": {
                "log_dir": str(cluster.shared_dir),
                "environment": cluster.env,
                **cluster.port_range,
                "python": sys.executable,
                "grace": 2,
                "linger": 5,
                "command_timeout": 20,
                "sbatch_options": list(sbatch),
                **extra,
            },
        }

    return {
        "local": {"BACKEND": "jobs.backends.memory.MemoryBackend", "OPTIONS": {}},
        # Three ranks spread one per node while three are free; fewer nodes do if not.
        "slurm": one("--spread-job"),
        # Three ranks that need three nodes.
        "slurm-all": one("--nodes=3"),
    }


def submit_three_ranks(api, workspace, job_body, backend: str, command: str, name: str, flags: str):
    r = api.post(
        "/api/v1/jobs/",
        job_body(
            workspace,
            display_name=name,
            backend=backend,
            job_specs=[
                {"type": "Master", "pod_count": 1, "resource_config": {"cpu": 1, "memory": "1Gi", "gpu": 0}},
                {"type": "Worker", "pod_count": 2, "resource_config": {"cpu": 1, "memory": "1Gi", "gpu": 0}},
            ],
            user_command=command,
            settings={"enable_error_monitoring_in_aimaster": True, "error_monitoring_args": flags},
        ),
        format="json",
    )
    assert r.status_code == 201, r.content
    return r.json()["id"]


def tick_all(job_ids, done, seconds: float, what: str):
    """Tick every job as the sweep would until done(job) holds for all of them."""
    from jobs.models import Job, JobEvent
    from monitoring import tick

    deadline = time.monotonic() + seconds
    while True:
        jobs = []
        for pk in job_ids:
            tick.run_job(pk)
            jobs.append(Job.objects.get(pk=pk))
        if all(done(j) for j in jobs):
            return jobs
        if time.monotonic() > deadline:
            lines = [
                f"job {j.pk} {j.status} attempt {j.current_attempt} ({j.reason}):\n"
                + "\n".join(f"  {e.type}: {e.message}" for e in JobEvent.objects.filter(job=j).order_by("id"))
                for j in jobs
            ]
            raise AssertionError(f"jobs did not {what} within {seconds} s:\n" + "\n".join(lines))
        time.sleep(0.3)


def running_everywhere(job_id) -> bool:
    from jobs.models import Attempt, InstanceStatus

    attempt = Attempt.objects.filter(job_id=job_id).order_by("-number").first()
    insts = list(attempt.instances.all()) if attempt else []
    return len(insts) == 3 and all(i.status == InstanceStatus.RUNNING and i.node for i in insts)


@pytest.mark.django_db(transaction=True)
def test_a_dead_node_fails_the_attempt_with_node_fail_and_vigil_restarts_once_on_the_rest_or_waits_for_it(
    cluster, revive, settings, alice, alice_ws, api_as, job_body, tmp_path
):
    from jobs.access import backend_permission
    from jobs.backends import get_backend, reset_backends
    from jobs.models import Attempt, Job, JobEvent, JobStatus, NodeFault, RestartRecord

    settings.JOB_BACKENDS = slurm_backends(cluster)
    reset_backends()
    alice.user_permissions.add(backend_permission("slurm-all"))
    marker = cluster.shared_dir / f"done-{tmp_path.name}"
    command = RANK_SCRIPT.format(marker=marker)
    flags = "--enable-job-restart=True --max-num-of-job-restart=2"
    api = api_as(alice)
    try:
        rest = submit_three_ranks(api, alice_ws, job_body, "slurm", command, "on-the-rest", flags)
        all3 = submit_three_ranks(api, alice_ws, job_body, "slurm-all", command, "needs-all-three", flags)
        tick_all([rest, all3], lambda j: running_everywhere(j.pk), 40, "run on three nodes")
        for pk in (rest, all3):
            nodes = {i.name: i.node for i in Attempt.objects.get(job_id=pk, number=1).instances.all()}
            assert sorted(nodes.values()) == NODES, nodes

        died_at = time.time()
        killed = cluster.kill_node("n3")
        assert len(killed) >= 3, killed  # slurmd, and per job its slurmstepd and task at least
        tick_all([rest, all3], lambda j: j.current_attempt == 2, 40, "restart after the node died")
        marker.touch()  # attempt 2 may finish
        jobs = tick_all([rest], lambda j: j.status == JobStatus.SUCCEEDED, 40, "succeed on the remaining nodes")
        assert jobs[0].current_attempt == 2, jobs[0].reason

        for pk in (rest, all3):
            job = Job.objects.get(pk=pk)
            first = Attempt.objects.get(job=job, number=1)
            slurm = get_backend(job.backend)
            record = RestartRecord.objects.get(job=job)
            lost = first.instances.get(name="worker-1")
            assert (record.node_name, record.error_code) == ("n3", "NODE_LOST"), (
                record.reason,
                lost.status,
                lost.backend_reason,
                slurm.job(first.backend_handle).state,
                [
                    (f.name, f.read_text()[-500:])
                    for f in (Path(first.backend_handle["attempt_dir"]) / "instances" / "worker-1").iterdir()
                    if f.is_file()
                ],
                list(JobEvent.objects.filter(job=job).values_list("type", "message")),
            )
            # Slurm's own word, and no requeue of its own (sbatch --no-requeue): the job
            # stays NODE_FAIL while Vigil's one restart is attempt 2.
            assert slurm.job(first.backend_handle).state == "NODE_FAIL"
            assert Attempt.objects.filter(job=job).count() == 2
            assert record.instance_name == "worker-1"
            assert NodeFault.objects.filter(job=job, node="n3", retryable=True).count() == 1
            # srun's own words for the lost run, kept apart from the batch log: they explain
            # the run when the poll sees it end before Slurm fails the job (a CI run's race)
            said = Path(first.backend_handle["attempt_dir"]) / "instances" / "worker-1" / "srun-1.err"
            assert "Node failure on n3" in said.read_text()
            assert not NodeFault.objects.filter(job=job).exclude(node="n3").exists()
            print(
                f"{job.display_name}: node death to restart decision {record.restart_time.timestamp() - died_at:.1f} s"
            )

        second = Attempt.objects.get(job_id=rest, number=2)
        assert second.backend_handle["avoided_nodes"] == ["n3"]
        assert {i.node for i in second.instances.all()} <= {"n1", "n2"}
        assert JobEvent.objects.filter(
            job_id=rest, attempt=2, message="Attempt 2 avoids node n3: it runs on the remaining nodes."
        ).exists()

        waiting = Attempt.objects.get(job_id=all3, number=2)
        assert waiting.backend_handle["waiting_for_nodes"] == ["n3"]
        assert JobEvent.objects.filter(job_id=all3, attempt=2, message__startswith="Attempt 2 needs every node, n3")
        (job,) = tick_all([all3], lambda j: True, 5, "tick")
        assert job.status in (JobStatus.QUEUING, JobStatus.RESTARTING, JobStatus.RUNNING), job.status
        pending = {i.status for i in waiting.instances.all()}
        assert pending == {"Pending"}, pending

        cluster.revive_node("n3")  # the node returns: the waiting attempt runs on all three
        (job,) = tick_all([all3], lambda j: j.status == JobStatus.SUCCEEDED, 40, "succeed once n3 returned")
        assert sorted(i.node for i in Attempt.objects.get(job=job, number=2).instances.all()) == NODES
    finally:
        marker.touch()
        cluster.cancel_all_jobs()
        reset_backends()


@pytest.mark.django_db(transaction=True)
def test_a_node_whose_record_crosses_the_threshold_is_drained_avoided_and_returned_to_service_by_staff(
    cluster, revive, settings, client, alice, alice_ws, bob, bob_ws, api_as, job_body, tmp_path
):
    from jobs.backends import get_backend, reset_backends
    from jobs.models import Attempt, JobEvent, JobStatus, NodeFault, NodeServiceAction
    from testsupport.monitor import FAULT_ONCE_SCRIPT

    settings.JOB_BACKENDS = slurm_backends(cluster)
    reset_backends()
    # n2's record so far: one retryable fault in a job of alice's and one in bob's.
    for who, ws in ((alice, alice_ws), (bob, bob_ws)):
        r = api_as(who).post("/api/v1/jobs/", job_body(ws, display_name="earlier", backend="slurm"), format="json")
        NodeFault.objects.create(node="n2", backend="slurm", job_id=r.json()["id"], error_code="NCCL_SYSTEM_ERROR")
    markers = cluster.shared_dir / f"markers-{tmp_path.name}"
    markers.mkdir()
    script = cluster.shared_dir / f"fault-once-{tmp_path.name}.py"
    script.write_text(FAULT_ONCE_SCRIPT)
    r = api_as(alice).post(
        "/api/v1/jobs/",
        job_body(
            alice_ws,
            display_name="DRAIN-ME",
            backend="slurm",
            job_specs=[
                {"type": "Master", "pod_count": 1, "resource_config": {"cpu": 1, "memory": "1Gi", "gpu": 0}},
                {"type": "Worker", "pod_count": 2, "resource_config": {"cpu": 1, "memory": "1Gi", "gpu": 0}},
            ],
            user_command=f"{sys.executable} {script}",
            envs={"MARKERS": str(markers)},
            settings={
                "enable_error_monitoring_in_aimaster": True,
                "error_monitoring_args": "--enable-job-restart=True --max-num-of-job-restart=2",
            },
        ),
        format="json",
    )
    assert r.status_code == 201, r.content
    pk = r.json()["id"]
    try:
        # worker-0 runs on n2 (one rank per node, in rank order) and fails once, retryably.
        (job,) = tick_all([pk], lambda j: j.status == JobStatus.SUCCEEDED, 60, "succeed on attempt 2")
        first = {i.name: i.node for i in Attempt.objects.get(job=job, number=1).instances.all()}
        assert first["worker-0"] == "n2", first
        assert job.current_attempt == 2
        # The third fault, from a second submitter's jobs: Slurm drained n2 naming the jobs.
        [n2] = [n for n in get_backend("slurm").list_nodes() if n.name == "n2"]
        assert not n2.schedulable
        assert n2.reason.startswith("Vigil jobs ") and "on n2 (node reputation)" in n2.reason, n2.reason
        assert "DRAIN-ME" not in n2.reason
        assert "drain" in cluster.node_state("n2")
        assert JobEvent.objects.filter(job=job, type="node_isolated").exists()
        second = Attempt.objects.get(job=job, number=2)
        assert second.backend_handle["avoided_nodes"] == ["n2"]
        assert {i.node for i in second.instances.all()} <= {"n1", "n3"}

        # Staff see who and why on the nodes page and return n2 to service there.
        bob.is_staff = True
        bob.save()
        client.force_login(bob)
        page = client.get("/nodes/").content.decode()
        assert "Isolated by Vigil" in page and "on n2 (node reputation)" in page
        r = client.post("/nodes/slurm/n2/restore/", {"reason": "cable reseated"})
        assert r.status_code == 302, r.content
        deadline = time.monotonic() + 20
        while cluster.node_state("n2") != "idle" and time.monotonic() < deadline:
            time.sleep(0.3)
        assert cluster.node_state("n2") == "idle"  # scontrol update State=RESUME
        restored = NodeServiceAction.objects.first()
        assert (restored.kind, restored.by, restored.reason) == ("restore", bob, "cable reseated")
    finally:
        cluster.cancel_all_jobs()
        reset_backends()


# Every step ends at a barrier over the shared directory, as a collective does: when one
# rank stops, every rank waits (and prints nothing) from the next step on.
BARRIER_SCRIPT = (
    "d={dir}/a$VIGIL_ATTEMPT; mkdir -p $d; step=0; "
    "while [ ! -e {marker} ]; do step=$((step+1)); echo step $step rank $RANK on $SLURMD_NODENAME; "
    "touch $d/r$RANK-$step; "
    "while [ $(ls $d | grep -c -- -$step\\$) -lt 3 ] && [ ! -e {marker} ]; do sleep 0.1; done; sleep 0.3; done"
)


@pytest.mark.django_db(transaction=True)
def test_a_node_cut_off_while_its_ranks_live_on_is_named_by_the_decision_and_the_restart_avoids_it(
    cluster, revive, settings, alice, alice_ws, api_as, job_body, tmp_path
):
    """The partition, with a SIGSTOPped node standing in for a cut cable (all nodes share
    127.0.0.1 here; see docs/slurm.md): n3's slurmd, slurmstepds and rank are stopped, not
    dead. The other ranks wait at the barrier, silent. Slurm holds n3 not responding after
    SlurmdTimeout (5 s) and DOWN after ~10 s, which ends the job NODE_FAIL before the 30 s
    hang interval: the failure decision names n3, not the silent healthy ranks."""
    from jobs.backends import reset_backends
    from jobs.models import Attempt, JobStatus, RestartRecord

    settings.JOB_BACKENDS = slurm_backends(cluster)
    reset_backends()
    marker = cluster.shared_dir / f"done-{tmp_path.name}"
    work = cluster.shared_dir / f"barrier-{tmp_path.name}"
    flags = (
        "--enable-job-restart=True --max-num-of-job-restart=2 --enable-job-hang-detection=True --job-hang-interval=30"
    )
    command = BARRIER_SCRIPT.format(dir=work, marker=marker)
    pk = submit_three_ranks(api_as(alice), alice_ws, job_body, "slurm", command, "partitioned", flags)
    try:
        tick_all([pk], lambda j: running_everywhere(j.pk), 40, "run on three nodes")
        logs = {i.name: i for i in Attempt.objects.get(job_id=pk, number=1).instances.all()}
        assert logs["worker-1"].node == "n3"
        time.sleep(1.5)  # a few steps through the barrier
        cut_at = time.time()
        frozen = cluster.freeze_node("n3")
        assert len(frozen) >= 3, frozen
        (job,) = tick_all([pk], lambda j: j.current_attempt == 2, 40, "restart after n3 was cut off")
        marker.touch()
        (job,) = tick_all([pk], lambda j: j.status == JobStatus.SUCCEEDED, 40, "succeed without n3")
        record = RestartRecord.objects.get(job=job)
        assert (record.node_name, record.instance_name, record.error_code) == ("n3", "worker-1", "NODE_LOST"), (
            record.node_name,
            record.reason,
        )
        assert not job.events.filter(type="hang").exists()  # the healthy ranks' silence is not blamed
        second = Attempt.objects.get(job=job, number=2)
        assert second.backend_handle["avoided_nodes"] == ["n3"]
        assert {i.node for i in second.instances.all()} <= {"n1", "n2"}
        # n3's processes were never killed: the cut-off node's rank is still there, stopped.
        assert any(os.path.exists(f"/proc/{pid}") for pid in frozen)
        print(f"partition to restart decision {record.restart_time.timestamp() - cut_at:.1f} s")
    finally:
        marker.touch()
        cluster.cancel_all_jobs()
        reset_backends()


@pytest.mark.redis
def test_each_nodes_logs_and_exit_announcements_arrive_as_a_local_ones_do(cluster, revive, tmp_path):
    """Three ranks on three nodes: each log is read from the shared directory, and each
    node's wrapper announces its exit on Redis once the exit is on disk."""
    import json

    import redis

    from jobs.backends.base import AttemptLaunch, InstanceLaunch, InstanceState

    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    b = cluster.backend(
        python=sys.executable,
        redis_url=url,
        channel_prefix=f"vigil-test-{os.getpid()}-{tmp_path.name}",
        sbatch_options=["--spread-job"],
        linger=1,
    )
    client = redis.Redis.from_url(url)
    pubsub = client.pubsub()
    pubsub.subscribe(b.exit_channel)
    pubsub.get_message(timeout=1.0)
    insts = [
        InstanceLaunch(f"worker-{i}", "Worker", i, i, f"echo rank {i} on $SLURMD_NODENAME; exit {i + 2}")
        for i in range(3)
    ]
    try:
        handle = b.launch(AttemptLaunch(job_id="remote", attempt=1, job_type="ElasticBatchJob", instances=tuple(insts)))
        got = {}
        deadline = time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < deadline:
            m = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.5)
            if m:
                payload = json.loads(m["data"])
                got[payload["instance"]] = payload
        statuses = {s.name: s for s in b.poll(handle)}
    finally:
        pubsub.close()
        client.close()
    assert sorted(got) == ["worker-0", "worker-1", "worker-2"], got
    for i, node in enumerate(NODES):
        name = f"worker-{i}"
        s = statuses[name]
        assert (s.node, s.state, s.exit_code) == (node, InstanceState.FAILED, i + 2)
        assert got[name]["exit_code"] == i + 2 and got[name]["exited_at"] == s.exited_at  # on disk first
        assert b.read_log(handle, name) == f"rank {i} on {node}\n".encode()
