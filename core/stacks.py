"""Stack snapshots of hung jobs: dump every rank's Python stacks, aggregate identical ones.

The pure part (`parse_py_spy_json`, `aggregate_stacks`, `StackSnapshot`) works on
dataclasses; the shell part (`dump_process_stacks`, `dump_processes`,
`find_python_processes`) runs py-spy and reads the process tree with psutil.

A stack is the frame sequence of one thread, innermost frame first, identified by
(function, file, line) per frame. Files are compared by py-spy's short name
(relative to sys.path, e.g. ``torch/distributed/distributed_c10d.py``) so that the
same code installed under different prefixes on different nodes still matches.
Which processes are *suspects* is decided by evidence, strongest first (SPEC 6,
`find_culprits`): a rank outside every collective while its peers wait in one; a
rank in a different collective from its peers (a lower sequence number where C4D
gives one, else a different operation); a rank whose stack differs from the
majority's outside its waits; only then the odd one out. Vigil's own threads,
launchers and idle helper threads are shown but never suspects, and when the
evidence points nowhere there is no suspect. The rules compare processes, not
threads, so they hold for 2 ranks as for 1,000.
"""

from __future__ import annotations

import json
import os
from collections import Counter
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import psutil

from core.classify import Classification, ErrorSource

# Why a dump may fail; the shells turn these into a diagnosis, never an exception.
PY_SPY_MISSING = "py-spy-missing"
PROCESS_GONE = "process-gone"
PERMISSION_DENIED = "permission-denied"
NOT_PYTHON = "not-python"
TIMEOUT = "timeout"
DUMP_FAILED = "dump-failed"

# Top frames that mean "this thread is parked, waiting for work": flagged, never dropped.
_IDLE_FILES = {
    "threading.py",
    "selectors.py",
    "queue.py",
    "socketserver.py",
    "thread.py",
    "base_events.py",
    "connection.py",
    "popen_fork.py",
}
_IDLE_FUNCTIONS = {
    "wait",
    "select",
    "poll",
    "get",
    "accept",
    "_worker",
    "_recv",
    "recv",
    "_run_once",
    "serve_forever",
    "epoll",
    "join",
}


# torch.distributed functions a rank blocks in while it waits for its peers. Matched on
# the innermost such frame in a file under torch/distributed/ (py-spy's short name).
COLLECTIVES = frozenset(
    {
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
        "send",
        "recv",
        "batch_isend_irecv",
        "_store_based_barrier",
        "wait",
    }
)
# Frames of processes that launch ranks rather than train (torchrun's agent): never suspects.
_LAUNCHER_FILES = ("torch/distributed/elastic/", "torch/distributed/run.py", "torch/distributed/launch.py")

# The evidence a suspect was found by, strongest first.
RULE_NEVER_ENTERED = "never-entered"  # the recorder: peers are inside a collective it never entered
RULE_NEVER_RETURNED = "never-returned"  # the recorder counts its collective done, its stack is still in it
RULE_RECORDED_DESYNC = "recorded-desync"  # the recorder: inside another collective than its peers
RULE_OUTSIDE_COLLECTIVE = "outside-collective"
RULE_DESYNC = "desync"
RULE_DIFFERENT_FRAME = "different-frame"
RULE_ODD_ONE_OUT = "odd-one-out"
RULES = (
    RULE_NEVER_ENTERED,
    RULE_NEVER_RETURNED,
    RULE_RECORDED_DESYNC,
    RULE_OUTSIDE_COLLECTIVE,
    RULE_DESYNC,
    RULE_DIFFERENT_FRAME,
    RULE_ODD_ONE_OUT,
)


@dataclass(frozen=True)
class RecordedCollective:
    """What one rank did last by its collective records (PyTorch's Flight Recorder, else the
    SDK's reports): the collective it is inside, or the last one it entered and left. The
    recorder sees what the stacks cannot: DDP launches its gradient all-reduce from autograd
    hooks in C++, so a rank waiting there shows only `backward` in Python."""

    seq: int  # 0: it has entered none
    op: str
    inside: bool

    def describe(self) -> str:
        return f"{self.op} #{self.seq}" if self.seq else "no collective"


def recorded_positions(records: Mapping[int, Iterable]) -> dict[int, RecordedCollective]:
    """rank -> RecordedCollective from core.c4d records (anything with seq, op, exit): the
    highest collective it is inside, else the last it entered."""
    out: dict[int, RecordedCollective] = {}
    for rank, recs in records.items():
        recs = list(recs)
        inside = [r for r in recs if r.exit is None]
        last = max(inside or recs, key=lambda r: r.seq, default=None)
        out[int(rank)] = (
            RecordedCollective(last.seq, last.op, last.exit is None) if last else RecordedCollective(0, "", False)
        )
    return out


@dataclass(frozen=True)
class Frame:
    function: str
    file: str  # short name used for identity ("torch/distributed/distributed_c10d.py")
    line: int
    path: str = ""  # full path on the node that was dumped, for display

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.function, self.file, self.line)

    def describe(self) -> str:
        return f"{self.function} ({self.file}:{self.line})"


@dataclass(frozen=True)
class ThreadStack:
    thread_id: int
    thread_name: str
    frames: tuple[Frame, ...]  # innermost first, as py-spy prints them
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

    @property
    def vigil(self) -> bool:
        """One of Vigil's own SDK threads (progress reporter, C4D flusher, HTTP sender).

        Told by the thread's name or by code of the vigil package on a thread other than
        the main one: the main thread runs through vigil/c4d.py's collective wrapper."""
        if self.thread_name.startswith("vigil-"):
            return True
        return self.thread_name != "MainThread" and any(_in_vigil(f) for f in self.frames)

    @cached_property
    def collective(self) -> Frame | None:
        """The torch.distributed call this thread waits in for its peers: a collective
        by name anywhere in the stack, else an innermost own frame in torch/distributed/
        (DDP's start-up parameter check, the rendezvous: C++ below it waits for peers)."""
        named = next((f for f in self.frames if _is_collective(f)), None)
        if named is not None:
            return named
        own = next((f for f in self.frames if not _is_wait(f) or _in_torch_distributed(f)), None)
        return own if own is not None and _in_torch_distributed(own) else None


@lru_cache(maxsize=1 << 16)
def _in_vigil(frame: Frame) -> bool:
    return frame.file.startswith("vigil/") or "/vigil/" in frame.file


@lru_cache(maxsize=1 << 16)
def _in_torch_distributed(frame: Frame) -> bool:
    return frame.file.startswith("torch/distributed/") or "/torch/distributed/" in frame.file


@lru_cache(maxsize=1 << 16)
def _is_collective(frame: Frame) -> bool:
    return _in_torch_distributed(frame) and frame.function.rsplit(".", 1)[-1] in COLLECTIVES


@lru_cache(maxsize=1 << 16)  # a thousand ranks repeat the same frames
def _is_wait(frame: Frame) -> bool:
    """A frame that only waits: in torch.distributed, in Vigil's wrapper, or parked stdlib."""
    if _in_torch_distributed(frame) or _in_vigil(frame):
        return True
    name = frame.function.rsplit(".", 1)[-1]
    return os.path.basename(frame.file) in _IDLE_FILES and name in _IDLE_FUNCTIONS


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
        who = f"{self.instance or 'pid'} (pid {self.pid}" + (f", rank {self.rank})" if self.rank is not None else ")")
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
class Suspect:
    """One suspect process, the thread that gave the evidence, and why in one sentence."""

    thread: ThreadRef
    rule: str
    why: str  # one sentence for the snapshot
    where: str  # the function it is stuck in ("compute_forever", "barrier")
    frame: Frame | None

    def to_dict(self) -> dict:
        return {
            "instance": self.thread.instance,
            "rank": self.thread.rank,
            "pid": self.thread.pid,
            "thread_id": self.thread.thread_id,
            "thread_name": self.thread.thread_name,
            "rule": self.rule,
            "why": self.why,
            "where": self.where,
        }


@dataclass(frozen=True)
class Culprits:
    """What the stacks say about who hangs: suspects strongest first, or none and why.

    `why` is one sentence for the snapshot; `cause` and `next_step` are for the hang's
    restart record ("worker-0 stopped making progress in `compute_forever` while
    master-0 waited in `all_reduce`")."""

    suspects: tuple[Suspect, ...]
    why: str
    cause: str
    next_step: str

    def to_dict(self) -> dict:
        return {
            "suspects": [s.to_dict() for s in self.suspects],
            "why": self.why,
            "cause": self.cause,
            "next_step": self.next_step,
        }


@dataclass(frozen=True)
class AggregatedStack:
    frames: tuple[Frame, ...]
    threads: tuple[ThreadRef, ...]
    suspect: bool
    idle: bool
    vigil: bool = False
    why: str = ""  # why it is a suspect, one sentence ("" when it is not)

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
            "vigil": self.vigil,
            "why": self.why,
            "frames": [{"function": f.function, "file": f.file, "line": f.line, "path": f.path} for f in self.frames],
            "threads": [
                {
                    "instance": t.instance,
                    "rank": t.rank,
                    "pid": t.pid,
                    "thread_id": t.thread_id,
                    "thread_name": t.thread_name,
                }
                for t in self.threads
            ],
        }


# --- pure core -----------------------------------------------------------------


def parse_py_spy_json(
    text: str, pid: int, instance: str = "", rank: int | None = None, duration_s: float = 0.0
) -> ProcessStacks:
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
            threads.append(
                ThreadStack(
                    thread_id=int(t.get("thread_id") or 0),
                    thread_name=str(t.get("thread_name") or t.get("os_thread_id") or t.get("thread_id")),
                    frames=frames,
                    os_thread_id=t.get("os_thread_id"),
                    active=bool(t.get("active")),
                    owns_gil=bool(t.get("owns_gil")),
                )
            )
    except (ValueError, TypeError, AttributeError) as exc:
        return ProcessStacks(
            pid=pid,
            instance=instance,
            rank=rank,
            error_code=DUMP_FAILED,
            error=f"py-spy printed output that is not a stack dump: {exc}",
            duration_s=duration_s,
        )
    return ProcessStacks(pid=pid, instance=instance, rank=rank, threads=tuple(threads), duration_s=duration_s)


def aggregate_stacks(dumps: Sequence[ProcessStacks], culprits: Culprits | None = None) -> list[AggregatedStack]:
    """Group identical stacks across processes and threads.

    A stack is a suspect when it holds a suspect's thread (`find_culprits`, computed
    here when not given). Sorted suspects first, strongest evidence first; then busy
    stacks before idle and Vigil's own, each by count ascending, so the rarest come first.
    """
    if culprits is None:
        culprits = find_culprits(dumps)
    order = {(s.thread.instance, s.thread.pid, s.thread.thread_id): i for i, s in enumerate(culprits.suspects)}
    groups: dict[tuple, list[tuple[ThreadStack, ThreadRef]]] = {}
    for dump in dumps:
        for thread in dump.threads:
            key = tuple(f.key for f in thread.frames)
            ref = ThreadRef(dump.instance, dump.rank, dump.pid, thread.thread_id, thread.thread_name)
            groups.setdefault(key, []).append((thread, ref))
    out = []
    for members in groups.values():
        first = members[0][0]
        refs = tuple(
            sorted(
                (r for _, r in members),
                key=lambda r: (r.rank if r.rank is not None else 1 << 30, r.instance, r.pid, r.thread_id),
            )
        )
        found = sorted(
            order[(r.instance, r.pid, r.thread_id)] for r in refs if (r.instance, r.pid, r.thread_id) in order
        )
        why = culprits.suspects[found[0]].why if found else ""
        if len(found) > 1:
            why += f" {len(found) - 1} more suspect(s) share this stack."
        out.append(
            AggregatedStack(
                frames=first.frames,
                threads=refs,
                suspect=bool(found),
                idle=first.idle,
                vigil=all(t.vigil for t, _ in members),
                why=why,
            )
        )
    first_suspect = {
        id(s): min(
            order[(r.instance, r.pid, r.thread_id)] for r in s.threads if (r.instance, r.pid, r.thread_id) in order
        )
        for s in out
        if s.suspect
    }
    out.sort(key=lambda s: (not s.suspect, first_suspect.get(id(s), 0), s.idle or s.vigil, s.count, s.top))
    return out


# --- culprits ------------------------------------------------------------------


@dataclass(frozen=True)
class _Position:
    """Where one process stands: the thread that tells (the one in a collective, else
    the main thread) and the collective it waits in, if any."""

    ref: ThreadRef
    thread: ThreadStack
    label: str  # "worker-0 (rank 1)"
    name: str  # "worker-0"

    @property
    def collective(self) -> Frame | None:
        return self.thread.collective

    @property
    def op(self) -> str:
        return _short(self.collective.function) if self.collective else ""

    @property
    def innermost(self) -> Frame | None:
        return self.thread.frames[0] if self.thread.frames else None

    @property
    def innermost_busy(self) -> Frame | None:
        """The innermost frame that is not a wait: where its own code stands."""
        return next((f for f in self.thread.frames if not _is_wait(f)), self.innermost)

    def signature(self, without_waits: bool) -> tuple:
        return tuple(f.key for f in self.thread.frames if not (without_waits and _is_wait(f)))


def _short(function: str) -> str:
    """`Tensor.backward` stays, `_exception_logger.<locals>.wrapper` becomes `wrapper`."""
    return function.rsplit("<locals>.", 1)[-1]


def _is_launcher(dump: ProcessStacks) -> bool:
    return any(
        f.file.startswith(_LAUNCHER_FILES) or any(p in f.file for p in _LAUNCHER_FILES)
        for t in dump.threads
        for f in t.frames
    )


def _positions(dumps: Sequence[ProcessStacks]) -> list[_Position]:
    usable = [d for d in dumps if d.ok and d.threads and not _is_launcher(d)]
    names = [d.instance or f"pid {d.pid}" for d in usable]
    seen = Counter(names)
    out = []
    for dump, name in zip(usable, names):
        if seen[name] > 1:
            name = f"{name} pid {dump.pid}"
        candidates = [t for t in dump.threads if not t.vigil]
        in_collective = [t for t in candidates if t.collective is not None]
        main = next((t for t in candidates if t.thread_name == "MainThread" or t.os_thread_id == dump.pid), None)
        busy = [t for t in candidates if not t.idle]
        thread = in_collective[0] if in_collective else main or (busy[0] if busy else None)
        if thread is None:
            continue  # only Vigil's threads and parked helpers: nothing to judge
        label = name + (f" (rank {dump.rank})" if dump.rank is not None else "")
        ref = ThreadRef(dump.instance, dump.rank, dump.pid, thread.thread_id, thread.thread_name)
        out.append(_Position(ref, thread, label, name))
    return out


def _names(items: Sequence[str], limit: int = 3) -> str:
    if len(items) > limit:
        return f"{len(items)} ranks ({', '.join(items[:limit])}, …)"
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _where(frame: Frame | None) -> str:
    return f"{_short(frame.function)} ({frame.file}:{frame.line})" if frame else "(no Python frames)"


def _majority(positions: Sequence[_Position], key) -> tuple[list[_Position], list[_Position]]:
    """(the strict majority sharing one key, everyone else); ([], []) when no group has
    more than half, or when everyone agrees."""
    groups: dict = {}
    for p in positions:
        groups.setdefault(key(p), []).append(p)
    if len(groups) < 2:
        return [], []
    largest = max(groups.values(), key=len)
    if 2 * len(largest) <= len(positions):
        return [], []
    inside = {id(p) for p in largest}  # by identity: comparing positions compares whole stacks
    return largest, [p for p in positions if id(p) not in inside]


def _most_common(values: Sequence[str]) -> str:
    return max(sorted(set(values)), key=values.count) if values else ""


def find_culprits(
    dumps: Sequence[ProcessStacks],
    sequences: Mapping[int, int] | None = None,
    recorded: Mapping[int, RecordedCollective] | None = None,
) -> Culprits:
    """Rank the processes of a hung job by evidence, strongest first.

    0. what the ranks did (`recorded`, rank -> its collective records' last position,
       from PyTorch's Flight Recorder or the SDK), before any frame name:
       never-entered: peers are inside collective N, it never entered N, whatever its
       stack shows; never-returned: the same, but its stack is inside a torch.distributed
       collective the recorder counts as done (its call never returned: hung in
       communication); recorded-desync: every rank is inside a collective, it in another
       (a lower seq, or the minority's op at the same seq). A rank inside the collective
       its peers wait for is waiting, not guilty, even where its stack shows `backward`;
       every rank inside the same one: no suspect, the collective itself is stuck.
    1. outside-collective: not inside any collective while peers wait in one (a hang
       in compute, stuck I/O, a deadlock): the collective waits for it;
    2. desync: inside a different collective from its peers: a lower sequence number
       (`sequences`, rank -> the number of the collective it is in, from C4D) or, with
       no numbers, a different operation than the majority;
    3. different-frame: its stack differs from the majority's in a frame that is not a
       wait (torch.distributed, Vigil's wrapper, a parked stdlib call);
    4. odd-one-out: its stack as a whole differs from the majority's.
    The first rule with evidence decides. Vigil's own threads, launchers and idle
    helpers are never suspects; rules 2-4 need a strict majority to compare against,
    so two ranks that merely differ give no suspect.
    """
    positions = _positions(dumps)
    if recorded:
        by_records = _recorded_culprits(positions, recorded)
        if by_records is not None:
            return by_records
    if len(positions) < 2:
        why = (
            f"No suspect: {len(positions)} process(es) with stacks to compare; a culprit "
            "stands out only against its peers."
        )
        return _no_suspect(why, positions)

    waiting = [p for p in positions if p.collective is not None]
    outside = [p for p in positions if p.collective is None]
    if waiting and outside:
        op = _most_common([p.op for p in waiting])
        peers = [p.label for p in waiting]
        verb = "waits" if len(peers) == 1 else "wait"
        suspects = tuple(
            Suspect(
                p.ref,
                RULE_OUTSIDE_COLLECTIVE,
                f"{p.label} is not inside any collective (it is in {_where(p.innermost)}) while "
                f"{_names(peers)} {verb} in {op}: the collective waits for it.",
                _short(p.innermost.function) if p.innermost else "",
                p.innermost,
            )
            for p in outside
        )
        who = _names([p.name for p in outside])
        func = suspects[0].where
        return Culprits(
            suspects,
            suspects[0].why,
            f"{who} stopped making progress in `{func}` while {_names([p.name for p in waiting])} waited in `{op}`",
            f"Look at {who}'s stack in the snapshot: it hangs in its own code at `{func}` "
            "(compute, I/O or a lock), not in communication; its peers only wait for it.",
        )

    if len(waiting) >= 2:
        numbered = {
            id(p): sequences[p.ref.rank]
            for p in waiting
            if sequences and p.ref.rank is not None and p.ref.rank in sequences
        }
        if len(set(numbered.values())) > 1:
            ahead = max(numbered.values())
            behind = sorted((p for p in waiting if numbered.get(id(p), ahead) < ahead), key=lambda p: numbered[id(p)])
            front = [p for p in waiting if numbered.get(id(p)) == ahead]
            return _desync(
                behind,
                front,
                lambda p: f"{p.op} #{numbered[id(p)]}",
                f"{_most_common([p.op for p in front])} #{ahead}",
                "behind",
            )
        front, behind = _majority(waiting, key=lambda p: p.op)
        if behind:
            return _desync(behind, front, lambda p: p.op, front[0].op, "different")

    for rule, without_waits in ((RULE_DIFFERENT_FRAME, True), (RULE_ODD_ONE_OUT, False)):
        majority, odd = _majority(positions, key=lambda p, w=without_waits: p.signature(w))
        if not odd:
            continue
        theirs = majority[0].innermost_busy if without_waits else majority[0].innermost
        their_names = _names([p.label for p in majority])
        verb = "is" if len(majority) == 1 else "are"
        found: list[Suspect] = []
        for p in odd:
            mine = p.innermost_busy if without_waits else p.innermost
            why = f"{p.label} is in {_where(mine)} where {their_names} {verb} in {_where(theirs)}: " + (
                "its stack differs from theirs outside any wait." if without_waits else "its stack is the odd one out."
            )
            found.append(Suspect(p.ref, rule, why, _short(mine.function) if mine else "", mine))
        who = _names([p.name for p in odd])
        their_func = _short(theirs.function) if theirs else "?"
        return Culprits(
            tuple(found),
            found[0].why,
            f"{who} stopped making progress in `{found[0].where}` while "
            f"{_names([p.name for p in majority])} were in `{their_func}`",
            f"Compare {who}'s stack with its peers' in the snapshot, from `{found[0].where}` outwards.",
        )

    if waiting and len({p.op for p in waiting}) == 1:
        why = (
            f"No suspect: all {len(waiting)} ranks wait in {waiting[0].op}, so the stacks "
            "cannot say which rank the collective waits for (C4D's records can)."
        )
    elif waiting:
        why = (
            "No suspect: the ranks wait in different collectives ("
            + ", ".join(f"{p.name} in {p.op}" for p in waiting[:4])
            + ") with no majority to tell which is out of step."
        )
    else:
        why = (
            f"No suspect: the {len(positions)} ranks' stacks differ with no majority, "
            "and none is outside a collective its peers wait in."
        )
    return _no_suspect(why, positions)


def _recorded_culprits(positions: Sequence[_Position], recorded: Mapping[int, RecordedCollective]) -> Culprits | None:
    """Rule 0 of find_culprits; None when the records show no rank inside a collective (the
    stacks decide). A rank with stacks but no records is not judged by them."""
    by_rank: dict[int, _Position] = {
        p.ref.rank: p for p in positions if p.ref.rank is not None and p.ref.rank in recorded
    }

    def rank_of(p: _Position) -> int:
        return p.ref.rank if p.ref.rank is not None else -1

    inside = {r: recorded[r] for r in by_rank if recorded[r].inside}
    if not inside:
        return None

    def label(rank: int) -> str:
        return by_rank[rank].label

    def waiters(ranks: Iterable[int]) -> str:
        ranks = sorted(ranks)
        groups: dict[str, list[str]] = {}
        for r in ranks:
            groups.setdefault(inside[r].describe(), []).append(label(r))
        return "; ".join(
            f"{_names(names)} {'waits' if len(names) == 1 else 'wait'} in {what}" for what, names in groups.items()
        )

    found: list[Suspect] = []
    for rank, p in sorted(by_rank.items()):
        mine = recorded[rank]
        if mine.inside:
            continue
        waiting = [r for r, rc in inside.items() if rc.seq > mine.seq]
        if not waiting:
            continue
        first = min(waiting, key=lambda r: inside[r].seq)
        if p.collective is not None:
            why = (
                f"{p.label} is still inside {p.op} ({p.collective.file}:{p.collective.line}), which its "
                f"collective records count as done (its last is {mine.describe()}), while "
                f"{waiters(waiting)}: its call never returned, it is hung in communication."
            )
            found.append(Suspect(p.ref, RULE_NEVER_RETURNED, why, p.op, p.collective))
        else:
            why = (
                f"{p.label} never entered {inside[first].describe()} (its last is {mine.describe()}, by the "
                f"collective records) while {waiters(waiting)}; it is in {_where(p.innermost_busy)}."
            )
            found.append(
                Suspect(
                    p.ref,
                    RULE_NEVER_ENTERED,
                    why,
                    _short(p.innermost_busy.function) if p.innermost_busy else "",
                    p.innermost_busy,
                )
            )
    if found:
        who = _names([by_rank[s.thread.rank].name for s in found if s.thread.rank is not None])
        victims = sorted(inside)
        if found[0].rule == RULE_NEVER_ENTERED:
            cause = (
                f"{who} stopped making progress in `{found[0].where}` and never entered the collective "
                f"{_names([by_rank[r].name for r in victims])} waited in"
            )
            step = (
                f"Look at {who}'s stack in the snapshot: it hangs in its own code at `{found[0].where}` "
                "(compute, I/O, a lock, or a branch that skips a collective); its peers only wait for it."
            )
        else:
            cause = f"{who} never returned from `{found[0].where}` while its peers went on to the next collective"
            step = f"{who} is hung in communication: check its node's network and the collective it is in."
        return Culprits(tuple(found), found[0].why, cause, step)

    if len(inside) < len(by_rank):
        return None  # ranks outside every collective but none behind: the stacks decide
    seqs = {rc.seq for rc in inside.values()}
    if len(seqs) > 1:  # behind: in a lower collective than the front's
        ahead, how = max(seqs), "behind"
        front = [by_rank[r] for r, rc in inside.items() if rc.seq == ahead]
        odd = sorted((by_rank[r] for r, rc in inside.items() if rc.seq < ahead), key=lambda p: inside[rank_of(p)].seq)
    else:  # the same collective, another op than the majority's
        front, odd = _majority(list(by_rank.values()), key=lambda p: inside[rank_of(p)].op)
        how = "different"
    if odd:

        def recorded_as(p: _Position) -> str:
            return inside[rank_of(p)].describe()

        return _desync(odd, front, recorded_as, recorded_as(front[0]), how, RULE_RECORDED_DESYNC)
    what = "/".join(sorted({rc.describe() for rc in inside.values()}))
    return _no_suspect(
        f"No suspect: all {len(inside)} ranks are inside {what} by their collective records, so every "
        "rank arrived and the collective itself is stuck (look at the network).",
        positions,
    )


def _desync(
    behind: list[_Position], front: list[_Position], what, theirs: str, how: str, rule: str = RULE_DESYNC
) -> Culprits:
    peers = _names([p.label for p in front])
    verb = "is" if len(front) == 1 else "are"
    tail = (
        "it is behind them (desync)."
        if how == "behind"
        else "it is out of step with them (desync, or a collective its partner never joined)."
    )
    suspects = tuple(
        Suspect(
            p.ref,
            rule,
            f"{p.label} waits in {what(p)} while {peers} {verb} in {theirs}: {tail}",
            p.op,
            p.collective,
        )
        for p in behind
    )
    who = _names([p.name for p in behind])
    first = what(behind[0])
    return Culprits(
        suspects,
        suspects[0].why,
        f"{who} waited in `{first}` while {_names([p.name for p in front])} waited in `{theirs}`: "
        "the ranks are out of step",
        f"Check why {who} reached `{what(behind[0])}` while its peers are in `{theirs}`: a "
        "collective skipped or added on some ranks (a rank-dependent branch) puts them out of step.",
    )


def _no_suspect(why: str, positions: Sequence[_Position]) -> Culprits:
    where = _most_common([p.op or (_short(p.innermost.function) if p.innermost else "") for p in positions])
    cause = (
        "Every rank stopped making progress"
        + (f" (most in `{where}`)" if where else "")
        + "; the stack snapshot names no suspect"
    )
    return Culprits(
        (),
        why,
        cause,
        "Compare the ranks' stacks in the snapshot; with C4D on "
        "(--enable-c4d-hang-detection) the collective records say which rank a "
        "collective waits for.",
    )


@dataclass(frozen=True)
class StackSnapshot:
    """The dumps of one hang and their aggregation: what the monitor stores and shows."""

    dumps: tuple[ProcessStacks, ...]
    stacks: tuple[AggregatedStack, ...] = field(default=())
    culprits: Culprits = field(default=Culprits((), "", "", ""))
    records: str = ""  # what the collective records said, or that there were none

    @classmethod
    def of(
        cls,
        dumps: Iterable[ProcessStacks],
        sequences: Mapping[int, int] | None = None,
        recorded: Mapping[int, RecordedCollective] | None = None,
        source: str = "",
    ) -> "StackSnapshot":
        """`sequences`: rank -> number of the collective it waits in, where C4D knows it;
        `recorded`: what each rank did by its collective records, from `source`."""
        dumps = tuple(dumps)
        culprits = find_culprits(dumps, sequences, recorded)
        if recorded:
            shown = sorted(recorded.items())
            records = f"Collective records ({source or 'C4D'}): " + "; ".join(
                f"rank {r} {'inside' if rc.inside else 'last left'} {rc.describe()}" for r, rc in shown[:16]
            )
            records += f"; and {len(shown) - 16} more rank(s)." if len(shown) > 16 else "."
        else:
            records = (
                "No collective records (no Flight Recorder dump and no SDK report): "
                "the suspects come from the stacks alone."
            )
        return cls(dumps=dumps, stacks=tuple(aggregate_stacks(dumps, culprits)), culprits=culprits, records=records)

    @property
    def suspects(self) -> tuple[AggregatedStack, ...]:
        return tuple(s for s in self.stacks if s.suspect)

    @property
    def failed(self) -> tuple[ProcessStacks, ...]:
        return tuple(d for d in self.dumps if not d.ok)

    def summary_text(self, max_frames: int = 8) -> str:
        text = summary_text(self.stacks, self.dumps, max_frames=max_frames, culprits=self.culprits)
        if not self.records:
            return text
        head, _, rest = text.partition("\n")
        return "\n".join(filter(None, [head, self.records, rest]))

    def in_collective(self) -> dict[int, str]:
        """rank -> the torch.distributed collective its stack is inside, where it is."""
        return {p.ref.rank: p.op for p in _positions(self.dumps) if p.ref.rank is not None and p.collective}

    def to_dict(self) -> dict:
        return {
            "processes": [
                {
                    "instance": d.instance,
                    "rank": d.rank,
                    "pid": d.pid,
                    "ok": d.ok,
                    "error_code": d.error_code,
                    "error": d.error,
                    "threads": len(d.threads),
                    "duration_s": round(d.duration_s, 4),
                }
                for d in self.dumps
            ],
            "stacks": [s.to_dict() for s in self.stacks],
            "culprits": self.culprits.to_dict(),
            "records": self.records,
        }


def summary_text(
    stacks: Sequence[AggregatedStack],
    dumps: Sequence[ProcessStacks] = (),
    max_frames: int = 8,
    culprits: Culprits | None = None,
) -> str:
    """Plain text for the monitor log: counts, suspects first, each stack's innermost frames."""
    ok = [d for d in dumps if d.ok]
    lines = []
    if dumps:
        lines.append(
            f"Stack snapshot of {len(dumps)} process(es): {len(ok)} dumped, "
            f"{len(dumps) - len(ok)} not; {sum(s.count for s in stacks)} thread(s) "
            f"in {len(stacks)} distinct stack(s), "
            f"{sum(1 for s in stacks if s.suspect)} suspect(s)."
        )
    if culprits is not None:
        for suspect in culprits.suspects[:5]:
            lines.append(f"Suspect: {suspect.why}")
        if len(culprits.suspects) > 5:
            lines.append(f"... and {len(culprits.suspects) - 5} more suspect(s).")
        if not culprits.suspects and culprits.why:
            lines.append(culprits.why)
    for d in dumps:
        if not d.ok:
            lines.append(f"  ! {d.describe()}")
    for i, s in enumerate(stacks, 1):
        tags = [t for t, on in (("SUSPECT", s.suspect), ("vigil", s.vigil), ("idle", s.idle)) if on]
        where = "; ".join(t.describe() for t in s.threads[:4])
        if s.count > 4:
            where += f"; and {s.count - 4} more"
        lines.append(f"#{i} x{s.count}{' [' + ', '.join(tags) + ']' if tags else ''}: {where}")
        for f in s.frames[:max_frames]:
            lines.append(f"    {f.describe()}")
        if len(s.frames) > max_frames:
            lines.append(f"    ... {len(s.frames) - max_frames} outer frame(s)")
    return "\n".join(lines)


# --- the hang's restart record ------------------------------------------------


def last_log_line(tail: bytes) -> tuple[str, int]:
    """The last non-blank line of a log tail and where it starts in the tail (-1 if none)."""
    end = len(tail.rstrip())
    if end == 0:
        return "", -1
    start = tail.rfind(b"\n", 0, end) + 1
    return tail[start:end].decode("utf-8", "replace").strip(), start


def hang_classification(message: str, culprits: Mapping | None, last_line: str = "") -> Classification:
    """A hang's restart record, as good as a crash's: the cause and next step from the
    stack snapshot's culprits (`Culprits.to_dict()`, None when no snapshot could be
    taken), and the suspect's last log line as the evidence. The rule and error code
    stay the hang's, so restart counting and the policy see the same as before."""
    culprits = culprits or {}
    cause = str(culprits.get("cause") or "")
    next_step = str(culprits.get("next_step") or "")
    if not cause:
        cause = "Every rank stopped making progress; no stack snapshot could be taken to say which one"
        next_step = (
            "Look at the end of each rank's log; install py-spy on the nodes (the snapshot "
            "needs it) so the next hang names its suspect."
        )
    return Classification(
        retryable=True,
        rule="hang",
        error_code=str(ErrorSource.HANG).upper(),
        message=message,
        source=ErrorSource.HANG,
        cause=cause.rstrip(".") + ".",
        next_step=next_step,
        cascade_like=False,
        evidence=last_line,
    )


# --- shells: py-spy and the process tree ---------------------------------------


def find_py_spy() -> str | None:
    """py-spy next to this interpreter (the venv) first, then on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("py-spy")


def _error_code_for(stderr: str, pid: int) -> tuple[str, str]:
    text = stderr.lower()
    first = next(
        (ln.strip() for ln in stderr.splitlines() if ln.strip().startswith("Error")),
        stderr.strip().splitlines()[0] if stderr.strip() else "no output",
    )
    try:
        if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return PROCESS_GONE, f"process {pid} has exited (a zombie not yet reaped)"
    except psutil.NoSuchProcess:
        return PROCESS_GONE, f"process {pid} is gone"
    except psutil.Error:
        pass
    if "permission denied" in text or "operation not permitted" in text:
        return PERMISSION_DENIED, (
            f"no permission to read process {pid} (py-spy needs ptrace: "
            f"run as the same user or root, or CAP_SYS_PTRACE): {first}"
        )
    if (
        "failed to find python version" in text
        or "not a python" in text
        or "failed to find a python interpreter" in text
    ):
        return NOT_PYTHON, f"process {pid} is not a Python program: {first}"
    if "check that the process is running" in text or "no such process" in text:
        return PROCESS_GONE, f"process {pid} is gone: {first}"
    return DUMP_FAILED, f"py-spy could not dump process {pid}: {first}"


def dump_process_stacks(
    pid: int, timeout: float = 5.0, instance: str = "", rank: int | None = None, py_spy: str | None = None
) -> ProcessStacks:
    """Dump one process's Python stacks with `py-spy dump --json`. Never raises for a
    process that cannot be dumped: the result carries error_code and error instead."""
    started = time.monotonic()

    def failed(code: str, message: str) -> ProcessStacks:
        return ProcessStacks(
            pid=pid, instance=instance, rank=rank, error_code=code, error=message, duration_s=time.monotonic() - started
        )

    exe = py_spy or find_py_spy()
    if not exe:
        return failed(PY_SPY_MISSING, "py-spy is not installed (pip install py-spy) next to this Python or on PATH")
    try:
        done = subprocess.run(
            [exe, "dump", "--json", "--pid", str(pid)], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return failed(TIMEOUT, f"py-spy took longer than {timeout:g} s to dump process {pid}")
    except OSError as exc:
        return failed(PY_SPY_MISSING, f"py-spy at {exe} cannot run: {exc}")
    if done.returncode != 0:
        return failed(*_error_code_for(done.stderr, pid))
    return parse_py_spy_json(done.stdout, pid, instance, rank, time.monotonic() - started)


def dump_processes(
    targets: Sequence[tuple[str, int | None, int]], timeout: float = 5.0, parallel: int = 4, py_spy: str | None = None
) -> list[ProcessStacks]:
    """Dump (instance, rank, pid) targets concurrently; results in the targets' order."""
    if not targets:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(targets)))) as pool:
        futures = [
            pool.submit(dump_process_stacks, pid, timeout, instance, rank, py_spy) for instance, rank, pid in targets
        ]
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
