"""The site shell's own pages: liveness and readiness checks, /metrics, the API docs' access,
the root page (your last workspace, or what to do when you have none) and the 400 page.
(A workspace's dashboard is a page of its app: jobs.views.)"""

import hmac
import ipaddress

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from rest_framework.exceptions import NotAuthenticated
from rest_framework.permissions import BasePermission

from infra.health import as_json, readiness
from jobs.access import may_create_workspace
from jobs.inputs import InputError
from jobs.models import Workspace

from .metrics import render as render_metrics


class ApiDocsAccess(BasePermission):
    """The OpenAPI schema is for people who can log in (a session or an API token),
    unless the deployer publishes it with VIGIL_PUBLIC_API_DOCS=1."""

    message = "the API schema needs a login or an API token (VIGIL_PUBLIC_API_DOCS=1 publishes it)."

    def has_permission(self, request, view):
        if settings.VIGIL_PUBLIC_API_DOCS or (request.user and request.user.is_authenticated):
            return True
        raise NotAuthenticated(self.message)  # DRF would replace the message with its generic one


def api_docs_page(view):
    """The Swagger page: anonymous visitors go to the login page first (unless public)."""

    def page(request, *args, **kwargs):
        if not settings.VIGIL_PUBLIC_API_DOCS and not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        return view(request, *args, **kwargs)

    return page


def healthz(request):
    """Liveness: this process answers HTTP. Cheap on purpose (no database, no Redis):
    restarting the web process would not fix either; /readyz says which part is down."""
    return JsonResponse({"ok": True})


def readyz(request):
    """Readiness: the database, Redis, a fresh Celery worker, the beat's sweeps and the
    exit listener, each with its state and age; 503 when any is not ok."""
    body = as_json(readiness())
    response = JsonResponse(body, status=200 if body["ready"] else 503)
    response["Cache-Control"] = "no-store"
    # The body says what is down; Django's ERROR line per 503 would flood the log
    # at every probe of a load balancer while a part is down.
    response._has_been_logged = True
    return response


def metrics_refusal(request) -> HttpResponse | None:
    """None when the scraper may read /metrics: the bearer token matches
    VIGIL_METRICS_TOKEN, or it connects directly from an address in VIGIL_METRICS_ALLOW.
    A request that came through the reverse proxy (X-Forwarded-For) is never let in
    by address: behind nginx every request comes from 127.0.0.1."""
    header = request.META.get("HTTP_AUTHORIZATION", "")
    token = settings.VIGIL_METRICS_TOKEN
    if header:
        scheme, _, given = header.partition(" ")
        if token and scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode()):
            return None
        return HttpResponse(
            "wrong metrics token (Authorization: Bearer <VIGIL_METRICS_TOKEN>).\n",
            status=403,
            content_type="text/plain",
        )
    if settings.VIGIL_METRICS_ALLOW and "HTTP_X_FORWARDED_FOR" not in request.META:
        try:
            address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
            if any(address in ipaddress.ip_network(net, strict=False) for net in settings.VIGIL_METRICS_ALLOW):
                return None
        except ValueError:
            pass
    response = HttpResponse(
        "metrics need Authorization: Bearer <VIGIL_METRICS_TOKEN> "
        "(or a direct connection from an address in VIGIL_METRICS_ALLOW).\n",
        status=401,
        content_type="text/plain",
    )
    response["WWW-Authenticate"] = 'Bearer realm="vigil-metrics"'
    return response


def metrics(request):
    """Prometheus exposition of every process's counters (see console/metrics.py)."""
    refusal = metrics_refusal(request)
    if refusal is not None:
        return refusal
    try:
        body, content_type = render_metrics()
    except Exception as exc:  # noqa: BLE001 - Redis or the database down: a failed scrape, not a 500 trace
        response = HttpResponse(f"metrics unavailable: {type(exc).__name__}\n", status=503, content_type="text/plain")
        response._has_been_logged = True  # Prometheus shows the failed scrape; no ERROR line per scrape
        return response
    response = HttpResponse(body, content_type=content_type)
    response["Cache-Control"] = "no-store"
    return response


@login_required
def dashboard(request):
    """Open the workspace used last (or the first one); explain when there is none."""
    mine = Workspace.objects.for_user(request.user).order_by("name")
    last = request.GET.get("ws") or request.session.get("workspace")
    workspace = (mine.filter(slug=last).first() if last else None) or mine.first()
    if workspace is not None:
        return redirect("pages:workspace", slug=workspace.slug)
    return render(request, "console/no_workspace.html", {"may_create": may_create_workspace(request.user)})


def bad_request(request, exception=None, template_name="400.html"):
    """handler400: say what was wrong (jobs.inputs.InputError names the field)."""
    message = str(exception) if isinstance(exception, InputError) else ""
    return render(request, template_name, {"message": message}, status=400)
