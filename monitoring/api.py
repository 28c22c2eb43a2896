"""REST API of the monitor's diagnoses: take a stack snapshot of a job now.

Its URL sits among the job's own (`/api/v1/jobs/{id}/diagnoses/stacks/`), but the
view lives here, beside the diagnosis it runs: the domain (jobs) never imports
the monitor. console.urls mounts monitoring.api_urls under /api/v1/ beside
jobs.urls."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from jobs import access, actions
from jobs.models import DiagnosisTrigger, Job
from jobs.serializers import DiagnosisSerializer, RetryableKeywordSerializer

from .backtest import keyword_backtest
from .diagnose import snapshot_stacks


class JobDiagnosisViewSet(viewsets.GenericViewSet):
    serializer_class = DiagnosisSerializer
    queryset = Job.objects.none()  # for the schema (the job id parameter); the view scopes by membership

    @extend_schema(request=None, responses={201: DiagnosisSerializer})
    @action(detail=True, methods=["post"], url_path="diagnoses/stacks")
    def snapshot_stacks(self, request, pk=None):
        """Take a stack snapshot of the current attempt now (py-spy on every instance)."""
        # NotFound and Forbidden become 404 and 403 in jobs.exceptions (the EXCEPTION_HANDLER).
        job = actions.job_for(request.user, pk)
        actions.require_job_action(request.user, job, access.SNAPSHOT)
        attempt = job.attempts.filter(number=job.current_attempt).first()
        if attempt is None or not attempt.backend_handle or job.finished:
            raise exceptions.ValidationError({"job": ["has no running attempt to take stacks of."]})
        diagnosis = snapshot_stacks(job, attempt, trigger=DiagnosisTrigger.ON_DEMAND)
        return Response(DiagnosisSerializer(diagnosis).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=RetryableKeywordSerializer, responses={200: dict})
    @action(detail=True, methods=["post"], url_path="retryable-keywords/preview")
    def retryable_keywords_preview(self, request, pk=None):
        """What a retryable keyword would have changed on past failures (the job's, or the
        workspace's for scope "workspace"), validated as POST .../retryable-keywords/ is;
        saves nothing (issue 26)."""
        job = actions.job_for(request.user, pk)
        actions.require_job_action(request.user, job, access.RETRYABLE_KEYWORD)
        given = RetryableKeywordSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        return Response(keyword_backtest(job, given.validated_data["keyword"], given.validated_data["scope"]))
