"""Nodes: staff see their state and fault record, isolate and restore them."""

import pytest
from django.utils import timezone

from jobs.models import NodeFault
from core.reputation import NodeFaultSeen, standings

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(alice):
    alice.is_staff = True
    alice.save()
    return alice


def test_a_node_failing_several_jobs_is_proposed_for_isolation_with_evidence():
    faults = [NodeFaultSeen("gpu-7", job, "NCCL_SYSTEM_ERROR", True, 100.0 + job) for job in (1, 2, 3)]
    faults.append(NodeFaultSeen("gpu-8", 1, "NCCL_SYSTEM_ERROR", True, 100.0))
    s = standings(faults, now=200.0)
    assert s["gpu-7"].proposed_for_isolation and "3 retryable faults" in s["gpu-7"].evidence
    assert not s["gpu-8"].proposed_for_isolation


def test_one_broken_job_does_not_blame_the_node():
    faults = [NodeFaultSeen("gpu-7", 1, "X", True, 100.0 + i) for i in range(5)]
    assert not standings(faults, now=200.0)["gpu-7"].proposed_for_isolation


def test_old_and_non_retryable_faults_do_not_count():
    faults = [NodeFaultSeen("n", j, "X", True, 0.0) for j in (1, 2, 3)]
    faults += [NodeFaultSeen("n", j, "BUG", False, 99_000.0) for j in (4, 5, 6)]
    assert standings(faults, now=100_000.0)["n"].faults_in_window == 0


def test_staff_list_nodes_with_their_faults_and_isolate_and_restore_them(staff, api_as, memory_backend):
    api = api_as(staff)
    for job in range(3):
        NodeFault.objects.create(node="mem-0", error_code="NCCL_SYSTEM_ERROR", retryable=True)
    NodeFault.objects.update(created_at=timezone.now())
    [node] = api.get("/api/v1/nodes/").json()
    assert node["name"] == "mem-0" and node["faults_24h"] == 3 and node["schedulable"]
    assert api.post("/api/v1/nodes/local:mem-0/isolate/", {}, format="json").status_code == 400
    r = api.post("/api/v1/nodes/local:mem-0/isolate/", {"reason": "ECC errors"}, format="json")
    assert r.status_code == 200 and r.json()["schedulable"] is False and "ECC errors" in r.json()["reason"]
    assert api.post("/api/v1/nodes/local:mem-0/restore/").json()["schedulable"] is True
    assert api.post("/api/v1/nodes/local:nope/restore/").status_code == 404


def test_people_who_are_not_staff_cannot_see_or_change_nodes(alice_ws, dave, api_as, memory_backend):
    api = api_as(dave)
    assert api.get("/api/v1/nodes/").status_code == 403
    assert api.post("/api/v1/nodes/local:mem-0/isolate/", {"reason": "x"}, format="json").status_code == 403
