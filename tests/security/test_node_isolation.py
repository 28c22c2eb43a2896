"""Issue 31, finding 0: a job's own C4D reports must not take shared nodes out of
service. The reproduction: a member's job posts a faked C4D report with its own
token (C4D_HANG_TIMES=1, a 1 s check period); on main the local node became
unschedulable and another workspace's next job failed with "no schedulable node"."""

import time

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from core.c4d import C4DKind, C4DVerdict
from core.flags import C4DLogLevel
from jobs.models import Attempt, JobEvent, JobStatus
from monitoring import diagnose
from testsupport import factory
from testsupport.monitor import tick_until

pytestmark = pytest.mark.django_db(transaction=True)

SLEEPER = "import time\nprint('step=1', flush=True)\ntime.sleep(120)\n"
C4D_FLAGS = (
    "--enable-job-restart=True --max-num-of-job-restart=1 --enable-job-hang-detection=True --job-hang-interval=600 "
    "--enable-c4d-hang-detection=True "
    "--c4d-log-level=Info --c4d-common-envs=C4D_HANG_TIMEOUT=1000000,C4D_HANG_TIMES=1,C4D_CONN_BW_CHECK_PERIOD=1"
)
TWO_RANKS = [{"type": "Master", "pod_count": 1}, {"type": "Worker", "pod_count": 1}]


def evidence():
    """NodeError and its states (imported late, so that on the code before the fix the
    tests fail at their first assertion on the node rather than at import)."""
    from jobs.models import NodeError, NodeErrorState

    return NodeError.objects, NodeErrorState


def sdk(job) -> APIClient:
    """The job's own SDK client: what its processes can do with VIGIL_JOB_TOKEN."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {job.plain_token()}")
    return client


def fake_hang(job) -> None:
    """One process posts for both ranks: rank 0 waits in all_reduce #5, rank 1 never entered it."""
    t = time.time()
    client = sdk(job)
    url = f"/api/v1/sdk/jobs/{job.pk}/c4d/"
    r0 = [
        {"seq": 4, "op": "all_reduce", "enter": t - 4.0, "exit": t - 3.9},
        {"seq": 5, "op": "all_reduce", "enter": t - 3.0, "exit": None},
    ]
    r1 = [{"seq": 4, "op": "all_reduce", "enter": t - 4.0, "exit": t - 3.9}]
    for rank, records in ((0, r0), (1, r1)):
        r = client.post(url, {"rank": rank, "attempt": 1, "records": records}, format="json")
        assert r.status_code == 202, r.content


def test_a_jobs_faked_c4d_error_isolates_nothing_and_another_workspaces_job_still_launches(
    alice_ws, bob_ws, alice, bob, api_as, local_backend, tmp_path
):
    job = factory.submit(
        api_as(alice),
        alice_ws,
        flags=C4D_FLAGS,
        user_command=factory.script_command(tmp_path / "sleep.py", SLEEPER),
        job_specs=TWO_RANKS,
    )
    tick_until(job, lambda j: j.status == JobStatus.RUNNING, backend=local_backend)
    fake_hang(job)
    tick_until(job, lambda j: j.current_attempt == 2, backend=local_backend, what="the faked Error's restart")
    # The verdict was reached and restarted the job that reported it...
    assert JobEvent.objects.filter(job=job, type="c4d", level="error").exists()
    # ...but took no node out of service: one submitter's word is a proposal.
    assert not JobEvent.objects.filter(type="node_isolated").exists()
    assert all(n.schedulable for n in local_backend.list_nodes())
    errors, state = evidence()
    [proposal] = errors.filter(job=job)
    assert proposal.state == state.PROPOSED and "1 job of 1 submitter" in proposal.evidence
    # Another workspace's next job launches on the same machine, once alice's has ended: while
    # it runs, a root console refuses a second workspace under the same OS user (issue 31
    # finding 5, tests/security/test_run_as.py), which is not what this test is about.
    r = api_as(alice).post(f"/api/v1/jobs/{job.pk}/stop/")
    assert r.status_code == 202, r.content
    tick_until(job, lambda j: j.status == JobStatus.STOPPED, backend=local_backend, what="alice's job stopped")
    other = factory.submit(
        api_as(bob), bob_ws, user_command=factory.script_command(tmp_path / "bob.py", SLEEPER), job_specs=TWO_RANKS
    )
    tick_until(other, lambda j: j.status == JobStatus.RUNNING, backend=local_backend, what="bob's job running")
    assert Attempt.objects.get(job=other, number=1).instances.exclude(node="").exists()


def test_a_c4d_report_for_a_rank_outside_the_jobs_world_is_refused_naming_rank(alice_ws, alice, api_as, memory_backend):
    job = factory.submit(api_as(alice), alice_ws, job_specs=TWO_RANKS, launch=True)
    t = time.time()
    body = {"rank": 2, "attempt": 1, "records": [{"seq": 1, "op": "all_reduce", "enter": t, "exit": None}]}
    r = sdk(job).post(f"/api/v1/sdk/jobs/{job.pk}/c4d/", body, format="json")
    assert r.status_code == 400 and r.json()["field"] == "rank" and "ranks 0 to 1" in r.json()["detail"]
    body["rank"] = 1
    assert sdk(job).post(f"/api/v1/sdk/jobs/{job.pk}/c4d/", body, format="json").status_code == 202


def _error_on(job, rank: int = 0):
    attempt = Attempt.objects.get(job=job, number=1)
    verdict = C4DVerdict(rank=rank, kind=C4DKind.COMM_HANG, severity=C4DLogLevel.ERROR, message="hung in all_reduce #5")
    return diagnose.isolate_for(job, attempt, verdict)


def _c4d_job(client, ws, name="resnet-ddp"):
    return factory.submit(client, ws, job_specs=[{"type": "Master", "pod_count": 1}], display_name=name, launch=True)


def test_errors_on_one_node_from_two_submitters_jobs_isolate_it_without_their_names_in_the_reason(
    alice_ws, bob_ws, alice, bob, api_as, memory_backend
):
    first = _c4d_job(api_as(alice), alice_ws, name="DRAIN-ME-please")
    _error_on(first)
    assert all(n.schedulable for n in memory_backend.list_nodes()), "one job's Error isolated the node"
    second = _c4d_job(api_as(bob), bob_ws, name="also-mine")
    _error_on(second)
    [node] = memory_backend.list_nodes()
    assert not node.schedulable
    # The drain reason (Slurm shows it to every cluster user) carries job ids and the
    # kind, never text a submitter chose.
    assert f"Vigil jobs {first.pk}, {second.pk}: C4D RankCommHang" in node.reason
    assert "DRAIN-ME" not in node.reason and "also-mine" not in node.reason
    errors, state = evidence()
    assert errors.get(job=second).state == state.ISOLATED
    assert JobEvent.objects.filter(job=second, type="node_isolated").exists()


def test_one_submitters_jobs_however_many_only_propose(alice_ws, alice, api_as, memory_backend):
    for _ in range(3):
        _error_on(_c4d_job(api_as(alice), alice_ws))
    assert all(n.schedulable for n in memory_backend.list_nodes())
    errors, state = evidence()
    assert errors.filter(state=state.PROPOSED).count() == 3


def test_automatic_isolations_are_rate_limited(alice_ws, bob_ws, alice, bob, api_as, memory_backend):
    from core.isolation import POLICY

    names = [f"gpu-{i}" for i in range(POLICY.max_automatic + 1)]
    memory_backend.nodes = [{"name": n, "slots": 1} for n in names]
    for name in names:
        for client, ws in ((api_as(alice), alice_ws), (api_as(bob), bob_ws)):
            job = _c4d_job(client, ws)
            Attempt.objects.get(job=job, number=1).instances.update(node=name)  # the pair ran on this node
            _error_on(job)
    isolated = [n.name for n in memory_backend.list_nodes() if not n.schedulable]
    assert isolated == names[: POLICY.max_automatic]
    errors, state = evidence()
    last = errors.filter(node=names[-1]).order_by("-id").first()
    assert last.state == state.PROPOSED and "isolated automatically" in last.evidence


def test_staff_confirm_a_proposal_on_the_nodes_page_and_others_cannot(
    client, alice_ws, dave, alice, api_as, memory_backend
):
    job = _c4d_job(api_as(alice), alice_ws)
    _error_on(job)
    url = "/nodes/local/mem-0/decide/"
    for person in (dave, alice):  # a member, and the workspace's owner: not staff
        client.force_login(person)
        assert client.get("/nodes/").status_code == 404
        assert client.post(url, {"decision": "confirm", "reason": "x"}).status_code == 404
        assert api_as(person).post("/api/v1/nodes/local:mem-0/decide/", {"decision": "confirm"}).status_code == 403
    assert all(n.schedulable for n in memory_backend.list_nodes())
    alice.is_staff = True
    alice.save()
    client.force_login(alice)
    page = client.get("/nodes/")
    assert page.status_code == 200 and b"RankCommHang" in page.content and b"1 job of 1 submitter" in page.content
    assert client.post(url, {"decision": "confirm", "reason": ""}).status_code == 400
    r = client.post(url, {"decision": "confirm", "reason": "ECC errors in dmesg too"})
    assert r.status_code == 302
    [node] = memory_backend.list_nodes()
    assert not node.schedulable and f"Vigil jobs {job.pk}" in node.reason and "confirmed by alice" in node.reason
    errors, state = evidence()
    decided = errors.get(job=job)
    assert decided.state == state.CONFIRMED and decided.decided_by == alice
    assert decided.decided_reason == "ECC errors in dmesg too" and decided.decided_at <= timezone.now()
    assert client.post(url, {"decision": "confirm", "reason": "again"}).status_code == 404  # nothing open


def test_staff_dismiss_a_proposal_through_the_api_and_it_no_longer_counts(
    alice_ws, bob_ws, dave, bob, alice, api_as, memory_backend
):
    _error_on(_c4d_job(api_as(alice), alice_ws))
    alice.is_staff = True
    alice.save()
    staff = api_as(alice)
    [listed] = staff.get("/api/v1/nodes/").json()
    assert len(listed["isolation_proposals"]) == 1
    r = staff.post("/api/v1/nodes/local:mem-0/decide/", {"decision": "dismiss", "reason": "a test job"}, format="json")
    assert r.status_code == 200 and r.json() == {"decided": 1, "decision": "dismiss"}
    bad = staff.post("/api/v1/nodes/local:mem-0/decide/", {"decision": "drain", "reason": "x"}, format="json")
    assert bad.status_code == 400 and "decision" in bad.json()
    # A dismissed Error is not corroboration: bob's job alone is one submitter again.
    _error_on(_c4d_job(api_as(bob), bob_ws))
    assert all(n.schedulable for n in memory_backend.list_nodes())


@pytest.mark.parametrize(
    "body, field",
    [
        ({"decision": "confirm"}, "reason"),
        ({"decision": "confirm", "reason": ""}, "reason"),
        ({"decision": "confirm", "reason": "x" * 301}, "reason"),
        ({"decision": "confirm", "reason": "line one\nline two"}, "reason"),
        ({"decision": "confirm", "reason": "ok \u202egnp.exe"}, "reason"),
        ({"reason": "no decision"}, "decision"),
        ({"decision": ["confirm"], "reason": "a list"}, "decision"),
    ],
)
def test_a_bad_staff_decision_is_a_400_naming_the_field_and_decides_nothing(
    body, field, alice_ws, alice, api_as, memory_backend
):
    job = _c4d_job(api_as(alice), alice_ws)
    _error_on(job)
    alice.is_staff = True
    alice.save()
    r = api_as(alice).post("/api/v1/nodes/local:mem-0/decide/", body, format="json")
    assert r.status_code == 400 and field in r.json(), r.content
    errors, state = evidence()
    assert errors.get(job=job).state == state.PROPOSED
    assert all(n.schedulable for n in memory_backend.list_nodes())
