"""The page shell: health check, the root page (your last workspace, or what to
do when you have none) and a workspace's dashboard."""

from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import JsonResponse
from django.shortcuts import redirect, render


def healthz(request):
    with connection.cursor() as cur:
        cur.execute("SELECT 1")
    return JsonResponse({"ok": True})


@login_required
def dashboard(request):
    """Open the workspace used last (or the first one); explain when there is none."""
    from jobs.models import Workspace

    mine = Workspace.objects.for_user(request.user).order_by("name")
    last = request.GET.get("ws") or request.session.get("workspace")
    workspace = (mine.filter(slug=last).first() if last else None) or mine.first()
    if workspace is not None:
        return redirect("pages:workspace", slug=workspace.slug)
    return render(request, "console/no_workspace.html", {})


@login_required
def workspace_dashboard(request, slug):
    from jobs.views import can_write, dashboard_context, workspace_or_404

    workspace = workspace_or_404(request, slug)
    context = {"workspace": workspace, "can_write": can_write(request, workspace), **dashboard_context(workspace)}
    template = "console/_dashboard_panels.html" if request.htmx else "console/dashboard.html"
    return render(request, template, context)
