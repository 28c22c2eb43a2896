"""Node reputation (SPEC 9): classified faults counted per node across all jobs;
a node that keeps failing different jobs is proposed for isolation, with the
evidence. Pure: fault observations in, proposals out."""

from __future__ import annotations

from dataclasses import dataclass

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
