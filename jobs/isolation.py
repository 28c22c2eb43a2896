"""Applying core.isolation: a C4D Error naming a node becomes a NodeError row, and
the node is isolated only when core.isolation.decide says the evidence is
corroborated; otherwise the row is a proposal staff confirm or dismiss (the nodes
page, jobs.views.nodes). Every automatic or confirmed isolation goes through here.

Drain reasons carry only what Vigil chose: job ids and the diagnosis kind, never a
job's display name or other text its submitter wrote (Slurm shows the reason to
every cluster user and operators act on it)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db import connection, transaction
from django.utils import timezone

from core.isolation import Action, Decision, NodeErrorSeen, decide
from core.reputation import WINDOW_SECONDS, NodeFaultSeen, isolation_decision

from . import actions
from .backends.base import BackendError
from .models import (
    EventLevel,
    EventType,
    Instance,
    InstanceStatus,
    Job,
    NodeError,
    NodeErrorState,
    NodeFault,
    NodeServiceAction,
    NodeServiceKind,
)

MAX_REASON = 400


@dataclass(frozen=True)
class Outcome:
    node: str
    action: Action
    evidence: str


def _seen(backend_name: str, since) -> list[NodeErrorSeen]:
    return [
        NodeErrorSeen(e.node, e.job_id, e.submitter_id_seen, e.workspace_id_seen, e.created_at.timestamp())
        for e in NodeError.objects.filter(backend=backend_name, created_at__gte=since).exclude(
            state=NodeErrorState.DISMISSED  # staff looked at these and kept the node in service
        )
    ]


ADVISORY_LOCK = 0x5649_4731  # "VIG1": one C4D isolation decision at a time (PostgreSQL)


def _serialize_decisions() -> None:
    """Two monitor workers deciding at once would both see the rate limit unspent and
    both isolate. PostgreSQL: a transaction-scoped advisory lock; SQLite serializes
    writers already (the NodeError insert below takes its write lock first)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [ADVISORY_LOCK])


def on_c4d_error(job: Job, attempt_number: int, node: str, rank: int | None, kind: str) -> Outcome | None:
    """A C4D Error of `job` named `node`: record it, then isolate, propose or note it as
    core.isolation decides. None when the backend cannot isolate nodes."""
    backend = actions.get_backend_for(job)
    if not node or not backend.can_isolate_nodes:
        return None
    now = timezone.now()
    policy_window = timedelta(days=1)  # covers core.isolation's window and rate window
    try:
        schedulable = {n.name: n.schedulable for n in backend.list_nodes()}.get(node, True)
    except BackendError:
        schedulable = True  # the isolation below then reports what the backend says
    with transaction.atomic():
        _serialize_decisions()
        error, created = NodeError.objects.get_or_create(
            job=job,
            attempt=attempt_number,
            backend=job.backend,
            node=node,
            defaults={
                "workspace_id_seen": job.workspace_id,
                "submitter_id_seen": job.created_by_id,
                "rank": rank,
                "kind": kind[:32],
                "created_at": now,
            },
        )
        if not created:
            return Outcome(node, Action.NOTHING, "this attempt's Error on the node is already recorded")
        decision: Decision = decide(
            node,
            _seen(job.backend, now - policy_window),
            schedulable=schedulable,
            automatic_isolations_at=_automatic_isolations(job.backend, now - policy_window),
            now=now.timestamp(),
        )
        error.evidence = decision.evidence[:MAX_REASON]
        error.state = {
            Action.ISOLATE: NodeErrorState.ISOLATED,
            Action.PROPOSE: NodeErrorState.PROPOSED,
            Action.NOTHING: NodeErrorState.NOTED,
        }[decision.action]
        error.save(update_fields=["evidence", "state"])
    where = f"rank {rank}" if rank is not None else "a rank"
    if decision.action == Action.ISOLATE:
        jobs = sorted(
            {e.job_id for e in _seen(job.backend, now - policy_window) if e.node == node and e.job_id is not None}
        )
        reason = f"Vigil jobs {', '.join(map(str, jobs))}: C4D {kind} on {node}"[:MAX_REASON]
        try:
            backend.isolate_node(node, reason)
        except BackendError as exc:
            NodeError.objects.filter(pk=error.pk).update(state=NodeErrorState.PROPOSED)
            actions.record_event(
                job,
                EventType.DECISION,
                f"Could not isolate node {node}: {exc.message}. It stays proposed for isolation.",
                level=EventLevel.WARNING,
                attempt=attempt_number,
            )
            return Outcome(node, Action.PROPOSE, decision.evidence)
        actions.record_event(
            job,
            EventType.NODE_ISOLATED,
            f"Node {node} isolated: {decision.evidence}. New attempts avoid it until a person restores it.",
            level=EventLevel.WARNING,
            attempt=attempt_number,
            payload={"node": node, "rank": rank, "kind": kind, "evidence": decision.evidence},
            key=f"isolated:{job.pk}:{attempt_number}:{node}",
        )
    elif decision.action == Action.PROPOSE:
        actions.record_event(
            job,
            EventType.DECISION,
            f"C4D {kind} on {where} names node {node}: proposed for isolation ({decision.evidence}). "
            "This job's next attempt avoids the node when another is free.",
            level=EventLevel.WARNING,
            attempt=attempt_number,
            payload={"node": node, "rank": rank, "kind": kind, "proposed": True, "evidence": decision.evidence},
            key=f"proposed:{job.pk}:{attempt_number}:{node}",
        )
    return Outcome(node, decision.action, decision.evidence)


def _automatic_isolations(backend_name: str, since) -> list[float]:
    """When Vigil isolated nodes on its own (C4D Errors or reputation): the rate limit's input."""
    c4d = NodeError.objects.filter(backend=backend_name, state=NodeErrorState.ISOLATED, created_at__gte=since)
    mine = NodeServiceAction.objects.filter(
        backend=backend_name, kind=NodeServiceKind.ISOLATE, by=None, created_at__gte=since
    )
    return [t.timestamp() for q in (c4d, mine) for t in q.values_list("created_at", flat=True)]


def on_node_fault(job: Job, node: str) -> Outcome | None:
    """A retryable fault of `job` was counted against `node`: when the node's record now
    crosses the reputation threshold with corroboration (core.reputation.isolation_decision),
    drain it with the jobs and the diagnosis as the reason; short of corroboration, say
    on the job that the node is proposed. None when the backend cannot isolate nodes."""
    backend = actions.get_backend_for(job)
    if not node or not backend.can_isolate_nodes:
        return None
    now = timezone.now()
    since = now - timedelta(seconds=WINDOW_SECONDS)
    try:
        schedulable = {n.name: n.schedulable for n in backend.list_nodes()}.get(node, True)
    except BackendError:
        return None  # the next fault decides again
    with transaction.atomic():
        _serialize_decisions()
        rows = NodeFault.objects.filter(backend=job.backend, node=node, created_at__gte=since).values_list(
            "job_id", "error_code", "retryable", "created_at", "job__created_by_id"
        )
        faults = [NodeFaultSeen(node, j, code, r, at.timestamp(), who) for j, code, r, at, who in rows]
        decision = isolation_decision(
            faults,
            node,
            schedulable=schedulable,
            automatic_isolations_at=_automatic_isolations(job.backend, since),
            now=now.timestamp(),
        )
        if decision.action == Action.ISOLATE:
            jobs = sorted({f.job_id for f in faults if f.job_id is not None})
            codes = sorted({f.error_code for f in faults if f.retryable})
            reason = f"Vigil jobs {', '.join(map(str, jobs))}: {', '.join(codes)} on {node} (node reputation)"
            reason = reason[:MAX_REASON]
            recorded = NodeServiceAction.objects.create(
                backend=job.backend, node=node, kind=NodeServiceKind.ISOLATE, job=job, reason=reason, created_at=now
            )
    if decision.action == Action.ISOLATE:
        try:
            backend.isolate_node(node, reason)
        except BackendError as exc:
            recorded.delete()
            actions.record_event(
                job,
                EventType.DECISION,
                f"Could not isolate node {node}: {exc.message}.",
                level=EventLevel.WARNING,
                key=f"isolate-failed:{job.pk}:{node}:{now.timestamp():.0f}",
            )
            return Outcome(node, Action.PROPOSE, decision.evidence)
        actions.record_event(
            job,
            EventType.NODE_ISOLATED,
            f"Node {node} isolated: {decision.evidence}. New attempts avoid it until a person restores it.",
            level=EventLevel.WARNING,
            payload={"node": node, "evidence": decision.evidence, "source": "reputation"},
            key=f"isolated:reputation:{job.pk}:{node}:{now.timestamp():.0f}",
        )
    elif decision.action == Action.PROPOSE:
        actions.record_event(
            job,
            EventType.DECISION,
            f"Node {node} is proposed for isolation: {decision.evidence}.",
            level=EventLevel.WARNING,
            payload={"node": node, "proposed": True, "evidence": decision.evidence, "source": "reputation"},
            key=f"proposed:reputation:{job.pk}:{node}:{len(faults)}",
        )
    return Outcome(node, decision.action, decision.evidence)


def restore_node(backend_name: str, node: str, user, reason: str) -> NodeServiceAction:
    """A staff member returns a node to service (Slurm: State=RESUME), recorded with why.
    Raises BackendError when the backend refuses."""
    actions.get_backend(backend_name).restore_node(node)
    return NodeServiceAction.objects.create(
        backend=backend_name, node=node, kind=NodeServiceKind.RESTORE, by=user, reason=reason[:MAX_REASON]
    )


def latest_service_actions() -> dict[tuple[str, str], NodeServiceAction]:
    """The latest isolation or return to service per (backend, node)."""
    out: dict[tuple[str, str], NodeServiceAction] = {}
    for a in NodeServiceAction.objects.select_related("by").order_by("-created_at", "-id")[:500]:
        out.setdefault((a.backend, a.node), a)
    return out


def on_a_silent_node(job: Job, instances: list[Instance]) -> tuple[Instance, str] | None:
    """The first running instance whose node the backend says does not answer (Slurm:
    "Not responding", a cut-off or dead node) and why; None when every node answers."""
    try:
        silent = {
            n.name: n.reason
            for n in actions.get_backend_for(job).list_nodes()
            if not n.schedulable and "not responding" in n.reason.lower()
        }
    except BackendError:
        return None
    for inst in sorted(instances, key=lambda i: i.rank):
        if inst.node in silent and inst.status == InstanceStatus.RUNNING:
            return inst, silent[inst.node]
    return None


def own_suspects(job: Job) -> list[str]:
    """The nodes this job's own C4D Errors named (its next attempts avoid them)."""
    return list(NodeError.objects.filter(job=job, backend=job.backend).values_list("node", flat=True).distinct())


def open_proposals(backend_name: str | None = None):
    qs = NodeError.objects.filter(state=NodeErrorState.PROPOSED).select_related("job")
    return qs.filter(backend=backend_name) if backend_name else qs


def decide_proposal(backend_name: str, node: str, user, confirm: bool, reason: str) -> int:
    """Staff confirm (isolate the node) or dismiss the open proposals on a node; returns
    how many were decided. Raises BackendError when the backend refuses to isolate."""
    now = timezone.now()
    with transaction.atomic():
        # Locks only the proposals (PostgreSQL cannot lock the nullable side of the job join).
        pending = list(open_proposals(backend_name).filter(node=node).select_for_update(of=("self",)))
        if not pending:
            return 0
        if confirm:
            jobs = sorted({e.job_id for e in pending if e.job_id is not None})
            kinds = sorted({e.kind for e in pending})
            text = (
                f"Vigil jobs {', '.join(map(str, jobs))}: C4D {', '.join(kinds)} on {node}; "
                f"confirmed by {user.get_username()}"
            )
            actions.get_backend(backend_name).isolate_node(node, text[:MAX_REASON])
        NodeError.objects.filter(pk__in=[e.pk for e in pending]).update(
            state=NodeErrorState.CONFIRMED if confirm else NodeErrorState.DISMISSED,
            decided_by=user,
            decided_at=now,
            decided_reason=reason[:MAX_REASON],
        )
    return len(pending)
