"""Waiting for something a real process does (a job's exit, a log line, a worker's
tick): asked again and again, never a fixed sleep."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def poll_until(predicate: Callable[[], T], timeout: float, every: float = 0.01) -> T | None:
    """predicate()'s first truthy value, asked every `every` seconds; None when `timeout`
    seconds pass without one (for a benchmark that reports a timeout as a figure)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    return None


def wait_until(predicate: Callable[[], T], timeout: float = 5.0, what: str = "the condition", every: float = 0.01) -> T:
    """poll_until for a test: an AssertionError naming `what` when the time runs out."""
    value = poll_until(predicate, timeout, every)
    if value is None:  # a truthy value is never None
        raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
    return value
