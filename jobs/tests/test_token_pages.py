"""The personal API tokens page through Django's test client: create (name and
lifetime validated server-side, 400 naming the field), the raw token shown once,
the list, revoke; another person's token is 404 and a revoked or expired token no
longer authenticates the REST API."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from jobs.models import ApiToken

pytestmark = pytest.mark.django_db

URL = "/account/tokens/"


def api_status(raw: str) -> int:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client.get("/api/v1/workspaces/").status_code


def test_create_shows_the_token_once_lists_it_and_the_api_accepts_it(client, alice):
    client.force_login(alice)
    response = client.post(URL, {"name": "laptop", "expires": "7"})
    assert response.status_code == 201 and response["Cache-Control"] == "no-store"
    token = ApiToken.objects.get(user=alice, name="laptop")
    raw = response.context["new_token"]
    assert raw.startswith("vpt_") and raw.startswith(token.hint) and raw in response.content.decode()
    assert abs(token.expires_at - (timezone.now() + timedelta(days=7))) < timedelta(minutes=1)
    assert api_status(raw) == 200
    # shown once: the next visit lists it by prefix, never the whole value
    page = client.get(URL).content.decode()
    assert raw not in page and f"{token.hint}…" in page and "laptop" in page
    assert "Last used" in page
    # "never" is a real choice, stored as no expiry
    client.post(URL, {"name": "ci", "expires": "never"})
    assert ApiToken.objects.get(user=alice, name="ci").expires_at is None


@pytest.mark.parametrize(
    "data, field",
    [
        ({"name": "x", "expires": "365"}, "expires"),
        ({"name": "x", "expires": ""}, "expires"),
        ({"name": "x"}, "expires"),
        ({"name": "   ", "expires": "7"}, "name"),
        ({"expires": "7"}, "name"),
        ({"name": "x" * 101, "expires": "7"}, "name"),
    ],
)
def test_bad_input_is_400_naming_the_field_and_makes_no_token(client, alice, data, field):
    client.force_login(alice)
    response = client.post(URL, data)
    assert response.status_code == 400
    assert list(response.context["form"].errors) == [field]
    assert f'id="id_{field}_error"' in response.content.decode() or f"id_{field}" in response.content.decode()
    assert not ApiToken.objects.filter(user=alice).exists()


def test_revoke_stops_the_token_and_only_the_owner_sees_or_revokes_it(client, alice, bob):
    mine, raw = ApiToken.issue(alice, name="alice-laptop")
    theirs, their_raw = ApiToken.issue(bob, name="bob-secret-name")
    client.force_login(alice)
    page = client.get(URL).content.decode()
    assert "alice-laptop" in page and "bob-secret-name" not in page and theirs.hint not in page
    # another person's token: 404, and it still works
    assert client.post(reverse("pages:api-token-revoke", args=[theirs.pk])).status_code == 404
    assert client.post(reverse("pages:api-token-revoke", args=[999999])).status_code == 404
    assert api_status(their_raw) == 200
    # revoke is a POST only
    assert client.get(reverse("pages:api-token-revoke", args=[mine.pk])).status_code == 405
    assert api_status(raw) == 200
    response = client.post(reverse("pages:api-token-revoke", args=[mine.pk]))
    assert response.status_code == 302
    assert api_status(raw) == 401
    assert "Revoked" in client.get(URL).content.decode()


def test_revoke_needs_the_csrf_token(alice):
    from django.test import Client

    token, raw = ApiToken.issue(alice)
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    assert client.post(reverse("pages:api-token-revoke", args=[token.pk])).status_code == 403
    assert api_status(raw) == 200


def test_an_expired_token_no_longer_authenticates(alice):
    token, raw = ApiToken.issue(alice, expires_at=timezone.now() + timedelta(days=7))
    assert api_status(raw) == 200
    with time_machine.travel(timezone.now() + timedelta(days=7, seconds=1)):
        assert api_status(raw) == 401


def test_the_page_asks_a_logged_out_visitor_to_log_in(client):
    assert client.get(URL).status_code == 302
    assert client.post(URL, {"name": "x", "expires": "7"}).status_code == 302
    assert not ApiToken.objects.exists()
