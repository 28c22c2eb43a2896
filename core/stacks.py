"""Stack snapshots of hung jobs: dump every rank's Python stacks, aggregate identical ones.

The pure part (`parse_py_spy_json`, `aggregate_stacks`, `StackSnapshot`) works on
dataclasses; the shell part (`dump_process_stacks`, `dump_processes`,
`find_python_processes`) runs py-spy and reads the process tree with psutil.

A stack is the frame sequence of one thread, innermost frame first, identified by
(function, file, line) per frame. Files are compared by py-spy's short name
(relative to sys.path, e.g. ``torch/distributed/distributed_c10d.py``) so that the
same code installed under different prefixes on different nodes still matches.
Stacks shared by exactly one thread are *suspects* (SPEC 6): in a hung job most
ranks wait in the same place and the odd one out is where to look.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import psutil

# Why a dump may fail; the shells turn these into a diagnosis, never an exception.
PY_SPY_MISSING = "py-spy-missing"
PROCESS_GONE = "process-gone"
PERMISSION_DENIED = "permission-denied"
NOT_PYTHON = "not-python"
TIMEOUT = "timeout"
DUMP_FAILED = "dump-failed"

# Top frames that mean "this thread is parked, waiting for work": flagged, never dropped.
_IDLE_FILES = {
    "threading.py", "selectors.py", "queue.py", "socketserver.py", "thread.py",
    "base_events.py", "connection.py", "popen_fork.py",
}
_IDLE_FUNCTIONS = {"wait", "select", "poll", "get", "accept", "_worker", "_recv", "recv",
                   "_run_once", "serve_forever", "epoll", "join"}


@dataclass(frozen=True)
class Frame:
    function: str
    file: str          # short name used for identity ("torch/distributed/distributed_c10d.py")
    line: int
    path: str = ""     # full path on the node that was dumped, for display

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.function, self.file, self.line)

    def describe(self) -> str:
        return f"{self.function} ({self.file}:{self.line})"


@dataclass(frozen=True)
class ThreadStack:
    thread_id: int
    thread_name: str
    frames: tuple[Frame, ...]      # innermost first, as py-spy prints them
    os_thread_id: int | None = None
    active: bool = False
    owns_gil: bool = False

    @property
    def idle(self) -> bool:
        """Parked in the standard library waiting for work (a queue, a selector, an event)."""
        if not self.frames:
            return True
        top = self.frames[0]
        base = os.path.basename(top.file)
        name = top.function.rsplit(".", 1)[-1]
        return base in _IDLE_FILES and name in _IDLE_FUNCTIONS


@dataclass(frozen=True)
class ProcessStacks:
    """One process's dump, or why there is none (error_code set, threads empty)."""

    pid: int
    instance: str = ""
    rank: int | None = None
    threads: tuple[ThreadStack, ...] = ()
    error_code: str = ""
    error: str = ""
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.error_code

    def describe(self) -> str:
        who = f"{self.instance or 'pid'} (pid {self.pid}" + (
            f", rank {self.rank})" if self.rank is not None else ")")
        if self.ok:
            return f"{who}: {len(self.threads)} thread(s)"
        return f"{who}: no stacks: {self.error}"


@dataclass(frozen=True)
class ThreadRef:
    instance: str
    rank: int | None
    pid: int
    thread_id: int
    thread_name: str

    def describe(self) -> str:
        rank = f" rank {self.rank}" if self.rank is not None else ""
        return f"{self.instance or 'pid ' + str(self.pid)}{rank} pid {self.pid} thread {self.thread_name}"


@dataclass(frozen=True)
class AggregatedStack:
    frames: tuple[Frame, ...]
    threads: tuple[ThreadRef, ...]
    suspect: bool
    idle: bool

    @property
    def count(self) -> int:
        return len(self.threads)

    @property
    def top(self) -> str:
        return self.frames[0].describe() if self.frames else "(no Python frames)"

    def to_dict(self) -> dict:
        return {
            "count": self.count,
            "suspect": self.suspect,
            "idle": self.idle,
            "frames": [
                {"function": f.function, "file": f.file, "line": f.line, "path": f.path}
                for f in self.frames
            ],
            "threads": [
                {"instance": t.instance, "rank": t.rank, "pid": t.pid,
                 "thread_id": t.thread_id, "thread_name": t.thread_name}
                for t in self.threads
            ],
        }


# --- pure core -----------------------------------------------------------------

def parse_py_spy_json(text: str, pid: int, instance: str = "", rank: int | None = None,
                      duration_s: float = 0.0) -> ProcessStacks:
    """Turn `py-spy dump --json` output into ProcessStacks; bad JSON becomes an error result."""
    try:
        raw = json.loads(text)
        if not isinstance(raw, list):
            raise ValueError("expected a JSON list of threads")
        threads = []
        for t in raw:
            frames = tuple(
                Frame(
                    function=str(f.get("name") or "?"),
                    file=str(f.get("short_filename") or f.get("filename") or "?"),
                    line=int(f.get("line") or 0),
                    path=str(f.get("filename") or ""),
                )
                for f in t.get("frames") or ()
            )
            threads.append(ThreadStack(
                thread_id=int(t.get("thread_id") or 0),
                thread_name=str(t.get("thread_name") or t.get("os_thread_id") or t.get("thread_id")),
                frames=frames,
                os_thread_id=t.get("os_thread_id"),
                active=bool(t.get("active")),
                owns_gil=bool(t.get("owns_gil")),
            ))
    except (ValueError, TypeError, AttributeError) as exc:
        return ProcessStacks(pid=pid, instance=instance, rank=rank, error_code=DUMP_FAILED,
                             error=f"py-spy printed output that is not a stack dump: {exc}",
                             duration_s=duration_s)
    return ProcessStacks(pid=pid, instance=instance, rank=rank, threads=tuple(threads),
                         duration_s=duration_s)


def aggregate_stacks(dumps: Sequence[ProcessStacks]) -> list[AggregatedStack]:
    """Group identical stacks across processes and threads.

    Sorted suspects first (busy before idle), then by count ascending, so the
    rarest stacks, where a hang usually is, come first. Suspects need at least two
    threads to compare: a lone thread is not "different from the others".
    """
    groups: dict[tuple, list[tuple[ThreadStack, ThreadRef]]] = {}
    for dump in dumps:
        for thread in dump.threads:
            key = tuple(f.key for f in thread.frames)
            ref = ThreadRef(dump.instance, dump.rank, dump.pid, thread.thread_id, thread.thread_name)
            groups.setdefault(key, []).append((thread, ref))
    total = sum(len(members) for members in groups.values())
    out = []
    for members in groups.values():
        first = members[0][0]
        refs = tuple(sorted((r for _, r in members),
                            key=lambda r: (r.rank if r.rank is not None else 1 << 30,
                                           r.instance, r.pid, r.thread_id)))
        out.append(AggregatedStack(
            frames=first.frames, threads=refs,
            suspect=len(members) == 1 and total > 1, idle=first.idle,
        ))
    out.sort(key=lambda s: (not s.suspect, s.idle, s.count, s.top))
    return out


@dataclass(frozen=True)
class StackSnapshot:
    """The dumps of one hang and their aggregation: what the monitor stores and shows."""

    dumps: tuple[ProcessStacks, ...]
    stacks: tuple[AggregatedStack, ...] = field(default=())

    @classmethod
    def of(cls, dumps: Iterable[ProcessStacks]) -> "StackSnapshot":
        dumps = tuple(dumps)
        return cls(dumps=dumps, stacks=tuple(aggregate_stacks(dumps)))

    @property
    def suspects(self) -> tuple[AggregatedStack, ...]:
        return tuple(s for s in self.stacks if s.suspect)

    @property
    def failed(self) -> tuple[ProcessStacks, ...]:
        return tuple(d for d in self.dumps if not d.ok)

    def summary_text(self, max_frames: int = 8) -> str:
        return summary_text(self.stacks, self.dumps, max_frames=max_frames)

    def to_dict(self) -> dict:
        return {
            "processes": [
                {"instance": d.instance, "rank": d.rank, "pid": d.pid, "ok": d.ok,
                 "error_code": d.error_code, "error": d.error, "threads": len(d.threads),
                 "duration_s": round(d.duration_s, 4)}
                for d in self.dumps
            ],
            "stacks": [s.to_dict() for s in self.stacks],
        }


def summary_text(stacks: Sequence[AggregatedStack], dumps: Sequence[ProcessStacks] = (),
                 max_frames: int = 8) -> str:
    """Plain text for the monitor log: counts, suspects first, each stack's innermost frames."""
    ok = [d for d in dumps if d.ok]
    lines = []
    if dumps:
        lines.append(f"Stack snapshot of {len(dumps)} process(es): {len(ok)} dumped, "
                     f"{len(dumps) - len(ok)} not; {sum(s.count for s in stacks)} thread(s) "
                     f"in {len(stacks)} distinct stack(s), "
                     f"{sum(1 for s in stacks if s.suspect)} suspect(s).")
    for d in dumps:
        if not d.ok:
            lines.append(f"  ! {d.describe()}")
    for i, s in enumerate(stacks, 1):
        tags = [t for t, on in (("SUSPECT", s.suspect), ("idle", s.idle)) if on]
        where = "; ".join(t.describe() for t in s.threads[:4])
        if s.count > 4:
            where += f"; and {s.count - 4} more"
        lines.append(f"#{i} x{s.count}{' [' + ', '.join(tags) + ']' if tags else ''}: {where}")
        for f in s.frames[:max_frames]:
            lines.append(f"    {f.describe()}")
        if len(s.frames) > max_frames:
            lines.append(f"    ... {len(s.frames) - max_frames} outer frame(s)")
    return "\n".join(lines)


# --- shells: py-spy and the process tree ---------------------------------------

def find_py_spy() -> str | None:
    """py-spy next to this interpreter (the venv) first, then on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("py-spy")


def _error_code_for(stderr: str, pid: int) -> tuple[str, str]:
    text = stderr.lower()
    first = next((ln.strip() for ln in stderr.splitlines() if ln.strip().startswith("Error")),
                 stderr.strip().splitlines()[0] if stderr.strip() else "no output")
    try:
        if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return PROCESS_GONE, f"process {pid} has exited (a zombie not yet reaped)"
    except psutil.NoSuchProcess:
        return PROCESS_GONE, f"process {pid} is gone"
    except psutil.Error:
        pass
    if "permission denied" in text or "operation not permitted" in text:
        return PERMISSION_DENIED, (f"no permission to read process {pid} (py-spy needs ptrace: "
                                   f"run as the same user or root, or CAP_SYS_PTRACE): {first}")
    if "failed to find python version" in text or "not a python" in text \
            or "failed to find a python interpreter" in text:
        return NOT_PYTHON, f"process {pid} is not a Python program: {first}"
    if "check that the process is running" in text or "no such process" in text:
        return PROCESS_GONE, f"process {pid} is gone: {first}"
    return DUMP_FAILED, f"py-spy could not dump process {pid}: {first}"


def dump_process_stacks(pid: int, timeout: float = 5.0, instance: str = "",
                        rank: int | None = None, py_spy: str | None = None) -> ProcessStacks:
    """Dump one process's Python stacks with `py-spy dump --json`. Never raises for a
    process that cannot be dumped: the result carries error_code and error instead."""
    started = time.monotonic()

    def failed(code: str, message: str) -> ProcessStacks:
        return ProcessStacks(pid=pid, instance=instance, rank=rank, error_code=code,
                             error=message, duration_s=time.monotonic() - started)

    exe = py_spy or find_py_spy()
    if not exe:
        return failed(PY_SPY_MISSING, "py-spy is not installed (pip install py-spy) "
                                      "next to this Python or on PATH")
    try:
        done = subprocess.run([exe, "dump", "--json", "--pid", str(pid)],
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return failed(TIMEOUT, f"py-spy took longer than {timeout:g} s to dump process {pid}")
    except OSError as exc:
        return failed(PY_SPY_MISSING, f"py-spy at {exe} cannot run: {exc}")
    if done.returncode != 0:
        return failed(*_error_code_for(done.stderr, pid))
    return parse_py_spy_json(done.stdout, pid, instance, rank, time.monotonic() - started)


def dump_processes(targets: Sequence[tuple[str, int | None, int]], timeout: float = 5.0,
                   parallel: int = 4, py_spy: str | None = None) -> list[ProcessStacks]:
    """Dump (instance, rank, pid) targets concurrently; results in the targets' order."""
    if not targets:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(targets)))) as pool:
        futures = [pool.submit(dump_process_stacks, pid, timeout, instance, rank, py_spy)
                   for instance, rank, pid in targets]
        return [f.result() for f in futures]


def _is_python(proc) -> bool:
    try:
        names = [os.path.basename(proc.exe() or "")]
    except (psutil.Error, OSError):
        names = []
    try:
        cmd = proc.cmdline()
        if cmd:
            names.append(os.path.basename(cmd[0]))
    except (psutil.Error, OSError):
        pass
    return any(n.startswith("python") or n.startswith("pypy") for n in names)


def find_python_processes(root_pids: Iterable[int]) -> list[int]:
    """Python processes among the roots and their descendants (a shell or launcher's
    training processes), in tree order, without duplicates or zombies."""
    seen: set[int] = set()
    found: list[int] = []
    for root in root_pids:
        try:
            top = psutil.Process(root)
            tree = [top] + top.children(recursive=True)
        except psutil.Error:
            continue
        for proc in tree:
            if proc.pid in seen:
                continue
            seen.add(proc.pid)
            try:
                if proc.status() == psutil.STATUS_ZOMBIE:
                    continue
            except psutil.Error:
                continue
            if _is_python(proc):
                found.append(proc.pid)
    return found
