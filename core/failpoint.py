"""Where a failure happened (issue 26): the point the repeated-failure guard compares.

Every job has one, SDK or not: the last training step (the SDK's report, else the log's
last step line), the phase (before the first progress, or training) and the evidence line
the classifier decided on. Two failures are the same fault at the same point when their
evidence is the same once the parts that differ between runs of one bug are stripped
(numbers, addresses, pids, timestamps) and the later one happened at the same or an earlier
point: no further in training than the first. A checkpoint-resumed attempt that re-does
some steps and fails again at the step it failed before is at the same point, since steps
are compared as the numbers the job prints, not as the steps this attempt ran.

Pure: the tail and the SDK's step in, a FailurePoint out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from core.classify import prepare_tail

__all__ = [
    "Phase",
    "FailurePoint",
    "JobProgress",
    "STEP_LINE",
    "PROGRESS_LINE",
    "last_logged_step",
    "job_progress",
    "failure_point",
    "normalise",
]

# A step line: "step 12", "Step 12/500", "step=12", "iteration 5", "iter: 7"
# (the same words core.stragglers and core.progress read, without requiring a timestamp).
STEP_LINE = re.compile(r"\b(?:step|iteration|iter)\b\s*[=:#]?\s*(\d+)", re.IGNORECASE)
# Any line showing training progress; "epoch 3" is progress but names no step.
PROGRESS_LINE = re.compile(r"\b(?:step|iter(?:ation)?|epoch)\b\s*[=:#]?\s*\d+", re.IGNORECASE)

# What differs between two runs of one bug on one line: timestamps, addresses, pids, ports,
# numbered hosts and ranks: hex addresses, then every run of digits (with the separators of
# a time, a date or a version inside it), become one placeholder.
_ADDRESS = re.compile(r"\b0x[0-9a-f]+\b", re.IGNORECASE)
_NUMBER = re.compile(r"\d+(?:[.:,_-]\d+)*")
_SPACE = re.compile(r"\s+")
_EVIDENCE_LIMIT = 500


class Phase(StrEnum):
    STARTUP = "startup"  # before the first progress
    TRAINING = "training"


def normalise(evidence: str) -> str:
    """The evidence line with what changes between runs of one bug stripped."""
    text = _ADDRESS.sub("#", evidence[:_EVIDENCE_LIMIT])
    text = _NUMBER.sub("#", text)
    return _SPACE.sub(" ", text).strip().casefold()


def last_logged_step(tail: bytes | str) -> int | None:
    """The step of the tail's last step line, None when it has none."""
    last = None
    for m in STEP_LINE.finditer(prepare_tail(tail)):
        last = m
    return int(last.group(1)) if last is not None else None


@dataclass(frozen=True)
class FailurePoint:
    step: int | None  # the last training step, the SDK's else the log's; None when neither says
    phase: Phase
    evidence: str  # Classification.evidence ("" when only the exit status decided)

    def __post_init__(self) -> None:
        if self.step is not None and (not isinstance(self.step, int) or isinstance(self.step, bool) or self.step < 0):
            raise ValueError(f"step: expected a non-negative integer or None, got {self.step!r}")
        object.__setattr__(self, "phase", Phase(self.phase))
        if not isinstance(self.evidence, str):
            raise ValueError(f"evidence: expected a string, got {type(self.evidence).__name__}")

    @property
    def signature(self) -> str:
        return normalise(self.evidence)

    def not_past(self, previous: FailurePoint) -> bool:
        """This failure happened at the same or an earlier point than `previous`."""
        if self.phase == Phase.STARTUP:
            return True
        if previous.phase == Phase.STARTUP:
            return False  # it trained this time, further than before
        if self.step is None or previous.step is None:
            return True  # training both times and no step to tell them apart: not past it
        return self.step <= previous.step

    def repeats(self, previous: FailurePoint) -> bool:
        """The same evidence at the same or an earlier point: the same fault again."""
        return self.signature == previous.signature and self.not_past(previous)

    def describe(self) -> str:
        if self.phase == Phase.STARTUP:
            return "before the first progress"
        return f"at step {self.step}" if self.step is not None else "while training"


@dataclass(frozen=True)
class JobProgress:
    """How far the attempt trained as its other instances' logs show it: in DDP most ranks
    print nothing and rank 0 prints the steps, so a failed rank's own tail often has no step
    line while the job trained for hours."""

    step: int | None = None  # the highest last step line among the logs read
    trained: bool = False  # a progress line in any of them


def job_progress(tails: Iterable[bytes | str]) -> JobProgress:
    """The attempt's progress from its instances' log tails."""
    steps: list[int] = []
    trained = False
    for tail in tails:
        text = prepare_tail(tail)
        logged = last_logged_step(text)
        if logged is not None:
            steps.append(logged)
        trained = trained or logged is not None or PROGRESS_LINE.search(text) is not None
    return JobProgress(step=max(steps) if steps else None, trained=trained)


def failure_point(
    tail: bytes | str,
    evidence: str,
    sdk_step: int | None = None,
    sdk_progress: bool = False,
    job: JobProgress | None = None,
) -> FailurePoint:
    """The point of a failure from the log tail the monitor read and what the SDK reported;
    where neither names a step, from the job's progress (its other instances' logs)."""
    text = prepare_tail(tail)
    logged = last_logged_step(text)
    step = sdk_step if sdk_step is not None else logged
    trained = sdk_progress or sdk_step is not None or PROGRESS_LINE.search(text) is not None
    if step is None and job is not None:
        step = job.step
        trained = trained or job.trained
    return FailurePoint(step=step, phase=Phase.TRAINING if trained else Phase.STARTUP, evidence=evidence or "")
