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


def prepare(redis: dict | None) -> None:
    """Pay ahead what a process's first connection costs, so the exit it announces
    later is not late by it: the first getaddrinfo imports the idna codec and loads
    the resolver's libraries (~4 ms measured on a 2-core VM, most of an announced
    exit's latency). The address is looked up again at publish time (a Redis whose
    address changed meanwhile is still found). Never raises."""
    if not redis:
        return
    try:
        socket.getaddrinfo(redis["host"], int(redis["port"]), 0, socket.SOCK_STREAM)
    except (OSError, ValueError, UnicodeError):
        pass


def publish(redis: dict | None, payload: str, deadline: float) -> bool:
    """PUBLISH `payload` on redis["channel"] within `deadline` seconds in all; True
    when every reply (AUTH's, PUBLISH's) came and none was an error. Never raises."""
    if not redis:
        return False
    end = time.monotonic() + deadline
    try:
        with socket.create_connection((redis["host"], int(redis["port"])), timeout=deadline) as s:
            commands = []
            if redis.get("password"):
                if redis.get("username"):
                    commands.append(resp_command("AUTH", redis["username"], redis["password"]))
                else:
                    commands.append(resp_command("AUTH", redis["password"]))
            commands.append(resp_command("PUBLISH", redis["channel"], payload))
            s.sendall(b"".join(commands))
            replies = b""
            while replies.count(b"\r\n") < len(commands):
                left = end - time.monotonic()
                if left <= 0:
                    return False
                s.settimeout(left)
                chunk = s.recv(4096)
                if not chunk:
                    return False
                replies += chunk
            return not any(line.startswith(b"-") for line in replies.split(b"\r\n"))
    except (OSError, ValueError):
        return False
