"""Run the classifier over the failure corpus and score it against the sources' verdicts.

Pure apart from reading the corpus files: `bench/classify_corpus.py` prints the figures,
`monitoring/tests/test_corpus.py` holds them to issue 13's targets.

How an entry becomes a `FailureInput` (the corpus records what its source showed):
- `signal` (a name such as "SIGKILL") becomes its number;
- `exit_code` is used as given (137 is read as SIGKILL, as the monitor does);
- a null `exit_code` with no signal and no `backend_reason` is taken as exit code 1: the
  source showed a process that failed and printed why, and a failed process that does not
  say otherwise exits 1 (Python's uncaught exception, torchrun's ChildFailedError). Read
  as "no exit status" it would be the monitor's lost-instance case instead, which never
  happens to a process whose log ends in its own error;
- a null `exit_code` with a `backend_reason` stays null: the scheduler decided, and no
  process status exists (the monitor passes the backend's reason the same way);
- an `exit_code` of 0 with no signal (a process that caught its error and exited cleanly
  while its scheduler failed it) is passed as null, as the monitor does for a lost instance.

How a verdict is scored: `Outcome.agrees` compares the classifier's first verdict with the
source's. `Outcome.decision_agrees` scores what the restart policy does with it over the
attempts the entry describes, which differs only for a verdict retryable a limited number
of times (`Classification.retry_limit`: issue 13's "SIGKILL with no evidence is retryable
once"): the policy retries it that often and then fails the job (core.policy,
RETRIES_SPENT). A failure its source calls not retryable repeats on an unchanged rerun, so
the job fails after those restarts, which `Outcome.restarts_spent` counts; one its source
calls retryable clears on the retry. Every other verdict is decided on the first attempt,
as scored. (The repeated-failure guard, which also stops an ambiguous retryable verdict
that repeats, is not credited: whether it fires depends on progress the corpus does not
record.)

An entry's optional `batch` (a positive integer, 1 when absent) says which gathering it
came from: batch 1 was there while the catalog's signatures were written, batch 2 was
gathered afterwards and never shown to whoever writes them, so its agreement is a fresh
held-back measure (`Score.fresh`); batch 3 was gathered later still, after the signatures
batch 2 measured, and is kept unseen the same way (`Score.of_batch`, `Score.seen`).
Batch 4 (issue 26) was gathered after the signatures written from issue 26's training
material (commit a412e3d: 13 entries of batch 1, split by id like every entry, for downloads
timing out inside a Python exception, GPU faults of one node and their look-alike bugs) and is
kept unseen whole like batches 2 and 3: 83 entries, weighted to the kinds issue 26 names
(registry rate limits and timeouts, hub and index outages, GPU hardware and driver faults,
preemption and node loss) and to their look-alikes (missing tags and wrong architectures,
401/404/quota, version mismatches, ports in use, collective timeouts from rank-0-only work).
"""

from __future__ import annotations

import json
import signal as _signal
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from core.classify import Classification, FailureInput, classify_failure
from monitoring.corpus.split import is_holdout

__all__ = [
    "CORPUS_DIR",
    "FAMILIES",
    "VERDICTS",
    "FRESH_BATCH",
    "Entry",
    "Outcome",
    "FamilyScore",
    "Score",
    "load_corpus",
    "failure_input",
    "run",
    "score",
]

CORPUS_DIR = Path(__file__).resolve().parent
FAMILIES = (
    "preemption",
    "startup",
    "rendezvous",
    "external-services",
    "storage",
    "gpu",
    "network",
    "signals",
    "collective-timeout",
    "user-error",
    "nan",
)
VERDICTS = ("retryable", "not-retryable")
FRESH_BATCH = 2  # gathered after the signatures were written, never seen by their writers


@dataclass(frozen=True)
class Entry:
    id: str
    family: str
    source: str
    framework: str
    log: str
    exit_code: int | None
    signal: str | None
    backend_reason: str | None
    verdict: str
    why: str
    holdout: bool
    marked: bool = True  # the file carries the holdout field (split.py ran over it)
    batch: int = 1  # which gathering the entry came from (module docstring)

    @property
    def retryable(self) -> bool:
        return self.verdict == "retryable"


def load_corpus(directory: Path = CORPUS_DIR) -> list[Entry]:
    """Every entry of every `*.jsonl` file, in file and line order. Raises ValueError
    naming the file, line and field of a malformed entry."""
    entries = []
    for path in sorted(directory.glob("*.jsonl")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            where = f"{path.name}:{number}"
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where}: not JSON ({exc})") from exc
            try:
                entry = Entry(
                    id=raw["id"],
                    family=raw["family"],
                    source=raw["source"],
                    framework=raw["framework"],
                    log=raw["log"],
                    exit_code=raw["exit_code"],
                    signal=raw["signal"],
                    backend_reason=raw["backend_reason"],
                    verdict=raw["verdict"],
                    why=raw["why"],
                    # Entries not yet marked by split.py are held back by the same rule.
                    holdout=raw.get("holdout", is_holdout(raw["id"])),
                    marked="holdout" in raw,
                    batch=raw.get("batch", 1),
                )
            except KeyError as exc:
                raise ValueError(f"{where}: missing field {exc.args[0]!r}") from exc
            if entry.verdict not in VERDICTS:
                raise ValueError(f"{where}: verdict {entry.verdict!r} is not one of {VERDICTS}")
            if not isinstance(entry.log, str):
                raise ValueError(f"{where}: log must be a string")
            if entry.exit_code is not None and (
                isinstance(entry.exit_code, bool) or not isinstance(entry.exit_code, int)
            ):
                raise ValueError(f"{where}: exit_code must be an integer or null")
            if isinstance(entry.batch, bool) or not isinstance(entry.batch, int) or entry.batch < 1:
                raise ValueError(f"{where}: batch must be a positive integer, not {entry.batch!r}")
            entries.append(entry)
    return entries


def _signal_number(name: str | None) -> int | None:
    if not name:
        return None
    name = name.strip().upper()
    if not name.startswith("SIG"):
        name = "SIG" + name
    try:
        return int(_signal.Signals[name])
    except KeyError as exc:
        raise ValueError(f"signal: unknown signal name {name!r}") from exc


def failure_input(entry: Entry, user_keywords: tuple[str, ...] = ()) -> FailureInput:
    """The classifier's input for one corpus entry (conventions in the module docstring)."""
    signum = _signal_number(entry.signal)
    reason = (entry.backend_reason or "").strip()
    exit_code = entry.exit_code
    if exit_code == 0 and signum is None:
        exit_code = None
    elif exit_code is None and signum is None and not reason:
        exit_code = 1
    return FailureInput(
        exit_code=exit_code, signal=signum, log_tail=entry.log, backend_reason=reason, user_keywords=user_keywords
    )


@dataclass(frozen=True)
class Outcome:
    entry: Entry
    classification: Classification

    @property
    def agrees(self) -> bool:
        """The first verdict is the source's."""
        return self.classification.retryable == self.entry.retryable

    @property
    def bounded(self) -> bool:
        """Retryable only `retry_limit` times, then not (the policy's retry-once verdicts)."""
        return self.classification.retryable and self.classification.retry_limit is not None

    @property
    def decided_retryable(self) -> bool:
        """Whether the job is, in the end, restarted past this failure (module docstring)."""
        return self.entry.retryable if self.bounded else self.classification.retryable

    @property
    def decision_agrees(self) -> bool:
        return self.decided_retryable == self.entry.retryable

    @property
    def restarts_spent(self) -> int:
        """Restarts the policy spends before it fails a job its source says a restart cannot fix."""
        limit = self.classification.retry_limit
        return limit if self.bounded and limit is not None and not self.entry.retryable else 0


def run(entries: Iterable[Entry]) -> list[Outcome]:
    return [Outcome(e, classify_failure(failure_input(e))) for e in entries]


@dataclass(frozen=True)
class FamilyScore:
    family: str
    entries: int
    agree: int
    true_retryable: int  # judged retryable, and retryable
    false_retryable: int  # judged retryable, but not retryable
    missed_retryable: int  # judged not retryable, but retryable

    @property
    def precision(self) -> float | None:
        judged = self.true_retryable + self.false_retryable
        return self.true_retryable / judged if judged else None

    @property
    def recall(self) -> float | None:
        actual = self.true_retryable + self.missed_retryable
        return self.true_retryable / actual if actual else None


def _ratio(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _false_retryable_rate(outcomes: list[Outcome], decision: bool = False) -> float | None:
    negatives = [o for o in outcomes if not o.entry.retryable]
    judged = (o.decided_retryable if decision else o.classification.retryable for o in negatives)
    return _ratio(sum(judged), len(negatives))


def _agreement(outcomes: list[Outcome], decision: bool = False) -> float | None:
    return _ratio(sum(o.decision_agrees if decision else o.agrees for o in outcomes), len(outcomes))


@dataclass(frozen=True)
class Score:
    outcomes: list[Outcome]
    # confusion[(expected, judged)] = count, verdicts as in the corpus
    confusion: Counter = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return len(self.outcomes)

    @property
    def agreement(self) -> float | None:
        return _agreement(self.outcomes)

    def _part(self, holdout: bool) -> list[Outcome]:
        return [o for o in self.outcomes if o.entry.holdout is holdout]

    @property
    def held_back(self) -> list[Outcome]:
        return self._part(True)

    @property
    def training(self) -> list[Outcome]:
        return self._part(False)

    @property
    def held_back_agreement(self) -> float | None:
        return _agreement(self.held_back)

    @property
    def training_agreement(self) -> float | None:
        return _agreement(self.training)

    @property
    def false_retryable_rate(self) -> float | None:
        """Among the entries whose source says not retryable, the share judged retryable."""
        return _false_retryable_rate(self.outcomes)

    @property
    def fresh(self) -> list[Outcome]:
        """The entries of the fresh batch, gathered after the signatures were written."""
        return self.of_batch(FRESH_BATCH)

    @property
    def fresh_agreement(self) -> float | None:
        return _agreement(self.fresh)

    @property
    def fresh_false_retryable_rate(self) -> float | None:
        return _false_retryable_rate(self.fresh)

    def of_batch(self, batch: int) -> list[Outcome]:
        return [o for o in self.outcomes if o.entry.batch == batch]

    @property
    def batches(self) -> list[int]:
        return sorted({o.entry.batch for o in self.outcomes})

    @property
    def seen(self) -> list[Outcome]:
        """The part whoever writes signatures may read: batch 1, not held back (every later
        batch is kept unseen whole)."""
        return [o for o in self.outcomes if not o.entry.holdout and o.entry.batch < FRESH_BATCH]

    def decision(self, part: str = "overall") -> tuple[float | None, float | None]:
        """(agreement, false-retryable rate) of the policy's decisions (module docstring) on
        "overall", "held_back", "training", "seen", "fresh" or "batch N"."""
        if part.startswith("batch "):
            outcomes = self.of_batch(int(part.removeprefix("batch ")))
        else:
            outcomes = self.outcomes if part == "overall" else getattr(self, part)
        return _agreement(outcomes, decision=True), _false_retryable_rate(outcomes, decision=True)

    @property
    def bounded(self) -> list[Outcome]:
        """The entries given a verdict retryable only a limited number of times."""
        return [o for o in self.outcomes if o.bounded]

    @property
    def restarts_spent(self) -> int:
        return sum(o.restarts_spent for o in self.outcomes)

    @property
    def misses(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.agrees]

    def families(self) -> list[FamilyScore]:
        rows = []
        for family in sorted({o.entry.family for o in self.outcomes}, key=_family_order):
            part = [o for o in self.outcomes if o.entry.family == family]
            rows.append(
                FamilyScore(
                    family=family,
                    entries=len(part),
                    agree=sum(o.agrees for o in part),
                    true_retryable=sum(o.entry.retryable and o.classification.retryable for o in part),
                    false_retryable=sum(not o.entry.retryable and o.classification.retryable for o in part),
                    missed_retryable=sum(o.entry.retryable and not o.classification.retryable for o in part),
                )
            )
        return rows


def _family_order(family: str) -> tuple[int, str]:
    return (FAMILIES.index(family) if family in FAMILIES else len(FAMILIES), family)


def _verdict(retryable: bool) -> str:
    return VERDICTS[0] if retryable else VERDICTS[1]


def score(outcomes: list[Outcome]) -> Score:
    confusion = Counter((o.entry.verdict, _verdict(o.classification.retryable)) for o in outcomes)
    return Score(outcomes=outcomes, confusion=confusion)
