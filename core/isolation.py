"""When a C4D Error may take a shared node out of service (issue 31, finding 0).

A C4D verdict is computed from what the job itself writes: its SDK reports (one
process may post for every rank) and its Flight Recorder dumps, judged with the
hang threshold and check period the job chose. So one job's Error is evidence
about that job, not about the node: it may restart or fail that job (and steer
that job's own next attempt off the node), never isolate a node other
workspaces' jobs run on. Isolation needs evidence no single submitter can forge:

- Errors on the same node from at least `min_jobs` distinct jobs of at least
  `min_submitters` distinct people within `window` seconds; and
- at most `max_automatic` automatic isolations site-wide within `rate_window`
  seconds, so even colluding submitters cannot drain a cluster at check speed.

Anything else becomes a proposal on the node, which staff confirm or dismiss on
the nodes page. The node's reputation record (core.reputation) is not enough on
its own: its faults come from log lines the jobs print, which one submitter's
jobs can print too.

Pure: observations in, a decision out. monitoring.diagnose applies it, in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Action(StrEnum):
    ISOLATE = "isolate"  # corroborated and within the rate limit: drain the node now
    PROPOSE = "propose"  # recorded on the node for staff to confirm or dismiss
    NOTHING = "nothing"  # no node to act on, or it is already out of service


@dataclass(frozen=True)
class Policy:
    window: float = 6 * 3600  # Errors on one node count together for this long
    min_jobs: int = 2
    min_submitters: int = 2  # one person's jobs, however many, never isolate alone
    rate_window: float = 3600
    max_automatic: int = 2  # automatic isolations site-wide per rate_window


POLICY = Policy()


@dataclass(frozen=True)
class NodeErrorSeen:
    """One job's C4D Error on a node (one per job attempt and node)."""

    node: str
    job_id: int | None
    submitter_id: int | None
    workspace_id: int | None
    at: float


@dataclass(frozen=True)
class Decision:
    action: Action
    evidence: str  # one sentence for the event, the proposal and the node page


def decide(
    node: str,
    errors: list[NodeErrorSeen],
    *,
    schedulable: bool,
    automatic_isolations_at: list[float],
    now: float,
    policy: Policy = POLICY,
) -> Decision:
    """What a C4D Error on `node` does: `errors` are the Errors seen on the backend's
    nodes (this one included), `automatic_isolations_at` when automatic isolations
    happened site-wide."""
    if not node:
        return Decision(Action.NOTHING, "the rank has no node")
    if not schedulable:
        return Decision(Action.NOTHING, f"node {node} is already out of service")
    recent = [e for e in errors if e.node == node and 0 <= now - e.at <= policy.window]
    jobs = {e.job_id for e in recent if e.job_id is not None}
    people = {e.submitter_id for e in recent if e.submitter_id is not None}
    workspaces = {e.workspace_id for e in recent if e.workspace_id is not None}
    hours = policy.window / 3600
    seen = (
        f"C4D Errors on {node} from {len(jobs)} job{'s' if len(jobs) != 1 else ''} of "
        f"{len(people)} submitter{'s' if len(people) != 1 else ''} in "
        f"{len(workspaces)} workspace{'s' if len(workspaces) != 1 else ''} in the last {hours:g} h"
    )
    if len(jobs) < policy.min_jobs or len(people) < policy.min_submitters:
        return Decision(
            Action.PROPOSE,
            f"{seen}; isolating a shared node needs {policy.min_jobs} jobs of {policy.min_submitters} "
            "submitters, so staff decide",
        )
    return isolate_within_rate(seen, automatic_isolations_at, now, policy)


def isolate_within_rate(seen: str, automatic_isolations_at: list[float], now: float, policy: Policy) -> Decision:
    """Corroborated evidence isolates, unless the site-wide automatic isolations of the
    rate window are spent: then staff decide."""
    lately = [t for t in automatic_isolations_at if 0 <= now - t <= policy.rate_window]
    if len(lately) >= policy.max_automatic:
        return Decision(
            Action.PROPOSE,
            f"{seen}; {len(lately)} nodes were isolated automatically in the last "
            f"{policy.rate_window / 60:g} min (at most {policy.max_automatic}), so staff decide",
        )
    return Decision(Action.ISOLATE, seen)


def nodes_to_avoid(isolated: list[str], own_suspects: list[str], schedulable: list[str]) -> list[str]:
    """The nodes a job's next attempt avoids: every isolated node, and the nodes this
    job's own C4D Errors named as long as another schedulable node remains (a job's
    reports steer only its own attempts; with nowhere else to go it retries there)."""
    left = [n for n in schedulable if n not in own_suspects and n not in isolated]
    extra = [n for n in own_suspects if n not in isolated] if left else []
    return list(dict.fromkeys([*isolated, *extra]))
