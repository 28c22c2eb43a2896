"""The console's page for trying a retryable keyword on past failures before it is kept
(issue 26). Its URL sits among the job's pages, but the view lives here beside the
back-test it runs: the domain (jobs) never imports the monitor."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.views.decorators.http import require_POST

from jobs import access
from jobs.serializers import RetryableKeywordSerializer
from jobs.views import forbidden, job_or_404

from .backtest import keyword_backtest


@login_required
@require_POST
def keyword_preview(request, slug, job_id):
    """What the keyword of the job page's offer would have changed on past failures;
    saves nothing. The offer's own button saves, through the same serializer."""
    workspace, job = job_or_404(request, slug, job_id)
    refusal = access.job_action_refusal(workspace.role_of(request.user), request.user.pk, job, access.RETRYABLE_KEYWORD)
    if refusal:
        return forbidden(request, workspace, refusal)
    given = RetryableKeywordSerializer(data=request.POST)
    context: dict = {
        "workspace": workspace,
        "job": job,
        "keyword": request.POST.get("keyword", "")[:256],
        "scope": request.POST.get("scope", "job"),
        "rights": {"retryable_keyword": True},
    }
    status = 200
    if given.is_valid():
        context["backtest"] = keyword_backtest(job, given.validated_data["keyword"], given.validated_data["scope"])
    else:
        field, messages = next(iter(given.errors.items()))
        context.update(error_field=field, error=f"{field}: {' '.join(str(m) for m in messages)}")
        status = 400
    template = "monitoring/_keyword_backtest.html" if request.htmx else "monitoring/keyword_backtest.html"
    return render(request, template, context, status=status)
