"""Real receivers on loopback for the notification tests: an HTTP server whose
answers a test scripts, and an SMTP server (aiosmtpd). Both are stopped at
teardown. Also a record of every socket connect the process makes, so a test
can prove that nothing was sent off the loopback interface."""

from __future__ import annotations

import ipaddress
import socket
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


@dataclass
class ReceivedRequest:
    method: str
    path: str
    headers: dict
    body: bytes


@dataclass
class HttpSink:
    """Answers each request with the next scripted (status, headers) and
    records what it received; once the script runs out it answers 200."""

    server: ThreadingHTTPServer
    requests: list = field(default_factory=list)
    script: list = field(default_factory=list)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        if isinstance(host, bytes):  # typeshed allows it; a server bound to a str host has a str
            host = host.decode()
        return f"http://{host}:{port}"

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def answer(self, *responses):
        self.script.extend(r if isinstance(r, tuple) else (r, {}) for r in responses)


def _handler(sink_ref):
    class Handler(BaseHTTPRequestHandler):
        def _serve(self):
            sink = sink_ref[0]
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            sink.requests.append(ReceivedRequest(self.command, self.path, dict(self.headers.items()), body))
            status, headers = sink.script.pop(0) if sink.script else (200, {})
            payload = b"ok" if status < 300 else b"no"
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_POST = do_GET = do_PUT = _serve

        def log_message(self, *args):
            pass

    return Handler


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """The personas' passwords play no part here; hashing them slowly costs seconds per test."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def http_sink():
    ref = [None]
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(ref))
    server.daemon_threads = True
    ref[0] = sink = HttpSink(server)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield sink
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


@dataclass
class SmtpSink:
    host: str
    port: int
    messages: list = field(default_factory=list)


@pytest.fixture
def smtp_sink():
    from aiosmtpd.controller import Controller

    sink = None

    class Handler:
        async def handle_DATA(self, server, session, envelope):
            sink.messages.append(envelope)
            return "250 Message accepted"

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    sink = SmtpSink("127.0.0.1", port)
    controller = Controller(Handler(), hostname="127.0.0.1", port=port)
    controller.start()
    yield sink
    controller.stop()


_connects: list | None = None


def _audit(event, args):
    if event == "socket.connect" and _connects is not None:
        address = args[1]
        if isinstance(address, tuple) and address[1] not in _service_ports():
            _connects.append(address[0])


def _service_ports() -> set:
    """The database's and Redis's ports: their connections are not notifications."""
    from urllib.parse import urlsplit

    from django.conf import settings

    ports = {int(settings.DATABASES["default"].get("PORT") or 5432)}
    try:
        ports.add(urlsplit(settings.REDIS_URL).port or 6379)
    except ValueError:
        pass
    return ports


_hook_installed = False


@pytest.fixture
def connections():
    """Every address this process connected a socket to during the test
    (except the database and Redis)."""
    global _connects, _hook_installed
    if not _hook_installed:
        sys.addaudithook(_audit)  # audit hooks cannot be removed; inactive when _connects is None
        _hook_installed = True
    _connects = []
    yield _connects
    _connects = None


def assert_only_loopback(addresses):
    for address in addresses:
        assert ipaddress.ip_address(address.split("%")[0]).is_loopback, f"connected to {address}"


@pytest.fixture
def loopback_allowed(settings):
    settings.VIGIL_OUTBOUND_ALLOW = ["127.0.0.1"]
    settings.VIGIL_NOTIFY_RETRY_DELAYS = (0.01, 0.02)
    settings.VIGIL_CONSOLE_URL = "http://console.test"
    return settings


@pytest.fixture
def nothing_allowed(settings):
    settings.VIGIL_OUTBOUND_ALLOW = []
    settings.VIGIL_NOTIFY_RETRY_DELAYS = (0.01, 0.02)
    return settings


@pytest.fixture
def job(alice_ws, alice):
    from jobs.models import Job, JobStatus, JobType

    return Job.objects.create(
        workspace=alice_ws,
        created_by=alice,
        display_name="resnet-ddp",
        job_type=JobType.PYTORCH,
        user_command="python train.py",
        status=JobStatus.RESTARTING,
    )


@pytest.fixture
def make_event():
    def make(job, type="restart", message="worker-1 exited with code 1; restarting the job", **fields):
        from jobs.models import JobEvent

        fields.setdefault("level", "warning")
        fields.setdefault("payload", {"reason": "NCCL timeout on worker-1 is retryable", "error_code": "NCCL_TIMEOUT"})
        fields.setdefault("attempt", 2)
        fields.setdefault("instance", "worker-1")
        return JobEvent.objects.create(job=job, type=type, message=message, **fields)

    return make


@pytest.fixture
def make_channel(alice_ws):
    def make(url, kind="webhook", name=None, workspace=None):
        from notifications.models import Channel

        workspace = workspace or alice_ws
        return Channel.objects.create(
            workspace=workspace, name=name or f"{kind}-{Channel.objects.count()}", kind=kind, url=url
        )

    return make


@pytest.fixture
def make_rule(alice_ws):
    def make(channels, event_types=("restart",), pattern="", name=None, enabled=True, workspace=None):
        from notifications.models import EventRule

        rule = EventRule.objects.create(
            workspace=workspace or alice_ws,
            name=name or f"rule-{EventRule.objects.count()}",
            event_types=list(event_types),
            job_scope="pattern" if pattern else "all",
            job_pattern=pattern,
            enabled=enabled,
        )
        rule.channels.set(channels if isinstance(channels, (list, tuple)) else [channels])
        return rule

    return make


@pytest.fixture
def announce(django_capture_on_commit_callbacks):
    """What jobs.events does for this app after an event commits: event_committed,
    then the on-commit enqueues (Celery runs them in-process in tests)."""
    from notifications import dispatch

    def run(event_id):
        with django_capture_on_commit_callbacks(execute=True):
            return dispatch.event_committed(event_id)

    return run
