"""Nodes across backends: their state, their fault record, and isolation by a
person. Nodes are shared infrastructure, not a workspace's, so only staff may
see or change them."""

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, permissions, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from core.reputation import NodeFaultSeen, standings

from .backends import get_backend
from .backends.base import BackendError
from .inputs import text_problem
from .isolation import decide_proposal, open_proposals, restore_node
from .models import NodeFault


class NodeRestoreSerializer(serializers.Serializer):
    """A staff member returns an isolated node to service (the nodes page): why, in one line."""

    reason = serializers.CharField(max_length=300, trim_whitespace=True)

    def validate_reason(self, value: str) -> str:
        problem = text_problem(value, one_line=True)
        if problem:
            raise serializers.ValidationError(problem)
        return value


class NodeDecisionSerializer(NodeRestoreSerializer):
    """A staff decision on a node's isolation proposal (the API and the nodes page)."""

    decision = serializers.ChoiceField(
        choices=["confirm", "dismiss"], error_messages={"invalid_choice": "must be confirm or dismiss; got {input!r}."}
    )


def proposals_by_node() -> dict[tuple[str, str], list[dict]]:
    """Open isolation proposals, per (backend, node): the evidence staff decide on."""
    out: dict[tuple[str, str], list[dict]] = {}
    for e in open_proposals():
        out.setdefault((e.backend, e.node), []).append(
            {
                "id": e.pk,
                "job": e.job_id,
                "attempt": e.attempt,
                "rank": e.rank,
                "kind": e.kind,
                "evidence": e.evidence,
                "at": e.created_at.isoformat(),
            }
        )
    return out


class NodeViewSet(viewsets.ViewSet):
    permission_classes = [permissions.IsAdminUser]
    lookup_value_regex = r"[^/]+"

    def _backend(self, name):
        from django.conf import settings

        if name not in settings.JOB_BACKENDS:
            raise exceptions.NotFound(f"no backend {name!r}; configured: {', '.join(settings.JOB_BACKENDS)}.")
        return get_backend(name)

    @extend_schema(responses={200: dict})
    def list(self, request):
        from django.conf import settings

        now = timezone.now()
        faults = [
            NodeFaultSeen(f.node, f.job_id, f.error_code, f.retryable, f.created_at.timestamp())
            for f in NodeFault.objects.filter(created_at__gte=now - timezone.timedelta(days=7))
        ]
        by_node = standings(faults, now.timestamp())
        proposals = proposals_by_node()
        out = []
        for backend_name in settings.JOB_BACKENDS:
            try:
                nodes = self._backend(backend_name).list_nodes()
            except BackendError as exc:
                out.append({"backend": backend_name, "error": exc.message})
                continue
            for n in nodes:
                s = by_node.get(n.name)
                out.append(
                    {
                        "backend": backend_name,
                        "name": n.name,
                        "slots": n.slots,
                        "schedulable": n.schedulable,
                        "reason": n.reason,
                        "faults_24h": s.faults_in_window if s else 0,
                        "error_codes": s.error_codes if s else {},
                        "proposed_for_isolation": bool(s and s.proposed_for_isolation and n.schedulable),
                        "evidence": s.evidence if s else "",
                        "isolation_proposals": proposals.get((backend_name, n.name), []),
                    }
                )
        return Response(out)

    def _act(self, request, pk, isolate: bool):
        backend_name, _, node = pk.partition(":")
        backend = self._backend(backend_name)
        if not backend.can_isolate_nodes:
            raise exceptions.ValidationError({"backend": [f"the {backend_name} backend cannot isolate nodes."]})
        if node not in {n.name for n in backend.list_nodes()}:
            raise exceptions.NotFound(f"no node {node!r} on the {backend_name} backend.")
        try:
            if isolate:
                raw = request.data.get("reason") if isinstance(request.data, dict) else None
                reason = raw.strip() if isinstance(raw, str) else ""
                if not reason:
                    raise exceptions.ValidationError({"reason": ["is required: say why the node is isolated."]})
                if text_problem(reason, one_line=True):
                    raise exceptions.ValidationError({"reason": [text_problem(reason, one_line=True)]})
                backend.isolate_node(node, f"{reason} (by {request.user.get_username()})"[:400])
            else:
                raw = request.data.get("reason") if isinstance(request.data, dict) else None
                reason = raw.strip() if isinstance(raw, str) else ""
                if reason and text_problem(reason, one_line=True):
                    raise exceptions.ValidationError({"reason": [text_problem(reason, one_line=True)]})
                restore_node(backend_name, node, request.user, reason or "returned to service through the API")
        except BackendError as exc:
            raise exceptions.APIException(exc.message) from None
        return Response(
            {n.name: {"schedulable": n.schedulable, "reason": n.reason} for n in backend.list_nodes()}[node]
        )

    @extend_schema(request=dict, responses={200: dict})
    @action(detail=True, methods=["post"])
    def isolate(self, request, pk=None):
        """Isolate `<backend>:<node>` (new attempts avoid it); needs a reason."""
        return self._act(request, pk, True)

    @extend_schema(request=None, responses={200: dict})
    @action(detail=True, methods=["post"])
    def restore(self, request, pk=None):
        """Make `<backend>:<node>` schedulable again."""
        return self._act(request, pk, False)

    @extend_schema(request=NodeDecisionSerializer, responses={200: dict})
    @action(detail=True, methods=["post"])
    def decide(self, request, pk=None):
        """Confirm (isolate the node) or dismiss `<backend>:<node>`'s open isolation
        proposals: `{"decision": "confirm"|"dismiss", "reason": "..."}`; who, when and
        why are kept on each proposal."""
        backend_name, _, node = pk.partition(":")
        self._backend(backend_name)
        body = NodeDecisionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            decided = decide_proposal(
                backend_name,
                node,
                request.user,
                body.validated_data["decision"] == "confirm",
                body.validated_data["reason"],
            )
        except BackendError as exc:
            raise exceptions.APIException(exc.message) from None
        if not decided:
            raise exceptions.NotFound(f"no open isolation proposal for node {node!r} on the {backend_name} backend.")
        return Response({"decided": decided, "decision": body.validated_data["decision"]})
