"""Every bad input gets a 4xx naming the field, never a 500 and never a half-made
object (issue 12). Each test replays a reproduction through the real API, the SDK
endpoints or the pages; each answered 500 (or stored bad data) before the fix.
Run on SQLite and PostgreSQL: PostgreSQL refuses NUL in any query, SQLite kept
lone surrogates and then failed every page that showed them."""

from __future__ import annotations

import json
import time

import pytest
from django.core.cache import cache
from django.urls import reverse
from rest_framework.exceptions import ValidationError
from rest_framework.test import APIClient

from jobs import actions
from jobs.inputs import MAX_JSON_DEPTH, json_problem, text_problem, whole_number, workspace_ref
from jobs.models import Attempt, Job, Membership, Role, Workspace

pytestmark = pytest.mark.django_db

SURROGATE = "\udc80"
NUL = "\x00"


@pytest.fixture(autouse=True)
def _fresh_rate_limit():
    cache.clear()
    yield
    cache.clear()


def post_json(api, url, text: str, method="post"):
    """Send `text` as the raw JSON body: json.dumps escapes a lone surrogate as
    \\udc80, exactly what a client in another language sends."""
    return getattr(api, method)(url, data=text, content_type="application/json")


def no_new_jobs(before: int) -> bool:
    return Job.objects.count() == before and Attempt.objects.count() == 0


# --- the pure checks ---------------------------------------------------------------


def test_text_and_numbers_are_judged_the_same_way_everywhere():
    assert text_problem("plain text\twith tabs\nand lines") is None
    assert "NUL" in text_problem("a\x00b")
    assert "lone surrogate" in text_problem("a\udc80b")
    assert text_problem("two\nlines") is None and "control character" in text_problem("two\nlines", one_line=True)
    assert "U+0085" in text_problem("next\x85line", one_line=True)
    assert [whole_number(v) for v in ("12", " -3 ", "+4", 5)] == [12, -3, 4, 5]
    assert [whole_number(v) for v in ("²", "٣", "1e3", "", True, 1.0, "9" * 20)] == [None] * 7
    assert workspace_ref("42") == ("pk", 42) and workspace_ref(7) == ("pk", 7)
    assert workspace_ref("vision-lab") == ("slug", "vision-lab")
    for bad in ("²", "4a-", "-lab", "", {"a": 1}, [1], None, True, "0"):
        with pytest.raises(Exception) as info:
            workspace_ref(bad)
        assert getattr(info.value, "field", None) == "workspace"


def test_deep_json_is_found_without_recursion():
    deep = []
    for _ in range(100_000):  # far deeper than Python's recursion limit
        deep = [deep]
    assert json_problem(deep)[1].startswith(f"is nested more than {MAX_JSON_DEPTH}")
    assert json_problem({"a": [{"b": "ok"}]}) is None
    assert json_problem({"envs": {"X": "a\x00"}})[0] == "envs.X"
    assert json_problem({"job_specs": [{"image": "\udc80"}]})[0] == "job_specs.0.image"


# --- submission through the API ------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value, where",
    [
        ("envs", {"TOKEN": SURROGATE}, "envs.TOKEN"),
        ("display_name", f"resnet{SURROGATE}", "display_name"),
        ("user_command", f"echo {SURROGATE}", "user_command"),
        ("envs", {"X": f"a{NUL}b"}, "envs.X"),
        ("display_name", f"res{NUL}net", "display_name"),
        ("user_command", f"echo hi{NUL}", "user_command"),
        ("workdir", f"/tmp/a{NUL}b", "workdir"),
        ("settings", {"retryable_errors": [f"NCCL{NUL}"]}, "settings.retryable_errors.0"),
        ("settings", {"error_monitoring_args": f"--job-hang-interval=60{NUL}"}, "settings.error_monitoring_args"),
    ],
)
def test_unstorable_text_in_a_submission_is_a_400_naming_the_field_and_stores_nothing(
    alice_ws, alice, api_as, job_body, field, value, where
):
    api = api_as(alice)
    before = Job.objects.count()
    r = post_json(api, "/api/v1/jobs/", json.dumps(job_body(alice_ws, **{field: value})))
    assert r.status_code == 400, r.content
    assert where in r.json(), r.json()
    assert no_new_jobs(before)
    # The workspace's job list and pages still answer.
    assert api.get("/api/v1/jobs/", {"workspace": alice_ws.slug}).status_code == 200


def test_a_surrogate_that_reaches_validation_by_another_path_is_refused_there_too(alice_ws, alice, job_body):
    """The form and scripts call submit_job without the JSON parser in front."""
    for field, value in (
        ("envs", {"A": SURROGATE}),
        ("display_name", SURROGATE),
        ("user_command", SURROGATE),
        ("workdir", f"/a{SURROGATE}"),
    ):
        with pytest.raises(ValidationError) as info:
            actions.submit_job(alice, job_body(alice_ws, **{field: value}))
        assert any(k.startswith(field) for k in info.value.detail), info.value.detail
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    "change, where",
    [
        (lambda b: b["job_specs"][1].update(pod_count="²"), "job_specs.1.pod_count"),
        (lambda b: b["job_specs"][1].update(pod_count="٣"), "job_specs.1.pod_count"),
        (lambda b: b["job_specs"][1]["resource_config"].update(gpu="²"), "job_specs.1.resource_config.gpu"),
        (lambda b: b["job_specs"][1]["resource_config"].update(memory="٣Gi"), "job_specs.1.resource_config.memory"),
        (lambda b: b.update(workspace="²"), "workspace"),
        (lambda b: b.update(workspace={"id": 1}), "workspace"),
        (lambda b: b.update(job_type={"PyTorchJob": 1}), "job_type"),
        (lambda b: b.update(job_type=["PyTorchJob"]), "job_type"),
        (lambda b: b.update(backend=["local"]), "backend"),
        (lambda b: b.update(envs={"NAME\n": "x"}), "envs.NAME\n"),
    ],
)
def test_odd_shapes_and_unicode_digits_in_a_submission_are_400s_naming_the_field(
    alice_ws, alice, api_as, job_body, change, where
):
    body = job_body(alice_ws)
    change(body)
    r = api_as(alice).post("/api/v1/jobs/", body, format="json")
    assert r.status_code == 400, r.content
    assert where in r.json(), r.json()
    assert Job.objects.count() == 0


def test_a_submission_that_is_not_an_object_is_a_400(alice_ws, alice, api_as):
    for body in ("[1, 2]", '"text"', "12", "null"):
        r = post_json(api_as(alice), "/api/v1/jobs/", body)
        assert r.status_code == 400, (body, r.content)
    assert Job.objects.count() == 0


# --- query parameters of the API ---------------------------------------------------------------


@pytest.fixture
def running_job(alice, alice_ws, job_body):
    job, _ = actions.submit_job(alice, job_body(alice_ws))
    actions.launch_attempt(job.pk, 1)
    job.refresh_from_db()
    return job


@pytest.mark.parametrize(
    "path, params, field",
    [
        ("/api/v1/jobs/", {"workspace": "²"}, "workspace"),
        ("/api/v1/jobs/", {"workspace": "-1"}, "workspace"),
        ("/api/v1/jobs/{id}/events/", {"after": "²"}, "after"),
        ("/api/v1/jobs/{id}/events/", {"after": "9" * 30}, "after"),
        ("/api/v1/jobs/{id}/logs/", {"instance": "worker-0", "attempt": "²"}, "attempt"),
        ("/api/v1/jobs/{id}/logs/", {"instance": "worker-0", "offset": "²"}, "offset"),
        ("/api/v1/jobs/{id}/logs/", {"instance": "worker-0", "tail": "①"}, "tail"),
        ("/api/v1/jobs/", {"status": f"Running{NUL}"}, "status"),
        ("/api/v1/jobs/", {"q": f"res{NUL}"}, "q"),
        ("/api/v1/jobs/{id}/events/", {"type": f"status{NUL}"}, "type"),
    ],
)
def test_bad_query_parameters_are_400s_naming_them(alice, api_as, running_job, path, params, field):
    r = api_as(alice).get(path.format(id=running_job.pk), params)
    assert r.status_code == 400, r.content
    assert field in r.json(), r.json()


def test_a_workspace_id_and_a_slug_are_told_apart(alice, alice_ws, api_as, running_job):
    api = api_as(alice)
    by_id = api.get("/api/v1/jobs/", {"workspace": str(alice_ws.pk)}).json()
    by_slug = api.get("/api/v1/jobs/", {"workspace": alice_ws.slug}).json()
    assert [j["id"] for j in by_id["results"]] == [j["id"] for j in by_slug["results"]] == [running_job.pk]


# --- workspace and channel names, numeric slugs ------------------------------------------------------


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_user(
        "sam", "sam@example.com", "sam-password-123", is_staff=True, is_superuser=True
    )


def test_a_numeric_slug_is_refused_and_a_numeric_name_gets_a_slug_that_starts_with_a_letter(staff, api_as, alice_ws):
    api = api_as(staff)
    r = api.post("/api/v1/workspaces/", {"name": "Four", "slug": str(alice_ws.pk)}, format="json")
    assert r.status_code == 400 and "slug" in r.json(), r.content
    r = api.post("/api/v1/workspaces/", {"name": "Four", "slug": "4-four"}, format="json")
    assert r.status_code == 400 and "slug" in r.json(), r.content
    r = api.post("/api/v1/workspaces/", {"name": "2026"}, format="json")
    assert r.status_code == 201, r.content
    assert r.json()["slug"] == "ws-2026"
    assert Workspace.objects.filter(slug__regex=r"^[0-9]").count() == 0


def test_a_page_url_takes_a_slug_never_an_id(client, alice, alice_ws):
    client.force_login(alice)
    assert client.get(reverse("pages:job-list", args=[alice_ws.slug])).status_code == 200
    # Before: /workspaces/<id>/ opened the workspace with that id.
    assert client.get(f"/workspaces/{alice_ws.pk}/jobs/").status_code == 404


@pytest.mark.parametrize("name", ["lab\x1b[31m", "lab\nsecond line", "lab\x85x", "lab\u2028x", f"lab{NUL}"])
def test_control_characters_in_a_workspace_name_are_a_400(staff, api_as, name):
    r = api_as(staff).post("/api/v1/workspaces/", {"name": name}, format="json")
    assert r.status_code == 400 and "name" in r.json(), r.content
    assert not Workspace.objects.exists()


@pytest.mark.parametrize("name", ["alerts\x1b[2J", "alerts\x07", "alerts\u2029x"])
def test_control_characters_in_channel_and_rule_names_are_refused_beside_the_field(client, alice, alice_ws, name):
    from notifications.models import Channel, EventRule

    client.force_login(alice)
    url = reverse("notifications:channel-add", args=[alice_ws.slug])
    r = client.post(url, {"name": name, "kind": "webhook", "url": "https://hooks.example.com/x"})
    assert r.status_code == 200 and "control character" in r.content.decode()
    assert not Channel.objects.exists()
    channel = Channel.objects.create(workspace=alice_ws, name="ok", kind="webhook", url="https://hooks.example.com/x")
    r = client.post(
        reverse("notifications:rule-add", args=[alice_ws.slug]),
        {"name": name, "event_types": ["restart"], "job_scope": "all", "channels": [channel.pk], "enabled": "on"},
    )
    assert r.status_code == 200 and "control character" in r.content.decode()
    assert not EventRule.objects.exists()


def test_the_migration_fixes_numeric_slugs_control_characters_and_stored_surrogates(db):
    """What an existing install holds is made valid (SQLite kept lone surrogates)."""
    import importlib

    from django.apps import apps

    fix = importlib.import_module("jobs.migrations.0005_workspace_slug_starts_with_a_letter").fix_existing
    Workspace.objects.bulk_create([Workspace(name="Four\x1b", slug="4"), Workspace(name="x", slug="ws-4")])
    fix(apps, None)
    assert set(Workspace.objects.values_list("slug", "name")) == {("ws-4-2", "Four"), ("ws-4", "x")}


# --- pages ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "page, params, field",
    [
        ("job-detail", {"attempt": "²"}, "attempt"),
        ("restarts", {"open": "²"}, "open"),
        ("job-detail", {"attempt": "1", "instance": f"w{NUL}"}, "instance"),
    ],
)
def test_bad_page_parameters_are_400s_that_say_which(client, alice, alice_ws, running_job, page, params, field):
    client.force_login(alice)
    r = client.get(reverse(f"pages:{page}", args=[alice_ws.slug, running_job.pk]), params)
    assert r.status_code == 400
    assert f"{field}:" in r.content.decode()


def test_an_unknown_tested_delivery_on_the_channels_page_is_a_400(client, alice, alice_ws):
    client.force_login(alice)
    r = client.get(reverse("notifications:channels", args=[alice_ws.slug]), {"tested": "²"})
    assert r.status_code == 400 and "tested:" in r.content.decode()


def test_the_forms_replica_and_gpu_fields_refuse_unicode_digits_beside_the_field(client, alice, alice_ws):
    from jobs.tests.test_pages import form_data

    client.force_login(alice)
    r = client.post(
        reverse("pages:job-new", args=[alice_ws.slug]),
        form_data(role_1_replicas="²", role_1_gpu="①", role_0_replicas="٣"),
    )
    assert r.status_code == 400
    errors = r.context["form"].errors
    assert "ASCII digits" in str(errors["role_1_replicas"]) and "ASCII digits" in str(errors["role_0_replicas"])
    assert "Invalid GPU count" in str(errors["role_1_gpu"])
    assert Job.objects.count() == 0


# --- the runtime PATCH and the nodes API -------------------------------------------------------------------


@pytest.mark.parametrize("body", ['{"job_hang_interval": "²"}', '{"job_hang_interval": ["60"]}', "[1]", '"60"'])
def test_a_bad_runtime_patch_is_a_400(alice, api_as, running_job, body):
    r = post_json(api_as(alice), f"/api/v1/jobs/{running_job.pk}/runtime/", body, method="patch")
    assert r.status_code == 400 and "job_hang_interval" in r.json(), r.content
    running_job.refresh_from_db()
    assert running_job.hang_interval_override is None


def test_a_node_isolation_reason_must_be_text_on_one_line(staff, api_as, memory_backend):
    memory_backend.nodes = [{"name": "node-a", "slots": 4}]
    api = api_as(staff)
    for body in ("[1]", '{"reason": ["x"]}', '{"reason": "a\\u001bb"}'):
        r = post_json(api, "/api/v1/nodes/local:node-a/isolate/", body)
        assert r.status_code == 400 and "reason" in r.json(), (body, r.content)
    assert all(n.schedulable for n in memory_backend.list_nodes())


# --- deep JSON on every JSON endpoint ---------------------------------------------------------------------------


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


def json_operations(api) -> list[tuple[str, str]]:
    """(method, path) of every operation the schema says takes a JSON body."""
    schema = api.get("/api/schema/", {"format": "json"}).json()
    ops = []
    for path, item in schema["paths"].items():
        for method, op in item.items():
            if "application/json" in ((op.get("requestBody") or {}).get("content") or {}):
                ops.append((method, path))
    return ops


@pytest.mark.parametrize("levels", [MAX_JSON_DEPTH + 5, 5000, 30_000])
def test_json_nested_too_deep_is_a_400_on_every_json_endpoint(staff, alice_ws, api_as, levels, memory_backend):
    memory_backend.nodes = [{"name": "node-a", "slots": 4}]
    Membership.objects.create(workspace=alice_ws, user=staff, role=Role.OWNER)
    job, token = actions.submit_job(
        staff,
        {
            "workspace": alice_ws.slug,
            "display_name": "j",
            "job_type": "PyTorchJob",
            "user_command": "true",
            "job_specs": [{"type": "Worker", "pod_count": 1}],
        },
    )
    api = api_as(staff)
    sdk = APIClient()
    sdk.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    ops = json_operations(api)
    assert len(ops) >= 8, ops  # jobs, workspaces, runtime, nodes and the five SDK calls at least
    body = deep(levels)
    for method, path in ops:
        url = path.replace("{id}", "local:node-a" if "/nodes/" in path else str(job.pk)).replace(
            "{job_id}", str(job.pk)
        )
        client = sdk if "/sdk/" in path else api
        r = getattr(client, method)(url, data=body, content_type="application/json")
        assert r.status_code == 400, (method, path, r.status_code, r.content[:300])
        assert b"nested more than" in r.content
    assert Job.objects.count() == 1 and Workspace.objects.count() == 1


def test_the_sdk_names_the_field_of_an_unstorable_string_in_its_own_error_shape(alice_ws, alice):
    job, token = actions.submit_job(
        alice,
        {
            "workspace": alice_ws.slug,
            "display_name": "j",
            "job_type": "PyTorchJob",
            "user_command": "true",
            "job_specs": [{"type": "Worker", "pod_count": 1}],
        },
    )
    sdk = APIClient()
    sdk.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    r = sdk.post(
        f"/api/v1/sdk/jobs/{job.pk}/messages/", data='{"content": "hi \\udc80"}', content_type="application/json"
    )
    assert r.status_code == 400 and r.json()["field"] == "content" and "surrogate" in r.json()["detail"]


# --- a log offset past the end -------------------------------------------------------------------------------------


def test_a_log_offset_past_the_end_of_the_file_is_a_400_not_a_failed_seek(
    alice, alice_ws, api_as, job_body, local_backend
):
    """ext4 refuses to seek past its largest file (EINVAL): that was a 500."""
    job, _ = actions.submit_job(alice, job_body(alice_ws, user_command='echo "hello from $VIGIL_INSTANCE"'))
    actions.launch_attempt(job.pk, 1)
    handle = Attempt.objects.get(job=job, number=1).backend_handle
    deadline = time.monotonic() + 20
    while b"hello" not in local_backend.read_log(handle, "worker-0"):
        assert time.monotonic() < deadline, "worker-0 wrote nothing"
        time.sleep(0.05)
    api = api_as(alice)
    url = f"/api/v1/jobs/{job.pk}/logs/"
    for offset in ("1000000000000000", str((1 << 63) - 1)):
        r = api.get(url, {"instance": "worker-0", "offset": offset})
        assert r.status_code == 400 and "offset" in r.json(), r.content
    r = api.get(url, {"instance": "worker-0", "offset": str(1 << 64)})
    assert r.status_code == 400 and "offset" in r.json()
    size = len(b"hello from worker-0\n")
    r = api.get(url, {"instance": "worker-0", "offset": str(size)})
    assert r.status_code == 200 and r.json()["content"] == "" and r.json()["next_offset"] == size
    # The page's jump-to-line link reads the same file.
    from django.test import Client

    page = Client()
    page.force_login(alice)
    r = page.get(reverse("pages:log-line-at", args=[alice_ws.slug, job.pk, 1, "worker-0", 10**15]))
    assert r.status_code == 302
    actions.stop_job(alice, job)


# --- notifications: what is stored about a failure, where it may connect ---------------------------------------

from notifications.tests.conftest import loopback_allowed, nothing_allowed, smtp_sink  # noqa: E402,F401

SECRET_PATH = "hooks/s3cr3t-path-7Qx"
SECRET_QUERY = "qu3ry-secret-9Zk"
SECRET_PASSWORD = "pa55-word-4Lm"


def assert_no_secret(*texts):
    for text in texts:
        for secret in (SECRET_PATH, "s3cr3t-path-7Qx", SECRET_QUERY, SECRET_PASSWORD):
            assert secret not in text, text


@pytest.fixture
def echo_server():
    """A real HTTP server on loopback that answers every request with `status`
    and a body repeating the path and query it was sent (as some services do)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    state = {"status": 404}

    class Echo(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = f"no hook at {self.path} (http://{self.headers['Host']}{self.path})".encode()
            self.send_response(state["status"])
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state["port"] = server.server_address[1]
    yield state
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


@pytest.mark.parametrize(
    "kind, url",
    [
        ("webhook", "http://127.0.0.1:{port}/" + SECRET_PATH + "?token=" + SECRET_QUERY),
        ("webhook", "http://user:" + SECRET_PASSWORD + "@127.0.0.1:{port}/" + SECRET_PATH),
        ("apprise_json", "json://127.0.0.1:{port}/" + SECRET_PATH + "?token=" + SECRET_QUERY),
    ],
)
def test_a_failed_delivery_stores_and_shows_no_part_of_the_destinations_secrets(
    client,
    alice,
    carol,
    alice_ws,
    loopback_allowed,  # noqa: F811
    echo_server,
    kind,
    url,
):
    from notifications import dispatch
    from notifications.models import Channel, Delivery, DeliveryAttempt

    channel = Channel.objects.create(
        workspace=alice_ws, name="hook", kind=kind, url=url.format(port=echo_server["port"])
    )
    test = dispatch.send_test(channel)  # "Send test": shown to the admin at once
    assert test.status == "failed"
    job, _ = actions.submit_job(
        alice,
        {
            "workspace": alice_ws.slug,
            "display_name": "j",
            "job_type": "PyTorchJob",
            "user_command": "true",
            "job_specs": [{"type": "Worker", "pod_count": 1}],
        },
    )
    from jobs.models import JobEvent

    event = JobEvent.objects.create(job=job, type="restart", message="restarting", level="warning")
    delivery = Delivery.objects.create(event=event, channel=channel)
    dispatch.attempt_delivery(delivery.pk)  # 404: permanent, the channel is disabled with the reason
    delivery.refresh_from_db()
    channel.refresh_from_db()
    assert delivery.status == "failed" and not channel.enabled
    stored = [
        test.error,
        delivery.error,
        channel.disabled_reason,
        *DeliveryAttempt.objects.values_list("error", flat=True),
    ]
    assert all(stored) and "404" in delivery.error
    assert_no_secret(*stored)
    for who in (alice, carol):
        client.force_login(who)
        page = client.get(reverse("notifications:channels", args=[alice_ws.slug]), {"tested": test.pk})
        assert page.status_code == 200 and "404" in page.content.decode()
        # Admins see the URL itself in its own column (it is theirs to edit); nothing else shows it.
        html = page.content.decode().replace(f'<code class="url">{channel.url}</code>', "", 1 if who == alice else 0)
        assert_no_secret(html)


def test_a_connection_error_naming_the_url_is_stored_without_it(alice_ws, loopback_allowed):  # noqa: F811
    """requests' own text says "Max retries exceeded with url: /path?query"."""
    import socket

    from notifications import dispatch
    from notifications.models import Channel

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    closed_port = probe.getsockname()[1]
    probe.close()  # nothing listens there: connection refused
    channel = Channel.objects.create(
        workspace=alice_ws,
        name="hook",
        kind="webhook",
        url=f"http://127.0.0.1:{closed_port}/{SECRET_PATH}?token={SECRET_QUERY}",
    )
    test = dispatch.send_test(channel)
    assert test.status == "failed" and "could not connect" in test.error
    assert_no_secret(test.error)
    assert "127.0.0.1" in test.error  # the host stays: it is what the admin needs to look at


def test_stored_errors_from_before_are_scrubbed_by_the_migration(alice_ws):
    import importlib

    from django.apps import apps

    from notifications.models import Channel, Delivery

    url = f"https://hooks.example.com/{SECRET_PATH}?token={SECRET_QUERY}"
    channel = Channel.objects.create(
        workspace=alice_ws,
        name="hook",
        kind="webhook",
        url=url,
        enabled=False,
        disabled_reason=f"HTTP 404 from hooks.example.com: no hook {SECRET_PATH}",
    )
    Delivery.objects.create(channel=channel, is_test=True, error=f"could not connect: with url: /{SECRET_PATH}")
    importlib.import_module("notifications.migrations.0003_scrub_stored_delivery_errors").scrub_stored_errors(
        apps, None
    )
    channel.refresh_from_db()
    assert_no_secret(channel.disabled_reason, *Delivery.objects.values_list("error", flat=True))
    assert "hooks.example.com" in channel.disabled_reason


@pytest.mark.parametrize(
    "address, words",
    [
        ("192.0.0.9", "IETF protocol assignment"),
        ("192.0.0.170", "IETF protocol assignment"),
        ("198.18.0.1", "benchmarking"),
        ("198.19.255.254", "benchmarking"),
        ("100.64.0.1", "shared address space"),
        ("192.0.2.10", "documentation"),
        ("198.51.100.7", "documentation"),
        ("203.0.113.9", "documentation"),
        ("2001:db8::1", "documentation"),
        ("2001:2::1", "benchmarking"),
        ("64:ff9b::7f00:1", "loopback"),  # NAT64 of 127.0.0.1
        ("64:ff9b:1::1", "local-use NAT64"),
        ("::ffff:198.18.0.1", "benchmarking"),
    ],
)
def test_special_purpose_addresses_are_refused_and_named_for_what_they_are(address, words):
    from notifications import outbound

    reason = outbound.refusal_reason(address)
    assert reason and words in reason, reason
    assert "private" not in reason


def test_a_documentation_address_is_refused_at_save_and_labelled_as_such(client, alice, alice_ws, nothing_allowed):  # noqa: F811
    from notifications.models import Channel

    client.force_login(alice)
    r = client.post(
        reverse("notifications:channel-add", args=[alice_ws.slug]),
        {"name": "docs", "kind": "webhook", "url": "http://192.0.2.10/hook"},
    )
    assert r.status_code == 200
    html = r.content.decode()
    assert "documentation address" in html and "private" not in html.split("documentation address")[0][-80:]
    assert not Channel.objects.exists()


def test_smtp_connects_to_the_address_that_was_checked_not_to_a_second_lookup(
    alice,
    alice_ws,
    loopback_allowed,  # noqa: F811
    smtp_sink,  # noqa: F811
    monkeypatch,
):
    """A real SMTP server on loopback. The host is a name only our resolver
    knows; every lookup of it must come from the outbound check (which then
    connects to the checked address), none from smtplib's own connect."""
    import socket
    import traceback

    from notifications import dispatch
    from notifications.models import Channel

    real_getaddrinfo = socket.getaddrinfo
    lookups = []

    def fake_getaddrinfo(host, port, *args, **kwargs):
        if host == "mail.vigil.test":
            lookups.append([frame.name for frame in traceback.extract_stack()])
            return real_getaddrinfo("127.0.0.1", port, *args, **kwargs)
        return real_getaddrinfo(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake_getaddrinfo)
    channel = Channel.objects.create(
        workspace=alice_ws,
        name="mail",
        kind="email",
        url=f"mailto://mail.vigil.test:{smtp_sink.port}?from=vigil@example.com&to=oncall@example.com",
    )
    test = dispatch.send_test(channel)
    assert test.status == "sent", test.error
    assert len(smtp_sink.messages) == 1
    assert lookups, "the SMTP host was never resolved"
    for stack in lookups:
        assert "resolve_checked" in stack, stack
        assert "create_connection" not in stack or "_connect_checked" in stack, stack


# --- the job page's socket --------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_socket_message_nested_too_deep_is_ignored_and_the_socket_stays_open(alice, alice_ws, settings):
    """A RecursionError in the consumer used to end the socket (and its log stream)."""
    import os
    import uuid

    from asgiref.sync import async_to_sync

    from console.asgi import application
    from monitoring.tests.test_consumers import communicator, session_cookie

    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [{"address": settings.REDIS_URL, "socket_timeout": 30}],
                "prefix": f"vigil-test-{os.getpid()}-{uuid.uuid4().hex[:8]}",
            },
        }
    }
    job, _ = actions.submit_job(
        alice,
        {
            "workspace": alice_ws.slug,
            "display_name": "j",
            "job_type": "PyTorchJob",
            "user_command": "true",
            "job_specs": [{"type": "Worker", "pod_count": 1}],
        },
    )
    cookie = session_cookie(alice)

    async def scenario():
        comm = communicator(application, job.pk, cookie)
        assert (await comm.connect(timeout=10))[0]
        await comm.send_to(text_data="[" * 100_000 + "]" * 100_000)
        await comm.send_to(text_data='{"type": "hello", "logs": ' + "[" * 50 + "]" * 50 + "}")
        await comm.send_to(text_data="not json")
        await comm.send_json_to({"type": "ping"})
        for _ in range(50):
            message = await comm.receive_json_from(timeout=5)
            if message.get("type") == "pong":
                break
        else:
            raise AssertionError("no pong: the socket did not survive")
        await comm.disconnect()

    async_to_sync(scenario)()
