"""The nodes page: staff see every backend's nodes, their open isolation proposals
(C4D Errors core.isolation did not let isolate on their own) and confirm or dismiss
them. Nodes are shared infrastructure: to anyone but staff the page does not exist."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from .backends import get_backend
from .backends.base import BackendError
from .isolation import decide_proposal, latest_service_actions, restore_node
from .models import NodeError, NodeErrorState
from .nodes_api import NodeDecisionSerializer, NodeRestoreSerializer, proposals_by_node


def _staff_only(request) -> None:
    if not request.user.is_staff:
        raise Http404("no such page")


@login_required
def nodes(request, errors: dict | None = None, status: int = 200):
    _staff_only(request)
    proposals = proposals_by_node()
    service = latest_service_actions()
    rows, problems = [], []
    for backend_name in settings.JOB_BACKENDS:
        try:
            listed = get_backend(backend_name).list_nodes()
        except BackendError as exc:
            problems.append(f"{backend_name}: {exc.message}")
            continue
        for n in listed:
            rows.append(
                {
                    "backend": backend_name,
                    "node": n,
                    "proposals": proposals.get((backend_name, n.name), []),
                    "service": service.get((backend_name, n.name)),
                }
            )
    decided = NodeError.objects.exclude(state__in=[NodeErrorState.PROPOSED, NodeErrorState.NOTED]).select_related(
        "decided_by"
    )[:50]
    context = {"rows": rows, "problems": problems, "decided": decided, "errors": errors or {}}
    return render(request, "jobs/nodes.html", context, status=status)


@login_required
@require_POST
def node_decide(request, backend, node):
    _staff_only(request)
    if backend not in settings.JOB_BACKENDS:
        raise Http404(f"no backend {backend!r}")
    body = NodeDecisionSerializer(data=request.POST)
    if not body.is_valid():
        return nodes(request, errors={f"{backend}:{node}": body.errors}, status=400)
    try:
        decided = decide_proposal(
            backend, node, request.user, body.validated_data["decision"] == "confirm", body.validated_data["reason"]
        )
    except BackendError as exc:
        return nodes(request, errors={f"{backend}:{node}": {"backend": [exc.message]}}, status=502)
    if not decided:
        raise Http404(f"no open isolation proposal for {node!r}")
    return redirect("pages:nodes")


@login_required
@require_POST
def node_restore(request, backend, node):
    """Return an isolated node to service (Slurm: State=RESUME), recorded with who and why."""
    _staff_only(request)
    if backend not in settings.JOB_BACKENDS:
        raise Http404(f"no backend {backend!r}")
    key = f"{backend}:{node}"
    body = NodeRestoreSerializer(data=request.POST)
    if not body.is_valid():
        return nodes(request, errors={key: body.errors}, status=400)
    try:
        listed = {n.name: n for n in get_backend(backend).list_nodes()}
    except BackendError as exc:
        return nodes(request, errors={key: {"backend": [exc.message]}}, status=502)
    if node not in listed:
        raise Http404(f"no node {node!r} on the {backend} backend")
    if listed[node].schedulable:
        return nodes(
            request, errors={key: {"node": ["is in service already: there is nothing to return."]}}, status=400
        )
    try:
        restore_node(backend, node, request.user, body.validated_data["reason"])
    except BackendError as exc:
        return nodes(request, errors={key: {"backend": [exc.message]}}, status=502)
    return redirect("pages:nodes")
