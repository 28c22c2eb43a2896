"""A private Redis for `make run` and `make test` on a machine with nothing running.

    python -m console.devredis -- <command ...>

runs the command with REDIS_URL pointing at a Redis that is stopped (by PID)
when the command ends. When REDIS_URL is already set, it is used as is. Else a
`redis-server` found on PATH is started on a free loopback port with nothing
kept on disk; where there is none, an embedded pure-Python server (fakeredis)
serves instead, with a warning: it is for trying Vigil, not for production.
Standard library only until the fallback is needed, so it runs before Django.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ping(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def wait_for(host: str, port: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ping(host, port):
            return True
        time.sleep(0.05)
    return False


class PrivateRedis:
    """Start one Redis for the lifetime of this object; `url` says where."""

    def __init__(self):
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None
        self.embedded = None
        self.tmp = tempfile.mkdtemp(prefix="vigil-redis-")

    def start(self) -> "PrivateRedis":
        server = shutil.which("redis-server")
        if server:
            self.process = subprocess.Popen(
                [
                    server,
                    "--bind",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    self.tmp,
                    "--loglevel",
                    "warning",
                ],
                stdout=subprocess.DEVNULL,
                start_new_session=True,
            )
        else:
            self._start_embedded()
        if not wait_for("127.0.0.1", self.port):
            self.stop()
            raise RuntimeError(f"the private Redis did not answer on 127.0.0.1:{self.port}")
        return self

    def _start_embedded(self) -> None:
        print(
            "WARNING: no redis-server on PATH; using an embedded pure-Python Redis (fakeredis). "
            "It is for trying Vigil, not for production: install Redis and set REDIS_URL.",
            file=sys.stderr,
        )
        from fakeredis import TcpFakeServer

        server = TcpFakeServer(("127.0.0.1", self.port), server_type="redis")
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, name="embedded-redis", daemon=True)
        thread.start()
        self.embedded = server

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(5)
        if self.embedded is not None:
            self.embedded.shutdown()
            self.embedded.server_close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def main(argv: list[str]) -> int:
    if "--" in argv:
        argv = argv[argv.index("--") + 1 :]
    if not argv:
        print("usage: python -m console.devredis -- <command ...>", file=sys.stderr)
        return 2
    env = dict(os.environ)
    redis = None
    if not env.get("REDIS_URL"):
        redis = PrivateRedis().start()
        env["REDIS_URL"] = redis.url
        print(f"vigil: private Redis at {redis.url}", file=sys.stderr)
    child = subprocess.Popen(argv, env=env)
    forward = lambda signum, frame: child.send_signal(signum)  # noqa: E731
    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    try:
        return child.wait()
    finally:
        if redis:
            redis.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
