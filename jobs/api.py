"""REST API v1 (SPEC section 8). Every query is scoped to the caller's
workspaces, so another workspace's objects are 404, never 403. Bodies are
validated by jobs.serializers; the domain's refusals (actions.NotFound,
actions.Forbidden, ...) become responses in jobs.exceptions, not here."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.http import FileResponse
from django.utils.text import slugify
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response


from . import access, actions
from .access import WORKSPACE_CREATION_REFUSED, may_create_workspace
from .backends.base import BackendError
from .exceptions import Conflict
from .goodput import job_goodput
from .inputs import SLUG_RE, parse_int, query_int, workspace_ref
from .logs import InstanceLog
from .models import Job, Membership, Role, Workspace
from .serializers import (
    AttemptSerializer,
    DiagnosisSerializer,
    JobDetailSerializer,
    JobEventSerializer,
    JobSerializer,
    JobSubmitSerializer,
    RestartRecordSerializer,
    RetryableKeywordSerializer,
    RuntimeSerializer,
    WorkspaceSerializer,
)

MAX_LOG_BYTES = 8 * 1024 * 1024


class WorkspaceViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, viewsets.GenericViewSet
):
    serializer_class = WorkspaceSerializer

    def get_queryset(self):
        return Workspace.objects.for_user(self.request.user).order_by("name")

    def create(self, request, *args, **kwargs):
        if not may_create_workspace(request.user):
            raise exceptions.PermissionDenied(WORKSPACE_CREATION_REFUSED)
        return super().create(request, *args, **kwargs)

    def perform_create(self, serializer):
        name = serializer.validated_data["name"]
        base = serializer.validated_data.get("slug") or slugify(name)[:90] or "workspace"
        if not SLUG_RE.fullmatch(base):
            base = f"ws-{base}"[:90]  # "2026 runs" -> ws-2026-runs: a slug starts with a letter
        with transaction.atomic():
            slug, n = base, 1
            while Workspace.objects.filter(slug=slug).exists():
                n += 1
                slug = f"{base}-{n}"
            try:
                ws = serializer.save(slug=slug)
            except IntegrityError:
                raise exceptions.ValidationError({"slug": ["is taken; choose another."]}) from None
            Membership.objects.create(workspace=ws, user=self.request.user, role=Role.OWNER)


class JobViewSet(viewsets.GenericViewSet):
    serializer_class = JobSerializer
    queryset = Job.objects.none()  # for the schema; get_queryset scopes by membership

    def get_queryset(self):
        qs = actions.jobs_for(self.request.user).select_related("workspace")
        ws = self.request.query_params.get("workspace")
        if ws:
            kind, value = workspace_ref(ws)
            qs = qs.filter(**{f"workspace__{kind}": value})
        st = self.request.query_params.get("status")
        if st:
            qs = qs.filter(status__in=[s.strip().capitalize() for s in st.split(",")])
        q = self.request.query_params.get("q")
        if q:
            qs = qs.filter(display_name__icontains=q)
        return qs.order_by("-created_at", "-id")

    def get_job(self):
        return actions.job_for(self.request.user, self.kwargs["pk"])

    @extend_schema(
        parameters=[
            OpenApiParameter("workspace", str, description="workspace id (digits) or slug (starts with a letter)"),
            OpenApiParameter("status", str, description="comma-separated statuses"),
            OpenApiParameter("q", str, description="name contains"),
        ]
    )
    def list(self, request):
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(JobSerializer(page, many=True, context={"request": request}).data)

    @extend_schema(responses=JobDetailSerializer)
    def retrieve(self, request, pk=None):
        return Response(JobDetailSerializer(self.get_job(), context={"request": request}).data)

    @extend_schema(request=JobSubmitSerializer, responses={201: JobDetailSerializer})
    def create(self, request):
        job, token = actions.submit_job(request.user, request.data)
        data = JobDetailSerializer(job, context={"request": request}).data
        data["token"] = token  # shown once; the job's SDK uses it from its environment
        # Whether the launch is queued now or left to the sweep (Redis did not answer).
        data["launch"] = (
            {"queued": True} if job.launch_queued is not False else {"queued": False, "detail": actions.LAUNCH_DEFERRED}
        )
        return Response(data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=JobDetailSerializer)
    @action(detail=True, methods=["post"])
    def stop(self, request, pk=None):
        job = self.get_job()
        actions.stop_job(request.user, job)
        job.refresh_from_db()
        return Response(JobDetailSerializer(job, context={"request": request}).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(responses=AttemptSerializer(many=True))
    @action(detail=True, methods=["get"])
    def attempts(self, request, pk=None):
        job = self.get_job()
        qs = job.attempts.prefetch_related("instances").order_by("number")
        return Response(AttemptSerializer(qs, many=True).data)

    @extend_schema(responses=RestartRecordSerializer(many=True))
    @action(detail=True, methods=["get"])
    def restarts(self, request, pk=None):
        job = self.get_job()
        return Response(RestartRecordSerializer(job.restart_records.order_by("restart_time", "id"), many=True).data)

    @extend_schema(
        parameters=[OpenApiParameter("after", int, description="only events with a larger id")],
        responses=JobEventSerializer(many=True),
    )
    @action(detail=True, methods=["get"])
    def events(self, request, pk=None):
        job = self.get_job()
        qs = job.events.order_by("id")
        after = query_int(request.query_params, "after")
        if after is not None:
            qs = qs.filter(pk__gt=after)
        types = request.query_params.get("type")
        if types:
            qs = qs.filter(type__in=types.split(","))
        return Response(JobEventSerializer(qs[:5000], many=True).data)

    @extend_schema(responses=DiagnosisSerializer(many=True))
    @action(detail=True, methods=["get"])
    def diagnoses(self, request, pk=None):
        job = self.get_job()
        return Response(DiagnosisSerializer(job.diagnoses.all()[:200], many=True).data)

    @extend_schema(responses={200: dict})
    @action(detail=True, methods=["get"])
    def goodput(self, request, pk=None):
        """Where the job's time went: detection, teardown, scheduling, start-up, first
        progress per attempt, and the effective training time ratio (ETTR)."""
        return Response(job_goodput(self.get_job()).to_dict())

    @extend_schema(
        parameters=[
            OpenApiParameter("instance", str, description="e.g. worker-0", required=True),
            OpenApiParameter("attempt", int, description="default: the current attempt"),
            OpenApiParameter("tail", int, description="last N bytes"),
            OpenApiParameter("offset", int, description="from this byte offset"),
            OpenApiParameter("download", bool, description="stream the whole log as a file"),
        ]
    )
    @action(detail=True, methods=["get"])
    def logs(self, request, pk=None):
        job = self.get_job()
        name = request.query_params.get("instance", "")
        number = query_int(request.query_params, "attempt", default=job.current_attempt, minimum=1)
        attempt = job.attempts.filter(number=number).first()
        if attempt is None:
            raise exceptions.NotFound(f"attempt {number} not found; this job has attempts 1 to {job.current_attempt}.")
        known = list(attempt.instances.values_list("name", flat=True))
        if name not in known:
            raise exceptions.ValidationError(
                {
                    "instance": [
                        f"{name!r} is not an instance of attempt {attempt.number}; accepted: {', '.join(known) or 'none yet'}."
                    ]
                }
            )
        backend = actions.get_backend_for(job)
        handle = attempt.backend_handle
        if not handle:
            return Response({"instance": name, "attempt": attempt.number, "offset": 0, "next_offset": 0, "content": ""})
        log = InstanceLog(backend, handle, name)
        if request.query_params.get("download") in ("1", "true", "True") and log.path:
            return FileResponse(
                open(log.path, "rb"),
                as_attachment=True,
                filename=f"job{job.pk}-attempt{attempt.number}-{name}.log",
                content_type="text/plain",
            )
        try:
            if request.query_params.get("tail"):
                nbytes = min(parse_int(request.query_params["tail"], "tail", minimum=1), MAX_LOG_BYTES)
                data = log.tail(nbytes)
                size = log.size()
                offset = (len(data) if size is None else size) - len(data)
            else:
                offset = query_int(request.query_params, "offset", default=0)
                size = log.size()
                if size is not None and offset > size:
                    raise exceptions.ValidationError(
                        {"offset": [f"{offset} is past the end of the log ({size} bytes); use 0 to {size}."]}
                    )
                data = log.read(offset, MAX_LOG_BYTES)
        except BackendError as exc:
            raise exceptions.APIException(f"the backend could not read the log: {exc.message}") from None
        return Response(
            {
                "instance": name,
                "attempt": attempt.number,
                "offset": offset,
                "next_offset": offset + len(data),
                "content": data.decode("utf-8", errors="replace"),
            }
        )

    @extend_schema(request=None, responses={200: dict})
    @action(detail=True, methods=["post"], url_path="reset-token")
    def reset_token(self, request, pk=None):
        job = self.get_job()
        raw = actions.reset_job_token(request.user, job)
        return Response({"token": raw, "token_hint": raw[:10]})

    @extend_schema(request=RetryableKeywordSerializer, responses={200: dict})
    @action(detail=True, methods=["post"], url_path="retryable-keywords")
    def retryable_keywords(self, request, pk=None):
        """Make a log line retryable for this job or every job of its workspace (owners and
        admins; the job page's form). POST .../retryable-keywords/preview/ first shows what it
        would have changed on past failures."""
        job = self.get_job()
        actions.require_job_action(request.user, job, access.RETRYABLE_KEYWORD)
        given = RetryableKeywordSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        keyword, scope = given.validated_data["keyword"], given.validated_data["scope"]
        added = actions.add_retryable_keyword(request.user, job, keyword, scope)
        return Response({"keyword": keyword, "scope": scope, "added": added})

    @extend_schema(request=RuntimeSerializer, responses=JobDetailSerializer)
    @action(detail=True, methods=["patch", "post"])
    def runtime(self, request, pk=None):
        """Change the hang interval while the job runs (-1 suspends, null restores the flag's)."""
        job = self.get_job()
        actions.require_job_action(request.user, job, access.RECONFIGURE)
        if job.finished:
            raise Conflict(f"job {job.pk} is {job.status}; a finished job's hang interval can no longer change.")
        runtime = RuntimeSerializer(data=request.data)
        runtime.is_valid(raise_exception=True)
        actions.set_hang_interval(job, runtime.validated_data["job_hang_interval"], source=request.user.get_username())
        job.refresh_from_db()
        return Response(JobDetailSerializer(job, context={"request": request}).data)
