"""A retryable keyword tried on past failures before it is kept (issue 26).

Pure: past failures in (their classification inputs, what Vigil did and what happened
next), the proposed keywords in; per failure the verdict then and with the keywords,
what Vigil would have done differently, and whether the outcome proved the new verdict
right. It re-runs the real classifier (`classify_failure` with the proposed
`user_keywords`) and the real restart decision (`core.policy.decide`, with the failure
points of core.failpoint, so the repeated-failure guard judges a keyword's verdict as it
judges every retried one), so a keyword that only renames a verdict the policy restarts
anyway changes nothing.

The history each failure is decided on is rebuilt from the failures of its job that
came before it, re-classified with the same keywords (a keyword changes the rule, and
the same-error counts and the guard count rules). What came after a changed decision
never happened, so each failure is judged on the past as it was.

The outcome is the retry's experiment (issue 26): a failure that was restarted and
whose next attempt succeeded or trained past that failure's point proves *retryable*;
one whose next attempt failed the same way (the same evidence line, or the same rule
where there is no line) at the same or an earlier point proves *deterministic*, and so
does the repeat itself (the failure that failed the job by repeating the one before it).
Anything else, a failure that failed the job first of all, is *unknown*.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from core.classify import Classification, FailureInput, classify_failure
from core.failpoint import FailurePoint, Phase
from core.flags import FaultToleranceConfig
from core.policy import Action, InstanceFailure, JobHistory, PreviousFailure, decide

__all__ = [
    "Did",
    "Change",
    "Proved",
    "NextAttempt",
    "PastFailure",
    "FailureReplay",
    "Summary",
    "backtest_keywords",
    "outcome_of",
    "summarize",
]


class Did(StrEnum):
    """What Vigil did, or would have done, about one failure."""

    RESTARTED = "restarted"
    FAILED = "failed"
    NOTHING = "nothing"  # the job had been stopped by a person


class Change(StrEnum):
    NONE = "none"
    RESTART_INSTEAD_OF_FAIL = "restart_instead_of_fail"
    FAIL_INSTEAD_OF_RESTART = "fail_instead_of_restart"
    LOG_GONE = "log_gone"  # the failure's log can no longer be read: not re-classified


class Proved(StrEnum):
    RETRYABLE = "retryable"
    DETERMINISTIC = "deterministic"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class NextAttempt:
    """What the attempt a whole-job restart started did."""

    point: FailurePoint
    succeeded: bool = False
    failed: bool = False
    rule: str = ""  # its failure's recorded rule and evidence line, when it failed
    evidence: str = ""


@dataclass(frozen=True)
class PastFailure:
    """One past failure: the root cause of one decision, as the monitor saw it."""

    ref: str  # the caller's name for it (shown back unchanged)
    job: int  # failures of one job are replayed in attempt order, each on those before it
    attempt: int
    instance: str  # "worker-0"
    role: str
    index: int
    failure: FailureInput | None  # None: its log is gone, so it cannot be classified again
    keywords: tuple[str, ...]  # the retryable keywords in force for its job without the proposal
    config: FaultToleranceConfig | None  # None: fault tolerance is off (the first failure fails the job)
    did: Did  # what Vigil did then
    rule: str  # the verdict recorded then
    evidence: str = ""
    point: FailurePoint = field(default_factory=lambda: FailurePoint(None, Phase.STARTUP, ""))
    next_attempt: NextAttempt | None = None  # only for a whole-job restart whose attempt exists
    node: str = ""
    stopped_by_user: bool = False
    job_restarts_before: int = 0
    restarts_without_progress_before: int = 0
    failed_workers: int = 0  # at the time, this one included when it is a worker
    total_workers: int = 0


@dataclass(frozen=True)
class FailureReplay:
    ref: str
    job: int
    attempt: int
    instance: str
    did: Did  # what Vigil did then
    verdict_then: Classification | None  # re-classified with the keywords in force (None: log gone)
    verdict_with: Classification | None  # re-classified with the proposal too
    would_do: Did | None  # with the proposal (None: log gone)
    change: Change
    matched: bool  # the proposal changed the verdict (a proposed keyword decided it)
    proved: Proved  # what the outcome showed this failure to be
    right: bool | None  # does the verdict with the proposal agree with the outcome (None: unknown)


@dataclass(frozen=True)
class Summary:
    failures: int
    matched: int  # failures whose verdict the proposal changes
    restart_instead_of_fail_jobs: int
    restart_instead_of_fail_proved_transient: int
    restart_instead_of_fail_proved_deterministic: int
    fail_instead_of_restart_jobs: int
    fail_instead_of_restart_later_trained: int
    logs_gone: int
    sentence: str


def _same_way(failure: PastFailure, after: NextAttempt) -> bool:
    if failure.evidence and after.evidence:
        return failure.evidence == after.evidence
    return bool(failure.rule) and failure.rule == after.rule


def outcome_of(failure: PastFailure, before: PastFailure | None = None) -> Proved:
    """What the retry showed the failure to be; `before` is the failure whose restart
    started this one's attempt, when there was one."""
    after = failure.next_attempt
    if failure.did is Did.RESTARTED and after is not None:
        # past the failure's point: core.failpoint's own comparison, as the guard makes it
        if after.succeeded or not after.point.not_past(failure.point):
            return Proved.RETRYABLE
        if after.failed and _same_way(failure, after):
            return Proved.DETERMINISTIC
        return Proved.UNKNOWN
    if before is not None and outcome_of(before) is Proved.DETERMINISTIC:
        return Proved.DETERMINISTIC  # it is the repeat that showed the one before deterministic
    return Proved.UNKNOWN


def _did(action: Action) -> Did:
    if action in (Action.RESTART_JOB, Action.RESTART_INSTANCE):
        return Did.RESTARTED
    return Did.FAILED if action is Action.FAIL_JOB else Did.NOTHING


def _with(f: FailureInput, keywords: tuple[str, ...]) -> FailureInput:
    return replace(f, user_keywords=keywords)


def _keywords(base: tuple[str, ...], proposed: tuple[str, ...]) -> tuple[str, ...]:
    """The proposal after the keywords in force, each once (the classifier reads the first 100)."""
    out = list(base)
    out += [k for k in proposed if k not in out]
    return tuple(out[:100])


def _decision(f: PastFailure, c: Classification, earlier: Sequence[tuple[PastFailure, str, str]]) -> Did:
    """The restart decision on `f` with verdict `c`, on the history of its job's earlier
    failures (each with its rule and evidence line under the same keywords)."""
    if f.config is None:
        return Did.FAILED
    counts: dict[tuple[str, str, int], int] = {}
    for p, rule, _ in earlier:
        if p.did is Did.RESTARTED:  # the history counts the restarts' root causes
            key = (rule, p.role, p.index)
            counts[key] = counts.get(key, 0) + 1
    previous = None
    if earlier:
        p, rule, evidence = earlier[-1]
        if p.did is Did.RESTARTED and p.attempt + 1 == f.attempt:
            previous = PreviousFailure(
                rule=rule,
                role=p.role,
                index=p.index,
                step=p.point.step,
                progress_since=f.point.phase == Phase.TRAINING,
                step_now=f.point.step,
                point=replace(p.point, evidence=evidence),
                node=p.node,
            )
    history = JobHistory(
        stopped_by_user=f.stopped_by_user,
        job_restarts_so_far=f.job_restarts_before,
        same_error_counts=counts,
        failed_worker_instances_now=min(f.failed_workers, f.total_workers),
        total_worker_instances=f.total_workers,
        consecutive_restarts_without_progress=f.restarts_without_progress_before,
        previous_failure=previous,
    )
    trigger = InstanceFailure(
        instance=f.instance,
        role=f.role,
        index=f.index,
        node=f.node,
        classification=c,
        point=replace(f.point, evidence=c.evidence),  # the guard compares the evidence this verdict read
    )
    return _did(decide(f.config, history, trigger).action)


def _change(then: Did, now: Did) -> Change:
    if then is Did.FAILED and now is Did.RESTARTED:
        return Change.RESTART_INSTEAD_OF_FAIL
    if then is Did.RESTARTED and now is Did.FAILED:
        return Change.FAIL_INSTEAD_OF_RESTART
    return Change.NONE


def _right(c: Classification, proved: Proved) -> bool | None:
    if proved is Proved.UNKNOWN:
        return None
    return c.retryable == (proved is Proved.RETRYABLE)


def backtest_keywords(failures: Iterable[PastFailure], proposed: Sequence[str]) -> list[FailureReplay]:
    """Each past failure replayed with and without the proposed retryable keywords, in
    the order given. Raises ValueError for keywords the classifier would refuse."""
    proposed = tuple(proposed)
    given = list(failures)
    by_job: dict[int, list[PastFailure]] = {}
    for f in given:
        by_job.setdefault(f.job, []).append(f)
    replays: dict[int, FailureReplay] = {}
    for job_failures in by_job.values():
        ordered = sorted(job_failures, key=lambda f: f.attempt)
        # each earlier failure with its rule and evidence line as re-classified (the guard compares both)
        then_rules: list[tuple[PastFailure, str, str]] = []
        with_rules: list[tuple[PastFailure, str, str]] = []
        for i, f in enumerate(ordered):
            before = ordered[i - 1] if i and ordered[i - 1].attempt + 1 == f.attempt else None
            proved = outcome_of(f, before)
            if f.failure is None:
                replay = FailureReplay(
                    f.ref, f.job, f.attempt, f.instance, f.did, None, None, None, Change.LOG_GONE, False, proved, None
                )
                then_rules.append((f, f.rule, f.evidence))
                with_rules.append((f, f.rule, f.evidence))
            else:
                then = classify_failure(_with(f.failure, _keywords(f.keywords, ())))
                now = classify_failure(_with(f.failure, _keywords(f.keywords, proposed)))
                did_then = _decision(f, then, then_rules)
                did_now = _decision(f, now, with_rules)
                matched = now != then
                # A change is the proposal's when it changes the replayed decision, and it is
                # told against what Vigil did: the replay lacks what the decision weighed beyond
                # the log (other jobs failing on the node that minute, core.failcontext), so its
                # decision without the proposal can differ from Vigil's.
                change = Change.NONE if did_now is did_then else _change(f.did, did_now)
                replay = FailureReplay(
                    f.ref,
                    f.job,
                    f.attempt,
                    f.instance,
                    f.did,
                    then,
                    now,
                    did_now,
                    change,
                    matched,
                    proved,
                    _right(now, proved),
                )
                then_rules.append((f, then.rule, then.evidence))
                with_rules.append((f, now.rule, now.evidence))
            replays[id(f)] = replay
    return [replays[id(f)] for f in given]


def _jobs(n: int) -> str:
    return f"{n} job{'' if n == 1 else 's'}"


def summarize(replays: Sequence[FailureReplay]) -> Summary:
    """The figures the preview's summary line says, counted in jobs (a job counts once
    per kind of change, by its first changed failure)."""
    restart: dict[int, FailureReplay] = {}
    fail: dict[int, FailureReplay] = {}
    for r in replays:
        if r.change is Change.RESTART_INSTEAD_OF_FAIL:
            restart.setdefault(r.job, r)
        elif r.change is Change.FAIL_INSTEAD_OF_RESTART:
            fail.setdefault(r.job, r)
    transient = sum(1 for r in restart.values() if r.proved is Proved.RETRYABLE)
    deterministic = sum(1 for r in restart.values() if r.proved is Proved.DETERMINISTIC)
    trained = sum(1 for r in fail.values() if r.proved is Proved.RETRYABLE)
    gone = sum(1 for r in replays if r.change is Change.LOG_GONE)
    matched = sum(1 for r in replays if r.matched)
    parts = []
    if restart:
        part = f"would have restarted {_jobs(len(restart))}"
        proved = []
        if transient:
            proved.append(f"{transient} of them proved transient")
        if deterministic:
            proved.append(f"{deterministic} proved deterministic (the same failure at the same point twice)")
        if not proved:
            proved.append("no outcome proves either way (those jobs failed)")
        parts.append(part + ", " + ", ".join(proved))
    if fail:
        part = f"would have failed {_jobs(len(fail))}"
        if trained:
            part += " that later trained" if trained == len(fail) else f", {trained} of which later trained"
        parts.append(part)
    if not parts:
        parts.append(
            f"would have changed no decision on the {len(replays)} past failure{'' if len(replays) == 1 else 's'}"
        )
    sentence = "; ".join(parts)
    sentence = sentence[0].upper() + sentence[1:]
    if matched:
        sentence += f"; it matches {matched} of {len(replays)} past failure{'' if len(replays) == 1 else 's'}"
    if gone:
        sentence += f"; {gone} past failure{'' if gone == 1 else 's'} could not be tried (the log is gone)"
    return Summary(
        failures=len(replays),
        matched=matched,
        restart_instead_of_fail_jobs=len(restart),
        restart_instead_of_fail_proved_transient=transient,
        restart_instead_of_fail_proved_deterministic=deterministic,
        fail_instead_of_restart_jobs=len(fail),
        fail_instead_of_restart_later_trained=trained,
        logs_gone=gone,
        sentence=sentence + ".",
    )
