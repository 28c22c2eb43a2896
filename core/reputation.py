"""Node reputation (SPEC 9): classified faults counted per node across all jobs;
a node that keeps failing different jobs is proposed for isolation, with the
evidence. Pure: fault observations in, proposals out.

A record that crosses the threshold drains the node on its own only when no single
submitter can have written it (`isolation_decision`): the faults must come from jobs
of at least two people, and automatic isolations stay within core.isolation's
site-wide rate limit, the same corroboration a C4D Error needs (issue 31)."""

from __future__ import annotations

from dataclasses import dataclass

from core.isolation import POLICY, Action, Decision, Policy, isolate_within_rate

WINDOW_SECONDS = 24 * 3600
MIN_FAULTS = 3  # retryable faults on one node within the window...
MIN_JOBS = 2  # ...across at least this many jobs (one broken job is not the node's fault)


@dataclass(frozen=True)
class NodeFaultSeen:
    node: str
    job_id: int | None
    error_code: str
    retryable: bool
    at: float
    submitter_id: int | None = None  # who submitted the job (corroboration)


@dataclass(frozen=True)
class NodeStanding:
    node: str
    faults_in_window: int
    jobs_in_window: int
    error_codes: dict
    proposed_for_isolation: bool
    evidence: str


def standings(faults: list[NodeFaultSeen], now: float, window: float = WINDOW_SECONDS) -> dict[str, NodeStanding]:
    recent = [f for f in faults if f.retryable and now - f.at <= window]
    out: dict[str, NodeStanding] = {}
    for node in sorted({f.node for f in faults}):
        mine = [f for f in recent if f.node == node]
        jobs = {f.job_id for f in mine if f.job_id is not None}
        codes: dict[str, int] = {}
        for f in mine:
            codes[f.error_code] = codes.get(f.error_code, 0) + 1
        proposed = len(mine) >= MIN_FAULTS and len(jobs) >= MIN_JOBS
        evidence = (
            f"{len(mine)} retryable faults in the last {window / 3600:.0f} h across {len(jobs)} jobs: "
            + ", ".join(f"{c} x{n}" for c, n in sorted(codes.items(), key=lambda kv: -kv[1]))
            if mine
            else "no retryable faults in the window"
        )
        out[node] = NodeStanding(node, len(mine), len(jobs), codes, proposed, evidence)
    return out


def isolation_decision(
    faults: list[NodeFaultSeen],
    node: str,
    *,
    schedulable: bool,
    automatic_isolations_at: list[float],
    now: float,
    window: float = WINDOW_SECONDS,
    policy: Policy = POLICY,
) -> Decision:
    """What `node`'s reputation record does now: nothing below the threshold; above it,
    isolate when the faults come from at least policy.min_submitters people and the
    site-wide rate of automatic isolations allows it, else propose it to staff."""
    standing = standings(faults, now, window).get(node)
    if standing is None or not standing.proposed_for_isolation:
        return Decision(Action.NOTHING, standing.evidence if standing else "no faults on record")
    if not schedulable:
        return Decision(Action.NOTHING, f"node {node} is already out of service")
    people = {
        f.submitter_id
        for f in faults
        if f.node == node and f.retryable and now - f.at <= window and f.submitter_id is not None
    }
    seen = f"node {node}'s record: {standing.evidence}, from {len(people)} submitter{'s' if len(people) != 1 else ''}"
    if len(people) < policy.min_submitters:
        return Decision(Action.PROPOSE, f"{seen}; one person's jobs never isolate a shared node alone, so staff decide")
    return isolate_within_rate(seen, automatic_isolations_at, now, policy)
