"""What each SDK call does to its job (the bodies are jobs.sdk.serializers, the
caller and its rate jobs.sdk.auth).

Finished jobs (Succeeded, Failed, Stopped) and jobs being stopped:
- once the job has finished its token writes nothing: every endpoint answers
  409 with the job's status, so a token that leaked from a finished job's
  files or environment cannot add events or reports to it;
- while the job is being stopped, messages, progress and C4D reports are still
  accepted (its processes flush as they exit), but retryable keywords and
  config are refused with 409: nothing can use them any more, so accepting
  them would tell the code something untrue.

Every refusal is {"detail": "...", "field": "..."} (error_body, jobs.exceptions).
"""

from __future__ import annotations

import math
from typing import Any, NoReturn, cast

from django.db import transaction
from django.utils import timezone
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import exceptions, serializers, status
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from .. import actions, events
from ..exceptions import BodyTooLarge, Conflict
from ..inputs import BoundedJSONParser
from ..models import PROGRESS_SAMPLES, Attempt, C4DReport, EventLevel, EventType, Job, JobStatus
from .auth import JobTokenAuthentication, OwnJobOnly, SdkJobThrottle, processes_of
from .serializers import (
    SdkC4DSerializer,
    SdkConfigSerializer,
    SdkMessageSerializer,
    SdkProgressSerializer,
    SdkRetryableErrorsSerializer,
    sender_payload,
    sender_source,
)

C4D_RECORDS_KEPT_PER_RANK = 2000
# Raw body caps, checked before parsing: generous for the fields of each call
# even when every character is JSON-escaped, small enough that no call can make
# the console hold much memory.
KIB = 1024


def merge_c4d_records(kept: list[dict], incoming: list[dict], cap: int = C4D_RECORDS_KEPT_PER_RANK) -> list[dict]:
    """The newest window of one rank's records: a later report of a seq replaces the
    earlier one (an open collective is sent again with its exit), ordered by seq,
    at most `cap` of the highest seqs."""
    by_seq = {r["seq"]: r for r in kept if isinstance(r, dict) and "seq" in r}
    for r in incoming:
        by_seq[r["seq"]] = r
    return [by_seq[s] for s in sorted(by_seq)[-cap:]]


class SdkJSONParser(BoundedJSONParser):
    brackets = True  # records[0].op, as the SDK's refusals name fields


class SdkView(APIView):
    authentication_classes = [JobTokenAuthentication]
    permission_classes = [OwnJobOnly]
    throttle_classes = [SdkJobThrottle]
    parser_classes = [SdkJSONParser]
    renderer_classes = [JSONRenderer]
    error_body = "detail_and_field"
    max_body_bytes = 64 * KIB
    # Config-like calls that mean nothing once the job has finished.
    refused_when_finished = False

    @property
    def job(self) -> Job:
        return cast(Job, self.request.auth)  # OwnJobOnly let only a job token through

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)  # authentication, OwnJobOnly, the rate limit
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > self.max_body_bytes:
            raise BodyTooLarge(f"the request body is {length} bytes; at most {self.max_body_bytes} are accepted here.")
        if self.refused_when_finished and (self.job.finished or self.job.status == JobStatus.STOPPING):
            raise Conflict(f"job {self.job.pk} is {self.job.status}; its configuration can no longer change.")
        if self.job.finished:
            raise Conflict(f"job {self.job.pk} is {self.job.status}; a finished job's token no longer writes anything.")

    def throttled(self, request: Request, wait: float | None) -> NoReturn:
        rate = SdkJobThrottle().get_rate()
        n = processes_of(self.job.job_specs)
        seconds = max(1, math.ceil(wait or 0))
        raise exceptions.Throttled(
            wait=seconds,
            detail=f"rate limit: job {self.job.pk} may make {rate} SDK calls per process ({n} "
            f"process{'es' if n != 1 else ''} counted); retry after {seconds} s.",
        )

    def valid(self, serializer_class: type[serializers.Serializer]) -> dict:
        """The body as serializer_class accepts it; a refusal names its field."""
        body = serializer_class(data=self.request.data, context={"job": self.job})
        body.is_valid(raise_exception=True)
        return body.validated_data


_ERROR = inline_serializer(
    "SdkError", {"detail": serializers.CharField(), "field": serializers.CharField(required=False)}
)
ERROR_ANSWERS = {400: _ERROR, 401: _ERROR, 404: _ERROR, 409: _ERROR, 413: _ERROR, 429: _ERROR}


class MessageView(SdkView):
    """send_custom_message(content=...): a custom_message event (notified per event rules)."""

    max_body_bytes = 64 * KIB

    @extend_schema(
        request=SdkMessageSerializer,
        responses={201: inline_serializer("SdkMessageAnswer", {"id": serializers.IntegerField()}), **ERROR_ANSWERS},
    )
    def post(self, request: Request, job_id: str) -> Response:
        body = self.valid(SdkMessageSerializer)
        source = sender_source(body)
        event = actions.record_event(
            self.job,
            EventType.CUSTOM_MESSAGE,
            body["content"],
            level=EventLevel.INFO,
            payload={"source": source, **sender_payload(body)},
            attempt=body.get("attempt") or self.job.current_attempt,
            instance=body.get("instance", ""),
        )
        return Response({"id": event.pk if event else None}, status=status.HTTP_201_CREATED)


class RetryableErrorsView(SdkView):
    """set_retryable_errors([...]): replaces the SDK-set keywords the classifier matches."""

    max_body_bytes = 256 * KIB
    refused_when_finished = True

    @extend_schema(
        request=SdkRetryableErrorsSerializer,
        responses={
            200: inline_serializer(
                "SdkRetryableErrorsAnswer",
                {
                    "keywords": serializers.ListField(child=serializers.CharField()),
                    "changed": serializers.BooleanField(),
                },
            ),
            **ERROR_ANSWERS,
        },
    )
    def post(self, request: Request, job_id: str) -> Response:
        body = self.valid(SdkRetryableErrorsSerializer)
        keywords, source = body["keywords"], sender_source(body)
        with transaction.atomic():
            job = Job.objects.select_for_update().get(pk=self.job.pk)
            changed = job.sdk_retryable_keywords != keywords
            if changed:
                Job.objects.filter(pk=job.pk).update(sdk_retryable_keywords=keywords, updated_at=timezone.now())
                shown = ", ".join(repr(k) for k in keywords[:10]) + (
                    f" and {len(keywords) - 10} more" if len(keywords) > 10 else ""
                )
                text = (
                    f"Retryable error keywords set by {source}: {shown}."
                    if keywords
                    else f"Retryable error keywords cleared by {source}."
                )
                actions.record_event(
                    job,
                    EventType.DECISION,
                    text,
                    attempt=body.get("attempt") or job.current_attempt,
                    instance=body.get("instance", ""),
                    payload={"sdk_retryable_keywords": keywords, "source": source},
                )
        return Response({"keywords": keywords, "changed": changed}, status=status.HTTP_200_OK)


class ConfigView(SdkView):
    """reset_config(job_hang_interval=N) and hang_detect(N): the runtime hang interval."""

    refused_when_finished = True

    @extend_schema(
        request=SdkConfigSerializer,
        responses={
            200: inline_serializer(
                "SdkConfigAnswer",
                {"job_hang_interval": serializers.IntegerField(), "changed": serializers.BooleanField()},
            ),
            **ERROR_ANSWERS,
        },
    )
    def post(self, request: Request, job_id: str) -> Response:
        body = self.valid(SdkConfigSerializer)
        value = body["job_hang_interval"]
        job = self.job
        changed = job.hang_interval_override != value
        if changed:
            # Every rank sends the same value at start; only a change is recorded.
            actions.set_hang_interval(job, value, source=sender_source(body))
        return Response({"job_hang_interval": value, "changed": changed}, status=status.HTTP_200_OK)


class ProgressView(SdkView):
    """report_progress(step, metrics): training progress for the restart-loop breaker and goodput."""

    @extend_schema(
        request=SdkProgressSerializer,
        responses={
            202: inline_serializer(
                "SdkProgressAnswer", {"step": serializers.IntegerField(), "attempt": serializers.IntegerField()}
            ),
            **ERROR_ANSWERS,
        },
    )
    def post(self, request: Request, job_id: str) -> Response:
        body = self.valid(SdkProgressSerializer)
        job = self.job
        number = body.get("attempt") or job.current_attempt
        now = timezone.now()
        attempts = Attempt.objects.filter(job=job, number=number)
        if attempts.filter(first_progress_at__isnull=True).update(first_progress_at=now):
            actions.wake_monitor(job.pk)  # the start-up interval ended: the hang deadline moved
        attempts.filter(made_progress=False).update(made_progress=True)
        with transaction.atomic():
            attempt = attempts.select_for_update().first()
            samples = list(attempt.progress_samples or []) if attempt is not None else []
            if attempt is not None and (not samples or body["step"] > samples[-1][1]):
                # [t, step], with the loss and the total (step N of M) when reported: the
                # job page draws its loss chart and "step N of M" from these.
                metrics = body.get("metrics") or {}
                sample = [now.timestamp(), body["step"]]
                if "loss" in metrics or "total_steps" in metrics:
                    sample.append(metrics.get("loss"))
                if "total_steps" in metrics:
                    sample.append(int(metrics["total_steps"]))
                samples.append(sample)
                attempt.progress_samples = samples[-PROGRESS_SAMPLES:]
                attempt.save(update_fields=["progress_samples"])
                events.announce_progress_on_commit(job.pk, job.workspace_id, number, body["step"])
        if number == job.current_attempt:
            Job.objects.filter(pk=job.pk).update(last_progress_at=now, last_progress_step=body["step"])
        return Response({"step": body["step"], "attempt": number}, status=status.HTTP_202_ACCEPTED)


class C4DView(SdkView):
    """One rank's collective records (C4D input), kept per (job, attempt, rank)."""

    max_body_bytes = 2 * KIB * KIB

    @extend_schema(
        request=SdkC4DSerializer,
        responses={
            202: inline_serializer(
                "SdkC4DAnswer",
                {
                    "rank": serializers.IntegerField(),
                    "attempt": serializers.IntegerField(),
                    "kept": serializers.IntegerField(),
                },
            ),
            **ERROR_ANSWERS,
        },
    )
    def post(self, request: Request, job_id: str) -> Response:
        batch = self.valid(SdkC4DSerializer)
        attempt = batch.get("attempt") or self.job.current_attempt
        with transaction.atomic():
            report, _ = C4DReport.objects.get_or_create(job=self.job, attempt=attempt, rank=batch["rank"])
            report = C4DReport.objects.select_for_update().get(pk=report.pk)
            report.records = merge_c4d_records(report.records or [], batch["records"])
            report.updated_at = timezone.now()
            report.save(update_fields=["records", "updated_at"])
        return Response(
            {"rank": batch["rank"], "attempt": attempt, "kept": len(report.records)}, status=status.HTTP_202_ACCEPTED
        )
