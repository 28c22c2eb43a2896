"""The SDK's road to the console: the job's identity from the VIGIL_* environment,
the Status every public call returns, and HTTP calls that finish within a bounded
time whatever the console does (down, slow, silent, answering errors).

Nothing here raises into user code: every failure becomes a Status that is not ok.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import weakref
from dataclasses import dataclass
from enum import Enum
from typing import Any, Mapping, Optional

__all__ = ["Status", "StatusCode", "JobEnv", "Client", "DEFAULT_TIMEOUT", "after_fork_in_child"]

DEFAULT_TIMEOUT = 2.0
# After a call timed out, further calls fail fast for this long (doubling up to
# the maximum) so that a silent console costs the training loop one timeout per
# window instead of one per call.
BREAKER_FIRST_BACKOFF = 5.0
BREAKER_MAX_BACKOFF = 60.0
MAX_ERROR_BODY = 64 * 1024
API_PREFIX = "/api/v1/sdk/jobs/"


class StatusCode(str, Enum):
    OK = "OK"
    NOT_IN_JOB = "NOT_IN_JOB"  # no VIGIL_* environment: nothing was sent
    MISCONFIGURED = "MISCONFIGURED"  # VIGIL_* environment incomplete or invalid
    INVALID_ARGUMENT = "INVALID_ARGUMENT"  # refused by the SDK or by the console (400/413/422)
    UNAUTHENTICATED = "UNAUTHENTICATED"  # 401/403: job token missing, wrong or reset
    NOT_FOUND = "NOT_FOUND"  # 404: no such job (or endpoint)
    RATE_LIMITED = "RATE_LIMITED"  # 429: see retry_after
    SERVER_ERROR = "SERVER_ERROR"  # 5xx or any other unexpected answer
    TIMEOUT = "TIMEOUT"  # no answer within the SDK timeout
    UNAVAILABLE = "UNAVAILABLE"  # connection refused/reset, DNS, or skipped after a timeout
    INTERNAL = "INTERNAL"  # an SDK bug, caught so that training goes on

    def __str__(self) -> str:
        return self.value


class Status:
    """Outcome of one SDK call. `ok()` is True only when the console accepted it."""

    __slots__ = ("code", "message", "http_status", "field", "retry_after")

    def __init__(
        self,
        code: StatusCode,
        message: str = "",
        *,
        http_status: Optional[int] = None,
        field: Optional[str] = None,
        retry_after: Optional[float] = None,
    ):
        self.code = code
        self.message = message
        self.http_status = http_status
        self.field = field
        self.retry_after = retry_after

    def ok(self) -> bool:
        return self.code is StatusCode.OK

    def to_string(self) -> str:
        if self.ok():
            return "OK" if not self.message else "OK: " + self.message
        extra = []
        if self.http_status is not None:
            extra.append("HTTP %d" % self.http_status)
        if self.field:
            extra.append("field %r" % self.field)
        if self.retry_after is not None:
            extra.append("retry after %g s" % self.retry_after)
        text = "%s: %s" % (self.code.value, self.message)
        return text + (" (%s)" % ", ".join(extra) if extra else "")

    __str__ = to_string

    def __repr__(self) -> str:
        return "Status(%s, %r)" % (self.code.value, self.message)


def _env_int(environ: Mapping[str, str], name: str) -> Optional[int]:
    raw = environ.get(name, "").strip()
    try:
        return int(raw) if raw else None
    except ValueError:
        return None


@dataclass(frozen=True)
class JobEnv:
    """Which job this process belongs to, as the backend told it through VIGIL_*."""

    console_url: str = ""
    job_id: str = ""
    token: str = ""
    attempt: Optional[int] = None
    role: str = ""
    index: Optional[int] = None
    rank: Optional[int] = None
    instance: str = ""
    c4d: bool = False
    timeout: float = DEFAULT_TIMEOUT
    job_hang_interval: Optional[int] = None
    problem: str = ""  # why calls cannot be sent; empty when in a job

    REQUIRED = ("VIGIL_CONSOLE_URL", "VIGIL_JOB_ID", "VIGIL_JOB_TOKEN")

    @classmethod
    def from_environ(cls, environ: Optional[Mapping[str, str]] = None) -> "JobEnv":
        environ = os.environ if environ is None else environ
        present = {n: environ.get(n, "").strip() for n in cls.REQUIRED}
        missing = [n for n, v in present.items() if not v]
        url = present["VIGIL_CONSOLE_URL"].rstrip("/")
        problem = ""
        if len(missing) == len(cls.REQUIRED):
            problem = "not running under Vigil (%s are not set); nothing was sent" % ", ".join(cls.REQUIRED)
        elif missing:
            problem = "the Vigil job environment is incomplete: %s %s not set; nothing was sent" % (
                " and ".join(missing),
                "is" if len(missing) == 1 else "are",
            )
        elif urllib.parse.urlsplit(url).scheme not in ("http", "https") or not urllib.parse.urlsplit(url).netloc:
            problem = "VIGIL_CONSOLE_URL=%r is not an http:// or https:// URL; nothing was sent" % url
        timeout = DEFAULT_TIMEOUT
        raw_timeout = environ.get("VIGIL_SDK_TIMEOUT", "").strip()
        if raw_timeout:
            try:
                timeout = float(raw_timeout)
                if not (0 < timeout < float("inf")):
                    raise ValueError
            except ValueError:
                timeout = DEFAULT_TIMEOUT
                _say(
                    "VIGIL_SDK_TIMEOUT=%r is not a positive number of seconds; using %g"
                    % (raw_timeout, DEFAULT_TIMEOUT)
                )
        return cls(
            console_url=url,
            job_id=present["VIGIL_JOB_ID"],
            token=present["VIGIL_JOB_TOKEN"],
            attempt=_env_int(environ, "VIGIL_ATTEMPT"),
            role=environ.get("VIGIL_ROLE", ""),
            index=_env_int(environ, "VIGIL_INDEX"),
            rank=_env_int(environ, "VIGIL_RANK"),
            instance=environ.get("VIGIL_INSTANCE", ""),
            c4d=environ.get("VIGIL_C4D", "").strip() == "1",
            timeout=timeout,
            job_hang_interval=_env_int(environ, "VIGIL_JOB_HANG_INTERVAL"),
            problem=problem,
        )

    @property
    def in_job(self) -> bool:
        return not self.problem

    def not_sent(self) -> Status:
        code = StatusCode.NOT_IN_JOB if self.problem.startswith("not running") else StatusCode.MISCONFIGURED
        return Status(code, self.problem)


def _say(text: str) -> None:
    """One line on stderr for things the user should fix; never raises."""
    try:
        sys.stderr.write("vigil: %s\n" % text)
    except Exception:
        pass


# Objects holding locks or threads that a forked child must rebuild (DataLoader
# workers fork while other threads may hold those locks).
_fork_aware: "weakref.WeakSet[Any]" = weakref.WeakSet()


def after_fork_in_child(obj: Any) -> None:
    """Register obj so that obj._after_fork_in_child() runs in every forked child."""
    _fork_aware.add(obj)


def _run_after_fork_hooks() -> None:
    for obj in list(_fork_aware):
        try:
            obj._after_fork_in_child()
        except Exception:
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_run_after_fork_hooks)


# Direct connections: the console is reached the way the backend reached it,
# never through an HTTP(S)_PROXY meant for the internet.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _exchange(request: urllib.request.Request, timeout: float):
    """One HTTP exchange; returns (status, headers, body bytes) or raises."""
    try:
        with _opener.open(request, timeout=timeout) as response:
            return response.status, response.headers, response.read(MAX_ERROR_BODY)
    except urllib.error.HTTPError as error:
        try:
            body = error.read(MAX_ERROR_BODY)
        except Exception:
            body = b""
        return error.code, error.headers, body


def _is_timeout(exc: BaseException) -> bool:
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return True
    reason = getattr(exc, "reason", None)
    return isinstance(reason, (socket.timeout, TimeoutError))


def status_from_response(code: int, headers: Any, body: bytes) -> Status:
    if 200 <= code < 300:
        return Status(StatusCode.OK, http_status=code)
    detail, field = "", None
    try:
        data = json.loads(body.decode("utf-8"))
        if isinstance(data, dict):
            raw = data.get("detail")
            detail = raw if isinstance(raw, str) else (json.dumps(data)[:500] if raw is None else str(raw))
            field = data.get("field") if isinstance(data.get("field"), str) else None
        else:
            detail = json.dumps(data)[:500]
    except Exception:
        detail = body.decode("utf-8", "replace").strip()[:500]
    retry_after = None
    if code == 429:
        try:
            retry_after = float(headers.get("Retry-After")) if headers is not None else None
        except (TypeError, ValueError):
            retry_after = None
    if code in (400, 413, 422):
        kind = StatusCode.INVALID_ARGUMENT
    elif code in (401, 403):
        kind = StatusCode.UNAUTHENTICATED
    elif code == 404:
        kind = StatusCode.NOT_FOUND
    elif code == 429:
        kind = StatusCode.RATE_LIMITED
    else:
        kind = StatusCode.SERVER_ERROR
    return Status(
        kind, detail or "the console answered HTTP %d" % code, http_status=code, field=field, retry_after=retry_after
    )


class Client:
    """POSTs JSON to the console's SDK endpoints of one job.

    Each call runs its HTTP exchange on a short-lived daemon thread and waits for
    it at most `timeout` seconds in total, so name resolution, connecting,
    sending and a server that trickles or never answers are all covered by one
    deadline. Connections are per call: nothing is shared across threads or
    across fork.
    """

    def __init__(self, env: JobEnv, timeout: Optional[float] = None):
        self.env = env
        self.timeout = env.timeout if timeout is None else timeout
        self._lock = threading.Lock()
        self._breaker_until = 0.0
        self._breaker_backoff = 0.0
        self._breaker_reason = ""
        after_fork_in_child(self)

    def _after_fork_in_child(self) -> None:
        # The parent's lock may have been held by a thread that does not exist here.
        self._lock = threading.Lock()
        self._breaker_until = 0.0
        self._breaker_backoff = 0.0

    def url(self, endpoint: str) -> str:
        return "%s%s%s/%s/" % (self.env.console_url, API_PREFIX, urllib.parse.quote(self.env.job_id, safe=""), endpoint)

    def post(self, endpoint: str, body: Any, *, timeout: Optional[float] = None) -> Status:
        try:
            return self._post(endpoint, body, self.timeout if timeout is None else timeout)
        except Exception as exc:  # the boundary: an SDK bug must not stop training
            return Status(StatusCode.INTERNAL, "vigil SDK error: %r" % (exc,))

    def _post(self, endpoint: str, body: Any, timeout: float) -> Status:
        if not self.env.in_job:
            return self.env.not_sent()
        now = time.monotonic()
        with self._lock:
            if now < self._breaker_until:
                return Status(
                    StatusCode.UNAVAILABLE,
                    (
                        "not sent: %s; the SDK waits %.0f s more before calling the console again "
                        "so that training is not slowed" % (self._breaker_reason, self._breaker_until - now)
                    ),
                )
        if timeout <= 0:
            return Status(StatusCode.TIMEOUT, "not sent: no time left of the SDK timeout")
        if isinstance(body, dict):
            # Say who sends, so that events name the rank and stale attempts can be told apart.
            sender = {"rank": self.env.rank, "instance": self.env.instance or None, "attempt": self.env.attempt}
            body = {**{k: v for k, v in sender.items() if v is not None}, **body}
        data = json.dumps(body, allow_nan=False).encode("utf-8")
        request = urllib.request.Request(
            self.url(endpoint),
            data=data,
            method="POST",
            headers={
                "Content-Type": "application/json",
                "Accept": "application/json",
                "Authorization": "Bearer " + self.env.token,
                "User-Agent": "vigil-sdk/0.1",
            },
        )
        outcome: list = []
        done = threading.Event()

        def run() -> None:
            try:
                outcome.append(("ok", _exchange(request, timeout)))
            except BaseException as exc:  # reported to the caller, never raised there
                outcome.append(("error", exc))
            finally:
                done.set()

        try:
            worker = threading.Thread(target=run, name="vigil-http", daemon=True)
            worker.start()
        except RuntimeError:
            # No new threads (interpreter shutting down): do it inline; the socket
            # timeout still bounds each step.
            run()
        if not done.wait(timeout):
            return self._timed_out(timeout)
        kind, value = outcome[0]
        if kind == "ok":
            with self._lock:
                self._breaker_until = 0.0
                self._breaker_backoff = 0.0
            return status_from_response(*value)
        if _is_timeout(value):
            return self._timed_out(timeout)
        reason = getattr(value, "reason", value)
        return Status(StatusCode.UNAVAILABLE, "cannot reach the console at %s: %s" % (self.env.console_url, reason))

    def _timed_out(self, timeout: float) -> Status:
        with self._lock:
            self._breaker_backoff = min(BREAKER_MAX_BACKOFF, max(BREAKER_FIRST_BACKOFF, self._breaker_backoff * 2))
            self._breaker_until = time.monotonic() + self._breaker_backoff
            self._breaker_reason = "the console at %s did not answer within %g s" % (self.env.console_url, timeout)
        return Status(
            StatusCode.TIMEOUT, "the console at %s did not answer within %g s" % (self.env.console_url, timeout)
        )
