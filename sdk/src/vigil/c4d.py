"""C4D instrumentation: each rank records its collective operations (sequence
number, op, enter and exit time) so the console can tell a rank hung inside a
collective (entered, never exited) from one hung in compute (never entered).

Enabled by VIGIL_C4D=1 (the job's C4D detection switch) or explicitly:

    import vigil.c4d
    vigil.c4d.instrument_torch_distributed()     # wraps torch.distributed collectives
    with vigil.c4d.collective("all_reduce"):      # code that does not use torch
        ...

The wrapped call only appends a tuple to an in-memory ring buffer; a daemon
thread sends batches to POST .../c4d/ every VIGIL_C4D_FLUSH_SECONDS (default 1 s).
Records are upserts keyed by (rank, attempt, seq): an open collective is sent
with "exit": null on every flush until it exits, then once more with its exit.

Limits, stated:
- seq counts this process's instrumented collectives from 1. It matches across
  ranks when they call the same collectives in the same order, which the
  default process group requires; collectives on subgroups share the counter.
- Only the names in `torch.distributed` are wrapped; code that bound a
  collective earlier (`from torch.distributed import all_reduce`) before
  instrumenting keeps the unwrapped function: instrument first.
- async_op=True: exit is the time the work completed (its future's callback),
  not the time someone waited on it. With NCCL a synchronous call returns when
  the work is queued on the GPU stream, so exit there is the enqueue time.
"""

from __future__ import annotations

import atexit
import functools
import itertools
import os
import threading
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Mapping, Optional, Tuple

from vigil._client import Client, JobEnv, Status, StatusCode, after_fork_in_child

__all__ = [
    "instrument_torch_distributed",
    "uninstrument_torch_distributed",
    "collective",
    "enable",
    "disable",
    "flush",
    "get_recorder",
    "Recorder",
    "COLLECTIVES",
]

COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "broadcast",
    "reduce_scatter",
    "barrier",
    "all_to_all",
    "reduce",
    "gather",
    "scatter",
    "all_gather_into_tensor",
    "reduce_scatter_tensor",
    "all_to_all_single",
    "monitored_barrier",
    "all_gather_object",
    "broadcast_object_list",
    "gather_object",
    "scatter_object_list",
    "all_reduce_coalesced",
)
DEFAULT_FLUSH_SECONDS = 1.0
DEFAULT_CAPACITY = 65536  # events kept when the console cannot take them
MAX_OPEN = 1024  # open collectives remembered (async work may overlap)
MAX_RECORDS_PER_POST = 5000

Event = Tuple[int, str, float, Optional[float]]  # (seq, op, enter, exit or None)


class Recorder:
    """One rank's collective records: a lock-free ring buffer written by the
    instrumented calls, drained by one flusher thread."""

    def __init__(
        self,
        client: Client,
        *,
        rank: Optional[int] = None,
        attempt: Optional[int] = None,
        flush_seconds: float = DEFAULT_FLUSH_SECONDS,
        capacity: int = DEFAULT_CAPACITY,
    ):
        self._client = client
        self._rank = rank
        self.attempt = attempt if attempt is not None else 0
        self.flush_seconds = flush_seconds
        self.capacity = capacity
        self._reset()
        after_fork_in_child(self)

    def _reset(self) -> None:
        self._events: Deque[Event] = deque(maxlen=self.capacity)
        self._seq = itertools.count(1)
        self._open: Dict[int, Event] = {}  # flusher-side state only
        self._unsent: List[Event] = []
        self._flush_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = False
        self._thread: Optional[threading.Thread] = None
        self.last_status: Optional[Status] = None

    def _after_fork_in_child(self) -> None:
        # The parent reports its own collectives; a child starts its own count.
        self._reset()

    # -- the hot path: no I/O, no locks ------------------------------------------

    def enter(self, op: str) -> Tuple[int, str, float]:
        if self._thread is None:
            self._start()
        seq = next(self._seq)
        started = time.time()
        self._events.append((seq, op, started, None))
        return seq, op, started

    def exit(self, opened: Tuple[int, str, float]) -> None:
        self._events.append((opened[0], opened[1], opened[2], time.time()))

    # -- the flusher ---------------------------------------------------------------

    @property
    def rank(self) -> int:
        if self._rank is not None:
            return self._rank
        try:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                return int(dist.get_rank())
        except Exception:
            pass
        return 0

    def _start(self) -> None:
        with self._flush_lock:
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(target=self._run, name="vigil-c4d", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while not self._stopped:
            self._wake.wait(self.flush_seconds)
            self._wake.clear()
            if self._stopped:
                break
            self.flush()

    def _drain(self) -> List[Event]:
        """Move buffered events into completed records and the open set."""
        completed: List[Event] = []
        events = self._events
        while True:
            try:
                event = events.popleft()
            except IndexError:
                break
            if event[3] is None:
                self._open[event[0]] = event
                if len(self._open) > MAX_OPEN:
                    del self._open[min(self._open)]
            else:
                self._open.pop(event[0], None)
                completed.append(event)
        return completed

    def flush(self, timeout: Optional[float] = None) -> Status:
        """Send what was recorded since the last flush plus every open collective."""
        try:
            with self._flush_lock:
                self._unsent.extend(self._drain())
                if len(self._unsent) > self.capacity:
                    del self._unsent[: len(self._unsent) - self.capacity]
                if not self._unsent and not self._open:
                    return Status(StatusCode.OK, "nothing to report")
                status = Status(StatusCode.OK)
                while True:
                    batch = self._unsent[:MAX_RECORDS_PER_POST]
                    last = len(self._unsent) <= MAX_RECORDS_PER_POST
                    open_now = sorted(self._open.values()) if last else []
                    body = {
                        "rank": self.rank,
                        "attempt": self.attempt,
                        "records": [
                            {"seq": s, "op": op, "enter": enter, "exit": exit_}
                            for s, op, enter, exit_ in batch + open_now
                        ],
                    }
                    status = self._client.post("c4d", body, timeout=timeout)
                    self.last_status = status
                    if not status.ok():
                        # Keep them for the next flush (bounded by capacity); a
                        # rejected batch (4xx) would be rejected again: drop it.
                        if (
                            status.http_status is not None
                            and 400 <= status.http_status < 500
                            and status.code is not StatusCode.RATE_LIMITED
                        ):
                            del self._unsent[: len(batch)]
                        return status
                    del self._unsent[: len(batch)]
                    if not self._unsent:
                        return status
        except Exception as exc:
            status = Status(StatusCode.INTERNAL, "vigil SDK error: %r" % (exc,))
            self.last_status = status
            return status

    def stop(self, timeout: Optional[float] = None) -> Status:
        """Stop the flusher after a last flush."""
        self._stopped = True
        self._wake.set()
        return self.flush(timeout)


class _Collective:
    """`with collective("op"):` -- records enter and exit, also when the body raises."""

    __slots__ = ("_op", "_opened", "_recorder")

    def __init__(self, op: str, recorder: Optional[Recorder]):
        self._op = op
        self._recorder = recorder
        self._opened = None

    def __enter__(self) -> "_Collective":
        if self._recorder is not None:
            self._opened = self._recorder.enter(self._op)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._opened is not None:
            self._recorder.exit(self._opened)  # type: ignore[union-attr]


_lock = threading.Lock()
_recorder: Optional[Recorder] = None
_originals: Dict[str, Callable[..., Any]] = {}


def enable(
    environ: Optional[Mapping[str, str]] = None,
    *,
    flush_seconds: Optional[float] = None,
    timeout: Optional[float] = None,
) -> Recorder:
    """Start recording collectives for this process's job (idempotent)."""
    global _recorder
    with _lock:
        if _recorder is None:
            env = JobEnv.from_environ(environ)
            if flush_seconds is None:
                flush_seconds = _env_seconds(environ, "VIGIL_C4D_FLUSH_SECONDS", DEFAULT_FLUSH_SECONDS)
            _recorder = Recorder(
                Client(env, timeout=timeout), rank=env.rank, attempt=env.attempt, flush_seconds=flush_seconds
            )
        return _recorder


def disable(timeout: Optional[float] = None) -> Optional[Status]:
    """Flush what was recorded and stop recording."""
    global _recorder
    with _lock:
        recorder, _recorder = _recorder, None
    return recorder.stop(timeout) if recorder is not None else None


def get_recorder() -> Optional[Recorder]:
    return _recorder


def flush(timeout: Optional[float] = None) -> Status:
    recorder = _recorder
    if recorder is None:
        return Status(StatusCode.OK, "C4D recording is off")
    return recorder.flush(timeout)


def _env_seconds(environ: Optional[Mapping[str, str]], name: str, default: float) -> float:
    raw = (os.environ if environ is None else environ).get(name, "")
    try:
        value = float(raw)
        return value if value > 0 else default
    except ValueError:
        return default


def _enabled_by_env() -> bool:
    return os.environ.get("VIGIL_C4D", "").strip() == "1"


def collective(op_name: str) -> _Collective:
    """Context manager timing one collective of code that does not use torch.
    Records only when C4D is on (VIGIL_C4D=1 or enable())."""
    recorder = _recorder
    if recorder is None and _enabled_by_env():
        recorder = enable()
    return _Collective(op_name, recorder)


def _wrap(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def instrumented(*args: Any, **kwargs: Any) -> Any:
        recorder = _recorder
        if recorder is None:
            return original(*args, **kwargs)
        opened = recorder.enter(name)
        try:
            result = original(*args, **kwargs)
        except BaseException:
            recorder.exit(opened)
            raise
        if result is not None and hasattr(result, "get_future"):
            # async_op=True: the collective ends when its work completes.
            try:
                result.get_future().add_done_callback(lambda _fut: recorder.exit(opened))
            except Exception:
                recorder.exit(opened)  # no future for this backend: enqueue time only
        else:
            recorder.exit(opened)
        return result

    instrumented.__vigil_c4d__ = True  # type: ignore[attr-defined]
    return instrumented


def instrument_torch_distributed(enabled: Optional[bool] = None) -> bool:
    """Wrap torch.distributed's collectives so each call is recorded.

    enabled=None follows VIGIL_C4D=1. Returns True when the collectives are
    instrumented, False when C4D is off or torch.distributed is not available.
    Never raises: instrumentation must not stop a job from training.
    """
    try:
        if enabled is None:
            enabled = _enabled_by_env()
        if not enabled:
            return False
        import torch.distributed as dist

        if not dist.is_available():
            return False
        enable()
        with _lock:
            for name in COLLECTIVES:
                current = getattr(dist, name, None)
                if current is None or getattr(current, "__vigil_c4d__", False):
                    continue
                _originals[name] = current
                setattr(dist, name, _wrap(name, current))
        return True
    except Exception:
        return False


def uninstrument_torch_distributed() -> None:
    """Put torch.distributed's own collectives back."""
    if not _originals:
        return
    try:
        import torch.distributed as dist
    except Exception:
        return
    with _lock:
        for name, original in list(_originals.items()):
            setattr(dist, name, original)
            del _originals[name]


@atexit.register
def _flush_at_exit() -> None:
    recorder = _recorder
    if recorder is not None:
        try:
            recorder.stop()
        except Exception:
            pass
