"""Slurm's words parsed (pure): squeue --json, scontrol and sacct lines into a job's
state, sinfo into nodes, a command's refusal into transient or permanent.

The Slurm backend (jobs/backends/slurm.py) runs the commands and keeps the I/O;
everything here takes their output as text or decoded JSON, so it is tested
without Slurm.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

# Slurm job states (squeue / scontrol / sacct spell them the same way).
ACTIVE_STATES = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "STAGE_OUT",
        "RESIZING",
        "REQUEUED",
        "SIGNALING",
        "STOPPED",
    }
)
WAITING_STATES = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "RESV_DEL_HOLD", "REQUEUE_HOLD", "REQUEUE_FED"})
# Where Slurm ended the job itself, its word is the instance's reason.
SLURM_FAILURE_STATES = frozenset(
    {
        "NODE_FAIL",
        "TIMEOUT",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "CANCELLED",
        "FAILED",
        "REVOKED",
        "SPECIAL_EXIT",
    }
)

# Slurm's own verdicts on a job, which say more than an instance's missing exit record.
SLURM_VERDICTS = frozenset({"NODE_FAIL", "TIMEOUT", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"})

# Node states in which Slurm places nothing new.
UNSCHEDULABLE_NODE_STATES = frozenset(
    {
        "DOWN",
        "DRAIN",
        "DRAINED",
        "DRAINING",
        "FAIL",
        "FAILING",
        "MAINT",
        "NOT_RESPONDING",
        "NO_RESPOND",
        "POWERED_DOWN",
        "POWERING_DOWN",
        "POWER_DOWN",
        "REBOOT_REQUESTED",
        "REBOOT_ISSUED",
        "RESERVED",
        "FUTURE",
        "UNKNOWN",
        "INVALID",
        "INVALID_REG",
    }
)

# Node states of a node that is lost (its slurmd silent or the node set DOWN), as against
# one taken out of service on purpose (DRAIN, MAINT, RESERVED, power saving).
DOWN_NODE_STATES = frozenset({"DOWN", "NOT_RESPONDING", "NO_RESPOND"})

# Slurm's words for "it is not there right now"; anything else a command
# refuses with is taken as a permanent refusal of this request.
TRANSIENT_MARKERS = (
    "unable to contact slurm controller",
    "socket timed out",
    "connection refused",
    "temporarily unavailable",
    "try again",
    "slurm_receive_msg",
    "communication",
    "zero bytes were transmitted",
    "timed out",
    "slurmctld",
    "not responding",
    "qosmaxsubmitjob",
    "assocmaxsubmitjob",
    "maxsubmitjob",
    "busy",
    "munge",
    "authentication",
)


def is_transient(refusal: str) -> bool:
    """Whether a command's refusal means Slurm is unreachable or busy right now."""
    text = refusal.lower()
    return any(m in text for m in TRANSIENT_MARKERS)


# -- srun's words for a task a signal ended -----------------------------------------------

# The supervisor's record of a run that ended without the instance's own report, with srun's
# last words: "step ended without a report from the instance (srun exit 137): srun: error: n3:
# task 0: Killed". srun exits 128 + N for a task that signal N ended and names the signal as
# strsignal(3) does ("Killed", "Segmentation fault", "Bus error"), "(core dumped)" after it.
_SRUN_EXIT = re.compile(r"\(srun exit (\d+)\)")
_SRUN_TASK_ENDED = re.compile(r"\btask \d+(?:-\d+)?: ([A-Z][A-Za-z ]*?)(?: \(core dumped\))?(?:;|$)")


def srun_task_signal(reason: str) -> int | None:
    """The signal that ended a run's task, when srun's exit status and its words agree on it
    (the wrapper itself was killed, so the instance could not report); None otherwise."""
    m = _SRUN_EXIT.search(reason)
    if not m or not 128 < int(m.group(1)) < 128 + signal.NSIG:
        return None
    number = int(m.group(1)) - 128
    try:
        name = signal.strsignal(number)
    except ValueError:
        return None
    said = {w.group(1) for w in _SRUN_TASK_ENDED.finditer(reason[m.end() :])}
    return number if name in said else None


# -- Slurm's view of a job (pure parsing) ------------------------------------------------


@dataclass(frozen=True)
class SlurmJob:
    job_id: str
    state: str  # RUNNING, PENDING, NODE_FAIL, ... ; "" when Slurm no longer knows the job
    reason: str = ""  # state reason: Resources, Priority, ReqNodeNotAvail, ...
    nodes: str = ""
    start_time: float | None = None
    end_time: float | None = None

    @property
    def known(self) -> bool:
        return bool(self.state)

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def waiting(self) -> bool:
        return self.state in WAITING_STATES


def _number(value):
    """22.05 gives plain numbers, 23.02+ {"set": true, "number": n}."""
    if isinstance(value, dict):
        return value.get("number") if value.get("set", True) and not value.get("infinite") else None
    return value


def _state_word(value) -> str:
    """22.05 gives "RUNNING", 23.02+ ["RUNNING", "COMPLETING"]; the first word is the base state."""
    if isinstance(value, list):
        return str(value[0]).upper() if value else ""
    return str(value or "").split()[0].upper() if value else ""


def job_from_squeue_json(data: dict, job_id: str) -> SlurmJob | None:
    # Some versions ignore -j with --json and list every job: pick ours.
    for j in data.get("jobs", ()):
        if str(_number(j.get("job_id"))) == str(job_id):
            start = _number(j.get("start_time")) or None
            state = _state_word(j.get("job_state"))
            end = _number(j.get("end_time")) if state not in ACTIVE_STATES else None
            reason = str(j.get("state_reason") or "")
            return SlurmJob(
                str(job_id),
                state,
                "" if reason == "None" else reason,
                str(j.get("nodes") or ""),
                float(start) if start else None,
                float(end) if end else None,
            )
    return None


def job_from_scontrol(text: str, job_id: str) -> SlurmJob | None:
    """`scontrol show job -o <id>`: one line of Key=Value pairs."""
    fields: dict[str, str] = {}
    for token in text.split():
        key, _, value = token.partition("=")
        fields.setdefault(key, value)
    if fields.get("JobId") != str(job_id):
        return None
    reason = fields.get("Reason", "")
    return SlurmJob(
        str(job_id),
        fields.get("JobState", "").upper(),
        "" if reason == "None" else reason,
        fields.get("NodeList", "") if fields.get("NodeList") != "(null)" else "",
    )


def job_from_sacct(text: str, job_id: str) -> SlurmJob | None:
    """`sacct -X -n -P -o JobID,State,Reason,NodeList`: "123|NODE_FAIL|None|n1"."""
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) >= 4 and parts[0] == str(job_id):
            state = parts[1].split()[0].upper() if parts[1] else ""
            reason = "" if parts[2] == "None" else parts[2]
            return SlurmJob(str(job_id), state, reason, parts[3] if parts[3] != "None assigned" else "")
    return None


# -- nodes (pure parsing) -----------------------------------------------------------------


def _node_state_words(state, flags=()) -> set[str]:
    words = set()
    for item in state if isinstance(state, list) else [state]:
        for w in str(item or "").replace("+", " ").split():
            if w.endswith("*"):
                words.add("NOT_RESPONDING")
                w = w.rstrip("*")
            words.add(w.upper())
    words.update(str(f).upper() for f in flags or ())
    return words


@dataclass(frozen=True)
class SlurmNode:
    """A node as sinfo describes it; `slots` are its CPUs."""

    name: str
    slots: int
    schedulable: bool
    reason: str = ""
    down: bool = False  # DOWN or not responding: lost, as against drained or reserved on purpose


NOT_RESPONDING = "Not responding"  # slurmctld's own reason for a node it set DOWN this way


def _reason(given: str, words: set[str]) -> str:
    """Slurm gives a reason once it sets a silent node DOWN; before that (`mixed*`) only
    the flag says the node does not answer: say so in slurmctld's words."""
    if not given and words & {"NOT_RESPONDING", "NO_RESPOND"}:
        return NOT_RESPONDING
    return given


def nodes_from_sinfo_json(data: dict, partition: str = "") -> list[SlurmNode]:
    seen: dict[str, SlurmNode] = {}
    for n in data.get("nodes", ()):
        name = n.get("name") or n.get("hostname")
        if not name or name in seen or (partition and partition not in (n.get("partitions") or ())):
            continue
        words = _node_state_words(n.get("state"), n.get("state_flags"))
        seen[name] = SlurmNode(
            name=name,
            slots=int(_number(n.get("cpus")) or 0),
            schedulable=not (words & UNSCHEDULABLE_NODE_STATES),
            reason=_reason(str(n.get("reason") or ""), words),
            down=bool(words & DOWN_NODE_STATES),
        )
    return list(seen.values())


def nodes_from_sinfo_text(text: str) -> list[SlurmNode]:
    """`sinfo -h -N -o %N|%c|%T|%E` (one line per node and partition)."""
    seen: dict[str, SlurmNode] = {}
    for line in text.splitlines():
        parts = line.split("|", 3)
        if len(parts) < 4 or parts[0] in seen:
            continue
        words = _node_state_words(parts[2])
        reason = _reason("" if parts[3].strip() == "none" else parts[3].strip(), words)
        seen[parts[0]] = SlurmNode(
            parts[0],
            int(parts[1]) if parts[1].isdigit() else 0,
            not (words & UNSCHEDULABLE_NODE_STATES),
            reason,
            down=bool(words & DOWN_NODE_STATES),
        )
    return list(seen.values())
