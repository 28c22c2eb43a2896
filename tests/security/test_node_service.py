"""Issue 29: a node's reputation record drains it (with issue 31's corroboration), the
nodes page says who isolated it and why, and staff return it to service from the page
with the action recorded. Only staff see or use the page."""

import pytest

from jobs import isolation
from jobs.models import JobEvent, NodeFault
from testsupport import factory

pytestmark = pytest.mark.django_db(transaction=True)

ONE_RANK = [{"type": "Master", "pod_count": 1}]


def faulted_job(client, ws, name="job"):
    """A job of `client`'s person whose retryable fault was counted against mem-0."""
    job = factory.submit(client, ws, job_specs=ONE_RANK, display_name=name, launch=True)
    NodeFault.objects.create(node="mem-0", backend="local", job=job, error_code="NODE_LOST", retryable=True)
    return job


def service():
    from jobs.models import NodeServiceAction

    return NodeServiceAction.objects


def test_a_record_over_the_threshold_from_two_submitters_drains_the_node_naming_jobs_not_their_names(
    alice_ws, bob_ws, alice, bob, api_as, memory_backend
):
    first = faulted_job(api_as(alice), alice_ws, "DRAIN-ME")
    second = faulted_job(api_as(alice), alice_ws)
    assert isolation.on_node_fault(second, "mem-0").action == "nothing"  # 2 faults: below the threshold
    third = faulted_job(api_as(bob), bob_ws)
    outcome = isolation.on_node_fault(third, "mem-0")
    assert outcome.action == "isolate", outcome
    [node] = memory_backend.list_nodes()
    assert not node.schedulable
    assert node.reason == f"Vigil jobs {first.pk}, {second.pk}, {third.pk}: NODE_LOST on mem-0 (node reputation)"
    assert "DRAIN-ME" not in node.reason
    [row] = service().all()
    assert (row.kind, row.by, row.job_id) == ("isolate", None, third.pk)
    assert JobEvent.objects.filter(job=third, type="node_isolated", message__contains="from 2 submitters").exists()


def test_one_submitters_faults_over_the_threshold_only_propose(alice_ws, alice, api_as, memory_backend):
    jobs = [faulted_job(api_as(alice), alice_ws) for _ in range(3)]
    assert isolation.on_node_fault(jobs[-1], "mem-0").action == "propose"
    assert all(n.schedulable for n in memory_backend.list_nodes())
    assert not service().exists()
    assert JobEvent.objects.filter(job=jobs[-1], message__startswith="Node mem-0 is proposed for isolation").exists()


def test_staff_see_who_isolated_a_node_and_return_it_to_service_and_others_cannot(
    client, alice_ws, bob_ws, alice, bob, dave, api_as, memory_backend
):
    faulted_job(api_as(alice), alice_ws)
    faulted_job(api_as(alice), alice_ws)
    isolation.on_node_fault(faulted_job(api_as(bob), bob_ws), "mem-0")
    url = "/nodes/local/mem-0/restore/"
    for person in (dave, alice):  # a member, and a workspace's owner: not staff
        client.force_login(person)
        assert client.get("/nodes/").status_code == 404
        assert client.post(url, {"reason": "fixed"}).status_code == 404
    client.logout()
    assert client.post(url, {"reason": "fixed"}).status_code == 302  # to the login page
    assert not memory_backend.list_nodes()[0].schedulable
    alice.is_staff = True
    alice.save()
    client.force_login(alice)
    page = client.get("/nodes/").content.decode()
    assert "Isolated by Vigil" in page and "(node reputation)" in page and "Return to service" in page
    r = client.post(url, {"reason": "DIMM replaced, memtest clean"})
    assert r.status_code == 302
    assert memory_backend.list_nodes()[0].schedulable
    latest = service().first()
    assert (latest.kind, latest.by, latest.reason) == ("restore", alice, "DIMM replaced, memtest clean")
    page = client.get("/nodes/").content.decode()
    assert "Returned to service by alice" in page and "DIMM replaced" in page
    # In service now: nothing to return, said on the field.
    again = client.post(url, {"reason": "again"})
    assert again.status_code == 400 and "node: is in service already" in again.content.decode()
    assert service().count() == 2


@pytest.mark.parametrize(
    "body",
    [{}, {"reason": ""}, {"reason": "   "}, {"reason": "x" * 301}, {"reason": "one\ntwo"}, {"reason": "ok \u202egnp"}],
)
def test_a_bad_return_to_service_is_a_400_naming_reason_and_the_node_stays_isolated(
    body, client, alice, memory_backend
):
    memory_backend.isolate_node("mem-0", "Vigil jobs 1: NODE_LOST on mem-0")
    alice.is_staff = True
    alice.save()
    client.force_login(alice)
    r = client.post("/nodes/local/mem-0/restore/", body)
    assert r.status_code == 400 and "reason:" in r.content.decode()
    assert not memory_backend.list_nodes()[0].schedulable
    assert not service().exists()


def test_an_unknown_backend_or_node_is_a_404(client, alice, memory_backend):
    alice.is_staff = True
    alice.save()
    client.force_login(alice)
    assert client.post("/nodes/nope/mem-0/restore/", {"reason": "x"}).status_code == 404
    assert client.post("/nodes/local/mem-9/restore/", {"reason": "x"}).status_code == 404
    assert client.get("/nodes/local/mem-0/restore/").status_code == 405
    assert not service().exists()
