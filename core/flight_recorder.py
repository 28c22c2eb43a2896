"""C4D from PyTorch's own Flight Recorder: the per-rank dumps torch writes, read into
the collective records core.c4d judges, so a job needs no Vigil SDK call to be judged.

What torch 2.13 (CPU build) does, found by running it (core/tests/test_flight_recorder.py
reproduces it): with TORCH_FR_BUFFER_SIZE (or the older TORCH_NCCL_TRACE_BUFFER_SIZE) > 0
the gloo backend records every collective it is asked for, as NCCL does: one entry per
call with the group's `collective_seq_id`, `profiling_name` ("gloo:all_reduce"),
`time_created_ns` (epoch) and `retired` (true once the work finished). Gloo has no
device events, so its `state` stays "scheduled" and `time_discovered_started_ns` /
`time_discovered_completed_ns` stay null (0 in the JSON form): a gloo entry says whether a collective
finished, not when. Gloo never dumps by itself (no watchdog, no dump on timeout;
TORCH_FR_DUMP_TEMP_FILE is used by NCCL only): the dump comes from
`torch._C._distributed_c10d._dump_fr_trace_json()` (or `_dump_fr_trace()`, pickle)
called inside the rank's process, which Vigil's injected start-up hook does
(jobs/backends/fr_boot.py). NCCL keeps a recorder of its own, dumped by
`_dump_nccl_trace_json` in CUDA builds (public notes of a project that probed it on a
GPU say `_dump_fr_trace_json` holds none of NCCL's entries); the hook takes whichever
has entries. That NCCL side is not checked here: this machine has no GPU. NCCL's watchdog writes the pickle form on timeout
(TORCH_NCCL_DUMP_ON_TIMEOUT) to TORCH_FR_DUMP_TEMP_FILE + rank.

PyTorch's own analyzer (`python -m torch.distributed.flight_recorder.fr_trace`) cannot
read gloo's dumps in 2.13: their pg_config is keyed "" (name "", desc "") while the
entries name the group ("0", "default_pg"), and its builder stops with KeyError ('0', 0).
So the dumps are judged here, by core.c4d's rules, which need only each rank's seq ids.

Both forms are read here. The pickle is loaded with no class allowed (torch's dump is
plain dicts, lists, tuples, strings and numbers), so a job cannot make the console run
code through a crafted file.

Mapping to core.c4d's records: one record per collective of the default process group
(pg_id 0; subgroups count their own seq ids), seq =
collective_seq_id, op = profiling_name without its backend prefix, enter =
time_created_ns, exit = time_discovered_completed_ns where the backend measured it,
else the creation time for a retired entry (finished, time unknown) and None for one
not retired (still inside). Without completion times slowness cannot be judged, so
`analyze_flight_recorder` judges hangs only then; the slowness verdicts come from the
SDK's instrumentation, which the start-up hook injects where the job does not import
it, and `judge_sources` (below) says which source answers which question. A rank the default group's records call
hung outside communication while it waits inside a collective of another group (which
the recorder also holds) is hung in communication there: RankCommHang, naming the group.
"""

from __future__ import annotations

import io
import json
import pickle
from dataclasses import dataclass
from typing import Any, Mapping

from core.c4d import C4DKind, C4DResult, C4DState, C4DVerdict, CollectiveRecord, analyze_collectives, ordered
from core.flags import C4DEnvs

MAX_DUMP_BYTES = 32 * 1024 * 1024


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"a Flight Recorder dump holds no classes, found {module}.{name}")


def load_dump(data: bytes) -> dict:
    """A dump's bytes (torch's JSON or pickle form) as a dict; ValueError says what is wrong,
    and it is the only exception raised: the bytes are the job's, and what a crafted file
    makes the decoders raise is not a list anyone keeps (class-free pickles raise IndexError,
    AttributeError, TypeError or KeyError from their opcodes, deep JSON RecursionError)."""
    if len(data) > MAX_DUMP_BYTES:
        raise ValueError(f"dump: {len(data)} bytes is over the {MAX_DUMP_BYTES} accepted")
    stripped = data.lstrip()
    try:
        if stripped.startswith(b"{"):
            out = json.loads(stripped)
        else:
            out = _PlainUnpickler(io.BytesIO(data)).load()
    except Exception as exc:  # noqa: BLE001  (see the docstring: any decoder error is a bad dump)
        reason = f"{type(exc).__name__}: {exc}"[:200]
        raise ValueError(f"dump: not a Flight Recorder dump in JSON or pickle form ({reason})") from None
    if not isinstance(out, dict) or not isinstance(out.get("entries", []), list):
        raise ValueError("dump: expected an object with an 'entries' list")
    return out


@dataclass(frozen=True)
class RankTrace:
    """One rank's collectives from its dump, and whether their durations are known."""

    records: tuple[CollectiveRecord, ...]
    timed: bool  # every finished entry carries its completion time
    backend: str  # "gloo", "nccl", ... from the profiling names; "" if none
    # Collectives of other process groups the rank is still inside: (group, seq, op, enter).
    open_elsewhere: tuple[tuple[str, int, str, float], ...] = ()


def _default_group(entry: Mapping) -> bool:
    pg = entry.get("process_group")
    if isinstance(pg, (list, tuple)) and len(pg) == 2 and pg[1] == "default_pg":
        return True
    return entry.get("pg_id") == 0


def read_trace(data: bytes) -> RankTrace:
    """One rank's dump file as its trace: load_dump then records_from_dump, raising nothing
    but ValueError, so a caller skips one bad dump and keeps judging the others."""
    dump = load_dump(data)
    try:
        return records_from_dump(dump)
    except Exception as exc:  # noqa: BLE001  (a shape records_from_dump did not foresee is a bad dump)
        reason = f"{type(exc).__name__}: {exc}"[:200]
        raise ValueError(f"dump: its entries cannot be read ({reason})") from None


def _ns(value: object) -> int | None:
    """A nanosecond timestamp as the recorder writes it (a non-negative int64), else None:
    a larger int would overflow the float conversion to seconds."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63 else None


def _group_name(entry: Mapping) -> str:
    """A subgroup's name for the verdict's text; only strings and ints are shown, since str()
    of a crafted nested value recurses without bound."""
    pg = entry.get("process_group")
    name = pg[0] if isinstance(pg, (list, tuple)) and pg else entry.get("pg_id")
    return str(name)[:64] if isinstance(name, (str, int)) and not isinstance(name, bool) else "?"


def records_from_dump(dump: Mapping) -> RankTrace:
    """The default group's collectives of one rank's dump, as core.c4d records."""
    by_seq: dict[int, CollectiveRecord] = {}
    elsewhere: list[tuple[str, int, str, float]] = []
    timed, backend = True, ""
    for entry in dump.get("entries") or ():
        if not isinstance(entry, Mapping) or entry.get("is_p2p"):
            continue
        seq, name, created = (
            entry.get("collective_seq_id"),
            entry.get("profiling_name"),
            _ns(entry.get("time_created_ns")),
        )
        if not isinstance(seq, int) or seq <= 0 or not isinstance(name, str) or created is None:
            continue
        prefix, _, op = name.partition(":")
        if not _default_group(entry):
            if not entry.get("retired") and entry.get("state") != "completed":
                elsewhere.append((_group_name(entry), seq, (op or name)[:64], created / 1e9))
            continue
        backend = backend or (prefix if op else "")
        enter = created / 1e9
        completed = _ns(entry.get("time_discovered_completed_ns"))
        done = bool(entry.get("retired")) or entry.get("state") == "completed"
        if completed is not None and completed >= created:
            exit_: float | None = completed / 1e9
        elif done:
            exit_, timed = enter, False
        else:
            exit_ = None
        by_seq[seq] = CollectiveRecord(seq=seq, op=(op or name)[:64], enter=enter, exit=exit_)
    return RankTrace(tuple(by_seq[s] for s in sorted(by_seq)), timed, backend, tuple(elsewhere))


def analyze_flight_recorder(
    dumps: Mapping[int, Mapping],
    envs: C4DEnvs,
    now: float,
    state: C4DState | None = None,
    world_size: int | None = None,
) -> C4DResult:
    """core.c4d's verdicts from the ranks' dumps (rank -> loaded dump). A rank with no
    dump counts, with world_size, as one that never entered any collective."""
    return analyze_traces({int(rank): records_from_dump(d) for rank, d in dumps.items()}, envs, now, state, world_size)


def analyze_traces(
    traces: Mapping[int, RankTrace],
    envs: C4DEnvs,
    now: float,
    state: C4DState | None = None,
    world_size: int | None = None,
) -> C4DResult:
    """analyze_flight_recorder over dumps already read (rank -> records_from_dump's trace)."""
    timed = bool(traces) and all(t.timed for t in traces.values())
    result = analyze_collectives(
        {r: t.records for r, t in traces.items()}, envs, now, state, world_size=world_size, judge_slowness=timed
    )
    return C4DResult(tuple(_inside_a_subgroup(v, traces, now) for v in result.verdicts), result.state)


def _inside_a_subgroup(verdict: C4DVerdict, traces: Mapping[int, RankTrace], now: float) -> C4DVerdict:
    """The default group's records call a rank that never entered the collective its peers
    wait in hung outside communication; the recorder also sees the other groups, and a
    rank waiting inside one of their collectives is hung in communication there."""
    trace = traces.get(verdict.rank) if verdict.rank is not None else None
    if verdict.kind != C4DKind.NON_COMM_HANG or trace is None or not trace.open_elsewhere:
        return verdict
    group, seq, op, enter = min(trace.open_elsewhere, key=lambda e: e[3])
    _, found, tail = verdict.message.partition(" Found hanging")
    ev = verdict.evidence
    message = (
        f"Rank {verdict.rank} never entered {ev.get('op')} #{ev.get('seq')}, which rank(s) "
        f"{', '.join(map(str, ev.get('waiting_ranks') or []))} wait in, because it has been inside "
        f"{op} #{seq} of process group {group} for {now - enter:.1f} s: it is hung in communication "
        f"on another process group." + (found + tail if found else "")
    )
    return C4DVerdict(
        verdict.rank,
        C4DKind.COMM_HANG,
        verdict.severity,
        message,
        {**ev, "group": group, "group_seq": seq, "group_op": op, "inside_s": round(now - enter, 3)},
    )


SDK, FLIGHT_RECORDER = "sdk", "flight_recorder"


@dataclass(frozen=True)
class Sources:
    """Which source answers which question; None where nothing can."""

    hangs: str | None
    slowness: str | None


def choose_sources(sdk: Mapping[int, object], traces: Mapping[int, RankTrace]) -> Sources:
    """The rule when both the SDK's reports (imported by the job, or injected by the
    start-up hook) and the Flight Recorder's dumps exist. Their records are never merged:
    the recorder counts every collective of the group, DDP's own C++ ones included, the
    SDK only the calls into torch.distributed, so the same seq names different calls.
      * Hangs: the recorder where it holds any collective -- it sees the collectives
        the SDK cannot (DDP's gradient all-reduce, other process groups), so a rank
        waiting there is seen waiting; else the SDK's reports (code that reports
        collectives torch does not run, through vigil.c4d.collective).
      * Slowness needs measured exit times: the recorder where every rank's dump has
        them (NCCL), else the SDK's reports (gloo records no completion time)."""
    recorded = any(t.records or t.open_elsewhere for t in traces.values())
    timed = recorded and all(t.timed for t in traces.values())
    reported = any(sdk.values())
    return Sources(
        FLIGHT_RECORDER if recorded else SDK if reported else None,
        FLIGHT_RECORDER if timed else SDK if reported else None,
    )


def judge_sources(
    sdk: Mapping[int, list[CollectiveRecord]],
    traces: Mapping[int, RankTrace],
    envs: C4DEnvs,
    now: float,
    state: C4DState | None = None,
    world_size: int | None = None,
) -> tuple[C4DResult, Sources]:
    """core.c4d's verdicts, each question from its source (choose_sources); every
    verdict's evidence names its "source". The hang counts (the state) are the hang
    source's; a rank found hung is not also called slow."""
    sources = choose_sources(sdk, traces)
    reported = {r: recs for r, recs in sdk.items() if recs}
    if sources.hangs == FLIGHT_RECORDER:
        hang = analyze_traces(traces, envs, now, state, world_size)
    else:
        hang = analyze_collectives(
            reported, envs, now, state, world_size=world_size, judge_slowness=sources.slowness == SDK
        )
    verdicts = [_sourced(v, sources.hangs or SDK) for v in hang.verdicts]
    if sources.slowness is not None and sources.slowness != sources.hangs:
        hung = {v.rank for v in hang.verdicts if v.kind in (C4DKind.COMM_HANG, C4DKind.NON_COMM_HANG)}
        slow = analyze_collectives(reported, envs, now, world_size=world_size).verdicts
        verdicts += [
            _sourced(v, sources.slowness)
            for v in slow
            if v.kind in (C4DKind.COMM_SLOW, C4DKind.NON_COMM_SLOW) and v.rank not in hung and None not in hung
        ]
    return C4DResult(tuple(ordered(verdicts)), hang.state), sources


def _sourced(verdict: C4DVerdict, source: str) -> C4DVerdict:
    return C4DVerdict(
        verdict.rank, verdict.kind, verdict.severity, verdict.message, {**verdict.evidence, "source": source}
    )
