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
A second gathering of issue 26's training material (ids numbered 200 to 299 in their family,
batch 1) came after batch 4 was measured: 36 entries, 17 retryable and 19 look-alikes (CUDA's
unknown error in pre-10.1 words, NVML mismatches cleared by a reboot or not, image-layer downloads
that broke off, cloud capacity and quota, W&B, DNS and storage hiccups, IB and socket misconfiguration,
OOM kills, shm and driver fixes), split by id like every entry (7 held back, which join the others).
A third gathering of issue 26's training material (ids numbered 300 to 399 in their family,
batch 1) came after batch 5, for the fourth round of signatures: 33 entries, 17 retryable and 16
look-alikes, weighted to transient faults that do not name themselves (a traceback ending in a
generic or a wrapper's exception, a read that timed out under pip's traceback, a launcher's or
spawn's report of a child's signal, a bus error from a shell, downloads that broke or came back
as something else, cloud 503s that cleared) and to bugs with the same surface (SIGABRT, SIGKILL
and SIGBUS from versions, memory and shm size, a hub or metadata service unreachable by
configuration, a 500 that one request always triggers, a 503 a library's own ACL call caused, a
moved download link, a DataLoader's leak and an OOM kill), split by id like every entry (8 held
back, which join the others). Like the second, it came after every corpus floor was set, so the
floors leave both out (`gathered_after_the_floors`).
A fourth gathering of issue 26's training material (ids numbered 400 to 499 in their family,
batch 1) came after the calibration batch made an unrecognised exit ambiguous, for the fifth round
of signatures, on the bug side: 41 entries, 6 retryable and 35 not, weighted to bugs that fall to
the fallbacks because no signature reads them (a program's rejected arguments from argparse, Hydra
and OmegaConf overrides and keys, YAML that does not parse, pip's conflicting pins and conda's
missing packages, C++ exceptions that end in terminate or an abort, a failed assertion or CHECK,
cuDNN's BAD_PARAM and NOT_SUPPORTED, extensions whose symbols do not match the installed torch, a
checkpoint's shapes that do not match the model, nvcc's unknown architecture, an illegal
instruction from binaries built for other CPUs of a cluster) and to transient look-alikes with the
same surface (an index that answered nothing for a while, JSON that was not JSON while a service
was down, a scheduler's own "error:" lines), split by id like every entry (16 held back, which
join the others). Like the second and third, it
came after every corpus floor was set, so the floors leave it out (`gathered_after_the_floors`).
Batch 5 (issue 26) was gathered after the signatures of issue 26's second round (the kinds
keyed by evidence finer than the rule, ef6fc27, and the exit-status key, c18aff3), at the same
time as, and never shown to, the third round's signatures (written from new batch-1 training
entries, ids <family>-2NN), and is kept unseen whole like batches 2 to 4: 56 entries, 26 retryable and 30 not (61 gathered;
the 5 whose thread the third round's training material also drew on were dropped), weighted to the
infrastructure side of a restart decision (cloud capacity, quota and throttling on SageMaker and
GCP, registry, CDN, index and dataset-host outages, GPUs lost or faulty on one node, runners and
spot nodes taken away, Slurm prolog and launch failures, object-store and NFS errors that clear)
and to look-alikes with the same surface (a quota of 0, a BigQuery dataset the API cannot serve,
a wrong wheel URL or tag, 401 from a missing token or a removed repo, a GPU hidden by a
hardcoded CUDA_VISIBLE_DEVICES, a fabric manager never installed, a starved runner, OOM kills
and bus errors from undersized requests, nan from labels and learning rates).
Batch 6 (issue 26) was gathered while the fourth round's signatures were written (from new
batch-1 training entries, ids <family>-3NN) and never shown to their writer, and without running
the classifier, so that no entry was chosen for what Vigil makes of it: 72 entries, 31
retryable and 41 not (74 gathered; the 2 whose thread the fourth round's training material also
drew on were dropped), over every family (cluster and course support trackers, notebook and
cloud platforms, CI infrastructure flakes, failures a rerun or another machine cleared, and
their look-alikes), held back whole like batches 2 to 5. Before the fourth round and the
calibration batch (at c31be56) it gave 38.7 % recovered (12 of 31) and 0.41 futile restarts per bug.
The calibration batch (batch 7, `calibration: true`, in CALIBRATION_DIR) was gathered the same
way at the same time, for the verdict counts alone (monitoring/corpus/verdict_table.py says
why): 100 entries, of which the 9 whose thread batch 6 also holds were dropped (91 left, 26
retryable). load_corpus never reads that folder, so it is in no part that is measured.
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
    "CALIBRATION_DIR",
    "CORPUS_DIR",
    "FAMILIES",
    "VERDICTS",
    "FRESH_BATCH",
    "Entry",
    "Outcome",
    "FamilyScore",
    "Score",
    "load_calibration",
    "load_corpus",
    "failure_input",
    "run",
    "score",
    "second_training_gathering",
    "third_training_gathering",
    "fourth_training_gathering",
    "gathered_after_the_floors",
]

CORPUS_DIR = Path(__file__).resolve().parent
# The calibration batch (issue 26): real reports that only count (core/verdict_counts.json),
# never read by whoever writes signatures and never part of the held-back measure; a folder
# of its own so that nothing that reads CORPUS_DIR's files meets them by accident.
CALIBRATION_DIR = CORPUS_DIR / "calibration"
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
    calibration: bool = False  # of the calibration batch (CALIBRATION_DIR): counted, never measured

    @property
    def retryable(self) -> bool:
        return self.verdict == "retryable"


def _training_gathering(entry: Entry, first: int) -> bool:
    number = entry.id.rsplit("-", 1)[-1]
    return entry.batch == 1 and number.isdigit() and first <= int(number) <= first + 99


def second_training_gathering(entry: Entry) -> bool:
    """Whether the entry is of issue 26's second gathering of training material (batch 1, ids
    numbered 200 to 299 in their family; the module docstring)."""
    return _training_gathering(entry, 200)


def third_training_gathering(entry: Entry) -> bool:
    """Whether the entry is of issue 26's third gathering of training material (batch 1, ids
    numbered 300 to 399 in their family; the module docstring)."""
    return _training_gathering(entry, 300)


def fourth_training_gathering(entry: Entry) -> bool:
    """Whether the entry is of issue 26's fourth gathering of training material (batch 1, ids
    numbered 400 to 499 in their family; the module docstring)."""
    return _training_gathering(entry, 400)


def gathered_after_the_floors(entry: Entry) -> bool:
    """Whether the entry is of a gathering of training material that came after every corpus
    floor was set (issue 26's second, third and fourth: batch 1, ids 200 to 499), so that the
    floors, scored on the entries they were set on, leave it out: a new real report that goes
    against a line lowers a figure without any signature breaking."""
    return second_training_gathering(entry) or third_training_gathering(entry) or fourth_training_gathering(entry)


def load_corpus(directory: Path = CORPUS_DIR, *, calibration: bool = False) -> list[Entry]:
    """Every entry of every `*.jsonl` file, in file and line order. Raises ValueError
    naming the file, line and field of a malformed entry. `calibration`: the folder is the
    calibration batch's, whose entries say so and only they (load_calibration)."""
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
                    calibration=raw.get("calibration", False),
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
            if entry.calibration is not calibration:
                raise ValueError(
                    f"{where}: calibration must be {str(calibration).lower()} here (true exactly in the "
                    f"calibration batch's folder, {CALIBRATION_DIR.name}/), not {entry.calibration!r}"
                )
            entries.append(entry)
    return entries


def load_calibration(directory: Path = CALIBRATION_DIR) -> list[Entry]:
    """The calibration batch's entries (none where the folder does not exist): load_corpus's checks."""
    return load_corpus(directory, calibration=True) if directory.is_dir() else []


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
