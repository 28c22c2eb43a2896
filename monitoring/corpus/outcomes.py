"""Replay the failure corpus through the real decision path as attempt sequences (issue 26).

Every entry becomes a job with one worker and --max-num-of-job-restart=3: each attempt prints
PROGRESS_STEPS step lines, then fails with the entry's log. A fault its source calls
retryable (transient) happens on the first attempt only, and the next attempt trains to the
end; a bug (not retryable) happens again on every attempt at the same step after the same
progress lines. Each attempt's failure goes through the functions the monitor calls:
`core.classify.classify_failure` (the entry's input as monitoring/corpus/evaluate.py makes
it, with the step lines before its log), `core.failpoint.failure_point` over that tail, the
history the monitor gathers (restarts so far, the same error's count, the previous failure
with its point and node) and `core.policy.decide`.

Scenarios vary what the bug's later attempts look like: an unchanged rerun; a rerun resumed
from a checkpoint (it re-does steps CHECKPOINT_STEP.. and fails at the old step); a rerun on
another node each time (the scheduler placed it elsewhere).

torchrun's rule (`--max-restarts=3`: restart every failure until spent) is replayed on the
same sequences: it recovers every transient fault and restarts every bug 3 times.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from core.classify import Classification, classify_failure
from core.failcontext import FailureContext
from core.failpoint import failure_point
from core.flags import FaultToleranceConfig
from core.kinds import counted_key, evidence_keys
from core.policy import Action, InstanceFailure, JobHistory, PreviousFailure, decide
from monitoring.corpus.evaluate import FRESH_BATCH, Entry, failure_input

__all__ = [
    "RESTARTS",
    "SCENARIOS",
    "CEILING_KEYS",
    "Ceiling",
    "Replay",
    "replay",
    "replay_all",
    "held_back",
    "Figures",
    "figures",
    "ceiling",
]

RESTARTS = 3
PROGRESS_STEPS = 20
CHECKPOINT_STEP = 11
SCENARIOS = ("rerun", "checkpoint-resumed", "another node")
CONFIG = FaultToleranceConfig(enable_job_restart=True, max_num_of_job_restart=RESTARTS)


def held_back(entry: Entry) -> bool:
    """Never shown to whoever writes signatures: the held-back 30 % and every later batch whole."""
    return entry.holdout or entry.batch >= FRESH_BATCH


def _progress(first: int) -> str:
    return "".join(f"step {n}/{PROGRESS_STEPS * 5} loss={2.0 - n / 50:.3f}\n" for n in range(first, PROGRESS_STEPS + 1))


@dataclass(frozen=True)
class Replay:
    entry: Entry
    scenario: str
    first: Classification  # the classifier's verdict on the first attempt
    restarts: int  # restarts Vigil made
    recovered: bool  # the job trained to the end
    last_reason: str  # the reason of the decision that ended the sequence

    @property
    def futile(self) -> int:
        """Restarts spent on a fault a restart does not fix."""
        return 0 if self.entry.retryable else self.restarts


def replay(entry: Entry, scenario: str = "rerun") -> Replay:
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario: expected one of {SCENARIOS}, got {scenario!r}")
    base = failure_input(entry)
    previous: PreviousFailure | None = None
    counts: dict[tuple[str, str, int], int] = {}
    first: Classification | None = None
    restarts = 0
    while True:
        attempt = restarts + 1
        resumed = scenario == "checkpoint-resumed" and attempt > 1
        tail = _progress(CHECKPOINT_STEP if resumed else 1) + entry.log
        node = f"node-{attempt}" if scenario == "another node" else "node-1"
        c = classify_failure(replace(base, log_tail=tail))
        first = first or c
        point = failure_point(tail, c.evidence)
        history = JobHistory(
            job_restarts_so_far=restarts,
            same_error_counts=counts,
            failed_worker_instances_now=1,
            total_worker_instances=1,
            previous_failure=previous,
        )
        # the context the monitor gathers: one job alone on its nodes, none of them with a record
        context = FailureContext(attempt=attempt, node=node, previous_node=previous.node if previous else "")
        d = decide(CONFIG, history, InstanceFailure("worker-0", "Worker", 0, node, c, point=point, context=context))
        if d.action != Action.RESTART_JOB:
            return Replay(entry, scenario, first, restarts, False, d.reason)
        restarts += 1
        if entry.retryable:  # a transient fault: the next attempt trains to the end
            return Replay(entry, scenario, first, restarts, True, d.reason)
        counts[(c.rule, "Worker", 0)] = counts.get((c.rule, "Worker", 0), 0) + 1
        previous = PreviousFailure(rule=c.rule, role="Worker", index=0, progress_since=True, point=point, node=node)


def replay_all(entries: Iterable[Entry], scenario: str = "rerun") -> list[Replay]:
    return [replay(e, scenario) for e in entries]


@dataclass(frozen=True)
class Figures:
    entries: int
    retryable: int
    recovered: int
    not_retryable: int
    futile: int
    worst: int
    first_agree: int
    torchrun_futile: int

    @property
    def recovered_share(self) -> float | None:
        return self.recovered / self.retryable if self.retryable else None

    @property
    def futile_per_bug(self) -> float | None:
        return self.futile / self.not_retryable if self.not_retryable else None

    @property
    def first_agreement(self) -> float | None:
        return self.first_agree / self.entries if self.entries else None


def figures(replays: list[Replay]) -> Figures:
    bugs = [r for r in replays if not r.entry.retryable]
    return Figures(
        entries=len(replays),
        retryable=len(replays) - len(bugs),
        recovered=sum(r.recovered for r in replays if r.entry.retryable),
        not_retryable=len(bugs),
        futile=sum(r.futile for r in bugs),
        worst=max((r.futile for r in bugs), default=0),
        first_agree=sum(r.first.retryable == r.entry.retryable for r in replays),
        torchrun_futile=RESTARTS * len(bugs),
    )


def _evidence_class(c: Classification) -> str:
    """The coarsest reading of a verdict's evidence finer than its rule: the HTTP status, errno,
    exception class or family core.kinds keys it by (not the line itself, which no two reports
    share), else the rule."""
    return next(key for key, _ in evidence_keys(c) if not key.startswith("line:"))


# What a verdict can be decided by: the catalog's rule, the finest key of its evidence that more
# than one report can share, and the key the committed kinds count reports by.
CEILING_KEYS: dict[str, Callable[[Classification], str]] = {
    "rule": lambda c: f"rule:{c.rule}",
    "evidence class": _evidence_class,
    # what the committed kinds are decided by: the key whose reports are counted, and the
    # catalog's verdict of the rule (core.kinds.verdict_of reads nothing else of the log)
    "counted key": lambda c: f"{counted_key(c)[0]} {'retryable' if c.retryable else 'not retryable'}",
}


@dataclass(frozen=True)
class Ceiling:
    """The best any verdict per group could do, the groups' verdicts chosen knowing the answers."""

    groups: int
    futile_per_bug: float | None  # the fewest futile restarts per bug of a choice that recovers >= the target
    recovered: float | None  # the most recovered of a choice with <= the futile target


def ceiling(
    replays: Iterable[Replay],
    key: Callable[[Classification], str],
    recovered_target: float = 0.98,
    futile_target: float = 0.25,
) -> Ceiling:
    """An upper bound on what deciding by `key` can reach on these replays.

    Every failure whose first verdict has the same key gets the same decision: restart it (each
    transient one is recovered, each bug costs one restart, the fewest the repeated-failure guard
    allows) or fail it. The choice per group is made here with the sources' verdicts in hand,
    which no classifier has, so no threshold, count or verdict over these keys does better: a
    target this misses needs evidence the keys do not read, not a better cut. Exact (a knapsack
    over the groups: the fewest bugs restarted for each number of transient faults recovered)."""
    groups: dict[str, list[int]] = {}
    for r in replays:
        counts = groups.setdefault(key(r.first), [0, 0])
        counts[0 if r.entry.retryable else 1] += 1
    transient = sum(t for t, _ in groups.values())
    bugs = sum(b for _, b in groups.values())
    unreachable = bugs + 1
    fewest = [0] + [unreachable] * transient  # fewest[x]: the fewest bugs restarted to recover x
    for t, b in groups.values():
        if t:
            for x in range(transient, t - 1, -1):
                fewest[x] = min(fewest[x], fewest[x - t] + b)
    # bugs alone in a group are failed at no cost: fewest[0] stays 0
    need = -(-round(recovered_target * 10_000) * transient // 10_000)  # ceil(target * transient)
    futile = min(fewest[need:]) / bugs if bugs and transient else None
    recovered = max(x for x, n in enumerate(fewest) if n <= futile_target * bugs) / transient if transient else None
    return Ceiling(len(groups), futile, recovered)
