"""The one Redis client of the console's own processes (web, workers, beat, exit
listener): heartbeats, metric counters and the monitor's per-job locks. (Celery
and the Channels layer keep their own connections, configured in settings.)"""

from __future__ import annotations

import redis
from django.conf import settings

# Short timeouts: whatever is done through this client has a slower path that
# does not need Redis (a tick without its lock, a missing heartbeat or
# increment), so a stalled Redis costs a caller at most about a second.
TIMEOUT_SECONDS = 1.0

_client: redis.Redis | None = None


def redis_client() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(
            settings.REDIS_URL, socket_timeout=TIMEOUT_SECONDS, socket_connect_timeout=TIMEOUT_SECONDS
        )
    return _client


def forget() -> None:
    """Build the client again on next use (REDIS_URL changed, or a test pointed it elsewhere)."""
    global _client
    _client = None
