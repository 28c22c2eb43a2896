"""What a log tail lacks about a failure (issue 26), and where it changes the verdict.

The shell gathers it (monitoring/failures.py); this module says what it means:
- the attempt number and the phase (before the first progress, or training): shown with
  every decision, and compared by the repeated-failure guard through the failure point;
- the node now against the node of the previous failure: the guard lets a preemption or node
  loss the backend reported on another node through (core.policy);
- the node's record across jobs (core.reputation: retryable faults on it within 24 h
  across at least 2 jobs, proposed for isolation): a failure that only the exit status
  explains (no signature matched) on such a node follows the node more likely than the code,
  so a deterministic verdict becomes one probe retry;
- other jobs failing on the same node within the same minute: an infrastructure event, so a
  deterministic verdict from the log or the exit status becomes one probe retry (a shared
  file system gone or a node rebooting makes user code raise too). A backend's reason is
  never overridden: the scheduler said what happened.
A probe is judged by repetition like an ambiguous verdict: the guard stops it at its second
identical failure, so context can cost a bug one restart at most.

Pure: plain values in, a Verdict and words out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from core.classify import Classification, ErrorSource
from core.kinds import Kind, Verdict

__all__ = ["FailureContext", "with_context"]


@dataclass(frozen=True)
class FailureContext:
    attempt: int = 1
    node: str = ""
    previous_node: str = ""  # the node of the failure before this one ("" when none or unknown)
    node_flagged: bool = False  # proposed for isolation by its record across jobs
    node_record: str = ""  # core.reputation's evidence, e.g. "3 retryable faults in the last 24 h across 2 jobs: ..."
    other_jobs_failing: int = 0  # other jobs that failed on this node within the same minute

    def __post_init__(self) -> None:
        for name in ("attempt", "other_jobs_failing"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name}: expected a non-negative integer, got {value!r}")
        if self.attempt < 1:
            raise ValueError(f"attempt: expected 1 or more, got {self.attempt}")

    def describe(self, where: str) -> str:
        """Every input used, in the words of the reason."""
        parts = [f"attempt {self.attempt}", f"failed {where}"]
        if self.node:
            if self.previous_node and self.previous_node != self.node:
                parts.append(f"on {self.node} ({self.previous_node} last time)")
            elif self.previous_node:
                parts.append(f"on {self.node} again")
            else:
                parts.append(f"on {self.node}")
        if self.node_flagged:
            parts.append(f"{self.node} has {self.node_record}")
        if self.other_jobs_failing:
            n = self.other_jobs_failing
            parts.append(f"{n} other job{'s' if n != 1 else ''} failed on {self.node} within the same minute")
        return ", ".join(parts)


def with_context(verdict: Verdict, c: Classification, context: FailureContext | None) -> Verdict:
    """The verdict once the context is weighed (module docstring)."""
    if context is None or verdict.kind != Kind.DETERMINISTIC or c.source == ErrorSource.BACKEND:
        return verdict
    if context.other_jobs_failing and c.source in (ErrorSource.LOG, ErrorSource.EXIT_CODE):
        n = context.other_jobs_failing
        return replace(
            verdict,
            kind=Kind.AMBIGUOUS,
            note=f"but {n} other job{'s' if n != 1 else ''} failed on {context.node} within the same minute: "
            "an infrastructure event",
        )
    if context.node_flagged and not c.evidence:
        return replace(
            verdict,
            kind=Kind.AMBIGUOUS,
            note=f"but only the exit status explains it, on {context.node}, which has {context.node_record}",
        )
    return verdict
