"""C4D: which rank is hung or slow, from the collective records the ranks report.

Pure: records in, verdicts and the next state out; no clock (`now` is a parameter),
no Django. Each rank reports, per collective it called, a record
(seq, op, enter, exit): seq counts the rank's collective calls from 1, enter and
exit are epoch seconds, exit is None while the call has not returned.

How a hang is attributed (SPEC 6). Take every rank that has been inside a
collective (entered, no exit) for longer than C4D_HANG_TIMEOUT; call its seq S.
  * A peer not inside any collective whose last seq is below S never entered the
    collective the stuck ranks wait in: it is hung in compute -> RankNonCommHang.
    The waiting ranks are its victims and get no verdict of their own.
  * A stuck rank some of whose peers already finished S (closed S, or went past
    it) is hung inside a collective the others finished -> RankCommHang.
  * Every rank is inside S and none finished. If their ops differ, the ranks in
    the minority op are inside a collective nobody else joined -> RankCommHang
    for them. If all run the same op, every participant arrived (the last to
    enter completed the set, so it is not to blame, and the earlier ones only
    waited): the collective itself is stuck and no rank can be singled out. One
    verdict with rank=None says so; it escalates like the others, and an Error
    there means "restart the job" with no node to isolate.
A hang is a Warning; when the same rank (or the collective, for rank=None) is
found hanging in C4D_HANG_TIMES consecutive checks it becomes an Error. The
consecutive counts are explicit state (`C4DState`) passed in and returned.

Slowness, over the recent window of collectives every rank finished:
  * RankCommSlow: the rank's time in communication, from the moment the last
    rank arrived to its own exit, is well above the peers' median, consistently.
    (Raw durations would blame the ranks that arrive early and wait.)
  * RankNonCommSlow: the rank's time outside collectives (from its exit of the
    previous collective to its enter of this one) is well above the peers'
    median, consistently: it keeps the others waiting.
A ratio of at least `warn_ratio` is a Warning, at least `slow_ratio` an Info.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from enum import StrEnum
from statistics import median
from typing import Any, Iterable, Mapping

from core.flags import C4DEnvs, C4DLogLevel


class C4DKind(StrEnum):
    COMM_HANG = "RankCommHang"
    NON_COMM_HANG = "RankNonCommHang"
    COMM_SLOW = "RankCommSlow"
    NON_COMM_SLOW = "RankNonCommSlow"


_LEVEL_ORDER = {C4DLogLevel.INFO: 0, C4DLogLevel.WARNING: 1, C4DLogLevel.ERROR: 2}


@dataclass(frozen=True)
class CollectiveRecord:
    seq: int
    op: str
    enter: float
    exit: float | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CollectiveRecord":
        """From the SDK's JSON; a bad field raises ValueError naming it and what is accepted."""
        if not isinstance(d, Mapping):
            raise ValueError("record: expected an object with seq, op, enter, exit")
        seq = d.get("seq")
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
            raise ValueError(f"seq: expected a non-negative integer, got {seq!r}")
        op = d.get("op")
        if not isinstance(op, str) or not op or len(op) > 64:
            raise ValueError(f"op: expected a collective name of 1-64 characters, got {op!r}")
        enter = d.get("enter")
        if not isinstance(enter, (int, float)) or isinstance(enter, bool):
            raise ValueError(f"enter: expected epoch seconds as a number, got {enter!r}")
        exit_ = d.get("exit")
        if exit_ is not None and (not isinstance(exit_, (int, float)) or isinstance(exit_, bool)):
            raise ValueError(f"exit: expected epoch seconds as a number or null, got {exit_!r}")
        if exit_ is not None and exit_ < enter:
            raise ValueError(f"exit: {exit_!r} is before enter {enter!r}")
        return cls(seq=seq, op=op, enter=float(enter), exit=None if exit_ is None else float(exit_))

    def to_dict(self) -> dict:
        return {"seq": self.seq, "op": self.op, "enter": self.enter, "exit": self.exit}


@dataclass(frozen=True)
class C4DVerdict:
    """One diagnosis. rank=None: the collective as a whole, no single rank to blame."""

    rank: int | None
    kind: C4DKind
    severity: C4DLogLevel
    message: str
    evidence: dict = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict:
        return {
            "rank": self.rank,
            "kind": str(self.kind),
            "severity": str(self.severity),
            "message": self.message,
            "evidence": self.evidence,
        }


@dataclass(frozen=True)
class C4DState:
    """Consecutive checks each rank has been found hanging; key "collective" for rank=None."""

    hang_counts: Mapping[str, int] = field(default_factory=dict)

    def count(self, rank: int | None) -> int:
        return int(self.hang_counts.get(_state_key(rank), 0))

    def to_dict(self) -> dict:
        return {"hang_counts": dict(self.hang_counts)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> "C4DState":
        counts = (d or {}).get("hang_counts") or {}
        if not isinstance(counts, Mapping):
            raise ValueError("hang_counts: expected an object of rank -> count")
        return cls({str(k): int(v) for k, v in counts.items()})


@dataclass(frozen=True)
class C4DResult:
    verdicts: tuple[C4DVerdict, ...]
    state: C4DState

    def shown(self, level: C4DLogLevel | str) -> list[C4DVerdict]:
        return visible(self.verdicts, level)

    @property
    def errors(self) -> list[C4DVerdict]:
        return [v for v in self.verdicts if v.severity == C4DLogLevel.ERROR]


def _state_key(rank: int | None) -> str:
    return "collective" if rank is None else str(rank)


def visible(verdicts: Iterable[C4DVerdict], level: C4DLogLevel | str) -> list[C4DVerdict]:
    """Verdicts at or above the job's --c4d-log-level (the lowest level shown)."""
    try:
        floor = _LEVEL_ORDER[C4DLogLevel(level)]
    except ValueError:
        raise ValueError(f"c4d_log_level: {level!r} is not one of Info, Warning, Error") from None
    return [v for v in verdicts if _LEVEL_ORDER[v.severity] >= floor]


def _ranks_text(ranks: Iterable[int]) -> str:
    ranks = sorted(ranks)
    if len(ranks) > 8:
        return ", ".join(map(str, ranks[:8])) + f" and {len(ranks) - 8} more"
    return ", ".join(map(str, ranks))


def _normalise(records: Mapping[int, Iterable[CollectiveRecord | Mapping]]) -> dict[int, dict[int, CollectiveRecord]]:
    out: dict[int, dict[int, CollectiveRecord]] = {}
    for rank, recs in records.items():
        by_seq: dict[int, CollectiveRecord] = {}
        for r in recs:
            rec = r if isinstance(r, CollectiveRecord) else CollectiveRecord.from_dict(r)
            by_seq[rec.seq] = rec  # a later report of the same seq (with its exit) wins
        out[int(rank)] = by_seq
    return out


def analyze_collectives(
    records: Mapping[int, Iterable[CollectiveRecord | Mapping]],
    envs: C4DEnvs,
    now: float,
    state: C4DState | None = None,
    world_size: int | None = None,
    window: int = 20,
    slow_ratio: float = 1.5,
    warn_ratio: float = 3.0,
    min_excess_s: float = 0.005,
    consistency: float = 0.75,
    min_samples: int = 5,
    judge_slowness: bool = True,
) -> C4DResult:
    """Classify ranks as hung or slow. `world_size` makes silent ranks (no records) count
    as never having entered any collective. judge_slowness=False for records whose exit
    times are not measured (core.flight_recorder on gloo). Returns the verdicts and the
    next state."""
    state = state or C4DState()
    by_rank = _normalise(records)
    if world_size is not None:
        for rank in range(world_size):
            by_rank.setdefault(rank, {})
    hang = _hangs(by_rank, envs.hang_timeout_us / 1e6, now)

    verdicts: list[C4DVerdict] = []
    counts: dict[str, int] = {}
    for rank, kind, message, evidence in hang:
        n = state.count(rank) + 1
        counts[_state_key(rank)] = n
        severity = C4DLogLevel.ERROR if n >= envs.hang_times else C4DLogLevel.WARNING
        evidence = {**evidence, "consecutive_checks": n, "hang_times": envs.hang_times}
        message += (
            f" Found hanging in {n} consecutive check(s)"
            f"{'; reached C4D_HANG_TIMES=' + str(envs.hang_times) if n >= envs.hang_times else ''}."
        )
        verdicts.append(C4DVerdict(rank, kind, severity, message, evidence))

    hung = {r for r, *_ in hang}
    for v in (
        []
        if not judge_slowness
        else _slowness(by_rank, window, slow_ratio, warn_ratio, min_excess_s, consistency, min_samples)
    ):
        if v.rank not in hung and None not in hung:
            verdicts.append(v)
    return C4DResult(tuple(ordered(verdicts)), C4DState(counts))


def ordered(verdicts: Iterable[C4DVerdict]) -> list[C4DVerdict]:
    """Most severe first, then by rank (the collective as a whole, rank None, first)."""
    return sorted(verdicts, key=lambda v: (-_LEVEL_ORDER[v.severity], v.rank if v.rank is not None else -1))


def _hangs(by_rank: dict[int, dict[int, CollectiveRecord]], timeout_s: float, now: float):
    """(rank, kind, message, evidence) for each hang, per the rules in the module docstring."""
    open_rec: dict[int, CollectiveRecord] = {}
    for rank, recs in by_rank.items():
        pending = [r for r in recs.values() if r.exit is None]
        if pending:
            open_rec[rank] = max(pending, key=lambda r: r.seq)
    last_seq = {rank: max(recs, default=0) for rank, recs in by_rank.items()}
    stuck = {rank: rec for rank, rec in open_rec.items() if now - rec.enter > timeout_s}
    if not stuck:
        return []

    found: dict[int | None, tuple] = {}

    # Compute hangs: peers outside every collective that never reached a seq others wait in.
    for rank in sorted(by_rank):
        if rank in open_rec:
            continue
        waiting_for_it = {r: rec for r, rec in stuck.items() if last_seq[rank] < rec.seq}
        if not waiting_for_it:
            continue
        seq = min(rec.seq for rec in waiting_for_it.values())
        op = Counter(rec.op for rec in waiting_for_it.values()).most_common(1)[0][0]
        longest = max(now - rec.enter for rec in waiting_for_it.values())
        last = by_rank[rank].get(last_seq[rank])
        since = (now - last.exit) if last and last.exit is not None else None
        where = f"its last collective was #{last.seq} ({last.op})" if last else "it has not entered any collective"
        found[rank] = (
            rank,
            C4DKind.NON_COMM_HANG,
            f"Rank {rank} never entered {op} #{seq}, which rank(s) "
            f"{_ranks_text(waiting_for_it)} have waited in for {longest:.1f} s; "
            f"{where}{f', {since:.1f} s ago' if since is not None else ''}: "
            f"it is hung outside communication (in compute, data loading or I/O).",
            {
                "seq": seq,
                "op": op,
                "waiting_ranks": sorted(waiting_for_it),
                "waited_s": round(longest, 3),
                "last_seq": last_seq[rank],
                "outside_collectives_s": None if since is None else round(since, 3),
            },
        )

    # Communication hangs, grouped by the seq the stuck ranks are in.
    for seq in sorted({rec.seq for rec in stuck.values()}):
        in_seq = {r: rec for r, rec in stuck.items() if rec.seq == seq}
        # Finished S: closed it, or went past it (and is not still inside S).
        finished = sorted(
            r
            for r in by_rank
            if r not in in_seq and ((seq in by_rank[r] and by_rank[r][seq].exit is not None) or last_seq[r] > seq)
        )
        not_reached = [r for r in by_rank if r not in in_seq and last_seq[r] < seq]
        if finished:
            for rank, rec in in_seq.items():
                found[rank] = (
                    rank,
                    C4DKind.COMM_HANG,
                    f"Rank {rank} has been inside {rec.op} #{seq} for "
                    f"{now - rec.enter:.1f} s, which rank(s) {_ranks_text(finished)} "
                    f"already finished: it is hung in communication.",
                    {"seq": seq, "op": rec.op, "inside_s": round(now - rec.enter, 3), "finished_ranks": finished},
                )
            continue
        if not_reached:
            continue  # victims of a compute hang, reported above
        ops = Counter(rec.op for rec in in_seq.values())
        if len(ops) > 1 and len(in_seq) == len(by_rank):
            (major, n_major), (_, n_next) = ops.most_common(2)
            if n_major > n_next:
                majority = sorted(r for r, rec in in_seq.items() if rec.op == major)
                for rank, rec in in_seq.items():
                    if rec.op == major:
                        continue
                    found[rank] = (
                        rank,
                        C4DKind.COMM_HANG,
                        f"Rank {rank} has been inside {rec.op} #{seq} for "
                        f"{now - rec.enter:.1f} s while rank(s) {_ranks_text(majority)} "
                        f"wait in {major} #{seq}: it is in a collective nobody else "
                        f"joined, hung in communication.",
                        {
                            "seq": seq,
                            "op": rec.op,
                            "peers_op": major,
                            "inside_s": round(now - rec.enter, 3),
                            "waiting_ranks": majority,
                        },
                    )
                continue
        if len(in_seq) == len(by_rank) and None not in found:
            entered = {r: rec.enter for r, rec in in_seq.items()}
            last_in = max(entered, key=entered.get)
            found[None] = (
                None,
                C4DKind.COMM_HANG,
                f"All {len(in_seq)} ranks have been inside {'/'.join(sorted(ops))} "
                f"#{seq} for at least {now - max(entered.values()):.1f} s; every rank "
                f"arrived (rank {last_in} last), so the collective itself is stuck "
                f"and no single rank can be blamed: look at the network and the "
                f"stack snapshot.",
                {
                    "seq": seq,
                    "ops": sorted(ops),
                    "ranks": sorted(in_seq),
                    "last_to_enter": last_in,
                    "inside_s": round(now - max(entered.values()), 3),
                },
            )
    return [found[k] for k in sorted(found, key=lambda k: -1 if k is None else k)]


def _slowness(by_rank, window, slow_ratio, warn_ratio, min_excess_s, consistency, min_samples):
    ranks = sorted(by_rank)
    if len(ranks) < 2:
        return []
    common = set.intersection(*({s for s, r in by_rank[k].items() if r.exit is not None} for k in ranks))
    seqs = sorted(common)[-window:]
    comm: dict[int, list[float]] = {r: [] for r in ranks}
    outside: dict[int, list[float]] = {r: [] for r in ranks}
    for seq in seqs:
        recs = {r: by_rank[r][seq] for r in ranks}
        all_in = max(rec.enter for rec in recs.values())
        for r, rec in recs.items():
            comm[r].append(max(0.0, rec.exit - all_in))
        if seq - 1 in common:
            for r in ranks:
                outside[r].append(max(0.0, recs[r].enter - by_rank[r][seq - 1].exit))

    verdicts = []
    for kind, samples, what in (
        (C4DKind.COMM_SLOW, comm, "inside collectives"),
        (C4DKind.NON_COMM_SLOW, outside, "outside collectives"),
    ):
        n = min(len(v) for v in samples.values())
        if n < min_samples:
            continue
        for rank in ranks:
            slow_steps = 0
            ratios = []
            for i in range(n):
                peers = median(samples[p][i] for p in ranks if p != rank)
                mine = samples[rank][i]
                if mine > slow_ratio * peers and mine - peers > min_excess_s:
                    slow_steps += 1
                ratios.append(mine / max(peers, min_excess_s))
            if slow_steps < consistency * n:
                continue
            mine_med = median(samples[rank][:n])
            peers_med = median(median(samples[p][i] for p in ranks if p != rank) for i in range(n))
            ratio = median(ratios)
            severity = C4DLogLevel.WARNING if ratio >= warn_ratio else C4DLogLevel.INFO
            verdicts.append(
                C4DVerdict(
                    rank,
                    kind,
                    severity,
                    f"Rank {rank} is consistently slower {what}: {mine_med * 1000:.1f} ms against "
                    f"the peers' {peers_med * 1000:.1f} ms (median over the last {n} collectives, "
                    f"{ratio:.1f}x), slow in {slow_steps} of {n}.",
                    {
                        "samples": n,
                        "slow_samples": slow_steps,
                        "median_s": round(mine_med, 6),
                        "peers_median_s": round(peers_med, 6),
                        "ratio": round(ratio, 2),
                        "seqs": [seqs[0], seqs[-1]] if seqs else [],
                    },
                )
            )
    return verdicts


def hang_envs(envs: C4DEnvs, silent_s: float) -> C4DEnvs:
    """The C4D environment for the check hang detection runs before its restart. Every
    rank has been silent for `silent_s` already, which proves the hang that
    C4D_HANG_TIMEOUT waits to see; so a collective held for half of that silence counts,
    when that is shorter, and a hang caught at 6 s gets its verdict even with the default
    10 s timeout (the restart would come first otherwise, with no verdict at all)."""
    floor_us = max(1, int(silent_s * 1e6 / 2))
    return replace(envs, hang_timeout_us=min(envs.hang_timeout_us, floor_us))


def with_stacks(result: C4DResult, in_collective: Mapping[int, str]) -> C4DResult:
    """A rank the records call hung outside communication whose stack is inside a
    torch.distributed collective (`in_collective`, rank -> op, from the stack snapshot) did
    enter one: the records count it done (gloo retires a collective once its data moved)
    but its call never returned while its peers went on to the next. That is a hang in
    communication: RankCommHang."""
    verdicts = []
    for v in result.verdicts:
        op = in_collective.get(v.rank) if v.rank is not None else None
        if v.kind != C4DKind.NON_COMM_HANG or not op:
            verdicts.append(v)
            continue
        ev = v.evidence
        _, found, tail = v.message.partition(" Found hanging")
        message = (
            f"Rank {v.rank} never returned from {op} (its stack is inside it; its collective records "
            f"end at #{ev.get('last_seq')}) while rank(s) {_ranks_text(ev.get('waiting_ranks') or [])} "
            f"finished it and have waited in {ev.get('op')} #{ev.get('seq')} for {ev.get('waited_s')} s: "
            "it is hung in communication." + (found + tail if found else "")
        )
        verdicts.append(C4DVerdict(v.rank, C4DKind.COMM_HANG, v.severity, message, {**ev, "stack_collective": op}))
    return C4DResult(tuple(verdicts), result.state)
