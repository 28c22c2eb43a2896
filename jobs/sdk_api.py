"""The console side of the SDK contract (docs/spec.md, section 8, "SDK and console"):
POST /api/v1/sdk/jobs/<job_id>/{messages,retryable-errors,config,progress,c4d}/.

Who may call: the job's own code, with its per-job token (`Authorization: Bearer
vjt_...`). No session and no personal tokens. A token reaches only its own job:
on another job's endpoints it gets 404; a token that was reset is refused (401)
at once, since only the new digest is stored.

What protects the console: every body is a JSON object of bounded size; a
message is at most 4,096 characters; at most 100 keywords of at most 256
characters; at most 5,000 C4D records per call, of which the newest 2,000 per
rank are kept; and a rate limit per job (throttle scope "sdk", settings
DEFAULT_THROTTLE_RATES, 429 with Retry-After) counted over all the job's
processes together; the settings rate is per process, so a 64-rank job gets 64
times as many calls. Every refusal is {"detail": "...", "field": "..."} naming
the field and what is accepted.

Finished jobs (Succeeded, Failed, Stopped) and jobs being stopped:
- once the job has finished its token writes nothing: every endpoint answers
  409 with the job's status, so a token that leaked from a finished job's
  files or environment cannot add events or reports to it;
- while the job is being stopped, messages, progress and C4D reports are still
  accepted (its processes flush as they exit), but retryable keywords and
  config are refused with 409: nothing can use them any more, so accepting
  them would tell the code something untrue.

Calls may name who sends them with optional "rank", "instance" and "attempt"
fields; the events then say so (e.g. source "SDK (rank 3)"). Progress metrics
are checked (names to finite numbers) but not kept: nothing reads them yet.
"""

from __future__ import annotations

import hmac
import math
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import exceptions, permissions, serializers, status
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle
from rest_framework.views import APIView

from . import actions
from .inputs import BoundedJSONParser, UnacceptableJSON, text_problem
from .models import (
    Attempt,
    C4DReport,
    EventLevel,
    EventType,
    Job,
    JobStatus,
    token_digest,
)
from .submission import SubmissionError

MAX_MESSAGE_CHARS = 4096
MAX_KEYWORDS = 100
MAX_KEYWORD_CHARS = 256
MAX_METRICS = 100
MAX_METRIC_NAME_CHARS = 128
MAX_INSTANCE_CHARS = 64
MAX_RANK = 1 << 20
MAX_STEP = (1 << 63) - 1
MAX_C4D_RECORDS_PER_CALL = 5000  # the SDK's own batch size
C4D_RECORDS_KEPT_PER_RANK = 2000
# Raw body caps, checked before parsing: generous for the fields above even
# when every character is JSON-escaped, small enough that no call can make
# the console hold much memory.
KIB = 1024


# --- the pure core: checking what the SDK sent --------------------------------------


class SdkRefusal(Exception):
    """A call the console will not take: HTTP status, what is wrong, which field."""

    def __init__(self, detail: str, field: str | None = None, status_code: int = 400):
        super().__init__(detail)
        self.detail = detail
        self.field = field
        self.status_code = status_code

    def body(self) -> dict:
        return {"detail": self.detail, **({"field": self.field} if self.field else {})}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _storable(text: str, field: str) -> str:
    """PostgreSQL stores neither NUL characters nor lone UTF-16 surrogates (both valid in JSON)."""
    problem = text_problem(text)
    if problem:
        raise SdkRefusal(f"{field} {problem}", field)
    return text


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class Sender:
    """Who in the job made the call, as far as it said."""

    rank: int | None = None
    instance: str = ""
    attempt: int | None = None

    def source(self) -> str:
        if self.rank is not None:
            return f"SDK (rank {self.rank})"
        if self.instance:
            return f"SDK ({self.instance})"
        return "SDK"

    def payload(self) -> dict:
        out: dict = {}
        if self.rank is not None:
            out["rank"] = self.rank
        if self.instance:
            out["instance"] = self.instance
        return out


def check_object(body: Any) -> dict:
    if not isinstance(body, dict):
        raise SdkRefusal(f"the request body must be a JSON object; got {type(body).__name__}.", "body")
    return body


def check_sender(body: dict, current_attempt: int) -> Sender:
    rank = body.get("rank")
    if rank is not None and (not _is_int(rank) or not 0 <= rank <= MAX_RANK):
        raise SdkRefusal(f"rank must be a whole number from 0 to {MAX_RANK}; got {rank!r}.", "rank")
    instance = body.get("instance", "")
    if instance is None:
        instance = ""
    if not isinstance(instance, str) or len(instance) > MAX_INSTANCE_CHARS:
        raise SdkRefusal(f"instance must be a name of at most {MAX_INSTANCE_CHARS} characters, e.g. \"worker-0\".",
                         "instance")
    _storable(instance, "instance")
    attempt = body.get("attempt")
    if attempt is not None:
        if not _is_int(attempt) or attempt < 0:
            raise SdkRefusal(f"attempt must be a whole number >= 1 (VIGIL_ATTEMPT); got {attempt!r}.", "attempt")
        if attempt > current_attempt:
            raise SdkRefusal(f"attempt {attempt} has not started; the job is on attempt {current_attempt}.",
                             "attempt")
        if attempt == 0:
            attempt = None  # the SDK's "not known"
    return Sender(rank=rank, instance=instance, attempt=attempt)


def check_message(body: dict) -> str:
    content = body.get("content")
    if not isinstance(content, str):
        raise SdkRefusal(f"content is required: a string of at most {MAX_MESSAGE_CHARS} characters.", "content")
    if not content.strip():
        raise SdkRefusal("content is empty; send the text people should read.", "content")
    if len(content) > MAX_MESSAGE_CHARS:
        raise SdkRefusal(f"content is {len(content)} characters; at most {MAX_MESSAGE_CHARS} are accepted.",
                         "content")
    return _storable(content, "content")


def check_keywords(body: dict) -> list[str]:
    keywords = body.get("keywords")
    if not isinstance(keywords, list):
        raise SdkRefusal("keywords is required: a list of strings, e.g. [\"connect timeout\"] "
                         "([] clears the list).", "keywords")
    if len(keywords) > MAX_KEYWORDS:
        raise SdkRefusal(f"{len(keywords)} keywords given; at most {MAX_KEYWORDS} are accepted.", "keywords")
    seen: list[str] = []
    for i, keyword in enumerate(keywords):
        if not isinstance(keyword, str) or not keyword.strip():
            raise SdkRefusal(f"keywords[{i}] must be a non-empty string; got {keyword!r}.", f"keywords[{i}]")
        if len(keyword) > MAX_KEYWORD_CHARS:
            raise SdkRefusal(f"keywords[{i}] is {len(keyword)} characters; at most {MAX_KEYWORD_CHARS} are "
                             "accepted.", f"keywords[{i}]")
        _storable(keyword, f"keywords[{i}]")
        if keyword not in seen:
            seen.append(keyword)
    return seen


RUNTIME_PARAMETERS = ("job_hang_interval",)
SENDER_FIELDS = ("rank", "instance", "attempt")


def check_config(body: dict) -> int:
    unknown = sorted(k for k in body if k not in RUNTIME_PARAMETERS + SENDER_FIELDS)
    if unknown:
        raise SdkRefusal(f"unknown parameter {unknown[0]!r}; accepted: {', '.join(RUNTIME_PARAMETERS)}.",
                         unknown[0])
    if "job_hang_interval" not in body:
        raise SdkRefusal("job_hang_interval is required: seconds > 0, or -1 to suspend hang detection.",
                         "job_hang_interval")
    value = body["job_hang_interval"]
    err = actions.hang_interval_error(value) if value is not None else "may not be null here."
    if err:
        raise SdkRefusal(f"job_hang_interval {err}", "job_hang_interval")
    return value


@dataclass(frozen=True)
class Progress:
    step: int
    metrics: dict


def check_progress(body: dict) -> Progress:
    step = body.get("step")
    if not _is_int(step) or not 0 <= step <= MAX_STEP:
        raise SdkRefusal(f"step is required: a whole number >= 0; got {step!r}.", "step")
    metrics = body.get("metrics", {})
    if metrics is None:
        metrics = {}
    if not isinstance(metrics, dict):
        raise SdkRefusal("metrics must be an object of name to number, e.g. {\"loss\": 0.31}.", "metrics")
    if len(metrics) > MAX_METRICS:
        raise SdkRefusal(f"{len(metrics)} metrics given; at most {MAX_METRICS} are accepted.", "metrics")
    for name, value in metrics.items():
        if not name or len(name) > MAX_METRIC_NAME_CHARS:
            raise SdkRefusal(f"metric names are 1 to {MAX_METRIC_NAME_CHARS} characters; got {name[:40]!r}.",
                             "metrics")
        if not _is_number(value):
            raise SdkRefusal(f"metric {name!r} must be a finite number; got {value!r}.", f"metrics.{name}")
    return Progress(step=step, metrics=metrics)


@dataclass(frozen=True)
class C4DBatch:
    rank: int
    attempt: int | None
    records: list[dict]


def check_c4d(body: dict, current_attempt: int) -> C4DBatch:
    from core.c4d import CollectiveRecord  # the consumer's own parser, so stored records always parse

    rank = body.get("rank")
    if not _is_int(rank) or not 0 <= rank <= MAX_RANK:
        raise SdkRefusal(f"rank is required: a whole number from 0 to {MAX_RANK}; got {rank!r}.", "rank")
    sender = check_sender({"attempt": body.get("attempt")}, current_attempt)
    records = body.get("records")
    if not isinstance(records, list):
        raise SdkRefusal("records is required: a list of {\"seq\", \"op\", \"enter\", \"exit\"}.", "records")
    if len(records) > MAX_C4D_RECORDS_PER_CALL:
        raise SdkRefusal(f"{len(records)} records given; at most {MAX_C4D_RECORDS_PER_CALL} are accepted per call.",
                         "records")
    parsed = []
    for i, raw in enumerate(records):
        try:
            rec = CollectiveRecord.from_dict(raw)
        except ValueError as exc:
            name = str(exc).split(":", 1)[0]
            field = f"records[{i}].{name}" if name in ("seq", "op", "enter", "exit") else f"records[{i}]"
            raise SdkRefusal(f"records[{i}]: {exc}", field) from None
        if not math.isfinite(rec.enter) or (rec.exit is not None and not math.isfinite(rec.exit)):
            raise SdkRefusal(f"records[{i}]: enter and exit must be finite epoch seconds.", f"records[{i}]")
        _storable(rec.op, f"records[{i}].op")
        parsed.append(rec.to_dict())
    return C4DBatch(rank=rank, attempt=sender.attempt, records=parsed)


def processes_of(job_specs: list) -> int:
    """How many processes of a job may call: one per instance, or one per GPU when an
    instance has several (torchrun starts a rank per GPU). At least 1, at most 4096."""
    total = 0
    for spec in job_specs or []:
        try:
            pods = int(spec.get("pod_count", 1))
            gpus = int((spec.get("resource_config") or {}).get("gpu") or 0)
        except (TypeError, ValueError, AttributeError):
            pods, gpus = 1, 0
        total += max(pods, 0) * max(gpus, 1)
    return min(max(total, 1), 4096)


def merge_c4d_records(kept: list[dict], incoming: list[dict], cap: int = C4D_RECORDS_KEPT_PER_RANK) -> list[dict]:
    """The newest window of one rank's records: a later report of a seq replaces the
    earlier one (an open collective is sent again with its exit), ordered by seq,
    at most `cap` of the highest seqs."""
    by_seq = {r["seq"]: r for r in kept if isinstance(r, dict) and "seq" in r}
    for r in incoming:
        by_seq[r["seq"]] = r
    return [by_seq[s] for s in sorted(by_seq)[-cap:]]


# --- the shell: authentication, limits, views ---------------------------------------


@dataclass(frozen=True)
class JobCaller:
    """request.user for SDK calls: the code of one job, not a person."""

    job_id: int
    is_authenticated: bool = True
    is_anonymous: bool = False
    is_active: bool = True
    is_staff: bool = False
    is_superuser: bool = False

    def get_username(self) -> str:
        return f"job {self.job_id}"

    def __str__(self) -> str:
        return self.get_username()


class JobTokenAuthentication(BaseAuthentication):
    """`Authorization: Bearer vjt_...`: the per-job token the backend gives every instance."""

    keyword = "Bearer"

    def authenticate(self, request):
        header = get_authorization_header(request).split()
        if not header:
            return None
        if header[0].lower() != self.keyword.lower().encode() or len(header) != 2:
            raise exceptions.AuthenticationFailed("Authorization must be 'Bearer <job token>' (VIGIL_JOB_TOKEN).")
        raw = header[1].decode(errors="replace")
        if not raw.startswith(Job.TOKEN_PREFIX) or len(raw) <= len(Job.TOKEN_PREFIX):
            raise exceptions.AuthenticationFailed(
                f"SDK endpoints take the job's own token ({Job.TOKEN_PREFIX}..., VIGIL_JOB_TOKEN), "
                "not a personal API token.")
        digest = token_digest(raw)
        job = Job.objects.filter(token_digest=digest).first()
        if job is None or not hmac.compare_digest(job.token_digest.encode(), digest.encode()):
            raise exceptions.AuthenticationFailed(
                "Invalid job token: it was reset or never existed. A restarted instance receives the current one.")
        return JobCaller(job.pk), job

    def authenticate_header(self, request):
        return self.keyword


class JobTokenScheme(OpenApiAuthenticationExtension):
    target_class = JobTokenAuthentication
    name = "jobToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer",
                "description": "The job's own token (vjt_...), given to its instances as VIGIL_JOB_TOKEN."}


class OwnJobOnly(permissions.BasePermission):
    """A job token reaches its own job's endpoints; any other job is simply not there."""

    def has_permission(self, request, view):
        job = request.auth
        if not isinstance(job, Job):
            return False
        if str(job.pk) != str(view.kwargs.get("job_id")):
            raise exceptions.NotFound(
                f"job {view.kwargs.get('job_id')!r} not found for this token; a job token reaches only its own job.")
        return True


class SdkJobThrottle(SimpleRateThrottle):
    """Calls per job, all its processes together, scope "sdk". The settings rate is
    per process (see processes_of): every rank sends progress and C4D flushes about
    once a second each, so a fixed rate per job would starve a large job's config
    and messages."""

    scope = "sdk"

    def get_rate(self):
        # Read at call time so that changing settings (tests, reload) takes effect.
        rates = api_settings.DEFAULT_THROTTLE_RATES or {}
        if self.scope not in rates:
            from django.core.exceptions import ImproperlyConfigured

            raise ImproperlyConfigured('REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["sdk"] is not set, e.g. "20/s".')
        return rates[self.scope]

    def get_cache_key(self, request, view):
        job = request.auth
        if not isinstance(job, Job):
            return None
        return self.cache_format % {"scope": self.scope, "ident": f"job-{job.pk}"}

    def allow_request(self, request, view):
        if isinstance(request.auth, Job):
            self.num_requests *= processes_of(request.auth.job_specs)
        return super().allow_request(request, view)


class SdkJSONParser(BoundedJSONParser):
    brackets = True  # records[0].op, as the checks below name fields


class SdkView(APIView):
    authentication_classes = [JobTokenAuthentication]
    permission_classes = [OwnJobOnly]
    throttle_classes = [SdkJobThrottle]
    parser_classes = [SdkJSONParser]
    renderer_classes = [JSONRenderer]
    max_body_bytes = 64 * KIB
    # Config-like calls that mean nothing once the job has finished.
    refused_when_finished = False

    @property
    def job(self) -> Job:
        return self.request.auth

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)  # authentication, OwnJobOnly, the rate limit
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > self.max_body_bytes:
            raise SdkRefusal(f"the request body is {length} bytes; at most {self.max_body_bytes} are accepted here.",
                             "body", status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
        if self.refused_when_finished and (self.job.finished or self.job.status == JobStatus.STOPPING):
            raise SdkRefusal(
                f"job {self.job.pk} is {self.job.status}; its configuration can no longer change.",
                None, status.HTTP_409_CONFLICT)
        if self.job.finished:
            raise SdkRefusal(
                f"job {self.job.pk} is {self.job.status}; a finished job's token no longer writes anything.",
                None, status.HTTP_409_CONFLICT)

    def throttled(self, request, wait):
        rate = SdkJobThrottle().get_rate()
        n = processes_of(self.job.job_specs)
        seconds = max(1, math.ceil(wait or 0))
        raise exceptions.Throttled(
            wait=seconds,
            detail=f"rate limit: job {self.job.pk} may make {rate} SDK calls per process ({n} "
                   f"process{'es' if n != 1 else ''} counted); retry after {seconds} s.")

    def handle_exception(self, exc):
        if isinstance(exc, SdkRefusal):
            return Response(exc.body(), status=exc.status_code)
        if isinstance(exc, UnacceptableJSON):
            return Response(SdkRefusal(f"{exc.field} {exc.message}", exc.field).body(), status=exc.status_code)
        if isinstance(exc, SubmissionError):  # from actions' own checks
            field, errors = next(iter(exc.errors.items()))
            return Response({"detail": f"{field} {'; '.join(map(str, errors))}", "field": field}, status=400)
        return super().handle_exception(exc)

    def body(self) -> dict:
        return check_object(self.request.data)

    def sender(self, body: dict) -> Sender:
        return check_sender(body, self.job.current_attempt)


# OpenAPI only: the views check bodies themselves (SdkRefusal names the field).
SENDER = {
    "rank": serializers.IntegerField(required=False, min_value=0),
    "instance": serializers.CharField(required=False, max_length=MAX_INSTANCE_CHARS),
    "attempt": serializers.IntegerField(required=False, min_value=0),
}
_ERROR = inline_serializer("SdkError", {"detail": serializers.CharField(), "field": serializers.CharField(required=False)})
ERROR_ANSWERS = {400: _ERROR, 401: _ERROR, 404: _ERROR, 409: _ERROR, 413: _ERROR, 429: _ERROR}


class MessageView(SdkView):
    """send_custom_message(content=...): a custom_message event (notified per event rules)."""

    max_body_bytes = 64 * KIB

    @extend_schema(
        request=inline_serializer("SdkMessage", {"content": serializers.CharField(max_length=MAX_MESSAGE_CHARS), **SENDER}),
        responses={201: inline_serializer("SdkMessageAnswer", {"id": serializers.IntegerField()}), **ERROR_ANSWERS},
    )
    def post(self, request, job_id):
        body = self.body()
        content = check_message(body)
        sender = self.sender(body)
        payload = {"source": sender.source(), **sender.payload()}
        event = actions.record_event(
            self.job, EventType.CUSTOM_MESSAGE, content, level=EventLevel.INFO, payload=payload,
            attempt=sender.attempt or self.job.current_attempt, instance=sender.instance,
        )
        return Response({"id": event.pk}, status=status.HTTP_201_CREATED)


class RetryableErrorsView(SdkView):
    """set_retryable_errors([...]): replaces the SDK-set keywords the classifier matches."""

    max_body_bytes = 256 * KIB
    refused_when_finished = True

    @extend_schema(
        request=inline_serializer("SdkRetryableErrors", {"keywords": serializers.ListField(child=serializers.CharField(max_length=MAX_KEYWORD_CHARS), max_length=MAX_KEYWORDS), **SENDER}),
        responses={200: inline_serializer("SdkRetryableErrorsAnswer", {"keywords": serializers.ListField(child=serializers.CharField()), "changed": serializers.BooleanField()}), **ERROR_ANSWERS},
    )
    def post(self, request, job_id):
        body = self.body()
        keywords = check_keywords(body)
        sender = self.sender(body)
        with transaction.atomic():
            job = Job.objects.select_for_update().get(pk=self.job.pk)
            changed = job.sdk_retryable_keywords != keywords
            if changed:
                Job.objects.filter(pk=job.pk).update(sdk_retryable_keywords=keywords, updated_at=timezone.now())
                shown = ", ".join(repr(k) for k in keywords[:10]) + (f" and {len(keywords) - 10} more"
                                                                     if len(keywords) > 10 else "")
                text = (f"Retryable error keywords set by {sender.source()}: {shown}." if keywords
                        else f"Retryable error keywords cleared by {sender.source()}.")
                actions.record_event(job, EventType.DECISION, text, attempt=sender.attempt or job.current_attempt,
                                     instance=sender.instance,
                                     payload={"sdk_retryable_keywords": keywords, "source": sender.source()})
        return Response({"keywords": keywords, "changed": changed}, status=status.HTTP_200_OK)


class ConfigView(SdkView):
    """reset_config(job_hang_interval=N) and hang_detect(N): the runtime hang interval."""

    refused_when_finished = True

    @extend_schema(
        request=inline_serializer("SdkConfig", {"job_hang_interval": serializers.IntegerField(help_text="seconds > 0, or -1 to suspend"), **SENDER}),
        responses={200: inline_serializer("SdkConfigAnswer", {"job_hang_interval": serializers.IntegerField(), "changed": serializers.BooleanField()}), **ERROR_ANSWERS},
    )
    def post(self, request, job_id):
        body = self.body()
        value = check_config(body)
        sender = self.sender(body)
        job = self.job
        changed = job.hang_interval_override != value
        if changed:
            # Every rank sends the same value at start; only a change is recorded.
            actions.set_hang_interval(job, value, source=sender.source())
        return Response({"job_hang_interval": value, "changed": changed}, status=status.HTTP_200_OK)


class ProgressView(SdkView):
    """report_progress(step, metrics): training progress for the restart-loop breaker and goodput."""

    @extend_schema(
        request=inline_serializer("SdkProgress", {"step": serializers.IntegerField(min_value=0), "metrics": serializers.DictField(child=serializers.FloatField(), required=False), **SENDER}),
        responses={202: inline_serializer("SdkProgressAnswer", {"step": serializers.IntegerField(), "attempt": serializers.IntegerField()}), **ERROR_ANSWERS},
    )
    def post(self, request, job_id):
        body = self.body()
        progress = check_progress(body)
        sender = self.sender(body)
        job = self.job
        number = sender.attempt or job.current_attempt
        now = timezone.now()
        attempts = Attempt.objects.filter(job=job, number=number)
        attempts.filter(first_progress_at__isnull=True).update(first_progress_at=now)
        attempts.filter(made_progress=False).update(made_progress=True)
        if number == job.current_attempt:
            Job.objects.filter(pk=job.pk).update(last_progress_at=now, last_progress_step=progress.step)
        return Response({"step": progress.step, "attempt": number}, status=status.HTTP_202_ACCEPTED)


class C4DView(SdkView):
    """One rank's collective records (C4D input), kept per (job, attempt, rank)."""

    max_body_bytes = 2 * KIB * KIB

    @extend_schema(
        request=inline_serializer("SdkC4D", {"rank": serializers.IntegerField(min_value=0), "attempt": serializers.IntegerField(min_value=0), "records": serializers.ListField(child=serializers.DictField(), max_length=MAX_C4D_RECORDS_PER_CALL, help_text="[{seq, op, enter, exit}]")}),
        responses={202: inline_serializer("SdkC4DAnswer", {"rank": serializers.IntegerField(), "attempt": serializers.IntegerField(), "kept": serializers.IntegerField()}), **ERROR_ANSWERS},
    )
    def post(self, request, job_id):
        batch = check_c4d(self.body(), self.job.current_attempt)
        attempt = batch.attempt or self.job.current_attempt
        with transaction.atomic():
            report, _ = C4DReport.objects.get_or_create(job=self.job, attempt=attempt, rank=batch.rank)
            report = C4DReport.objects.select_for_update().get(pk=report.pk)
            report.records = merge_c4d_records(report.records or [], batch.records)
            report.updated_at = timezone.now()
            report.save(update_fields=["records", "updated_at"])
        return Response({"rank": batch.rank, "attempt": attempt, "kept": len(report.records)},
                        status=status.HTTP_202_ACCEPTED)

