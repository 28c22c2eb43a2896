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
    "last_logged_position",
    "Position",
    "job_progress",
    "shows_progress",
    "failure_point",
    "normalise",
]

# A step line: "step 12", "Step 12/500", "step=12", "iteration 5", "iter: 7"
# (the same words core.stragglers and core.progress read, without requiring a timestamp).
STEP_LINE = re.compile(r"\b(?:step|iteration|iter)\b\s*+[=:#]?\s*+(\d+)", re.IGNORECASE)
# Any line showing training progress; "epoch 3" is progress but names no step, and so is
# the dict Hugging Face's Trainer logs ("{'loss': 0.2411, ..., 'epoch': 0.4}").
PROGRESS_LINE = re.compile(
    r"\b(?:step|iter(?:ation)?|epoch)\b\s*+[=:#]?\s*+\d|['\"](?:epoch|global_step)['\"]\s*+:\s*+\d", re.IGNORECASE
)
# Any count of a total, which every progress format of last_logged_step's has.
_COUNT_OF_TOTAL = re.compile(r"\d\s*+/\s*+\d")

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


# How training loops print where they are, beside "step N" (each read from real logs, the
# tests name them). A count of a total inside an epoch becomes the global step, epoch x total
# + count, so that a later epoch is further on whatever its count.
_EPOCH = re.compile(r"\bepoch\b\s*+[:=#]?\s*+[\[(]?\s*+(\d+)", re.IGNORECASE)
# "Epoch [2/10], Step [100/600]", "step 12/500", "Iter [40/1000]", "Batch 7/90"
_STEP_OF_TOTAL = re.compile(
    r"\b(?:step|iter(?:ation)?|batch)\b\s*+[:=#]?\s*+[\[(]?\s*+(\d++)\s*+/\s*+(\d+)", re.IGNORECASE
)
# The metric logger of torchvision's references, DeiT, MAE, DETR: "Epoch: [8]  [ 200/2293]  eta: ..."
_METRIC_LOGGER = re.compile(r"\bepoch\b:?\s*+\[\s*+\d++\s*+\]\s*+\[\s*+(\d+)\s*+/\s*+(\d+)\s*+\]", re.IGNORECASE)
# tqdm's bar: "Epoch 3:  45%|████▌     | 450/1000 [00:10<00:12, 45.00it/s]" (Lightning),
# "  5%|▌    | 50/1000 [00:10<03:10]" (Hugging Face's Trainer), "Steps:  10%|█ | 100/1000 ["
# (diffusers). Only a training bar counts: no description, or one naming an epoch, training,
# steps or iterations; "Validation DataLoader 0", "Map", "Loading ..." are not training.
# Without a terminal tqdm may draw no bar: "Epoch 0:  50% 1/2 [00:00<00:00, ...]". The
# description is what comes before the percentage.
_BAR = re.compile(r"(?<!\d)\d{1,3}%(?:\|[^|\n]*+\|)?\s*+(?P<n>\d++)/(?P<total>\d++)\s*+\[")
_TRAINING_BAR = re.compile(r"^[\s:]*+$|\b(?:epoch|train\w*+|steps?|iter\w*+)\b", re.IGNORECASE)
# What launchers put before each line of a rank: "[default0]:", "[rank0]:",
# "[1,mpirank:0,algo-1]<stdout>:" (mpirun), "(RayTrainWorker pid=8) ", "192.168.12.21: " (pdsh).
_LAUNCHER_PREFIX = re.compile(r"^(?:\s*+(?:\[[^\]\n]*+\](?:<\w++>)?:?|\([^)\n]*+\)|\d{1,3}(?:\.\d{1,3}){3}:))++")
# rsyslog and the services that ship logs through it write a carriage return as "#015".
_SYSLOG_CR = "#015"
# Keras: "Epoch 3/10" on a line of its own, then " 50/100 [=====>....] - ETA: 1s - loss: 0.3"
_KERAS_EPOCH = re.compile(r"^\s*+Epoch (\d+)/\d++\s*+$")
_KERAS_BAR = re.compile(r"^\s*+(\d++)/(\d++) \[[=>.]*+\]")


def _global(epoch: re.Match | None, count: str, total: str) -> int:
    return int(epoch.group(1)) * int(total) + int(count) if epoch is not None else int(count)


# Where a line says training was: (epoch, step). The epoch is kept apart only when the line
# names one beside a step with no total ("Epoch:  3 step: 20", "epoch: 2, iter: 40"): whether
# that step counts within the epoch or from the start, (epoch, step) orders the lines as
# training went, where the step alone would put epoch 3's step 20 before epoch 1's step 40.
# A count of a total is made global (epoch None): the epoch is already in it.
Position = tuple[int | None, int]


def _line_position(line: str, keras_epoch: int | None) -> Position | None:
    """Where training was by one line, None when the line does not say."""
    bar = _BAR.search(line)
    if bar is not None:
        desc = _LAUNCHER_PREFIX.sub("", line[: bar.start()])
        if not _TRAINING_BAR.search(desc):
            return None
        return None, _global(_EPOCH.search(desc), bar["n"], bar["total"])
    for counted in (_METRIC_LOGGER, _STEP_OF_TOTAL):
        m = counted.search(line)
        if m is not None:
            return None, _global(_EPOCH.search(line), m.group(1), m.group(2))
    steps = STEP_LINE.findall(line)
    if steps:
        epoch = _EPOCH.search(line)
        return (int(epoch.group(1)) if epoch is not None else None), int(steps[-1])
    keras = _KERAS_BAR.match(line)
    if keras is not None:
        n, total = int(keras.group(1)), int(keras.group(2))
        return None, (keras_epoch * total + n if keras_epoch is not None else n)
    return None


def last_logged_position(tail: bytes | str) -> Position | None:
    """(epoch, step) of the tail's last line that says where training was, None when none does."""
    last = None
    keras_epoch = None
    for line in prepare_tail(tail).replace(_SYSLOG_CR, "\n").split("\n"):
        line = _LAUNCHER_PREFIX.sub("", line)
        header = _KERAS_EPOCH.match(line)
        if header is not None:
            keras_epoch = int(header.group(1))
            continue
        position = _line_position(line, keras_epoch)
        if position is not None:
            last = position
    return last


def last_logged_step(tail: bytes | str) -> int | None:
    """The step of the tail's last line that says where training was, None when none does."""
    position = last_logged_position(tail)
    return position[1] if position is not None else None


@dataclass(frozen=True)
class FailurePoint:
    step: int | None  # the last training step, the SDK's else the log's; None when neither says
    phase: Phase
    evidence: str  # Classification.evidence ("" when only the exit status decided)
    # The epoch the step's line named beside it when the step had no total (Position); None
    # when the step is global or the SDK's.
    epoch: int | None = None

    def __post_init__(self) -> None:
        for name in ("step", "epoch"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise ValueError(f"{name}: expected a non-negative integer or None, got {value!r}")
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
        if self.epoch is not None and previous.epoch is not None:
            return (self.epoch, self.step) <= (previous.epoch, previous.step)
        return self.step <= previous.step

    def repeats(self, previous: FailurePoint) -> bool:
        """The same evidence at the same or an earlier point: the same fault again."""
        return self.signature == previous.signature and self.not_past(previous)

    def describe(self) -> str:
        if self.phase == Phase.STARTUP:
            return "before the first progress"
        if self.step is None:
            return "while training"
        return f"at epoch {self.epoch}, step {self.step}" if self.epoch is not None else f"at step {self.step}"


def shows_progress(tail: bytes | str) -> bool:
    """Does the tail show training progress: a progress line, or a line last_logged_step reads
    (a training bar, a metric logger's count). One regex first: this runs on every log with
    new output until an attempt's first progress."""
    text = prepare_tail(tail)
    if PROGRESS_LINE.search(text) is not None:
        return True
    return _COUNT_OF_TOTAL.search(text) is not None and last_logged_step(text) is not None


@dataclass(frozen=True)
class JobProgress:
    """How far the attempt trained as its other instances' logs show it: in DDP most ranks
    print nothing and rank 0 prints the steps, so a failed rank's own tail often has no step
    line while the job trained for hours."""

    step: int | None = None  # the furthest last step line among the logs read
    trained: bool = False  # a progress line in any of them
    epoch: int | None = None  # the epoch named beside that step (Position)


def _further(position: Position) -> tuple[int, int]:
    epoch, step = position
    return (-1 if epoch is None else epoch), step


def job_progress(tails: Iterable[bytes | str]) -> JobProgress:
    """The attempt's progress from its instances' log tails."""
    positions: list[Position] = []
    trained = False
    for tail in tails:
        text = prepare_tail(tail)
        logged = last_logged_position(text)
        if logged is not None:
            positions.append(logged)
        trained = trained or logged is not None or PROGRESS_LINE.search(text) is not None
    if not positions:
        return JobProgress(trained=trained)
    epoch, step = max(positions, key=_further)
    return JobProgress(step=step, trained=trained, epoch=epoch)


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
    epoch, step = (None, sdk_step) if sdk_step is not None else (last_logged_position(text) or (None, None))
    trained = sdk_progress or step is not None or PROGRESS_LINE.search(text) is not None
    if step is None and job is not None:
        epoch, step = job.epoch, job.step
        trained = trained or job.trained
    phase = Phase.TRAINING if trained else Phase.STARTUP
    return FailurePoint(step=step, phase=phase, evidence=evidence or "", epoch=epoch)
