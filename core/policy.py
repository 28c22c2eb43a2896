"""The restart decision: what the monitor does when an instance fails or the job hangs.

SPEC section 3's rules, applied in order, plus the restart-loop breaker of section 9:
1. the job was stopped by a person -> nothing;
2. policy Never -> the job fails;
3. with ExitCodeAndErrorMsg a deterministic verdict fails the job (core.kinds: the
   classification's kind by the public reports of its evidence's finest key that has
   enough of them, else of its rule, weighed with the context the log
   tail lacks, core.failcontext; an ambiguous one gets a probe restart and is judged by
   repetition)
   (with OnFailure every failure qualifies); so does a retryable one that holds only
   a few times (a SIGKILL with no evidence is retried once) once those are spent, and a
   retried one that repeats the previous failure at the same point (the same rule and the
   same evidence at the same or an earlier failure point, core.failpoint: on any rank after
   a whole-job restart, on that instance after it was restarted alone in Async mode): the
   repeated-failure guard, which stops a bug misjudged as transient at its second identical
   failure (a preemption or node loss the backend reported on another node is exempt);
4. the same error (rule, role, index) now occurred more than --max-num-of-same-error
   times -> the job fails;
5. the fraction of failed worker instances is over --max-tolerated-failure-rate
   (-1 = off) -> the job fails;
6. Async: restart the failed instance alone, unless it is a PS or Chief (whole-job
   restart); Sync: whole-job restart; replica groups (--replica-groups=N, issue 30):
   restart the failed instance's group alone, whatever the mode, after rules 3-5 counted
   the failure as one at its position in every group (a bug in one group is a bug in all);
7. a whole-job restart needs --enable-job-restart=True and fewer than
   --max-num-of-job-restart restarts so far; otherwise the job fails. The breaker: when
   the last 3 whole-job restarts in a row made no training progress, the job fails.
A hang, an exit hang or a C4D error goes through rules 1 and 7 (and the breaker).

Pure: the caller gathers the history, persists the decision and builds its idempotency key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType

from core.classify import Classification, ErrorSource
from core.failcontext import FailureContext, with_context
from core.failpoint import FailurePoint
from core.kinds import Verdict, verdict_of
from core.flags import ExecutionMode, FaultToleranceConfig, FaultTolerantPolicy
from core.replicas import kept_training

__all__ = [
    "RESTART_LOOP_LIMIT",
    "WHOLE_JOB_ROLES",
    "REPEATED_FAILURE_REASON",
    "Action",
    "Step",
    "InstanceFailure",
    "DetectedProblem",
    "Trigger",
    "PreviousFailure",
    "JobHistory",
    "Decision",
    "decide",
]

# Whole-job restarts in a row without training progress that stop the job (SPEC 9).
RESTART_LOOP_LIMIT = 3
# Roles whose failure needs a whole-job restart even in Async mode (SPEC 3, rule 6).
WHOLE_JOB_ROLES = frozenset({"ps", "chief"})


class Action(StrEnum):
    RESTART_JOB = "restart_job"
    RESTART_INSTANCE = "restart_instance"
    RESTART_GROUP = "restart_group"
    FAIL_JOB = "fail_job"
    NOTHING = "nothing"


class Step(StrEnum):
    """Which rule decided (SPEC 3's rule number in the comment)."""

    STOPPED_BY_USER = "stopped_by_user"  # 1
    POLICY_NEVER = "policy_never"  # 2
    NOT_RETRYABLE = "not_retryable"  # 3
    RETRIES_SPENT = "retries_spent"  # 3 (a verdict retryable only so many times)
    REPEATED_FAILURE = "repeated_failure"  # 3 (the repeated-failure guard)
    SAME_ERROR_LIMIT = "same_error_limit"  # 4
    FAILURE_RATE = "failure_rate"  # 5
    INSTANCE_RESTART = "instance_restart"  # 6 (Async)
    GROUP_RESTART = "group_restart"  # 6 (replica groups)
    RESTART_DISABLED = "restart_disabled"  # 7
    RESTART_BUDGET = "restart_budget"  # 7
    RESTART_LOOP = "restart_loop"  # SPEC 9 breaker
    JOB_RESTART = "job_restart"  # 6 + 7 passed


@dataclass(frozen=True)
class InstanceFailure:
    instance: str  # "worker-1"
    role: str  # "Worker", "PS", "Chief", "Master", ...
    index: int
    node: str
    classification: Classification
    point: FailurePoint | None = None  # where it failed (core.failpoint), for the guard
    context: FailureContext | None = None  # what the log tail lacks (core.failcontext)
    # Replica groups: the failed instance's group, and the (role, index) of the instances at
    # its position in the other groups, whose failures count as its own in rules 3 and 4.
    group: int | None = None
    counterparts: tuple[tuple[str, int], ...] = ()

    @property
    def source(self) -> ErrorSource:
        return self.classification.source


_PROBLEM_SOURCES = (ErrorSource.HANG, ErrorSource.EXIT_HANG, ErrorSource.C4D)


@dataclass(frozen=True)
class DetectedProblem:
    """A hang, an exit hang or a C4D error: a restart trigger without a failed instance."""

    source: ErrorSource
    message: str

    def __post_init__(self) -> None:
        if self.source not in _PROBLEM_SOURCES:
            raise ValueError(f"source: expected one of {', '.join(_PROBLEM_SOURCES)}, got {self.source!r}")
        if not isinstance(self.message, str) or not self.message.strip():
            raise ValueError("message: expected a non-empty description of the problem")


Trigger = InstanceFailure | DetectedProblem


def _non_negative_int(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name}: expected a non-negative integer, got {value!r}")


# The guard's verdict, in the words of issue 13.
REPEATED_FAILURE_REASON = "the same failure at the same point twice: likely deterministic"


@dataclass(frozen=True)
class PreviousFailure:
    """The root cause of the job's most recent restart, and what happened since."""

    rule: str
    role: str
    index: int
    step: int | None = None  # the training step the SDK had reported when it failed
    progress_since: bool = False  # the attempt that has failed now made training progress
    step_now: int | None = None  # the step the SDK reports now
    point: FailurePoint | None = None  # where it failed (core.failpoint)
    node: str = ""  # the node it failed on

    def repeated_by(
        self, rule: str, role: str, index: int, point: FailurePoint | None = None, any_instance: bool = False
    ) -> bool:
        """The same failure of the same instance at the same or an earlier point. With both
        failure points known they decide (the log's steps, the phase and the evidence), and
        with `any_instance` (a whole-job restart's root cause: every rank runs the same code,
        and which one fails first is timing) on whichever instance; without points, the
        SDK's steps and the progress since do, on the same instance, as before failure points."""
        if point is not None and self.point is not None:
            same = rule == self.rule and (
                any_instance or (role.casefold(), index) == (self.role.casefold(), self.index)
            )
            return same and point.repeats(self.point)
        if (rule, role.casefold(), index) != (self.rule, self.role.casefold(), self.index):
            return False
        same_step = self.step is not None and self.step == self.step_now
        return same_step or not self.progress_since

    def where(self, point: FailurePoint | None) -> str:
        if point is not None and self.point is not None:
            now, before = point.describe(), self.point.describe()
            if now == before:
                return f"{now}, with no training progress past it in between"
            return f"{now} (it failed {before} last time)"
        if self.step is not None and self.step == self.step_now:
            return f"at step {self.step}"
        return "with no training progress in between"


@dataclass(frozen=True)
class JobHistory:
    stopped_by_user: bool = False
    job_restarts_so_far: int = 0
    # (rule, role, index) -> occurrences before this one, across attempts
    same_error_counts: Mapping[tuple[str, str, int], int] = field(default_factory=dict)
    failed_worker_instances_now: int = 0  # including the one failing now, if a worker
    total_worker_instances: int = 0
    consecutive_restarts_without_progress: int = 0
    previous_failure: PreviousFailure | None = None
    # Async: the previous failure of each instance restarted alone within the current
    # attempt, with what its own run did since (previous_failure_on prefers these).
    instance_failures: tuple[PreviousFailure, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.stopped_by_user, bool):
            raise ValueError(f"stopped_by_user: expected True or False, got {self.stopped_by_user!r}")
        for name in (
            "job_restarts_so_far",
            "failed_worker_instances_now",
            "total_worker_instances",
            "consecutive_restarts_without_progress",
        ):
            _non_negative_int(name, getattr(self, name))
        if self.failed_worker_instances_now > self.total_worker_instances:
            raise ValueError(
                f"failed_worker_instances_now: {self.failed_worker_instances_now} is more than "
                f"total_worker_instances ({self.total_worker_instances})"
            )
        for key, count in self.same_error_counts.items():
            if not (isinstance(key, tuple) and len(key) == 3):
                raise ValueError(f"same_error_counts: keys are (rule, role, index), got {key!r}")
            _non_negative_int(f"same_error_counts[{key!r}]", count)
        if self.previous_failure is not None and not isinstance(self.previous_failure, PreviousFailure):
            raise ValueError(f"previous_failure: expected a PreviousFailure or None, got {self.previous_failure!r}")
        if not isinstance(self.instance_failures, tuple) or not all(
            isinstance(p, PreviousFailure) for p in self.instance_failures
        ):
            raise ValueError(f"instance_failures: expected a tuple of PreviousFailure, got {self.instance_failures!r}")
        object.__setattr__(self, "same_error_counts", MappingProxyType(dict(self.same_error_counts)))

    def same_error_count(self, rule: str, role: str, index: int) -> int:
        return self.same_error_counts.get((rule, role, index), 0)

    def previous_failure_on(self, role: str, index: int) -> PreviousFailure | None:
        """The failure before this one on that instance: its own restart alone within this
        attempt when it had one (the later of the two), else the root cause of the whole-job
        restart that started the attempt."""
        own = next(
            (p for p in self.instance_failures if (p.role.casefold(), p.index) == (role.casefold(), index)), None
        )
        return own or self.previous_failure


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str  # a full sentence shown to the user
    step: Step
    kind: str = ""  # the failure's verdict kind (core.kinds.Kind); "" for a hang or a stopped job


def _what_failed(t: InstanceFailure) -> str:
    c = t.classification
    return f"{t.instance} failed with {c.rule} ({c.message})"


def _flag_bool(value: bool) -> str:
    return "True" if value else "False"


# A retryable catalog entry's advice opens by promising the restart ("The job is retried.",
# "... retried automatically, preferably on another node.", "... retried once;"); a job that
# fails now was not retried.
_RETRIED = re.compile(r"^The job is retried\b[^.;]*[.;]\s*")


def _failing_advice(c: Classification, cause: bool = True) -> str:
    """The cause and next step of a failure that fails the job, without a promise of a retry
    that is not made: its further advice ("If it repeats on the same node, check that node")
    stands."""
    rest = _RETRIED.sub("", c.next_step.strip())
    advice = rest[:1].upper() + rest[1:]
    return f"{c.cause} {advice}".strip() if cause else advice


def _whole_job_restart(config: FaultToleranceConfig, history: JobHistory, why: str, prefix: str = "") -> Decision:
    """Rule 7 and the restart-loop breaker."""
    if not config.enable_job_restart:
        return Decision(
            Action.FAIL_JOB,
            f"Not restarted: {prefix}whole-job restarts are off "
            f"(--enable-job-restart={_flag_bool(config.enable_job_restart)}), so the job fails; {why}.",
            Step.RESTART_DISABLED,
        )
    done, budget = history.job_restarts_so_far, config.max_num_of_job_restart
    if done >= budget:
        return Decision(
            Action.FAIL_JOB,
            f"Not restarted: the job has already been restarted {done} of {budget} times "
            f"(--max-num-of-job-restart={budget}); {why}.",
            Step.RESTART_BUDGET,
        )
    stalled = history.consecutive_restarts_without_progress
    if stalled >= RESTART_LOOP_LIMIT:
        return Decision(
            Action.FAIL_JOB,
            f"Not restarted: the last {stalled} whole-job restarts in a row made no training "
            f"progress, so another restart would most likely fail the same way; {why}.",
            Step.RESTART_LOOP,
        )
    return Decision(
        Action.RESTART_JOB,
        f"Restarting the whole job (restart {done + 1} of {budget}): {prefix}{why}.",
        Step.JOB_RESTART,
    )


def _decide_problem(config: FaultToleranceConfig, history: JobHistory, t: DetectedProblem) -> Decision:
    what = {
        ErrorSource.HANG: "the job hung",
        ErrorSource.EXIT_HANG: "the job did not exit",
        ErrorSource.C4D: "C4D found a faulty rank",
    }[t.source]
    message = t.message.strip().rstrip(".")
    if message[:1].isupper() and message[1:2].islower():  # "All 4 ..." reads "all 4 ..." mid-sentence
        message = message[0].lower() + message[1:]
    why = f"{what}: {message}"
    if history.stopped_by_user:
        return Decision(
            Action.NOTHING,
            f"No action: the job was stopped by a person, and the monitor never restarts a stopped job ({why}).",
            Step.STOPPED_BY_USER,
        )
    return _whole_job_restart(config, history, why)


def _guarded(t: InstanceFailure, previous: PreviousFailure) -> bool:
    """Whether the repeated-failure guard may judge this failure. Every retried verdict,
    whatever decided it (the log, the exit status, a user's keyword, a backend's reason), so
    that a bug misjudged as transient is stopped at its second identical failure and wastes
    one restart at most; except a preemption, eviction or node loss that the backend itself
    reported, on another node than last time (or with last time's node unknown): the
    scheduler took a node away again, which says nothing about the code. A preemption
    read only from the log is guarded like the rest: a log line can be the code's own."""
    c = t.classification
    infrastructure = c.source == ErrorSource.BACKEND and c.family == "preemption"
    return not (infrastructure and (not previous.node or not t.node or previous.node != t.node))


def _same_error_count(history: JobHistory, rule: str, t: InstanceFailure) -> int:
    return sum(history.same_error_count(rule, role, index) for role, index in ((t.role, t.index), *t.counterparts))


def _repeated(history: JobHistory, t: InstanceFailure) -> PreviousFailure | None:
    """The previous failure this one repeats, for the guard (_guarded): on the same instance
    (after a whole-job restart, on any: which rank fails first is timing), or, with replica
    groups, at the same position of another group (a bug in one group is a bug in all)."""
    c = t.classification
    for role, index in ((t.role, t.index), *t.counterparts):
        previous = history.previous_failure_on(role, index)
        if previous is None or not _guarded(t, previous):
            continue
        whole_job = previous is history.previous_failure
        if previous.repeated_by(c.rule, role, index, t.point, any_instance=whole_job):
            return previous
    return None


def _decide_failure(config: FaultToleranceConfig, history: JobHistory, t: InstanceFailure) -> Decision:
    verdict = with_context(verdict_of(t.classification), t.classification, t.context)
    decision = _decide_on_verdict(config, history, t, verdict)
    if decision.step in (Step.STOPPED_BY_USER, Step.POLICY_NEVER):
        return decision
    reason = decision.reason
    if t.context is not None:  # every input the decision weighed, in its reason
        where = t.point.describe() if t.point is not None else "with no failure point"
        reason = f"{reason.rstrip()} (Context: {t.context.describe(where)}.)"
    return replace(decision, reason=reason, kind=str(verdict.kind))


def _decide_on_verdict(
    config: FaultToleranceConfig, history: JobHistory, t: InstanceFailure, verdict: Verdict
) -> Decision:
    c = t.classification
    failed = _what_failed(t)
    # 1
    if history.stopped_by_user:
        return Decision(
            Action.NOTHING,
            f"No action: the job was stopped by a person, and the monitor never restarts a stopped job ({failed}).",
            Step.STOPPED_BY_USER,
        )
    # 2
    if config.fault_tolerant_policy == FaultTolerantPolicy.NEVER:
        return Decision(
            Action.FAIL_JOB,
            f"Not restarted: the fault-tolerant policy is Never "
            f"(--fault-tolerant-policy=Never), so the job fails; {failed}.",
            Step.POLICY_NEVER,
        )
    # 3
    if config.fault_tolerant_policy == FaultTolerantPolicy.EXIT_CODE_AND_ERROR_MSG and not verdict.restarts:
        return Decision(
            Action.FAIL_JOB,
            f"Not restarted: {failed}, which a restart cannot fix ({verdict.reason}; "
            f"--fault-tolerant-policy=ExitCodeAndErrorMsg). {_failing_advice(c)}",
            Step.NOT_RETRYABLE,
        )
    if config.fault_tolerant_policy == FaultTolerantPolicy.EXIT_CODE_AND_ERROR_MSG:
        before = _same_error_count(history, c.rule, t)
        if c.retryable and c.retry_limit is not None and before >= c.retry_limit:
            return Decision(
                Action.FAIL_JOB,
                f"Not restarted: {failed} again; this is retried only {c.retry_limit} "
                f"time{'s' if c.retry_limit != 1 else ''} on one instance, and it already was "
                f"(--fault-tolerant-policy=ExitCodeAndErrorMsg). {_failing_advice(c)}",
                Step.RETRIES_SPENT,
            )
        previous = _repeated(history, t)
        if previous is not None:
            return Decision(
                Action.FAIL_JOB,
                f"Not restarted: {REPEATED_FAILURE_REASON}; {failed}, as it did before the last "
                f"restart, {previous.where(t.point)}. {_failing_advice(c, cause=False)}".rstrip(),
                Step.REPEATED_FAILURE,
            )
    # 4
    occurrences = _same_error_count(history, c.rule, t) + 1
    limit = config.max_num_of_same_error
    if occurrences > limit:
        return Decision(
            Action.FAIL_JOB,
            f"Not restarted: the error {c.rule} has now occurred {occurrences} times on "
            f"{t.instance}{' and its counterparts in the other replica groups' if t.counterparts else ''}, "
            f"more than --max-num-of-same-error={limit}; {failed}.",
            Step.SAME_ERROR_LIMIT,
        )
    # 5
    threshold = config.max_tolerated_failure_rate
    if threshold >= 0 and history.total_worker_instances > 0:
        rate = history.failed_worker_instances_now / history.total_worker_instances
        if rate > threshold:
            return Decision(
                Action.FAIL_JOB,
                f"Not restarted: {history.failed_worker_instances_now} of "
                f"{history.total_worker_instances} worker instances have failed "
                f"({rate:.0%}), more than --max-tolerated-failure-rate={threshold:g}; {failed}.",
                Step.FAILURE_RATE,
            )
    # 6
    if config.fault_tolerant_policy == FaultTolerantPolicy.ON_FAILURE and not c.retryable:
        qualifies = "an error (every failure qualifies with OnFailure)"
    else:
        qualifies = "a retryable error" if c.retryable else "an error that may be transient"
    if config.replica_groups >= 2 and t.group is not None:
        kept = kept_training(config.replica_groups, t.group)
        return Decision(
            Action.RESTART_GROUP,
            f"Group {t.group} restarted alone; {kept} kept training: {t.instance} failed with "
            f"{qualifies}: {c.rule} ({c.message}).",
            Step.GROUP_RESTART,
        )
    if config.job_execution_mode == ExecutionMode.ASYNC:
        if t.role.casefold() not in WHOLE_JOB_ROLES:
            return Decision(
                Action.RESTART_INSTANCE,
                f"Restarting {t.instance} alone: the job runs in Async mode and "
                f"{t.instance} failed with {qualifies}: {c.rule} ({c.message}); {verdict.reason}.",
                Step.INSTANCE_RESTART,
            )
        prefix = f"{t.instance} is a {t.role}, whose failure needs a whole-job restart even in Async mode; "
    else:
        prefix = ""
    # 7
    why = f"{t.instance} failed with {qualifies}: {c.rule} ({c.message}); {verdict.reason}"
    return _whole_job_restart(config, history, why, prefix)


def decide(config: FaultToleranceConfig, history: JobHistory, trigger: Trigger) -> Decision:
    """What to do about one trigger; see the module docstring for the rules."""
    if not isinstance(config, FaultToleranceConfig):
        raise ValueError(f"config: expected a FaultToleranceConfig, got {type(config).__name__}")
    if not isinstance(history, JobHistory):
        raise ValueError(f"history: expected a JobHistory, got {type(history).__name__}")
    if isinstance(trigger, InstanceFailure):
        return _decide_failure(config, history, trigger)
    if isinstance(trigger, DetectedProblem):
        return _decide_problem(config, history, trigger)
    raise ValueError(f"trigger: expected an InstanceFailure or a DetectedProblem, got {type(trigger).__name__}")
