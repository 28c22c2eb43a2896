"""A Redis lease on one monitor shard: who works the shard right now.

SET NX PX with a random token takes it; a thread renews it (compare-and-pexpire)
while the shard is worked; compare-and-delete releases it. A worker that dies
holds its shards only until the lease runs out. The lease keeps two workers off
the same shard almost always; it is not the guard of a decision (a worker paused
past its TTL may still finish a tick): MonitorState's compare-and-set and each
decision's idempotency key are."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import redis
from django.conf import settings

from infra.client import redis_client

# Short, so that a killed worker's shards are swept by another within seconds;
# renewed every LEASE_SECONDS / 3 while a sweep runs longer (a teardown grace, a launch).
# settings.MONITOR_LEASE_SECONDS (VIGIL_MONITOR_LEASE_SECONDS) overrides it: crash tests
# shorten it so a killed worker's shards come back quickly.
LEASE_SECONDS = 4.0

_RENEW = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0"
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


def shard_key(shard: int) -> str:
    return f"vigil:monitor:shard:{shard}"


class Lease:
    def __init__(self, key: str, seconds: float | None = None) -> None:
        self.key = key
        if seconds is None:
            seconds = float(getattr(settings, "MONITOR_LEASE_SECONDS", LEASE_SECONDS))
        self.ttl_ms = int(seconds * 1000)
        self.token = uuid.uuid4().hex
        self.lost = threading.Event()  # set when a renewal found the lease gone or taken

    def acquire(self) -> bool:
        """True if this call took the lease (it was free). Raises redis.RedisError."""
        return bool(redis_client().set(self.key, self.token, nx=True, px=self.ttl_ms))

    def renew(self) -> bool:
        """Push the expiry out again if the lease is still ours, or take it back if it
        ran out and nobody took it (a worker starved for a few seconds on a loaded
        machine, seen in bench/monitor_scale.py); False if another worker holds it."""
        return bool(redis_client().eval(_RENEW, 1, self.key, self.token, self.ttl_ms)) or self.acquire()

    def release(self) -> None:
        """Delete the lease only if it is still ours (never another worker's after an expiry)."""
        try:
            redis_client().eval(_RELEASE, 1, self.key, self.token)
        except redis.RedisError:
            pass  # it expires on its own


@contextmanager
def renewing(lease: Lease) -> Iterator[Lease]:
    """Keep the lease alive while the block runs; lease.lost tells the block to stop early."""
    done = threading.Event()

    def renew() -> None:
        while not done.wait(lease.ttl_ms / 3000):
            try:
                if not lease.renew():
                    lease.lost.set()
                    return
            except redis.RedisError:  # Redis away: keep trying; the CAS writes still hold
                pass

    renewer = threading.Thread(target=renew, name="vigil-lease-renewal", daemon=True)
    renewer.start()
    try:
        yield lease
    finally:
        done.set()
        renewer.join()
