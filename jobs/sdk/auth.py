"""Who may call the SDK endpoints, and how often.

Who: the job's own code, with its per-job token (`Authorization: Bearer
vjt_...`). No session and no personal tokens. A token reaches only its own job:
on another job's endpoints it gets 404; a token that was reset is refused (401)
at once, since only the new digest is stored.

How often: a rate limit per job (throttle scope "sdk", settings
DEFAULT_THROTTLE_RATES, 429 with Retry-After) counted over all the job's
processes together; the settings rate is per process, so a 64-rank job gets 64
times as many calls.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions, permissions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

from ..models import Job, token_digest


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

    def authenticate(self, request: Any) -> tuple[JobCaller, Job] | None:
        header = get_authorization_header(request).split()
        if not header:
            return None
        if header[0].lower() != self.keyword.lower().encode() or len(header) != 2:
            raise exceptions.AuthenticationFailed("Authorization must be 'Bearer <job token>' (VIGIL_JOB_TOKEN).")
        raw = header[1].decode(errors="replace")
        if not raw.startswith(Job.TOKEN_PREFIX) or len(raw) <= len(Job.TOKEN_PREFIX):
            raise exceptions.AuthenticationFailed(
                f"SDK endpoints take the job's own token ({Job.TOKEN_PREFIX}..., VIGIL_JOB_TOKEN), "
                "not a personal API token."
            )
        digest = token_digest(raw)
        job = Job.objects.filter(token_digest=digest).first()
        if job is None or not hmac.compare_digest(job.token_digest.encode(), digest.encode()):
            raise exceptions.AuthenticationFailed(
                "Invalid job token: it was reset or never existed. A restarted instance receives the current one."
            )
        return JobCaller(job.pk), job

    def authenticate_header(self, request: Any) -> str:
        return self.keyword


class JobTokenScheme(OpenApiAuthenticationExtension):
    target_class = JobTokenAuthentication
    name = "jobToken"

    def get_security_definition(self, auto_schema: Any) -> dict:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "The job's own token (vjt_...), given to its instances as VIGIL_JOB_TOKEN.",
        }


class OwnJobOnly(permissions.BasePermission):
    """A job token reaches its own job's endpoints; any other job is simply not there."""

    def has_permission(self, request: Any, view: Any) -> bool:
        job = request.auth
        if not isinstance(job, Job):
            return False
        if str(job.pk) != str(view.kwargs.get("job_id")):
            raise exceptions.NotFound(
                f"job {view.kwargs.get('job_id')!r} not found for this token; a job token reaches only its own job."
            )
        return True


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


class SdkJobThrottle(SimpleRateThrottle):
    """Calls per job, all its processes together, scope "sdk". The settings rate is
    per process (see processes_of): every rank sends progress and C4D flushes about
    once a second each, so a fixed rate per job would starve a large job's config
    and messages."""

    scope = "sdk"

    def get_rate(self) -> str:
        # Read at call time so that changing settings (tests, reload) takes effect.
        rates = api_settings.DEFAULT_THROTTLE_RATES or {}
        if self.scope not in rates:
            raise ImproperlyConfigured('REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["sdk"] is not set, e.g. "20/s".')
        return str(rates[self.scope])

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        job = request.auth
        if not isinstance(job, Job):
            return None
        return self.cache_format % {"scope": self.scope, "ident": f"job-{job.pk}"}

    def allow_request(self, request: Any, view: Any) -> bool:
        if isinstance(request.auth, Job):
            # num_requests is set by SimpleRateThrottle.__init__ (the stubs do not declare it).
            self.num_requests *= processes_of(request.auth.job_specs)  # type: ignore[attr-defined]
        return super().allow_request(request, view)
