"""A decision's reason, cause first, for places that show it cut short (the job
list, the restart table, the dashboard): the monitor's sentences start with the
decision ("Restarting the whole job (restart 1 of 3): worker-0 failed with ...")
so a truncated cell showed the decision and cut the cause. `cause_first` puts
the cause in front: "ECONNRESET on worker-0 — restart 1 of 3".

The job list shows the failure's evidence instead of the rule id (`evidence=True`):
"ValueError: bad config: hidden_dim must be > 0 on worker-0 — not restarted" is what a
person recognises from their own log; "python-exception" is the catalog's name for it,
kept for the hover (`rule_of`).

Pure: it reads the wording of core.policy's decisions; a sentence it does not
know comes back unchanged."""

from __future__ import annotations

import re

_FAILED = re.compile(
    r"(?P<inst>[\w.\-]+) failed with (?:a retryable error: |an error \(every failure qualifies with OnFailure\): )?"
    r"(?P<code>[A-Za-z0-9_.\-]+)"
)
_PROBLEMS = (("the job hung: ", "Hang"), ("the job did not exit: ", "Exit hang"), ("C4D found a faulty rank: ", "C4D"))
_WHOLE = re.compile(r"^Restarting the whole job \(restart (?P<n>\d+) of (?P<m>\d+)\): (?P<why>.*)$", re.S)
_ALONE = re.compile(r"^Restarting (?P<inst>[\w.\-]+) alone: (?P<why>.*)$", re.S)
_NOT = re.compile(r"^Not restarted: (?P<why>.*)$", re.S)
_BUDGET = re.compile(r"already been restarted (?P<n>\d+) of (?P<m>\d+) times")


def _evidence(why: str, at: int) -> str:
    """The classification's message in the parentheses after the rule id at `at`, read to its
    matching close: messages have parentheses of their own ("Crashed with SIGSEGV (signal 11)")."""
    if not why.startswith(" (", at):
        return ""
    depth = 0
    for i in range(at + 1, len(why)):
        if why[i] == "(":
            depth += 1
        elif why[i] == ")":
            depth -= 1
            if depth == 0:
                return why[at + 2 : i].strip()
    return ""


# The job list's cell holds 80 characters: a long evidence line is cut (`fit`), not the
# instance and the decision after it ("— restart 1 of 3"), which say what Vigil did.
CELL = 80


def _shortened(line: str, room: int) -> str:
    room = max(room, 16)
    return line if len(line) <= room else line[: room - 1].rstrip() + "…"


def _cause(why: str, evidence: bool = False) -> str | None:
    failed = _FAILED.search(why)
    if failed:
        shown = (_evidence(why, failed.end("code")) if evidence else "") or failed["code"]
        return f"{shown} on {failed['inst']}"
    for phrase, label in _PROBLEMS:
        at = why.find(phrase)
        if at >= 0:
            return f"{label}: {why[at + len(phrase) :].rstrip('.').split('; ')[0]}"
    return None


def rule_of(reason: str) -> str:
    """The catalog rule id a decision names ("python-exception"), or "" when it names none."""
    text = (reason or "").strip()
    decision = _WHOLE.match(text) or _ALONE.match(text) or _NOT.match(text)
    failed = _FAILED.search(decision["why"]) if decision else None
    return failed["code"] if failed else ""


def cause_first(reason: str, evidence: bool = False) -> str:
    """The reason with its cause first, then what was done; unknown wording unchanged. With
    `evidence`, the cause is the failure's message (the log line) rather than its rule id, cut
    so that the whole fits the job list's cell (CELL) with the decision kept whole."""
    out = _cause_first(reason, evidence)
    if not evidence or len(out) <= CELL:
        return out
    cause = _cause_of(reason)
    if cause is None:
        return out
    shown = _evidence(cause[0], cause[1])
    if not shown:
        return out
    rest = out[len(shown) :]
    return _shortened(shown, CELL - len(rest)) + rest


def _cause_of(reason: str) -> tuple[str, int] | None:
    """The decision's why-text and where its rule id ends (the evidence follows there)."""
    text = (reason or "").strip()
    m = _WHOLE.match(text) or _ALONE.match(text) or _NOT.match(text)
    failed = _FAILED.search(m["why"]) if m else None
    return (m["why"], failed.end("code")) if m and failed else None


def _cause_first(reason: str, evidence: bool) -> str:
    text = (reason or "").strip()
    m = _WHOLE.match(text)
    if m:
        cause = _cause(m["why"], evidence)
        return f"{cause} — restart {m['n']} of {m['m']}" if cause else text
    m = _ALONE.match(text)
    if m:
        cause = _cause(m["why"], evidence)
        return f"{cause} — restarting {m['inst']} alone" if cause else text
    m = _NOT.match(text)
    if m:
        cause = _cause(m["why"], evidence)
        if not cause:
            return text
        budget = _BUDGET.search(m["why"])
        done = f"not restarted, restart {budget['n']} of {budget['m']} used" if budget else "not restarted"
        return f"{cause} — {done}"
    return text
