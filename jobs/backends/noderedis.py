"""Announcing an instance's exit on Redis from where the instance ran, in plain RESP.

Shared by the node-side scripts, the local backend's shim (shim.py) and the Slurm
supervisor and wrapper (slurm_step.py, copied to the attempt's runtime with this
file). Standard library only and never raising: those scripts run outside the
console's venv, and an exit is on disk before it is announced, so a Redis that is
down costs at most a refused connection (the sweep finds the exit file).
"""

from __future__ import annotations

import socket
import time
from urllib.parse import unquote, urlsplit


def redis_target(url: str, channel: str) -> dict | None:
    """{host, port, username, password, channel} of a redis:// URL (plain JSON, so it
    can sit in a spec file), or None for no URL or another scheme."""
    if not url:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("redis", ""):
        return None
    return {
        "host": parts.hostname or "127.0.0.1",
        "port": parts.port or 6379,
        "username": unquote(parts.username) if parts.username else None,
        "password": unquote(parts.password) if parts.password else None,
        "channel": channel,
    }


def resp_command(*args: str | bytes) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        data = a.encode() if isinstance(a, str) else a
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def _auth_command(redis: dict) -> bytes:
    if not redis.get("password"):
        return b""
    if redis.get("username"):
        return resp_command("AUTH", redis["username"], redis["password"])
    return resp_command("AUTH", redis["password"])


def _replies_ok(s: socket.socket, count: int, end: float) -> bool:
    """Read `count` one-line replies (+OK, :1) by monotonic time `end`; True when all came
    and none was an error."""
    replies = b""
    while replies.count(b"\r\n") < count:
        left = end - time.monotonic()
        if left <= 0:
            return False
        s.settimeout(left)
        chunk = s.recv(4096)
        if not chunk:
            return False
        replies += chunk
    return not any(line.startswith(b"-") for line in replies.split(b"\r\n"))


def publish(redis: dict | None, payload: str, deadline: float) -> bool:
    """PUBLISH `payload` on redis["channel"] within `deadline` seconds in all, over a
    connection of its own; True when every reply (AUTH's, PUBLISH's) came and none was
    an error. Never raises."""
    if not redis:
        return False
    end = time.monotonic() + deadline
    try:
        with socket.create_connection((redis["host"], int(redis["port"])), timeout=deadline) as s:
            auth = _auth_command(redis)
            s.sendall(auth + resp_command("PUBLISH", redis["channel"], payload))
            return _replies_ok(s, 2 if auth else 1, end)
    except (OSError, ValueError):
        return False


class Announcer:
    """A connection to Redis opened and authenticated while the instance runs, so that
    announcing its exit is one write: a fresh connection at the exit (TCP handshake,
    AUTH, the address looked up again) was most of an announced exit's latency and of
    its tail on a loaded machine (bench/exit_detection.py). The connection idles
    meanwhile (nothing is read or sent); a Redis that restarted or closed it (an idle
    `timeout`) is found at the exit, before the PUBLISH, and the exit goes out over a
    fresh connection as before, within the same deadline. Never raises.

    `name` is shown by CLIENT LIST (CLIENT SETNAME), so an operator can tell whose
    connection it is; it must not hold anything secret."""

    def __init__(self, redis: dict | None, deadline: float, name: str = ""):
        self.redis, self.deadline, self.name = redis, deadline, name
        self.sock: socket.socket | None = None

    def open(self) -> bool:
        """Connect and authenticate now; False (nothing held) when Redis is down or refuses."""
        self.close()
        if not self.redis:
            return False
        end = time.monotonic() + self.deadline
        try:
            s = socket.create_connection((self.redis["host"], int(self.redis["port"])), timeout=self.deadline)
        except (OSError, ValueError):
            return False
        try:
            auth = _auth_command(self.redis)
            commands = [auth] if auth else []
            if self.name:
                commands.append(resp_command("CLIENT", "SETNAME", self.name))
            if commands:
                s.sendall(b"".join(commands))
                if not _replies_ok(s, len(commands), end):
                    s.close()
                    return False
        except (OSError, ValueError):
            s.close()
            return False
        self.sock = s
        return True

    def _still_open(self) -> bool:
        """The held connection, if the server has not closed it meanwhile: it sends nothing
        unasked, so anything to read (its FIN after a restart, an error) means it is gone."""
        if self.sock is None:
            return False
        try:
            self.sock.setblocking(False)
            try:
                self.sock.recv(1, socket.MSG_PEEK)
            except BlockingIOError:
                return True
            return False
        except OSError:
            return False

    def publish(self, payload: str) -> bool:
        """PUBLISH `payload` within the deadline: over the held connection when it is still
        open, else (or when it fails) over a fresh one. True when Redis took it."""
        if not self.redis:
            return False
        end = time.monotonic() + self.deadline
        if self._still_open():
            assert self.sock is not None
            try:
                self.sock.settimeout(self.deadline)
                self.sock.sendall(resp_command("PUBLISH", self.redis["channel"], payload))
                if _replies_ok(self.sock, 1, end):
                    return True
            except OSError:
                pass
        # A duplicate (the first PUBLISH went out, its reply did not come back) is harmless:
        # the listener's tick is idempotent, and the exit is on disk either way.
        self.close()
        left = end - time.monotonic()
        return left > 0 and publish(self.redis, payload, left)

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None
