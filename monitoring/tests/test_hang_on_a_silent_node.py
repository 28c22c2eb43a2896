"""A hang whose ranks give no stack suspect, while one rank's node no longer answers the
cluster (Slurm: "Not responding", a partition): the decision names that rank and node,
and the restart avoids the node (issue 29, part 4)."""

import time

import pytest
import time_machine

from jobs.models import Attempt, JobEvent, RestartRecord
from monitoring import tick
from testsupport import factory

pytestmark = pytest.mark.django_db(transaction=True)

FLAGS = (
    "--job-execution-mode=Sync --enable-job-restart=True --max-num-of-job-restart=3 "
    "--enable-job-hang-detection=True --job-hang-interval=2"
)


def test_a_hang_names_the_rank_on_a_node_that_stopped_answering_and_the_next_attempt_avoids_it(
    alice_ws, alice, api_as, memory_backend
):
    memory_backend.nodes = [{"name": "gpu-0", "slots": 1}, {"name": "gpu-1", "slots": 1}, {"name": "gpu-2", "slots": 1}]
    job = factory.submit(
        api_as(alice),
        alice_ws,
        flags=FLAGS,
        job_specs=[{"type": "Master", "pod_count": 1}, {"type": "Worker", "pod_count": 2}],
    )
    handle = Attempt.objects.get(job=job, number=1).backend_handle
    placed = {i["name"]: i["node"] for i in handle["instances"]}
    assert placed == {"master-0": "gpu-0", "worker-0": "gpu-1", "worker-1": "gpu-2"}
    start = time.time()
    for name in placed:
        memory_backend.write_log(handle, name, b"step=1\n", now=start)
    tick.run_job(job.pk)
    memory_backend.isolate_node("gpu-2", "Not responding")  # what sinfo says of a cut-off node
    with time_machine.travel(start + 2.5, tick=False):
        assert tick.run_job(job.pk).action == "restart_job"
    record = RestartRecord.objects.get(job=job)
    assert (record.error_source, record.instance_name, record.node_name) == ("Hang", "worker-1", "gpu-2")
    assert JobEvent.objects.filter(
        job=job, message__startswith="The hang's suspect is worker-1: its node gpu-2 does not answer the cluster"
    ).exists()
    second = Attempt.objects.get(job=job, number=2).backend_handle
    assert "gpu-2" not in {i["node"] for i in second["instances"]}


def test_a_hang_with_every_node_answering_names_no_node(alice_ws, alice, api_as, memory_backend):
    job = factory.submit(api_as(alice), alice_ws, flags=FLAGS, job_specs=[{"type": "Master", "pod_count": 1}])
    handle = Attempt.objects.get(job=job, number=1).backend_handle
    start = time.time()
    memory_backend.write_log(handle, "master-0", b"step=1\n", now=start)
    tick.run_job(job.pk)
    with time_machine.travel(start + 2.5, tick=False):
        assert tick.run_job(job.pk).action == "restart_job"
    assert RestartRecord.objects.get(job=job).node_name == ""
    assert not JobEvent.objects.filter(job=job, message__startswith="The hang's suspect is").exists()
