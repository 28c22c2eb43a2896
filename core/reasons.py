"""A decision's reason, cause first, for places that show it cut short (the job
list, the restart table, the dashboard): the monitor's sentences start with the
decision ("Restarting the whole job (restart 1 of 3): worker-0 failed with ...")
so a truncated cell showed the decision and cut the cause. `cause_first` puts
the cause in front: "ECONNRESET on worker-0 — restart 1 of 3".

Pure: it reads the wording of core.policy's decisions; a sentence it does not
know comes back unchanged."""

from __future__ import annotations

import re

_FAILED = re.compile(
    r"(?P<inst>[\w.\-]+) failed with (?:a retryable error: |an error \(every failure qualifies with OnFailure\): )?"
    r"(?P<code>[A-Za-z0-9_.\-]+)(?: \((?P<msg>[^)]*)\))?"
)
_PROBLEMS = (("the job hung: ", "Hang"), ("the job did not exit: ", "Exit hang"), ("C4D found a faulty rank: ", "C4D"))
_WHOLE = re.compile(r"^Restarting the whole job \(restart (?P<n>\d+) of (?P<m>\d+)\): (?P<why>.*)$", re.S)
_ALONE = re.compile(r"^Restarting (?P<inst>[\w.\-]+) alone: (?P<why>.*)$", re.S)
_NOT = re.compile(r"^Not restarted: (?P<why>.*)$", re.S)
_BUDGET = re.compile(r"already been restarted (?P<n>\d+) of (?P<m>\d+) times")


def _cause(why: str) -> str | None:
    failed = _FAILED.search(why)
    if failed:
        return f"{failed['code']} on {failed['inst']}"
    for phrase, label in _PROBLEMS:
        at = why.find(phrase)
        if at >= 0:
            return f"{label}: {why[at + len(phrase) :].rstrip('.').split('; ')[0]}"
    return None


def cause_first(reason: str) -> str:
    """The reason with its cause first, then what was done; unknown wording unchanged."""
    text = (reason or "").strip()
    m = _WHOLE.match(text)
    if m:
        cause = _cause(m["why"])
        return f"{cause} — restart {m['n']} of {m['m']}" if cause else text
    m = _ALONE.match(text)
    if m:
        cause = _cause(m["why"])
        return f"{cause} — restarting {m['inst']} alone" if cause else text
    m = _NOT.match(text)
    if m:
        cause = _cause(m["why"])
        if not cause:
            return text
        budget = _BUDGET.search(m["why"])
        done = f"not restarted, restart {budget['n']} of {budget['m']} used" if budget else "not restarted"
        return f"{cause} — {done}"
    return text
