"""Who may act on a job they did not submit (issue 31, finding 3; docs/security.md,
"Who may act on a job"). The job below was submitted by sam, a member of alice's
workspace. Every person, through the API and through the page forms, against every
mutating action on it:

- stop, runtime (the hang interval) and reset-token are for the submitter and the
  workspace's owners and admins: another member and a viewer get 403, and the job's
  status, hang interval and token stay as they were (its own token still works);
- a stack snapshot is for every member (owner, admin, member), not viewers;
- a retryable keyword is for owners and admins;
- a person of another workspace and site staff who are no member get 404 (staff have
  the admin site, not workspace powers; staff who are a plain member are a member);
- nobody signed in: 401 from the API, the login page from the pages.

On the main of the review, dave (a member) stopped, reconfigured and took the token of
sam's job (202, 200, 200) and the page showed him the buttons."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from jobs import actions
from jobs.models import Diagnosis, Job, JobStatus, Membership, Role

pytestmark = pytest.mark.django_db

RUNNING = JobStatus.RUNNING
OLD_INTERVAL = None  # the job's own --job-hang-interval: no runtime override yet
NEW_INTERVAL = 321
KEYWORD = "CUDA error: an illegal memory access"

# person -> what they are (fixtures build them below)
PEOPLE = [
    "owner",  # alice
    "admin",  # ada
    "submitter",  # sam, a member, who submitted the job
    "member",  # dave, another member
    "viewer",  # carol
    "other_workspace",  # bob, owner of his own workspace
    "staff",  # stan: is_staff, in no workspace
    "staff_member",  # stella: is_staff and a plain member here
    "anonymous",
]

OPERATORS = {"owner", "admin", "submitter"}
WRITERS = {"owner", "admin", "submitter", "member", "staff_member"}
ADMINS = {"owner", "admin"}
OUTSIDERS = {"other_workspace", "staff"}

# action -> who may do it
ACTIONS = {
    "stop": OPERATORS,
    "runtime": OPERATORS,
    "reset_token": OPERATORS,
    "snapshot": WRITERS,
    "retryable_keyword": ADMINS,
}
API_ACTIONS = ["stop", "runtime", "reset_token", "snapshot"]  # the keyword is a page form only
PAGE_ACTIONS = ["stop", "reset_token", "retryable_keyword"]  # the page forms (the snapshot button posts to the API)


@pytest.fixture
def cast(alice, alice_ws, carol, dave, bob, bob_ws, django_user_model, settings):
    """Every person by name, and the running job sam submitted (with its own token)."""
    from jobs.access import backend_permission

    def person(name, *, role=None, staff=False):
        user = django_user_model.objects.create_user(name, f"{name}@example.com", f"{name}-password-123")
        user.user_permissions.add(backend_permission("local"))
        if staff:
            user.is_staff = True
            user.save(update_fields=["is_staff"])
        if role:
            Membership.objects.create(workspace=alice_ws, user=user, role=role)
        return user

    people = {
        "owner": alice,
        "admin": person("ada", role=Role.ADMIN),
        "submitter": person("sam", role=Role.MEMBER),
        "member": dave,
        "viewer": carol,
        "other_workspace": bob,
        "staff": person("stan", staff=True),
        "staff_member": person("stella", role=Role.MEMBER, staff=True),
        "anonymous": None,
    }
    settings.VIGIL_LOCAL_SUBMIT_ROLES = ["owner", "admin", "member"]  # so that sam may submit on local
    from testsupport.factory import pytorch_job

    job, token = actions.submit_job(people["submitter"], pytorch_job(alice_ws))
    actions.launch_attempt(job.pk, 1)  # the launch waits for a commit this test never makes
    Job.objects.filter(pk=job.pk).update(status=RUNNING)
    return people, Job.objects.get(pk=job.pk), token


def token_works(job_id: int, token: str) -> bool:
    """Whether a job token is still the job's: the SDK's custom message endpoint with it."""
    sdk = APIClient()
    sdk.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    r = sdk.post(f"/api/v1/sdk/jobs/{job_id}/messages/", {"content": "am I still me?"}, format="json")
    assert r.status_code in (201, 401), r.content
    return r.status_code == 201


def snapshot_of(job: Job) -> dict:
    job = Job.objects.get(pk=job.pk)
    return {
        "status": job.status,
        "stop_requested": job.stop_requested,
        "hang_interval_override": job.hang_interval_override,
        "token_digest": job.token_digest,
        "retryable_keywords": list(job.retryable_keywords or []),
        "diagnoses": Diagnosis.objects.filter(job=job).count(),
    }


def expected_refusal(who: str, action: str, *, api: bool) -> int | None:
    """None when `who` may do `action`; else the status of the refusal."""
    if who == "anonymous":
        return 401 if api else 302
    if who in OUTSIDERS:
        return 404
    return None if who in ACTIONS[action] else 403


def assert_done(action: str, before: dict, after: dict, job: Job, old_token: str, new_token: str | None) -> None:
    if action == "stop":
        assert after["stop_requested"] and after["status"] in (JobStatus.STOPPING, JobStatus.STOPPED), after
    elif action == "runtime":
        assert after["hang_interval_override"] == NEW_INTERVAL
    elif action == "reset_token":
        assert after["token_digest"] != before["token_digest"]
        assert not token_works(job.pk, old_token)
        assert new_token and token_works(job.pk, new_token)
    elif action == "snapshot":
        assert after["diagnoses"] == before["diagnoses"] + 1
    elif action == "retryable_keyword":
        assert after["retryable_keywords"] == [KEYWORD]


def assert_untouched(before: dict, after: dict, job: Job, old_token: str) -> None:
    assert after == before
    assert token_works(job.pk, old_token), "a refused reset must leave the job's own token working"


# --- the API ------------------------------------------------------------------------


def api_client(user, api_as):
    return APIClient() if user is None else api_as(user)


API_CALLS = {
    "stop": ("stop/", None, 202),
    "runtime": ("runtime/", {"job_hang_interval": NEW_INTERVAL}, 200),
    "reset_token": ("reset-token/", None, 200),
    "snapshot": ("diagnoses/stacks/", None, 201),
}


@pytest.mark.parametrize("action", API_ACTIONS)
@pytest.mark.parametrize("who", PEOPLE)
def test_the_api_lets_only_those_the_model_names_act_on_someone_elses_job(who, action, cast, api_as):
    people, job, token = cast
    suffix, body, done = API_CALLS[action]
    before = snapshot_of(job)
    r = api_client(people[who], api_as).post(f"/api/v1/jobs/{job.pk}/{suffix}", body, format="json")
    after = snapshot_of(job)
    refused = expected_refusal(who, action, api=True)
    if refused is None:
        assert r.status_code == done, r.content
        assert_done(action, before, after, job, token, r.json().get("token") if action == "reset_token" else None)
    else:
        assert r.status_code == refused, r.content
        assert_untouched(before, after, job, token)
        if refused == 403:  # the refusal says who may
            assert "is for" in r.json()["detail"], r.json()


# --- the pages ------------------------------------------------------------------------


def page_client(user) -> Client:
    """A browser that enforces CSRF as the real one does, with the form's token in hand."""
    client = Client(enforce_csrf_checks=True)
    if user is not None:
        client.force_login(user)
    login = client.get(reverse("login")).content.decode()
    client.csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login).group(1)
    return client


PAGE_FORMS = {
    "stop": ("pages:job-stop", {}),
    "reset_token": ("pages:job-token", {}),
    "retryable_keyword": ("pages:retryable-keyword", {"keyword": KEYWORD, "scope": "job"}),
}


@pytest.mark.parametrize("action", PAGE_ACTIONS)
@pytest.mark.parametrize("who", PEOPLE)
def test_the_page_forms_let_only_those_the_model_names_act_on_someone_elses_job(who, action, cast, alice_ws):
    people, job, token = cast
    name, data = PAGE_FORMS[action]
    client = page_client(people[who])
    before = snapshot_of(job)
    r = client.post(reverse(name, args=[alice_ws.slug, job.pk]), {**data, "csrfmiddlewaretoken": client.csrf})
    after = snapshot_of(job)
    refused = expected_refusal(who, action, api=False)
    if refused is None:
        assert r.status_code == 302, r.content
        new_token = client.session.get(f"reset_token_{job.pk}") if action == "reset_token" else None
        assert_done(action, before, after, job, token, new_token)
    else:
        assert r.status_code == refused, r.content
        if refused == 302:
            assert r["Location"].startswith(reverse("login"))
        if refused == 403:
            assert "is for" in r.content.decode()
        assert_untouched(before, after, job, token)


def test_a_page_form_without_the_csrf_token_is_refused_even_for_the_submitter(cast, alice_ws):
    people, job, token = cast
    client = page_client(people["submitter"])
    before = snapshot_of(job)
    for name, data in PAGE_FORMS.values():
        assert client.post(reverse(name, args=[alice_ws.slug, job.pk]), data).status_code == 403
    assert_untouched(before, snapshot_of(job), job, token)


# --- the buttons: shown to exactly those who may use them -------------------------------

BUTTONS = {
    "stop": 'id="stop-job"',
    "reset_token": ">Reset token</button>",
    "snapshot": "data-dump-stacks",
    "clone": ">Clone</a>",
}
BUTTON_RIGHTS = {**ACTIONS, "clone": WRITERS}


@pytest.mark.parametrize("who", sorted(set(PEOPLE) - OUTSIDERS - {"anonymous"}))
def test_the_job_page_shows_each_action_only_to_those_who_may_use_it(who, cast, alice_ws):
    people, job, _ = cast
    client = Client()
    client.force_login(people[who])
    page = client.get(reverse("pages:job-detail", args=[alice_ws.slug, job.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    for action, marker in BUTTONS.items():
        assert (marker in html) == (who in BUTTON_RIGHTS[action]), f"{who} / {action}"


@pytest.mark.parametrize("who", ["staff", "other_workspace"])
def test_the_job_page_of_another_workspace_is_404_for_staff_too(who, cast, alice_ws):
    people, job, _ = cast
    client = Client()
    client.force_login(people[who])
    assert client.get(reverse("pages:job-detail", args=[alice_ws.slug, job.pk])).status_code == 404


def test_a_submitter_who_is_no_longer_a_member_loses_the_job_too(cast, api_as, alice_ws):
    """The role is what the workspace lets a person do now: sam, demoted to viewer,
    may no longer stop, reconfigure or take the token of the job he submitted."""
    people, job, token = cast
    Membership.objects.filter(workspace=alice_ws, user=people["submitter"]).update(role=Role.VIEWER)
    before = snapshot_of(job)
    as_sam = api_as(people["submitter"])
    for action in ("stop", "runtime", "reset_token"):
        suffix, body, _ = API_CALLS[action]
        assert as_sam.post(f"/api/v1/jobs/{job.pk}/{suffix}", body, format="json").status_code == 403
    assert_untouched(before, snapshot_of(job), job, token)
