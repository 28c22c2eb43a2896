"""Calls to Redis that a request or a monitor tick must not wait on for long.

A Redis that is stopped or stalled (SIGSTOP, a full disk, a long fork) makes a
Celery publish or a Channels group_send block far longer than a person waits for
an HTTP answer. What is sent this way always has a slower path that does not
need it (the monitor's sweep re-enqueues a queued attempt, a browser reads the
events it missed from the database), so the caller waits at most `timeout`
seconds and moves on; the call itself finishes in the background when Redis
answers again, or fails there and is only logged.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

log = logging.getLogger(__name__)

PUBLISH_TIMEOUT = 0.75  # seconds
# After a call ran out of time, Redis is taken to be stalled for this long and later
# calls wait only STALLED_TIMEOUT, so a request or tick that sends several things
# is not slowed down by each of them.
STALLED_FOR = 5.0
STALLED_TIMEOUT = 0.1
_stalled_until = 0.0


def call_bounded(fn: Callable[[], object], what: str, timeout: float = PUBLISH_TIMEOUT) -> bool:
    """Run `fn` in a daemon thread and wait up to `timeout` s. True if it finished without
    raising in time; False (logged) if it raised or is still waiting on Redis."""
    global _stalled_until
    if time.monotonic() < _stalled_until:
        timeout = min(timeout, STALLED_TIMEOUT)
    outcome: list[BaseException | None] = []

    def run():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - reported below, or logged if the caller left
            outcome.append(exc)
            if len(outcome) == 1 and finished.is_set():
                log.warning("%s failed after the caller moved on: %s", what, exc)
            return
        outcome.append(None)

    finished = threading.Event()
    worker = threading.Thread(target=run, name=f"vigil-bounded: {what}"[:60], daemon=True)
    worker.start()
    worker.join(timeout)
    finished.set()
    if not outcome:
        _stalled_until = time.monotonic() + STALLED_FOR
        log.warning("%s: Redis did not answer within %.2f s; moving on", what, timeout)
        return False
    if time.monotonic() < _stalled_until:
        _stalled_until = 0.0  # it answered: no longer stalled
    if outcome[0] is not None:
        log.warning("%s failed: %s", what, outcome[0])
        return False
    return True
