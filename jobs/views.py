"""The job pages: list, submission, job page (status, instances, logs, monitor
log, attempt timeline, token), restart records and their aggregation, log
downloads. Thin: every change goes through jobs.actions; every lookup is scoped
to the caller's workspaces, so another workspace's job is 404, never 403."""

from __future__ import annotations

import json
import os
import zipfile
from collections import Counter
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Count, OuterRef, Subquery
from django.http import FileResponse, Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.functional import SimpleLazyObject
from django.views.decorators.http import require_http_methods, require_POST
from rest_framework import serializers as drf_serializers

from core import logtimes
from core import reliability as reliability_core
from core.logindex import INITIAL_TAIL_BYTES, complete_lines, start_offset
from core.reputation import NodeFaultSeen
from core.reputation import standings as reputation_standings

from . import actions
from . import access
from .access import job_rights, permission_name, runnable_backends, sees_secrets
from .backends.base import BackendError
from .goodput import job_goodput
from .forms import BOOL_FIELDS, FieldFlagErrors, JobForm, fault_tolerance_from, ft_warnings, initial_from_job
from .hang_panel import hang_panel
from .quorum_panel import quorum_panel
from .progress_panel import SPARK_H, SPARK_W, list_sparklines, progress_panel
from .inputs import query_int
from .logs import InstanceLog
from .models import (
    WRITE_ROLES,
    Attempt,
    EventType,
    Instance,
    JobEvent,
    JobStatus,
    NodeFault,
    RestartRecord,
)
from .serializers import RetryableKeywordSerializer
from .verdicts import describe

LIST_PAGE_SIZE = 50
STATUS_ORDER = [s.value for s in JobStatus]


# --- lookups ----------------------------------------------------------------------


def workspace_or_404(request, slug):
    try:
        workspace = actions.workspace_by_slug(request.user, slug)
    except actions.NotFound:
        raise Http404("No such workspace among yours.") from None
    request.session["workspace"] = workspace.slug
    return workspace


def job_or_404(request, slug, job_id):
    workspace = workspace_or_404(request, slug)
    try:
        job = actions.job_for(request.user, job_id)
    except actions.NotFound:
        raise Http404("No such job in this workspace.") from None
    if job.workspace_id != workspace.pk:
        raise Http404("No such job in this workspace.")
    return workspace, job


@login_required
def job_short_link(request, job_id):
    """/jobs/<id>/, the link notifications carry: on to the job's page in its workspace."""
    try:
        job = actions.job_for(request.user, job_id)
    except actions.NotFound:
        raise Http404("No such job among your workspaces.") from None
    return redirect("pages:job-detail", slug=job.workspace.slug, job_id=job.pk)


def first_or_404(rows, message: str):
    """The first of `rows` (a query already narrowed to the job), or a 404 saying what is missing."""
    found = rows.first()
    if found is None:
        raise Http404(message)
    return found


def instance_attempt_or_404(job, number: int, instance: str):
    """Attempt `number` of `job`, when it has an instance named `instance`."""
    attempt = first_or_404(Attempt.objects.filter(job=job, number=number), "No such instance in this attempt.")
    if not attempt.instances.filter(name=instance).exists():
        raise Http404("No such instance in this attempt.")
    return attempt


def forbidden(request, workspace, message: str):
    return render(request, "jobs/forbidden.html", {"workspace": workspace, "message": message}, status=403)


def can_write(request, workspace) -> bool:
    return workspace.role_of(request.user) in WRITE_ROLES


def rights_on(request, workspace, job) -> dict[str, bool]:
    """What this person may do to this job (jobs.access.JOB_ACTIONS): the buttons the
    job's templates show, decided where the API and the forms decide."""
    return job_rights(workspace.role_of(request.user), request.user.pk, job)


# --- job list -----------------------------------------------------------------------


def _last_reason():
    return Subquery(RestartRecord.objects.filter(job=OuterRef("pk")).order_by("-id").values("reason")[:1])


def _list_filters(request):
    statuses = []
    for raw in request.GET.getlist("status"):
        for part in raw.split(","):
            part = part.strip().capitalize()
            if part in STATUS_ORDER and part not in statuses:
                statuses.append(part)
    return statuses, (request.GET.get("q") or "").strip()[:128]


@login_required
def job_list(request, slug):
    workspace = workspace_or_404(request, slug)
    statuses, q = _list_filters(request)
    base = workspace.jobs.all()
    if q:
        base = base.filter(display_name__icontains=q)
    counts = dict(base.values_list("status").annotate(n=Count("id")).values_list("status", "n"))
    jobs = base.filter(status__in=statuses) if statuses else base
    jobs = jobs.select_related("created_by").annotate(last_restart_reason=_last_reason()).order_by("-created_at", "-id")
    page = Paginator(jobs, LIST_PAGE_SIZE).get_page(request.GET.get("page"))
    page.object_list = list(page.object_list)
    _with_sparklines(page.object_list)
    context = {
        "workspace": workspace,
        "page": page,
        "jobs": page.object_list,
        "statuses": statuses,
        "q": q,
        "status_counts": [(s, counts.get(s, 0)) for s in STATUS_ORDER],
        "total": workspace.jobs.count() if q else sum(counts.values()),
        "can_write": can_write(request, workspace),
    }
    template = "jobs/_job_table.html" if request.htmx and request.htmx.target == "job-table" else "jobs/job_list.html"
    return render(request, template, context)


def _with_sparklines(jobs) -> None:
    """Each listed job's loss sparkline (job.sparkline, None without two losses), for the page at once."""
    lines = list_sparklines(jobs)
    for job in jobs:
        job.sparkline, job.spark_source = lines.get(job.pk, (None, ""))
        job.spark_w, job.spark_h = SPARK_W, SPARK_H


@login_required
def job_row(request, slug, job_id):
    workspace, job = job_or_404(request, slug, job_id)
    job.last_restart_reason = job.restart_records.order_by("-id").values_list("reason", flat=True).first() or ""
    _with_sparklines([job])
    return render(request, "jobs/_job_row.html", {"workspace": workspace, "job": job})


# --- submission -------------------------------------------------------------------------


@login_required
@require_http_methods(["GET", "POST"])
def job_new(request, slug):
    workspace = workspace_or_404(request, slug)
    if not can_write(request, workspace):
        role = workspace.role_of(request.user)
        return forbidden(
            request,
            workspace,
            f"Your role in {workspace.name} is {role}: you can watch jobs here but "
            "not submit them. Ask an owner or admin for the member role.",
        )
    backends = runnable_backends(request.user)
    if not backends:
        names = ", ".join(permission_name(b) for b in settings.JOB_BACKENDS)
        return forbidden(
            request,
            workspace,
            f"You may not run jobs on any backend of this console: that needs a "
            f"site permission ({names}) that staff grant in the admin or with "
            "`manage.py backendaccess`.",
        )
    status = 200
    clone_of = None
    if request.method == "POST":
        form = JobForm(request.POST, backends=backends)
        form.is_valid()  # the fields and the flag parser
        refused = set(form.errors)
        body = form.request_body(workspace)  # NAME=value lines
        form.check_submission(body, skip=refused)  # the serializer, on what the valid fields make: all at once
        if not form.errors:
            try:
                job, token = actions.submit_job(request.user, body)
            except drf_serializers.ValidationError as exc:  # JobSubmitSerializer's, keyed by field path
                form.add_submission_errors(exc.detail)
            except actions.Forbidden as exc:
                form.add_error("backend", str(exc))
                status = 403
            else:
                request.session[f"new_token_{job.pk}"] = token
                return redirect("pages:job-detail", slug=workspace.slug, job_id=job.pk)
        if status == 200:
            status = 400
    else:
        initial = {}
        if request.GET.get("clone"):
            _, clone_of = job_or_404(request, slug, request.GET["clone"])
            initial = initial_from_job(
                clone_of, show_secrets=sees_secrets(workspace.role_of(request.user), request.user.pk, clone_of)
            )
            if initial.get("backend") not in backends:
                initial.pop("backend", None)
        form = JobForm(initial=initial, backends=backends)
    form.mark_invalid()
    context = {"workspace": workspace, "form": form, "clone_of": clone_of}
    return render(request, "jobs/job_new.html", context, status=status)


@login_required
@require_POST
def flags_preview(request, slug):
    """The flag string the fault-tolerance fields and box combine into (htmx)."""
    workspace_or_404(request, slug)
    form = JobForm()
    raw = {name: request.POST.get(name) for name in request.POST}
    for name in BOOL_FIELDS:
        raw[name] = request.POST.get(name) in ("on", "true", "True", "1")
    try:
        config, named = fault_tolerance_from(raw)
        context = {"flags": config.to_flags(), "named": named, "errors": [], "warnings": ft_warnings(config)}
    except FieldFlagErrors as exc:
        labels = {name: str(form.fields[name].label) for name in form.fields}
        context = {"flags": None, "named": [], "errors": [(labels.get(f, f), m) for f, m in exc.errors]}
    context["enabled"] = bool(request.POST.get("fault_tolerance"))
    return render(request, "jobs/_flags_preview.html", context)


# --- the job page ------------------------------------------------------------------------


def _job_context(request, workspace, job) -> dict:
    attempts = list(job.attempts.order_by("number"))
    current = next((a for a in attempts if a.number == job.current_attempt), attempts[-1] if attempts else None)
    instances = list(current.instances.order_by("rank", "role", "index")) if current else []
    records = list(job.restart_records.order_by("restart_time", "id"))
    events = list(job.events.order_by("-id")[:200])[::-1]
    now = timezone.now()
    return {
        "workspace": workspace,
        "job": job,
        "attempts": attempts,
        "current": current,
        "instances": instances,
        "records": records,
        "events": events,
        "last_event_id": events[-1].pk if events else 0,
        "diagnoses": [_diagnosis_view(d) for d in job.diagnoses.order_by("-created_at", "-id")[:5]],
        "rights": rights_on(request, workspace, job),
        "failure_verdict": _failure_verdict(job),
        "live": not job.finished,
        "now": now,
        # Lazy: it reads log tails, and only the instances part shows it.
        "hang": SimpleLazyObject(lambda: hang_panel(job, current, instances, now)),
        # Lazy too: it asks the backend (processes on this machine), for the instances part only.
        "standby": SimpleLazyObject(lambda: _standby_view(job)),
        # Lazy: without report_progress it reads log tails, for the progress part only.
        "progress": SimpleLazyObject(lambda: progress_panel(job, attempts, records, now)),
        "quorums": quorum_panel(job, current.number if current else None),
    }


def _standby_view(job) -> dict | None:
    """What the warm standby of a job costs now: parked interpreters and their resident memory."""
    try:
        if job.finished or not (job.fault_tolerance and job.ft.enable_warm_restart):
            return None
        parked = actions.get_backend_for(job).standby(str(job.pk))
    except Exception:  # noqa: BLE001 - a page part must render even if the backend cannot say
        return None
    if not parked:
        return None
    rss = [p["rss"] for p in parked if p["rss"] is not None]
    return {
        "count": len(parked),
        "ready": sum(1 for p in parked if p["parked"]),
        "attempt": max(p["attempt"] for p in parked),
        "rss": sum(rss) if rss else None,
    }


def _failure_verdict(job):
    """How sure the verdict that failed the job was, from its job_failed event (None if none)."""
    if job.status != JobStatus.FAILED:
        return None
    payload = job.events.filter(type=EventType.JOB_FAILED).order_by("-id").values_list("payload", flat=True).first()
    if not isinstance(payload, dict) or not payload.get("error_source"):
        return None
    return describe(
        payload["error_source"], payload.get("family", ""), payload.get("evidence", ""), payload.get("error_code", "")
    )


def _diagnosis_view(diagnosis):
    """Stacks with the suspects first, strongest evidence first as the snapshot ranked
    them (core.stacks.find_culprits), C4D verdicts by severity."""
    data = diagnosis.data if isinstance(diagnosis.data, dict) else {}
    diagnosis.stacks = sorted(data.get("stacks") or [], key=lambda s: not s.get("suspect"))
    diagnosis.culprits = data.get("culprits") if isinstance(data.get("culprits"), dict) else {}
    order = {"Error": 0, "Warning": 1, "Info": 2}
    diagnosis.verdicts = sorted(data.get("verdicts") or [], key=lambda v: order.get(v.get("severity"), 3))
    return diagnosis


@login_required
def job_detail(request, slug, job_id):
    workspace, job = job_or_404(request, slug, job_id)
    context = _job_context(request, workspace, job)
    context["new_token"] = request.session.pop(f"new_token_{job.pk}", None)
    context["reset_token"] = request.session.pop(f"reset_token_{job.pk}", None)
    context["log_attempt"] = query_int(request.GET, "attempt", minimum=1)
    context["log_instance"] = request.GET.get("instance", "")
    context["failures_json"] = json.dumps(job_failures(job))
    context["log_urls"] = log_urls(workspace, job)
    context["log_earlier"] = earlier_attempt_logs(job, context["attempts"], context["records"])
    return render(request, "jobs/job_detail.html", context)


EARLIER_ATTEMPTS = 3  # a reloaded log that follows the job starts this many attempts back
EARLIER_INSTANCES = 16  # ... with the first window of at most this many instances' logs each


def earlier_attempt_logs(job, attempts, records) -> dict:
    """Where the followed log of a reloaded page starts in the attempts before the
    current one, {"<attempt>:<instance>": byte offset} (the first window of each log,
    as the socket starts the current attempt), and why each attempt was started,
    {attempt: the whole-job restart's reason}: the page sends the offsets with its
    first subscription, so the earlier attempts' ends come first with their
    "Attempt N — restarted: <reason>" separators, as a page that watched them live."""
    reasons = {r.new_attempt: r.reason for r in records if r.kind == "job" and r.new_attempt and r.reason}
    offsets: dict[str, int] = {}
    earlier = [a for a in attempts if a.number < job.current_attempt and a.backend_handle][-EARLIER_ATTEMPTS:]
    if not earlier:
        return {"offsets": offsets, "reasons": reasons}
    try:
        backend = actions.get_backend_for(job)
    except Exception:  # noqa: BLE001 - a backend gone from settings: the current attempt's log only
        return {"offsets": offsets, "reasons": reasons}
    names: dict[int, list[str]] = {}
    for attempt_id, name in Instance.objects.filter(attempt__in=earlier).values_list("attempt_id", "name"):
        names.setdefault(attempt_id, []).append(name)
    for a in earlier:
        for name in names.get(a.pk, [])[:EARLIER_INSTANCES]:
            log = InstanceLog(backend, a.backend_handle, name)
            try:
                size = log.size()
                head = log.read(max(0, size - INITIAL_TAIL_BYTES), INITIAL_TAIL_BYTES) if size else b""
            except (OSError, BackendError):
                continue
            finally:
                log.close()
            offsets[f"{a.number}:{name}"] = start_offset(size, head) if size else 0
    return {"offsets": offsets, "reasons": reasons}


def log_urls(workspace, job) -> dict[str, dict]:
    """The download URLs the log view offers, reversed here so that the page's script
    never builds one: {"archive": {attempt: zip}, "download": {attempt: {instance: log}}}.
    Attempts that start later bring theirs in the refreshed instances panel."""
    archive: dict[int, str] = {}
    download: dict[int, dict[str, str]] = {}
    for number in job.attempts.values_list("number", flat=True):
        archive[number] = reverse("pages:attempt-logs", args=[workspace.slug, job.pk, number])
    for number, name in Instance.objects.filter(attempt__job=job).values_list("attempt__number", "name"):
        download.setdefault(number, {})[name] = reverse(
            "pages:log-download", args=[workspace.slug, job.pk, number, name]
        )
    return {"archive": archive, "download": download}


def job_failures(job) -> list[dict]:
    """The failures the `e` key can jump to, oldest first: {attempt, instance} of
    each job_failed event (its payload names the instance, not a line). Restart
    records, which carry the classified line's offset, are read from their rows."""
    out = []
    for attempt, payload in (
        job.events.filter(type=EventType.JOB_FAILED).order_by("id").values_list("attempt", "payload")
    ):
        instance = (payload or {}).get("instance") if isinstance(payload, dict) else None
        if attempt and instance:
            out.append({"attempt": attempt, "instance": instance})
    return out


FRAGMENTS = {
    "header": "jobs/_job_header.html",
    "instances": "jobs/_instances.html",
    "timeline": "jobs/_timeline.html",
    "restarts": "jobs/_restart_table.html",
    "diagnoses": "jobs/_diagnoses.html",
    "progress": "jobs/_progress.html",
    "groups": "jobs/_replica_groups.html",
}


@login_required
def job_fragment(request, slug, job_id, part):
    if part not in FRAGMENTS:
        raise Http404("No such part of the job page.")
    workspace, job = job_or_404(request, slug, job_id)
    return render(request, FRAGMENTS[part], _job_context(request, workspace, job))


@login_required
@require_POST
def job_stop(request, slug, job_id):
    workspace, job = job_or_404(request, slug, job_id)
    try:
        actions.stop_job(request.user, job)
    except actions.Forbidden as exc:
        return forbidden(request, workspace, str(exc))
    if request.htmx:
        job.refresh_from_db()
        return render(request, "jobs/_job_header.html", _job_context(request, workspace, job))
    return redirect("pages:job-detail", slug=workspace.slug, job_id=job.pk)


@login_required
@require_POST
def job_token_reset(request, slug, job_id):
    workspace, job = job_or_404(request, slug, job_id)
    try:
        token = actions.reset_job_token(request.user, job)
    except actions.Forbidden as exc:
        return forbidden(request, workspace, str(exc))
    context = {**_job_context(request, workspace, job), "reset_token": token}
    if request.htmx:
        return render(request, "jobs/_token.html", context)
    request.session[f"reset_token_{job.pk}"] = token
    return redirect(reverse("pages:job-detail", kwargs={"slug": workspace.slug, "job_id": job.pk}) + "#token")


# --- retryable keywords from a verdict (issue 13) ---------------------------------------


@login_required
@require_POST
def retryable_keyword(request, slug, job_id):
    """An owner/admin makes a failure's line a retryable keyword for the job or workspace."""
    workspace, job = job_or_404(request, slug, job_id)
    # Refused before the form is read: a person who may not gets no field errors either.
    refusal = access.job_action_refusal(workspace.role_of(request.user), request.user.pk, job, access.RETRYABLE_KEYWORD)
    if refusal:
        return forbidden(request, workspace, refusal)
    form = RetryableKeywordSerializer(data=request.POST)
    if not form.is_valid():
        field, messages = next(iter(form.errors.items()))
        return render(
            request,
            "jobs/_keyword_offer.html",
            {
                "workspace": workspace,
                "job": job,
                "keyword": request.POST.get("keyword", "")[:256],
                "error_field": field,
                "error": f"{field}: {' '.join(str(m) for m in messages)}",
            },
            status=400,
        )
    keyword, scope = form.validated_data["keyword"], form.validated_data["scope"]
    try:
        added = actions.add_retryable_keyword(request.user, job, keyword, scope)
    except actions.Forbidden as exc:
        return forbidden(request, workspace, str(exc))
    context = {"workspace": workspace, "job": job, "keyword": keyword, "added": added, "scope": scope, "done": True}
    if request.htmx:
        return render(request, "jobs/_keyword_offer.html", context)
    return redirect("pages:job-detail", slug=workspace.slug, job_id=job.pk)


# --- restart records -----------------------------------------------------------------------


@login_required
def restart_records(request, slug, job_id):
    workspace, job = job_or_404(request, slug, job_id)
    context = _job_context(request, workspace, job)
    context["open_id"] = query_int(request.GET, "open", minimum=1)
    return render(request, "jobs/restart_records.html", context)


@login_required
def restart_record(request, slug, job_id, record_id):
    workspace, job = job_or_404(request, slug, job_id)
    record = first_or_404(job.restart_records.filter(pk=record_id), "No such restart record for this job.")
    return render(
        request,
        "jobs/restart_record.html",
        {
            "workspace": workspace,
            "job": job,
            "record": record,
            "rights": rights_on(request, workspace, job),
        },
    )


@login_required
def diagnosis(request, slug, job_id, diagnosis_id):
    """One diagnosis (a hang's stack snapshot) on its own page: what a restart record links to."""
    workspace, job = job_or_404(request, slug, job_id)
    found = first_or_404(job.diagnoses.filter(pk=diagnosis_id), "No such diagnosis for this job.")
    return render(
        request,
        "jobs/diagnosis.html",
        {"workspace": workspace, "job": job, "diagnosis": found, "diagnoses": [_diagnosis_view(found)]},
    )


def aggregate_faults(records) -> list[dict]:
    """Restart records grouped by (error code, source, node) with counts, the
    biggest group first."""
    groups: dict[tuple, dict] = {}
    for r in records:
        key = (r.error_code or "unknown", r.error_source or "unknown", r.node_name or "unknown")
        g = groups.setdefault(
            key,
            {
                "error_code": key[0],
                "error_source": key[1],
                "node_name": key[2],
                "count": 0,
                "root_causes": 0,
                "cascades": 0,
                "instances": Counter(),
                "first": r.restart_time,
                "last": r.restart_time,
                "message": r.error_message,
                "records": [],
            },
        )
        g["count"] += 1
        g["root_causes" if r.root_cause else "cascades"] += 1
        g["instances"][r.instance_name or "whole job"] += 1
        g["first"] = min(g["first"], r.restart_time)
        g["last"] = max(g["last"], r.restart_time)
        g["records"].append(r)
    out = sorted(groups.values(), key=lambda g: (-g["count"], g["error_code"]))
    for g in out:
        g["instances"] = ", ".join(f"{name} ×{n}" if n > 1 else name for name, n in g["instances"].most_common())
    return out


@login_required
def restart_aggregate(request, slug, job_id):
    workspace, job = job_or_404(request, slug, job_id)
    records = list(job.restart_records.order_by("restart_time", "id"))
    return render(
        request,
        "jobs/restart_aggregate.html",
        {"workspace": workspace, "job": job, "groups": aggregate_faults(records), "total": len(records)},
    )


# --- logs ----------------------------------------------------------------------------------

CHUNK = 256 * 1024


@login_required
def log_download(request, slug, job_id, number, instance):
    """Stream one instance's whole log from disk (or from the backend in chunks),
    never rendering it."""
    workspace, job = job_or_404(request, slug, job_id)
    attempt = instance_attempt_or_404(job, number, instance)
    filename = f"job{job.pk}-attempt{number}-{instance}.log"
    if not attempt.backend_handle:
        response = HttpResponse(b"", content_type="text/plain; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
        return response
    log = InstanceLog(actions.get_backend_for(job), attempt.backend_handle, instance)
    if request.GET.get("times") == "1" and log.line_times(0, b"") is not None:
        # Each line after its capture time, the time the page's Times column shows.
        def stamped_chunks():
            offset = 0
            while data := log.read_or_empty(offset, CHUNK):
                chunk = complete_lines(data, final=len(data) < CHUNK)
                yield logtimes.stamped(chunk, log.line_times(offset, chunk) or [])
                offset += len(chunk)

        response = StreamingHttpResponse(stamped_chunks(), content_type="text/plain; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{filename.removesuffix(".log")}-times.log"'
        return response
    if log.path and os.path.exists(log.path):
        return FileResponse(
            open(log.path, "rb"), as_attachment=True, filename=filename, content_type="text/plain; charset=utf-8"
        )

    def chunks():
        offset = 0
        while data := log.read_or_empty(offset, CHUNK):
            offset += len(data)
            yield data

    response = StreamingHttpResponse(chunks(), content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def line_permalink(workspace, job, attempt: int, instance: str, line: int | None = None) -> str:
    """?attempt=2&instance=worker-1#L123 on the job page: its log opened at that line."""
    url = reverse("pages:job-detail", kwargs={"slug": workspace.slug, "job_id": job.pk})
    return f"{url}?{urlencode({'attempt': attempt, 'instance': instance})}#" + (f"L{line}" if line else "logs")


@login_required
def log_line_at(request, slug, job_id, number, instance, offset):
    """The permalink of the line holding byte `offset` (a restart record's
    log_offset): counts the newlines before it, streaming, and redirects."""
    workspace, job = job_or_404(request, slug, job_id)
    attempt = instance_attempt_or_404(job, number, instance)
    if not attempt.backend_handle:
        return redirect(line_permalink(workspace, job, number, instance))
    log = InstanceLog(actions.get_backend_for(job), attempt.backend_handle, instance)
    return redirect(line_permalink(workspace, job, number, instance, log.line_at(offset, lenient=True)))


class _ArchivePipe:
    """The file a streamed zip is written into: it keeps only what was written
    since the last take(), so the archive never sits in memory. No seek(): zipfile
    then writes sizes after each member (data descriptors)."""

    def __init__(self):
        self.parts: list[bytes] = []
        self.written = 0

    def write(self, data) -> int:
        self.parts.append(bytes(data))
        self.written += len(data)
        return len(data)

    def tell(self) -> int:
        return self.written

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        data = b"".join(self.parts)
        self.parts = []
        return data


def attempt_archive_chunks(members):
    """A zip of (name, read(offset, limit)) members, produced CHUNK by CHUNK: each
    member is read from its start in CHUNK-sized pieces until its end."""
    pipe = _ArchivePipe()
    # Level 1: logs shrink well even so, and a 1 GB log should not hold a core for long.
    with zipfile.ZipFile(pipe, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for name, read in members:
            offset = 0
            with archive.open(name, "w", force_zip64=True) as member:  # sizes are known only at the end
                while True:
                    data = read(offset, CHUNK)
                    if not data:
                        break
                    offset += len(data)
                    member.write(data)
                    yield pipe.take()
            yield pipe.take()
    yield pipe.take()


@login_required
def attempt_logs_archive(request, slug, job_id, number):
    """Every instance log of one attempt as one zip, streamed from disk (or from
    the backend) a chunk at a time."""
    workspace, job = job_or_404(request, slug, job_id)
    attempt = first_or_404(Attempt.objects.filter(job=job, number=number), "No such attempt of this job.")
    names = list(attempt.instances.order_by("rank", "role", "index").values_list("name", flat=True))
    folder = f"job{job.pk}-attempt{number}"
    members = []
    if attempt.backend_handle:
        backend = actions.get_backend_for(job)
        members = [
            (f"{folder}/{name}.log", InstanceLog(backend, attempt.backend_handle, name).read_or_empty) for name in names
        ]
    else:
        members = [(f"{folder}/{name}.log", lambda offset, limit: b"") for name in names]
    response = StreamingHttpResponse((c for c in attempt_archive_chunks(members) if c), content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="{folder}-logs.zip"'
    return response


# --- a workspace's dashboard ----------------------------------------------------------------


@login_required
def workspace_dashboard(request, slug):
    workspace = workspace_or_404(request, slug)
    context = {"workspace": workspace, "can_write": can_write(request, workspace), **dashboard_context(workspace)}
    template = "console/_dashboard_panels.html" if request.htmx else "console/dashboard.html"
    return render(request, template, context)


def dashboard_context(workspace, now=None) -> dict:
    now = now or timezone.now()
    jobs = workspace.jobs.annotate(last_restart_reason=_last_reason())
    since = now - timedelta(days=1)
    return {
        "running": list(jobs.filter(status=JobStatus.RUNNING).order_by("-created_at")[:20]),
        "restarting": list(jobs.filter(status=JobStatus.RESTARTING).order_by("-created_at")[:20]),
        "failed": list(jobs.filter(status=JobStatus.FAILED, finished_at__gte=since).order_by("-finished_at")[:20]),
        "recent_events": list(
            JobEvent.objects.filter(job__workspace=workspace).select_related("job").order_by("-id")[:25]
        ),
        "live_count": workspace.jobs.filter(status__in=[JobStatus.CREATING, JobStatus.QUEUING]).count(),
    }


# --- a workspace's reliability ----------------------------------------------------------------

RELIABILITY_JOBS = 50  # goodput rows: the most recent jobs active in the period (one ledger each)
CHART_W, CHART_H = 600, 120
PALETTE = 8  # .cause-N colours in vigil.css; a ninth cause reuses the first colour


@login_required
def reliability(request, slug):
    """Restarts over time by cause, by node and by error code; goodput per job; the
    nodes with the most faults. Only this workspace's jobs: nodes are shared, but a
    member sees the faults of their own workspace's jobs, never another's."""
    workspace = workspace_or_404(request, slug)
    period, period_error = reliability_core.parse_period(request.GET.get("period"))
    now = timezone.now()
    span, _ = reliability_core.PERIODS[period]
    since = now - timedelta(seconds=span)
    records = list(
        RestartRecord.objects.filter(job__workspace=workspace, restart_time__gt=since, restart_time__lte=now)
        .select_related("job")
        .order_by("restart_time", "id")
    )
    seen = [
        reliability_core.RestartSeen(r.pk, r.job_id, r.restart_time.timestamp(), r.error_code, r.family, r.node_name)
        for r in records
    ]
    buckets = reliability_core.buckets(seen, now.timestamp(), period)
    causes = [c for c, _ in reliability_core.count_by(seen, "cause")]
    columns = reliability_core.stacked_bars(buckets, causes, CHART_W, CHART_H, palette=PALETTE)
    chart = [
        {"segments": col, "total": b.total, "start": datetime.fromtimestamp(b.start, tz=UTC)}
        for col, b in zip(columns, buckets, strict=True)
    ]
    by_id = {r.pk: r for r in records}
    node_records: dict[str, list] = {}
    for s in seen:
        node_records.setdefault(s.node or reliability_core.UNKNOWN, []).append(by_id[s.record_id])
    faults = [
        NodeFaultSeen(f.node, f.job_id, f.error_code, f.retryable, f.created_at.timestamp())
        for f in NodeFault.objects.filter(job__workspace=workspace, created_at__gt=since)
    ]
    standings = sorted(
        reputation_standings(faults, now.timestamp(), window=span).values(), key=lambda s: (-s.faults_in_window, s.node)
    )
    nodes = [{"standing": s, "records": node_records.get(s.node, [])} for s in standings if s.faults_in_window]
    active = (
        workspace.jobs.filter(created_at__lte=now)
        .exclude(finished_at__lt=since)
        .order_by("-created_at")[:RELIABILITY_JOBS]
    )
    goodput = [{"job": j, "ledger": job_goodput(j, now)} for j in active]
    context = {
        "workspace": workspace,
        "period": period,
        "period_error": period_error,
        "periods": [(k, {"24h": "24 h", "7d": "7 d", "30d": "30 d"}[k]) for k in reliability_core.PERIODS],
        "total": len(seen),
        "chart": chart,
        "chart_w": CHART_W,
        "chart_h": CHART_H,
        "bucket_hours": reliability_core.PERIODS[period][1] == 3600,
        "causes": [(c, n, i % PALETTE) for i, (c, n) in enumerate(reliability_core.count_by(seen, "cause"))],
        "by_node": reliability_core.count_by(seen, "node"),
        "by_code": reliability_core.count_by(seen, "error_code"),
        "nodes": nodes,
        "goodput": goodput,
        "records": records,
    }
    # A refused period still shows the page (for the default period, with the message
    # naming the field), but as a 400 so that a script asking for it is not misled.
    return render(request, "jobs/reliability.html", context, status=400 if period_error else 200)
