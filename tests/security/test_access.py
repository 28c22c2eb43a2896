"""Who may run code, and what sessions, tokens and sockets may still do (issue 12):
each test replays a reproduction through the real API, pages or consumers.

People (conftest): alice owns "alice-lab", carol is a viewer there, dave a member;
all of them hold the site permission to run on the local and Slurm backends.
erin (here) is an owner of her own workspace without that permission, and frank
(here) is in no workspace at all."""

from __future__ import annotations

import pytest
from django.urls import reverse

from jobs.models import Job, Membership, Role, Workspace

pytestmark = pytest.mark.django_db


@pytest.fixture
def erin(db, django_user_model):
    """Owner of "erin-lab" without any jobs.run_on_* permission."""
    user = django_user_model.objects.create_user("erin", "erin@example.com", "erin-password-123")
    ws = Workspace.objects.create(name="Erin Lab", slug="erin-lab")
    Membership.objects.create(workspace=ws, user=user, role=Role.OWNER)
    user.ws = ws
    return user


@pytest.fixture
def frank(db, django_user_model):
    """An account in no workspace."""
    return django_user_model.objects.create_user("frank", "frank@example.com", "frank-password-123")


# --- workspace creation ------------------------------------------------------------------


def test_a_viewer_cannot_promote_itself_by_creating_a_workspace(alice_ws, carol, api_as):
    r = api_as(carol).post("/api/v1/workspaces/", {"name": "Mine now"}, format="json")
    assert r.status_code == 403, r.content
    assert "VIGIL_WORKSPACE_CREATION" in r.json()["detail"]
    assert not Workspace.objects.filter(name="Mine now").exists()
    assert Membership.objects.filter(user=carol, role=Role.OWNER).count() == 0


def test_an_account_in_no_workspace_cannot_create_one_with_an_api_token(frank, api_as):
    r = api_as(frank).post("/api/v1/workspaces/", {"name": "Frank's"}, format="json")
    assert r.status_code == 403
    assert "VIGIL_WORKSPACE_CREATION" in r.json()["detail"]
    assert Workspace.objects.count() == 0


def test_the_no_workspace_page_suggests_creating_one_only_to_those_who_may(frank, client, settings):
    client.force_login(frank)
    page = client.get("/").content.decode()
    assert "Ask a workspace owner or admin" in page
    assert "/api/v1/workspaces/" not in page
    settings.VIGIL_WORKSPACE_CREATION = "anyone"
    assert "/api/v1/workspaces/" in client.get("/").content.decode()


# --- running code needs the site permission and a workspace role ---------------------------


def test_an_owner_without_the_backend_permission_cannot_run_a_local_job_through_the_api(erin, api_as, job_body):
    r = api_as(erin).post("/api/v1/jobs/", job_body(erin.ws, user_command="id -un; ls var"), format="json")
    assert r.status_code == 403, r.content
    assert "jobs.run_on_local" in r.json()["detail"]
    assert Job.objects.count() == 0


def test_an_account_in_no_workspace_cannot_make_one_to_run_a_job_in(frank, api_as, job_body):
    """The reproduction: create a workspace (becoming its owner), then run `id` in it."""
    api = api_as(frank)
    made = api.post("/api/v1/workspaces/", {"name": "Frank's"}, format="json")
    slug = made.json().get("slug") if made.status_code == 201 else "franks"
    r = api.post("/api/v1/jobs/", job_body(slug, user_command="id -un; ls var"), format="json")
    assert (made.status_code, r.status_code) == (403, 404), (made.content, r.content)
    assert Job.objects.count() == 0


def test_the_permission_without_a_submitting_role_is_refused(alice_ws, carol, api_as, job_body):
    assert carol.has_perm("jobs.run_on_local")
    r = api_as(carol).post("/api/v1/jobs/", job_body(alice_ws), format="json")
    assert r.status_code == 403
    assert "viewer" in r.json()["detail"]
    assert Job.objects.count() == 0


def test_the_form_refuses_a_person_without_any_backend_permission(erin, client):
    client.force_login(erin)
    url = reverse("pages:job-new", args=[erin.ws.slug])
    page = client.get(url)
    assert page.status_code == 403
    assert "jobs.run_on_local" in page.content.decode()
    r = client.post(
        url,
        {
            "display_name": "x",
            "job_type": "PyTorchJob",
            "user_command": "id",
            "backend": "local",
            "role_0_type": "Master",
            "role_0_replicas": "1",
            "role_0_gpu": "0",
            "role_0_cpu": "1",
        },
    )
    assert r.status_code == 403
    assert Job.objects.count() == 0


def test_the_form_offers_only_the_backends_the_person_may_use(alice_ws, alice, erin, client, settings):
    from jobs.access import backend_permission
    from jobs.backends import reset_backends

    settings.JOB_BACKENDS = {
        "local": {"BACKEND": "jobs.backends.memory.MemoryBackend", "OPTIONS": {}},
        "slurm": {"BACKEND": "jobs.backends.memory.MemoryBackend", "OPTIONS": {}},
    }
    reset_backends()
    Membership.objects.create(workspace=alice_ws, user=erin, role=Role.MEMBER)
    erin.user_permissions.add(backend_permission("slurm"))
    client.force_login(erin)
    url = reverse("pages:job-new", args=[alice_ws.slug])
    page = client.get(url).content.decode()
    assert '<option value="slurm"' in page
    assert '<option value="local"' not in page
    r = client.post(
        url,
        {
            "display_name": "x",
            "job_type": "PyTorchJob",
            "user_command": "id",
            "backend": "local",
            "role_0_type": "Master",
            "role_0_replicas": "1",
            "role_0_gpu": "0",
            "role_0_cpu": "1",
        },
    )
    assert r.status_code == 400
    assert Job.objects.count() == 0
    client.force_login(alice)
    page = client.get(url).content.decode()
    assert '<option value="slurm"' in page and '<option value="local"' in page


def test_granting_the_permission_lets_the_owner_run(erin, api_as, job_body):
    from django.core.management import call_command

    call_command("backendaccess", "grant", "local", "--user", "erin", stdout=open("/dev/null", "w"))
    r = api_as(type(erin).objects.get(pk=erin.pk)).post("/api/v1/jobs/", job_body(erin.ws), format="json")
    assert r.status_code == 201, r.content


# --- tokens of finished jobs ------------------------------------------------------------------


def _finished_job(alice, alice_ws, job_body, api_as):
    from jobs.models import JobStatus

    r = api_as(alice).post("/api/v1/jobs/", job_body(alice_ws), format="json")
    assert r.status_code == 201, r.content
    job = Job.objects.get(pk=r.json()["id"])
    Job.objects.filter(pk=job.pk).update(status=JobStatus.SUCCEEDED)
    return job, r.json()["token"]


def test_a_finished_jobs_token_cannot_write_events_or_reports(alice, alice_ws, job_body, api_as):
    from rest_framework.test import APIClient

    from jobs.models import JobEvent

    job, token = _finished_job(alice, alice_ws, job_body, api_as)
    before = JobEvent.objects.filter(job=job).count()
    sdk = APIClient()
    sdk.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    for endpoint, body in [
        ("messages", {"content": "forged: all good"}),
        ("progress", {"step": 10**6}),
        ("c4d", {"rank": 0, "attempt": 1, "records": []}),
    ]:
        r = sdk.post(f"/api/v1/sdk/jobs/{job.pk}/{endpoint}/", body, format="json")
        assert r.status_code == 409, (endpoint, r.content)
        assert "Succeeded" in r.json()["detail"]
    assert JobEvent.objects.filter(job=job).count() == before


def test_the_runtime_patch_of_a_finished_job_answers_409(alice, alice_ws, job_body, api_as):
    job, _ = _finished_job(alice, alice_ws, job_body, api_as)
    r = api_as(alice).patch(f"/api/v1/jobs/{job.pk}/runtime/", {"job_hang_interval": 60}, format="json")
    assert r.status_code == 409, r.content
    assert "Succeeded" in r.json()["detail"]
    job.refresh_from_db()
    assert job.hang_interval_override is None


# --- the API's schema and docs ----------------------------------------------------------------


def test_the_api_schema_and_docs_need_a_login_unless_published(alice, client, settings):
    from rest_framework.test import APIClient

    anon = APIClient()
    r = anon.get("/api/schema/", HTTP_ACCEPT="application/json")
    assert r.status_code in (401, 403)
    assert "VIGIL_PUBLIC_API_DOCS" in r.json()["detail"]
    docs = client.get("/api/docs/")
    assert docs.status_code == 302 and docs["Location"].startswith("/login/")
    client.force_login(alice)
    assert client.get("/api/docs/").status_code == 200
    assert client.get("/api/schema/", HTTP_ACCEPT="application/json").status_code == 200
    settings.VIGIL_PUBLIC_API_DOCS = True
    assert APIClient().get("/api/schema/", HTTP_ACCEPT="application/json").status_code == 200
    client.logout()
    assert client.get("/api/docs/").status_code == 200


# --- secrets in a job's environment ----------------------------------------------------------


SECRET_ENVS = {
    "WANDB_API_KEY": "wandb-1234",
    "hf_token": "hf-5678",
    "DB_PASSWORD": "pw",
    "AWS_CREDENTIALS": "c",
    "MY_SECRET": "s",
    "EPOCHS": "10",
}


def test_viewers_see_secret_looking_env_values_masked_and_owners_see_them(
    alice_ws, alice, carol, dave, api_as, job_body, client
):
    from jobs.access import MASK

    job_id = api_as(alice).post("/api/v1/jobs/", job_body(alice_ws, envs=SECRET_ENVS), format="json").json()["id"]
    for who in (carol, dave):  # a viewer, and a member who did not submit it
        shown = api_as(who).get(f"/api/v1/jobs/{job_id}/").json()["envs"]
        assert shown == {**{k: MASK for k in SECRET_ENVS if k != "EPOCHS"}, "EPOCHS": "10"}, who
        listed = api_as(who).get("/api/v1/jobs/").json()["results"][0]["envs"]
        assert "wandb-1234" not in str(listed) and listed["EPOCHS"] == "10"
    assert api_as(alice).get(f"/api/v1/jobs/{job_id}/").json()["envs"] == SECRET_ENVS
    # The clone form is the page that shows a job's environment.
    client.force_login(dave)
    page = client.get(reverse("pages:job-new", args=[alice_ws.slug]) + f"?clone={job_id}").content.decode()
    assert "wandb-1234" not in page and "hf-5678" not in page and "EPOCHS=10" in page
    client.force_login(alice)
    page = client.get(reverse("pages:job-new", args=[alice_ws.slug]) + f"?clone={job_id}").content.decode()
    assert "WANDB_API_KEY=wandb-1234" in page
    # A clone submitted with the mask still in place is refused, not run with the mask as the secret.
    r = api_as(dave).post("/api/v1/jobs/", job_body(alice_ws, envs={"WANDB_API_KEY": MASK}), format="json")
    assert r.status_code == 400 and "envs.WANDB_API_KEY" in r.json()


# --- open WebSockets after access ends ---------------------------------------------------------


@pytest.fixture
def private_channel_layer(settings):
    """The real Redis channel layer under a prefix of this test's own."""
    import os
    import uuid

    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [{"address": settings.REDIS_URL, "socket_timeout": 30}],
                "prefix": f"vigil-sec-{os.getpid()}-{uuid.uuid4().hex[:8]}",
            },
        }
    }


def _socket(path, client):
    from channels.testing import WebsocketCommunicator

    from console.asgi import application

    return WebsocketCommunicator(
        application,
        path,
        headers=[
            (b"host", b"127.0.0.1"),
            (b"origin", b"http://127.0.0.1"),
            (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()),
        ],
    )


async def _until_closed(comm, seconds: float) -> tuple[dict, list[dict], float]:
    """(the close message, the JSON messages before it, seconds it took)."""
    import asyncio
    import json

    loop = asyncio.get_running_loop()
    start = loop.time()
    messages = []
    while True:
        remaining = start + seconds - loop.time()
        assert remaining > 0, f"still open after {seconds} s; got {[m.get('type') for m in messages]}"
        out = await comm.receive_output(timeout=remaining)
        if out["type"] == "websocket.close":
            return out, messages, loop.time() - start
        messages.append(json.loads(out["text"]))


def _revoke(how, user, workspace, client):
    if how == "logout":
        client.logout()  # deletes the session the socket was opened with
    elif how == "membership":
        Membership.objects.filter(user=user, workspace=workspace).delete()
    elif how == "deactivated":
        type(user).objects.filter(pk=user.pk).update(is_active=False)


@pytest.mark.django_db(transaction=True)
@pytest.mark.redis
@pytest.mark.parametrize("how, code", [("logout", 4401), ("membership", 4403), ("deactivated", 4423)])
def test_an_open_job_socket_stops_streaming_when_access_ends(
    how, code, alice, dave, alice_ws, job_body, memory_backend, private_channel_layer
):
    from asgiref.sync import async_to_sync, sync_to_async
    from django.test import Client

    from jobs import actions
    from monitoring.consumers import ACCESS_CHECK_SECONDS

    job, _ = actions.submit_job(alice, job_body(alice_ws))
    handle = job.attempts.get(number=1).backend_handle
    client = Client()
    client.force_login(dave)

    async def scenario():
        comm = _socket(f"/ws/jobs/{job.pk}/", client)
        assert (await comm.connect(timeout=10))[0]
        await comm.send_json_to({"type": "hello", "after_event": None, "logs": {"attempt": None, "offsets": {}}})
        memory_backend.write_log(handle, "worker-0", "step 1\n")
        while True:  # streaming
            msg = await comm.receive_json_from(timeout=5)
            if msg["type"] == "log":
                break
        await sync_to_async(_revoke)(how, dave, alice_ws, client)
        memory_backend.write_log(handle, "worker-0", "secret step 2\n")
        closed, before, took = await _until_closed(comm, ACCESS_CHECK_SECONDS + 3)
        await comm.disconnect()
        return closed, before, took

    closed, before, took = async_to_sync(scenario)()
    assert closed["code"] == code
    assert before and before[-1]["type"] == "revoked" and before[-1]["code"] == code
    assert took <= ACCESS_CHECK_SECONDS + 3


@pytest.mark.django_db(transaction=True)
@pytest.mark.redis
def test_an_open_workspace_socket_closes_when_its_member_is_removed(alice, dave, alice_ws, private_channel_layer):
    from asgiref.sync import async_to_sync, sync_to_async
    from django.test import Client

    from monitoring.consumers import ACCESS_CHECK_SECONDS

    client = Client()
    client.force_login(dave)

    async def scenario():
        comm = _socket(f"/ws/workspaces/{alice_ws.slug}/", client)
        assert (await comm.connect(timeout=10))[0]
        await sync_to_async(_revoke)("membership", dave, alice_ws, client)
        closed, before, _ = await _until_closed(comm, ACCESS_CHECK_SECONDS + 3)
        await comm.disconnect()
        return closed, before

    closed, before = async_to_sync(scenario)()
    assert closed["code"] == 4403
    assert before[-1] == {"type": "revoked", "code": 4403, "reason": "you are no longer a member of this workspace"}


# --- login throttling ---------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["/login/", "/admin/login/"])
def test_repeated_wrong_passwords_for_one_account_lock_its_login_for_a_while(url, alice, client, settings):
    import time_machine
    from django.utils import timezone

    alice.is_staff = True  # so that /admin/login/ would let the right password in
    alice.save(update_fields=["is_staff"])
    right = {"username": "alice", "password": "alice-password-123"}
    with time_machine.travel(timezone.now(), tick=False) as clock:
        for _ in range(settings.AXES_FAILURE_LIMIT - 1):
            r = client.post(url, {"username": "alice", "password": "wrong"}, REMOTE_ADDR="192.0.2.10")
            assert r.status_code == 200  # the form again, with its error
        # the last allowed wrong password answers with the lockout, and so does the right one now
        r = client.post(url, {"username": "alice", "password": "wrong"}, REMOTE_ADDR="192.0.2.10")
        assert r.status_code == 429
        locked = client.post(url, right, REMOTE_ADDR="192.0.2.11")  # another address does not help
        assert locked.status_code == 429
        text = locked.content.decode()
        assert "Too many failed logins" in text and "alice" in text and "15 minutes" in text
        assert "_auth_user_id" not in client.session
        clock.shift(settings.AXES_COOLOFF_TIME.total_seconds() + 1)
        r = client.post(url, right, REMOTE_ADDR="192.0.2.11")
        assert r.status_code == 302 and client.session["_auth_user_id"] == str(alice.pk)


def test_wrong_passwords_from_one_address_lock_it_for_every_account(alice, bob, client, settings):
    for i in range(settings.AXES_FAILURE_LIMIT):
        client.post("/login/", {"username": f"guess{i}", "password": "wrong"}, REMOTE_ADDR="198.51.100.7")
    r = client.post("/login/", {"username": "bob", "password": "bob-password-123"}, REMOTE_ADDR="198.51.100.7")
    assert r.status_code == 429
    r = client.post("/login/", {"username": "bob", "password": "bob-password-123"}, REMOTE_ADDR="198.51.100.8")
    assert r.status_code == 302
