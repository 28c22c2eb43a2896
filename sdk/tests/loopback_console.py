"""A real HTTP server on loopback that speaks the console's SDK contract
(docs/spec.md, section 8, "SDK and console") and records every request, with the failure
modes the SDK must survive."""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional

JOB_ID = "42"
TOKEN = "vjt_test-token"
PREFIX = "/api/v1/sdk/jobs/"
ENDPOINTS = {"messages": 201, "retryable-errors": 200, "config": 200, "progress": 202, "c4d": 202}

# Modes: how the console answers every request.
OK = "ok"  # follows the contract (validates like the real one)
ERROR = "error"  # 400 with a detail and a field
RATE_LIMITED = "rate_limited"  # 429 with Retry-After
SERVER_ERROR = "server_error"  # 500 with an HTML body


@dataclass
class Received:
    method: str
    path: str
    endpoint: str
    headers: Dict[str, str]
    body: Any
    at: float = field(default_factory=time.time)
    sender: Dict[str, Any] = field(default_factory=dict)  # rank, instance, attempt the SDK adds


class LoopbackConsole:
    def __init__(self, mode: str = OK):
        self.mode = mode
        self.requests: List[Received] = []
        self._cond = threading.Condition()
        console = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw.decode("utf-8"))
                except Exception:
                    body = raw
                endpoint = ""
                if self.path.startswith(PREFIX):
                    parts = self.path[len(PREFIX) :].strip("/").split("/")
                    if len(parts) == 2 and parts[0] == JOB_ID:
                        endpoint = parts[1]
                sender = {}
                if isinstance(body, dict) and endpoint != "c4d":
                    sender = {k: body.pop(k) for k in ("rank", "instance", "attempt") if k in body}
                received = Received("POST", self.path, endpoint, dict(self.headers.items()), body, sender=sender)
                with console._cond:
                    console.requests.append(received)
                    console._cond.notify_all()
                code, payload, extra = console.answer(received)
                data = json.dumps(payload).encode() if not isinstance(payload, bytes) else payload
                self.send_response(code)
                self.send_header("Content-Type", "application/json" if not isinstance(payload, bytes) else "text/html")
                self.send_header("Content-Length", str(len(data)))
                for k, v in extra.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        class Server(ThreadingHTTPServer):
            request_queue_size = 128  # a real console's backlog; the default 5 resets bursts

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return "http://127.0.0.1:%d" % self._server.server_address[1]

    def answer(self, r: Received):
        if self.mode == ERROR:
            return 400, {"detail": "content is longer than 4096 characters", "field": "content"}, {}
        if self.mode == RATE_LIMITED:
            return 429, {"detail": "rate limit: at most 20 SDK calls per second for a job"}, {"Retry-After": "7"}
        if self.mode == SERVER_ERROR:
            return 500, b"<html><body>Server Error (500)</body></html>", {}
        if r.endpoint not in ENDPOINTS:
            return 404, {"detail": "no such job or endpoint: %s" % r.path}, {}
        if r.headers.get("Authorization") != "Bearer " + TOKEN:
            return 401, {"detail": "invalid job token"}, {}
        body = r.body if isinstance(r.body, dict) else {}
        if r.endpoint == "messages":
            content = body.get("content")
            if not isinstance(content, str) or len(content) > 4096:
                return 400, {"detail": "content is longer than 4096 characters", "field": "content"}, {}
            return 201, {"id": len(self.requests)}, {}
        if r.endpoint == "config":
            value = body.get("job_hang_interval")
            if not isinstance(value, int) or (value <= 0 and value != -1):
                return 400, {"detail": "job_hang_interval must be > 0 or -1", "field": "job_hang_interval"}, {}
            return 200, {"job_hang_interval": value}, {}
        return ENDPOINTS[r.endpoint], {}, {}

    def received(self, endpoint: Optional[str] = None) -> List[Received]:
        with self._cond:
            return [r for r in self.requests if endpoint is None or r.endpoint == endpoint]

    def bodies(self, endpoint: str) -> List[Any]:
        return [r.body for r in self.received(endpoint)]

    def wait_for(self, predicate: Callable[["LoopbackConsole"], bool], timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class SilentConsole:
    """Accepts connections and never answers: the SDK must give up on its own."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(128)
        self._held: List[socket.socket] = []
        self._closing = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return "http://127.0.0.1:%d" % self._sock.getsockname()[1]

    @property
    def connections(self) -> int:
        return len(self._held)

    def _accept(self) -> None:
        while not self._closing:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._held.append(conn)

    def close(self) -> None:
        self._closing = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        for conn in self._held:
            conn.close()


def closed_port_url() -> str:
    """A loopback port nobody listens on: connections are refused."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return "http://127.0.0.1:%d" % port


def job_env(url: str, **extra: str) -> Dict[str, str]:
    env = {
        "VIGIL_CONSOLE_URL": url,
        "VIGIL_JOB_ID": JOB_ID,
        "VIGIL_JOB_TOKEN": TOKEN,
        "VIGIL_ATTEMPT": "1",
        "VIGIL_ROLE": "Worker",
        "VIGIL_INDEX": "0",
        "VIGIL_RANK": "0",
        "VIGIL_INSTANCE": "worker-0",
    }
    env.update(extra)
    return env
