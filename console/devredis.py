"""A private Redis for `make run` and `make test` on a machine with nothing running.

    python -m console.devredis -- <command ...>

runs the command with REDIS_URL pointing at a Redis that is stopped (by PID)
when the command ends. When REDIS_URL is already set, it is used as is. Else a
`redis-server` found on PATH is started on a free loopback port with nothing
kept on disk; where there is none, an embedded pure-Python server (fakeredis)
serves instead, with a warning: it is for trying Vigil, not for production.
Standard library only until the fallback is needed, so it runs before Django.

The private Redis asks for a password (issue 31): jobs on this machine reach its
loopback port, and it holds the exit channel and Celery's queues. The password is
generated once into <data dir>/redis-password (0600, reused by later runs) and
reaches redis-server through a 0600 config file in its private 0700 directory, not
its argv, which every user reads in /proc/<pid>/cmdline. The command gets it in
REDIS_URL; a job does not (the local backend passes jobs only `inherit_env`, and
hands the shim its Redis address in the root-only spec.json). The embedded
fallback does not enforce a password (fakeredis accepts any AUTH and commands
without one), and its warning says so.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any
from urllib.parse import quote

PASSWORD_FILE = "redis-password"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _command(*args: str) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a.encode()), a.encode()) for a in args)


def ping(host: str, port: int, timeout: float = 0.5, password: str | None = None) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall((_command("AUTH", password) if password else b"") + _command("PING"))
            reply = b""
            while reply.count(b"\r\n") < (2 if password else 1):
                chunk = s.recv(64)
                if not chunk:
                    break
                reply += chunk
            return reply == (b"+OK\r\n" if password else b"") + b"+PONG\r\n"
    except OSError:
        return False


def wait_for(host: str, port: int, seconds: float = 10.0, password: str | None = None) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ping(host, port, password=password):
            return True
        time.sleep(0.05)
    return False


def stored_password(data_dir: str) -> str:
    """The private Redis's password: read from <data_dir>/redis-password, or generated into
    it (created 0600 and exclusively, so two starts at once agree on one)."""
    os.makedirs(data_dir, mode=0o700, exist_ok=True)
    path = os.path.join(data_dir, PASSWORD_FILE)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
    if os.stat(path).st_mode & 0o077:
        os.chmod(path, 0o600)  # a copy from elsewhere, or an older tool: the console's alone
    with open(path) as f:
        password = f.read().strip()
    if not password:
        raise RuntimeError(f"{path} is empty: delete it and a new password is generated")
    return password


class PrivateRedis:
    """Start one Redis for the lifetime of this object; `url` says where."""

    def __init__(self, password: str | None = None):
        self.port = free_port()
        self.password = password
        auth = f":{quote(password, safe='')}@" if password else ""
        self.url = f"redis://{auth}127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None
        self.embedded: Any = None  # a fakeredis TcpFakeServer, imported only when needed
        self.tmp = tempfile.mkdtemp(prefix="vigil-redis-")  # 0700

    def _config_file(self) -> str:
        """The settings argv must not show (the password), in a 0600 file of the 0700 dir."""
        path = os.path.join(self.tmp, "redis.conf")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            if self.password:
                f.write(f'requirepass "{self.password}"\n')
        return path

    def start(self) -> "PrivateRedis":
        os.makedirs(self.tmp, mode=0o700, exist_ok=True)  # stop() removed it; a restart needs it again
        server = shutil.which("redis-server")
        if server:
            self.process = subprocess.Popen(
                [
                    server,
                    self._config_file(),
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
        if not wait_for("127.0.0.1", self.port, password=self.password):
            self.stop()
            raise RuntimeError(f"the private Redis did not answer on 127.0.0.1:{self.port}")
        return self

    def _start_embedded(self) -> None:
        print(
            "WARNING: no redis-server on PATH; using an embedded pure-Python Redis (fakeredis). "
            "It is for trying Vigil, not for production: install Redis and set REDIS_URL. "
            + (
                "It does not enforce the password: any process on this machine, jobs included, can use it."
                if self.password
                else ""
            ),
            file=sys.stderr,
        )
        from fakeredis import TcpFakeServer

        server = TcpFakeServer(("127.0.0.1", self.port), server_type="redis")
        if self.password:  # so that AUTH with it succeeds; fakeredis does not refuse clients without it
            server.fake_server.config[b"requirepass"] = self.password.encode()
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
        data_dir = env.get("VIGIL_DATA_DIR") or "var"
        redis = PrivateRedis(stored_password(data_dir)).start()
        env["REDIS_URL"] = redis.url
        where = f"127.0.0.1:{redis.port}/0"
        print(f"vigil: private Redis at {where} (password in {os.path.join(data_dir, PASSWORD_FILE)})", file=sys.stderr)
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
