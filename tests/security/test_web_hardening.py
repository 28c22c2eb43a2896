"""Issue 31, findings 2, 4 and 7: the WebSocket origin check takes scheme, host and
port; the page forms' ids and numbers never answer 500; names refuse bidirectional
controls. (The Content-Security-Policy and the log view's OSC 8 links have their
browser tests in tests/browser/test_web_hardening_browser.py.)"""

from __future__ import annotations

import os
import uuid

import pytest
from asgiref.sync import async_to_sync
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from jobs import actions
from jobs.models import Workspace
from notifications.models import Channel, EventRule

MAX_BIGINT = (1 << 63) - 1


def _session(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


# --- finding 2: the socket's origin ------------------------------------------------------


@pytest.fixture
def private_layer(settings):
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [{"address": settings.REDIS_URL, "socket_timeout": 30}],
                "prefix": f"vigil-origin-{os.getpid()}-{uuid.uuid4().hex[:8]}",
            },
        }
    }


def _handshake(path: str, cookie: str, host: bytes, origin: bytes | None, scheme="ws", extra=()) -> bool:
    from channels.testing import WebsocketCommunicator

    from console.asgi import application

    headers = [(b"host", host), (b"cookie", f"sessionid={cookie}".encode()), *extra]
    if origin is not None:
        headers.append((b"origin", origin))

    async def go():
        comm = WebsocketCommunicator(application, path, headers=headers)
        comm.scope["scheme"] = scheme
        connected, _ = await comm.connect(timeout=10)
        await comm.disconnect()
        return connected

    return async_to_sync(go)()


@pytest.mark.django_db(transaction=True)
@pytest.mark.redis
@pytest.mark.parametrize(
    "host, origin, scheme, extra, expected",
    [
        # the console's own origin, with and without a port
        (b"127.0.0.1:8000", b"http://127.0.0.1:8000", "ws", (), True),
        (b"127.0.0.1", b"http://127.0.0.1", "ws", (), True),
        # another port of the same host: a job's own web server (the finding)
        (b"127.0.0.1:8000", b"http://127.0.0.1:8001", "ws", (), False),
        (b"127.0.0.1:8000", b"http://127.0.0.1", "ws", (), False),
        (b"127.0.0.1", b"http://127.0.0.1:9999", "ws", (), False),
        # another host that ALLOWED_HOSTS also lists, on any port
        (b"127.0.0.1:8000", b"http://localhost:8000", "ws", (), False),
        (b"127.0.0.1:8000", b"http://localhost:8001", "ws", (), False),
        # another scheme
        (b"127.0.0.1:8000", b"https://127.0.0.1:8000", "ws", (), False),
        (b"127.0.0.1:8000", b"http://127.0.0.1:8000", "wss", (), False),
        (b"127.0.0.1:8000", b"https://127.0.0.1:8000", "wss", (), True),
        # a foreign host, an opaque origin, none at all
        (b"127.0.0.1:8000", b"http://evil.example.com:8000", "ws", (), False),
        (b"127.0.0.1:8000", b"null", "ws", (), False),
        (b"127.0.0.1:8000", None, "ws", (), False),
        # a Host the console does not serve, even when the Origin repeats it
        (b"evil.example.com", b"http://evil.example.com", "ws", (), False),
    ],
)
def test_the_job_socket_opens_only_for_the_consoles_own_origin(
    private_layer, alice, alice_ws, job_body, memory_backend, host, origin, scheme, extra, expected
):
    job, _ = actions.submit_job(alice, job_body(alice_ws))
    cookie = _session(alice)
    assert _handshake(f"/ws/jobs/{job.pk}/", cookie, host, origin, scheme, extra) is expected
    assert _handshake(f"/ws/workspaces/{alice_ws.slug}/", cookie, host, origin, scheme, extra) is expected


@pytest.mark.django_db(transaction=True)
@pytest.mark.redis
def test_behind_the_proxy_the_forwarded_scheme_and_the_trusted_origins_count(
    private_layer, settings, alice, alice_ws, job_body, memory_backend
):
    """nginx sends Host without the port and X-Forwarded-Proto; the origin browsers
    send then matches only a CSRF_TRUSTED_ORIGINS entry, as for Django's form posts."""
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.CSRF_TRUSTED_ORIGINS = ["https://vigil.example.com:8443"]
    settings.ALLOWED_HOSTS = ["vigil.example.com"]
    job, _ = actions.submit_job(alice, job_body(alice_ws))
    cookie = _session(alice)
    path = f"/ws/jobs/{job.pk}/"
    https = ((b"x-forwarded-proto", b"https"),)
    assert _handshake(path, cookie, b"vigil.example.com", b"https://vigil.example.com", "ws", https)
    assert not _handshake(path, cookie, b"vigil.example.com", b"http://vigil.example.com", "ws", https)
    assert _handshake(path, cookie, b"vigil.example.com", b"https://vigil.example.com:8443", "ws", https)
    assert not _handshake(path, cookie, b"vigil.example.com", b"https://vigil.example.com:8444", "ws", https)


# --- finding 4: page forms' integer fields -----------------------------------------------

# Integers as a browser may post them: small, around the 64-bit limits, huge, signed.
ints = st.one_of(
    st.integers(min_value=-(1 << 70), max_value=1 << 70),
    st.sampled_from([0, -1, MAX_BIGINT, MAX_BIGINT + 1, -(MAX_BIGINT + 1), -(MAX_BIGINT + 2), 10**30]),
)
int_text = st.one_of(
    ints.map(str),
    ints.map(lambda i: f" {i} "),
    ints.map(lambda i: f"+{i}" if i >= 0 else str(i)),
    st.text(alphabet="0123456789+-. e٣²", max_size=25),
)
FUZZ = hsettings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture
def owner_client(alice, alice_ws):
    client = Client()
    client.force_login(alice)
    return client


@pytest.fixture
def a_rule(alice, alice_ws):
    channel = Channel.objects.create(workspace=alice_ws, name="ops", kind="webhook", url="https://example.com/hook")
    rule = EventRule.objects.create(workspace=alice_ws, name="r", event_types=["job_failed"], created_by=alice)
    rule.channels.add(channel)
    return rule, channel


@pytest.mark.django_db
def test_a_channel_id_past_the_64_bit_limit_is_a_field_error_not_a_500(owner_client, a_rule):
    rule, channel = a_rule
    for url in (
        reverse("notifications:rule-add", kwargs={"slug": "alice-lab"}),
        reverse("notifications:rule-edit", kwargs={"slug": "alice-lab", "rule_id": rule.pk}),
    ):
        for bad in (str(MAX_BIGINT + 1), "99999999999999999999999", "-5", "0"):
            r = owner_client.post(
                url, {"name": "n", "event_types": ["job_failed"], "job_scope": "all", "channels": [bad]}
            )
            assert r.status_code == 200, (url, bad, r.status_code)
            assert r.context["form"].errors["channels"], bad


@pytest.mark.django_db
@FUZZ
@given(ids=st.lists(int_text, min_size=1, max_size=3))
def test_the_rule_forms_never_answer_500_for_any_channel_ids(owner_client, a_rule, ids):
    rule, channel = a_rule
    for url in (
        reverse("notifications:rule-add", kwargs={"slug": "alice-lab"}),
        reverse("notifications:rule-edit", kwargs={"slug": "alice-lab", "rule_id": rule.pk}),
    ):
        r = owner_client.post(url, {"name": "n", "event_types": ["job_failed"], "job_scope": "all", "channels": ids})
        assert r.status_code in (200, 302), (url, ids, r.status_code)
        if r.status_code == 200:
            assert "channels" in r.context["form"].errors or r.context["form"].is_valid()
    EventRule.objects.exclude(pk=rule.pk).delete()


JOB_FORM_NUMBERS = [
    "role_0_replicas",
    "role_0_cpu",
    "role_0_memory",
    "role_0_gpu",
    "max_num_of_job_restart",
    "max_num_of_same_error",
    "max_tolerated_failure_rate",
    "job_hang_interval",
    "job_hang_startup_interval",
    "job_exit_hang_interval",
    "c4d_hang_timeout",
    "c4d_hang_times",
    "c4d_conn_bw_check_period",
]


@pytest.mark.django_db
@FUZZ
@given(field=st.sampled_from(JOB_FORM_NUMBERS), value=int_text)
def test_the_submit_form_never_answers_500_for_any_number(owner_client, memory_backend, field, value):
    url = reverse("pages:job-new", kwargs={"slug": "alice-lab"})
    r = owner_client.post(
        url,
        {
            "display_name": "fuzz",
            "job_type": "PyTorchJob",
            "user_command": "true",
            "backend": "local",
            "role_0_type": "Master",
            "role_0_replicas": "1",
            field: value,
        },
    )
    assert r.status_code < 500, (field, value, r.status_code)


# --- finding 7c: bidirectional controls in names -------------------------------------------

BIDI = [
    chr(c) for c in (0x202E, 0x202A, 0x202B, 0x202C, 0x202D, 0x2066, 0x2067, 0x2068, 0x2069, 0x200E, 0x200F, 0x061C)
]


@pytest.mark.django_db
@pytest.mark.parametrize("ch", BIDI)
def test_a_job_display_name_with_a_bidi_control_is_refused_naming_the_field(api_as, alice, alice_ws, job_body, ch):
    r = api_as(alice).post("/api/v1/jobs/", job_body(alice_ws, display_name=f"resnet{ch}gnp.exe"), format="json")
    assert r.status_code == 400, r.content
    assert "display_name" in r.content.decode(), r.content
    assert f"U+{ord(ch):04X}" in r.content.decode()


@pytest.mark.django_db
def test_workspace_channel_rule_and_token_names_refuse_bidi_controls(settings, api_as, alice, alice_ws, owner_client):
    settings.VIGIL_WORKSPACE_CREATION = "anyone"
    api = api_as(alice)
    spoof = "ops\u202eliam"
    r = api.post("/api/v1/workspaces/", {"name": spoof, "slug": "spoof-ws"}, format="json")
    assert r.status_code == 400 and "name" in r.json(), r.content
    assert not Workspace.objects.filter(slug="spoof-ws").exists()
    base = f"/api/v1/workspaces/{alice_ws.slug}/notifications"
    r = api.post(f"{base}/channels/", {"name": spoof, "kind": "webhook", "url": "https://example.com/h"}, format="json")
    assert r.status_code == 400 and "name" in r.json(), r.content
    channel = Channel.objects.create(workspace=alice_ws, name="ops", kind="webhook", url="https://example.com/hook")
    r = api.post(
        f"{base}/rules/", {"name": spoof, "event_types": ["job_failed"], "channels": [channel.pk]}, format="json"
    )
    assert r.status_code == 400 and "name" in r.json(), r.content
    r = owner_client.post(reverse("pages:api-tokens"), {"name": spoof, "expires": "30"})
    assert r.status_code == 400 and r.context["form"].errors["name"], r.status_code
    assert not alice.api_tokens.filter(name=spoof).exists()
