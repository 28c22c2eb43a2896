"""The job monitor SDK that training code calls, in the shape of the managed
platform's `job_monitor` so that its examples run after changing the import:

    from vigil import job_monitor as jm
    monitor = jm.Monitor(config=jm.PyTorchConfig(job_hang_interval=1800))
    st = monitor.send_custom_message(content="The training loss for the job is NaN.")
    if not st.ok(): print(st.to_string())
    monitor.set_retryable_errors(["connect timeout", "error_yyy"])
    monitor.reset_config(job_hang_interval=10)      # or reset_config({"job_hang_interval": 10})

    @jm.hang_detect(180)          # or @monitor.hang_detect(180)
    def train(epoch): ...

Decisions:
- Outside a Vigil job (no VIGIL_* environment) every call is a no-op that returns
  a Status whose ok() is False with code NOT_IN_JOB and the message "not running
  under Vigil (...); nothing was sent", so the seed's `if not st.ok():
  print(st.to_string())` tells the user that the message went nowhere.
- Calls never raise into the training loop: console down, slow, silent or
  answering errors all give a Status that is not ok within the SDK timeout
  (VIGIL_SDK_TIMEOUT, default 2 s, or Monitor(timeout=...)). After a timeout the
  SDK fails fast for a while (5 s doubling to 60 s) instead of waiting again.
  Mistakes at setup -- an unknown config keyword, a bad hang_detect() value --
  raise TypeError/ValueError at once, because they are programmer errors found
  before the loop starts.
- The job's hang interval is job-wide. hang_detect scopes form a stack: the
  value in force is the innermost open scope's, or the base value outside all
  scopes; leaving a scope (also by exception) sends the value now in force.
  The config request is made in the calling thread, also for coroutine
  functions, so that a cancelled task cannot leave the interval changed.
- The base value is the config's job_hang_interval if given, else
  VIGIL_JOB_HANG_INTERVAL when the backend sets it, else the flag default 1800.
- report_progress never waits for the network: the latest report is handed to a
  background thread that sends at most one per second, always the newest.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import math
import numbers
import os
import sys
import threading
import time
import weakref
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from vigil._client import Client, JobEnv, Status, StatusCode, after_fork_in_child

__all__ = [
    "Monitor",
    "PyTorchConfig",
    "TFConfig",
    "MPIConfig",
    "ElasticBatchConfig",
    "Status",
    "StatusCode",
    "hang_detect",
    "reset_hang_detect",
    "send_custom_message",
    "set_retryable_errors",
    "reset_config",
    "report_progress",
    "get_monitor",
]

DEFAULT_JOB_HANG_INTERVAL = 1800
SUSPEND = -1
MAX_KEYWORDS = 100
MAX_KEYWORD_LENGTH = 256
PROGRESS_MIN_INTERVAL = 1.0

# The runtime parameters the console accepts from a running job.
RUNTIME_PARAMETERS = ("job_hang_interval",)


class _ParameterError(Exception):
    def __init__(self, field: str, message: str, kind: type = ValueError):
        super().__init__(message)
        self.field = field
        self.message = message
        self.kind = kind


def _hang_interval(value: Any, field: str = "job_hang_interval") -> int:
    accepted = "a whole number of seconds > 0, or -1 to suspend hang detection"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _ParameterError(field, "%s must be %s; got %r" % (field, accepted, value), TypeError)
    if isinstance(value, float) and not value.is_integer():
        raise _ParameterError(field, "%s must be %s; got %r" % (field, accepted, value))
    seconds = int(value)
    if seconds <= 0 and seconds != SUSPEND:
        raise _ParameterError(field, "%s must be %s; got %r" % (field, accepted, value))
    return seconds


_CHECKS: Dict[str, Callable[[Any], Any]] = {"job_hang_interval": _hang_interval}


def _check_parameters(params: Mapping[Any, Any]) -> Dict[str, Any]:
    unknown = [k for k in params if k not in _CHECKS]
    if unknown:
        raise _ParameterError(
            str(unknown[0]),
            "unknown parameter %r; accepted: %s" % (unknown[0], ", ".join(RUNTIME_PARAMETERS)),
            TypeError,
        )
    return {k: _CHECKS[k](v) for k, v in params.items()}


class _FrameworkConfig:
    """Runtime parameters a job's code gives the monitor; only those given are sent."""

    framework = ""

    def __init__(self, **params: Any):
        try:
            self._params = _check_parameters(params)
        except _ParameterError as exc:
            if exc.message.startswith("unknown parameter"):
                raise TypeError(
                    "%s() got an unexpected keyword argument %r; accepted: %s"
                    % (type(self).__name__, exc.field, ", ".join(RUNTIME_PARAMETERS))
                ) from None
            raise exc.kind("%s(): %s" % (type(self).__name__, exc.message)) from None

    @property
    def job_hang_interval(self) -> Optional[int]:
        return self._params.get("job_hang_interval")

    def to_dict(self) -> Dict[str, Any]:
        return dict(self._params)

    def __repr__(self) -> str:
        return "%s(%s)" % (type(self).__name__, ", ".join("%s=%r" % kv for kv in self._params.items()))

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._params == self._params  # type: ignore[attr-defined]


class PyTorchConfig(_FrameworkConfig):
    framework = "PyTorch"


class TFConfig(_FrameworkConfig):
    framework = "TensorFlow"


class MPIConfig(_FrameworkConfig):
    framework = "MPI"


class ElasticBatchConfig(_FrameworkConfig):
    framework = "ElasticBatch"


def _guard(method: Callable[..., Status]) -> Callable[..., Status]:
    """The boundary of every public call: whatever goes wrong becomes a Status."""

    @functools.wraps(method)
    def guarded(*args: Any, **kwargs: Any) -> Status:
        try:
            return method(*args, **kwargs)
        except Exception as exc:
            return Status(StatusCode.INTERNAL, "vigil SDK error: %r" % (exc,))

    return guarded


class Monitor:
    """The job's monitor client. Safe to share across threads and to use after fork."""

    def __init__(
        self,
        config: Optional[_FrameworkConfig] = None,
        *,
        timeout: Optional[float] = None,
        environ: Optional[Mapping[str, str]] = None,
    ):
        if config is None:
            config = PyTorchConfig()
        if not isinstance(config, _FrameworkConfig):
            raise TypeError(
                "Monitor(config=...) takes PyTorchConfig, TFConfig, MPIConfig or ElasticBatchConfig; got %r" % (config,)
            )
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not 0 < timeout < math.inf
        ):
            raise ValueError("Monitor(timeout=...) must be a positive number of seconds; got %r" % (timeout,))
        self.config = config
        self.env = JobEnv.from_environ(environ)
        self._client = Client(self.env, timeout=None if timeout is None else float(timeout))
        self._state = threading.Lock()  # guards the hang-interval stack; held briefly
        self._send = threading.Lock()  # serialises config requests so they arrive in order
        self._base = config.job_hang_interval or self.env.job_hang_interval or DEFAULT_JOB_HANG_INTERVAL
        self._scopes: List[Tuple[object, int]] = []
        self._acked: Optional[int] = None  # the value the console last confirmed
        self.last_config_status: Optional[Status] = None
        self._progress = _ProgressReporter(self._client)
        after_fork_in_child(self)
        _set_default(self)
        params = config.to_dict()
        if params:
            self.init_status = self._send_config(params, force=True)
        elif self.env.in_job:
            self.init_status = Status(StatusCode.OK, "no runtime parameters to send")
        else:
            self.init_status = self.env.not_sent()
        if self.env.c4d and (isinstance(config, PyTorchConfig) or "torch" in sys.modules):
            try:
                from vigil import c4d

                c4d.instrument_torch_distributed(enabled=True)
            except Exception as exc:
                from vigil._client import _say

                _say("C4D instrumentation unavailable: %r" % (exc,))

    def _after_fork_in_child(self) -> None:
        self._state = threading.Lock()
        self._send = threading.Lock()

    # -- what the console knows -------------------------------------------------

    @property
    def in_job(self) -> bool:
        return self.env.in_job

    @property
    def timeout(self) -> float:
        return self._client.timeout

    @property
    def job_hang_interval(self) -> int:
        """The hang interval this process wants in force now (-1: suspended)."""
        with self._state:
            return self._scopes[-1][1] if self._scopes else self._base

    @property
    def last_progress_status(self) -> Optional[Status]:
        """How the last progress report sent in the background fared."""
        return self._progress.last_status

    # -- the seed's calls ---------------------------------------------------------

    @_guard
    def send_custom_message(self, content: str) -> Status:
        """Create a custom-message event for the job (notified per the workspace's event rules)."""
        if not isinstance(content, str):
            return Status(
                StatusCode.INVALID_ARGUMENT, "content must be a str; got %s" % type(content).__name__, field="content"
            )
        return self._client.post("messages", {"content": content})

    @_guard
    def set_retryable_errors(self, keywords: Any) -> Status:
        """Replace the job's SDK-set retryable error keywords (literal, case-insensitive substrings)."""
        if isinstance(keywords, (str, bytes)) or not hasattr(keywords, "__iter__"):
            return Status(
                StatusCode.INVALID_ARGUMENT,
                'keywords must be a list of strings, e.g. ["connect timeout"]; got %r' % (keywords,),
                field="keywords",
            )
        keywords = list(keywords)
        for keyword in keywords:
            if not isinstance(keyword, str) or not keyword.strip():
                return Status(
                    StatusCode.INVALID_ARGUMENT,
                    "each keyword must be a non-empty string; got %r" % (keyword,),
                    field="keywords",
                )
            if len(keyword) > MAX_KEYWORD_LENGTH:
                return Status(
                    StatusCode.INVALID_ARGUMENT,
                    "keyword %r... is %d characters; at most %d are accepted"
                    % (keyword[:40], len(keyword), MAX_KEYWORD_LENGTH),
                    field="keywords",
                )
        if len(keywords) > MAX_KEYWORDS:
            return Status(
                StatusCode.INVALID_ARGUMENT,
                "%d keywords given; at most %d are accepted" % (len(keywords), MAX_KEYWORDS),
                field="keywords",
            )
        return self._client.post("retryable-errors", {"keywords": keywords})

    @_guard
    def reset_config(self, params: Optional[Mapping[str, Any]] = None, /, **kwargs: Any) -> Status:
        """Change runtime parameters while the job runs: reset_config(job_hang_interval=10)
        or reset_config({"job_hang_interval": 10}). -1 suspends hang detection. Inside a
        hang_detect scope the change lasts until that scope ends."""
        merged: Dict[Any, Any] = {}
        if params is not None:
            if not isinstance(params, Mapping):
                return Status(
                    StatusCode.INVALID_ARGUMENT,
                    "reset_config takes a dict or keyword arguments, "
                    "e.g. reset_config(job_hang_interval=600); got %r" % (params,),
                )
            merged.update(params)
        merged.update(kwargs)
        if not merged:
            return Status(StatusCode.OK, "nothing to change: no parameters given")
        try:
            checked = _check_parameters(merged)
        except _ParameterError as exc:
            return Status(StatusCode.INVALID_ARGUMENT, exc.message, field=exc.field)
        return self._send_config(checked, force=True)

    def hang_detect(self, seconds: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: the job's hang interval is `seconds` (-1: suspended) while the function runs."""
        return _HangDetect(seconds, lambda: self)

    def reset_hang_detect(self, hang_seconds: int) -> Status:
        return self.reset_config(job_hang_interval=hang_seconds)

    @_guard
    def report_progress(self, step: Any = None, metrics: Optional[Mapping[str, Any]] = None, **more: Any) -> Status:
        """Report a training step (feeds the console's restart-loop breaker and goodput).

        Costs no network time in the caller: the newest report is sent by a
        background thread at most once per second. Metrics are numbers; NaN and
        infinity are left out (JSON has no such numbers) and said so in the status.
        """
        if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
            return Status(StatusCode.INVALID_ARGUMENT, "step must be an int >= 0; got %r" % (step,), field="step")
        given: Dict[str, Any] = {}
        if metrics is not None:
            if not isinstance(metrics, Mapping):
                return Status(
                    StatusCode.INVALID_ARGUMENT,
                    "metrics must be a dict of name to number; got %r" % (metrics,),
                    field="metrics",
                )
            given.update(metrics)
        given.update(more)
        clean: Dict[str, float] = {}
        left_out = []
        for name, value in given.items():
            if not isinstance(name, str):
                return Status(
                    StatusCode.INVALID_ARGUMENT, "metric names must be strings; got %r" % (name,), field="metrics"
                )
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                return Status(
                    StatusCode.INVALID_ARGUMENT,
                    "metric %r must be a number (int or float); got %s%s"
                    % (name, type(value).__name__, "; pass %s.item()" % name if hasattr(value, "item") else ""),
                    field="metrics",
                )
            number = float(value) if not isinstance(value, numbers.Integral) else int(value)
            if isinstance(number, float) and not math.isfinite(number):
                left_out.append(name)
                continue
            clean[name] = number
        if not self.env.in_job:
            return self.env.not_sent()
        self._progress.submit(int(step), clean)
        note = "step %d queued; sent at most once per second" % int(step)
        if left_out:
            note += "; %s left out (NaN or infinite)" % ", ".join(repr(n) for n in left_out)
        return Status(StatusCode.OK, note)

    # -- the hang-interval stack ---------------------------------------------------

    def _send_config(self, checked: Dict[str, Any], force: bool) -> Status:
        if "job_hang_interval" in checked:
            with self._state:
                if self._scopes:
                    token, _ = self._scopes[-1]
                    self._scopes[-1] = (token, checked["job_hang_interval"])
                else:
                    self._base = checked["job_hang_interval"]
        return self._sync(force=force)

    def _enter_scope(self, seconds: int) -> object:
        token = object()
        try:
            with self._state:
                self._scopes.append((token, seconds))
            self._sync(force=False)
        except Exception:
            pass
        return token

    def _exit_scope(self, token: object) -> None:
        try:
            with self._state:
                self._scopes = [s for s in self._scopes if s[0] is not token]
            self._sync(force=False)
        except Exception:
            pass

    def _sync(self, force: bool) -> Status:
        """Send the value in force now unless the console already has it. Sending the
        current value (not the one this caller set) keeps interleaved threads correct."""
        deadline = time.monotonic() + self._client.timeout
        if not self._send.acquire(timeout=self._client.timeout):
            status = Status(StatusCode.TIMEOUT, "another thread's config change is still waiting for the console")
            self.last_config_status = status
            return status
        try:
            with self._state:
                value = self._scopes[-1][1] if self._scopes else self._base
                if not force and value == self._acked:
                    return Status(StatusCode.OK, "job_hang_interval is already %d" % value)
            status = self._client.post("config", {"job_hang_interval": value}, timeout=deadline - time.monotonic())
            if status.ok():
                with self._state:
                    self._acked = value
            self.last_config_status = status
            return status
        finally:
            self._send.release()


class _HangDetect:
    """What hang_detect(seconds) returns: a decorator for plain, generator and coroutine functions."""

    def __init__(self, seconds: Any, monitor: Callable[[], Monitor]):
        try:
            self.seconds = _hang_interval(seconds, "hang_detect(seconds)")
        except _ParameterError as exc:
            raise exc.kind(exc.message) from None
        self._monitor = monitor

    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(func):
            raise TypeError("hang_detect(%d) decorates a function; got %r" % (self.seconds, func))
        seconds, monitor = self.seconds, self._monitor

        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def coroutine_scope(*args: Any, **kwargs: Any) -> Any:
                m = monitor()
                token = m._enter_scope(seconds)
                try:
                    return await func(*args, **kwargs)
                finally:
                    m._exit_scope(token)

            return coroutine_scope

        if inspect.isgeneratorfunction(func):

            @functools.wraps(func)
            def generator_scope(*args: Any, **kwargs: Any) -> Any:
                m = monitor()
                token = m._enter_scope(seconds)
                try:
                    return (yield from func(*args, **kwargs))
                finally:
                    m._exit_scope(token)

            return generator_scope

        @functools.wraps(func)
        def scope(*args: Any, **kwargs: Any) -> Any:
            m = monitor()
            token = m._enter_scope(seconds)
            try:
                return func(*args, **kwargs)
            finally:
                m._exit_scope(token)

        return scope


class _ProgressReporter:
    """Holds the newest progress report and sends it from a daemon thread, at most
    once per PROGRESS_MIN_INTERVAL seconds."""

    def __init__(self, client: Client):
        self._client = client
        self._reset()
        after_fork_in_child(self)
        _reporters.add(self)

    def _reset(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._send_lock = threading.Lock()
        self._pending: Optional[Dict[str, Any]] = None
        self._last_sent = -math.inf
        self._thread: Optional[threading.Thread] = None
        self._pid = os.getpid()
        self.last_status: Optional[Status] = None

    def _after_fork_in_child(self) -> None:
        # The parent sends its own reports; a DataLoader worker starts clean.
        self._reset()

    def submit(self, step: int, metrics: Dict[str, Any]) -> None:
        if self._pid != os.getpid():
            self._reset()
        with self._cond:
            self._pending = {"step": step, "metrics": metrics}
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="vigil-progress", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._pending is None:
                    self._cond.wait()
                wait = self._last_sent + PROGRESS_MIN_INTERVAL - time.monotonic()
                while wait > 0:
                    self._cond.wait(wait)
                    wait = self._last_sent + PROGRESS_MIN_INTERVAL - time.monotonic()
            self._send_pending()

    def _send_pending(self, timeout: Optional[float] = None) -> None:
        if not self._send_lock.acquire(timeout=self._client.timeout if timeout is None else timeout):
            return
        try:
            with self._cond:
                body, self._pending = self._pending, None
                if body is None:
                    return
                self._last_sent = time.monotonic()
            self.last_status = self._client.post("progress", body, timeout=timeout)
            # The interval runs from the end of this send: the console receives reports at
            # least a second apart however long each took to reach it (a slow console is sent
            # less often, not a burst of queued ones).
            with self._cond:
                self._last_sent = time.monotonic()
        except Exception as exc:
            self.last_status = Status(StatusCode.INTERNAL, "vigil SDK error: %r" % (exc,))
        finally:
            self._send_lock.release()

    def flush(self, timeout: Optional[float] = None) -> None:
        """Send the pending report now (at exit), within the SDK timeout."""
        if self._pid == os.getpid() and self._pending is not None:
            self._send_pending(timeout)


_reporters: "weakref.WeakSet[_ProgressReporter]" = weakref.WeakSet()


@atexit.register
def _flush_progress_at_exit() -> None:
    for reporter in list(_reporters):
        try:
            reporter.flush()
        except Exception:
            pass


# -- module-level calls on the process's monitor ------------------------------------

_default_lock = threading.Lock()
# A strong reference: `jm.Monitor(config=...)` without keeping the object must
# still be the monitor that jm.hang_detect and friends use.
_default: Optional[Monitor] = None


def _set_default(monitor: Monitor) -> None:
    global _default
    _default = monitor


def get_monitor() -> Monitor:
    """The Monitor created last in this process, or one made from the environment."""
    monitor = _default
    if monitor is None:
        with _default_lock:
            monitor = _default
            if monitor is None:
                monitor = Monitor()  # registers itself as the default
    return monitor


def hang_detect(seconds: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: set the job's hang interval to `seconds` for one function's scope
    (-1 suspends hang detection there) and restore the previous value after, also
    when the function raises. Works on plain, generator and coroutine functions.
    Uses the process's monitor (the last Monitor created) at call time."""
    return _HangDetect(seconds, get_monitor)


def reset_hang_detect(hang_seconds: int) -> Status:
    return get_monitor().reset_config(job_hang_interval=hang_seconds)


def send_custom_message(content: str) -> Status:
    return get_monitor().send_custom_message(content=content)


def set_retryable_errors(keywords: Any) -> Status:
    return get_monitor().set_retryable_errors(keywords)


def reset_config(params: Optional[Mapping[str, Any]] = None, /, **kwargs: Any) -> Status:
    return get_monitor().reset_config(params, **kwargs)


def report_progress(step: Any = None, metrics: Optional[Mapping[str, Any]] = None, **more: Any) -> Status:
    return get_monitor().report_progress(step, metrics, **more)
