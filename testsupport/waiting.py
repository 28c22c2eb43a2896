"""Waiting for something a real process does (a job's exit, a log line, a worker's
tick): asked again and again, never a fixed sleep."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float = 5.0, what: str = "the condition",
               every: float = 0.01) -> T:
    """predicate()'s first truthy value, asked every `every` seconds; an AssertionError
    naming `what` when `timeout` seconds pass without one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
