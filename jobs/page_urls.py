"""Page URLs of the web console (console.urls includes this module at the root)."""

from django.urls import path

from . import node_views, token_views, views

app_name = "pages"

urlpatterns = [
    path("nodes/", node_views.nodes, name="nodes"),
    path("nodes/<str:backend>/<str:node>/decide/", node_views.node_decide, name="node-decide"),
    path("nodes/<str:backend>/<str:node>/restore/", node_views.node_restore, name="node-restore"),
    path("account/tokens/", token_views.api_tokens, name="api-tokens"),
    path("account/tokens/<int:token_id>/revoke/", token_views.api_token_revoke, name="api-token-revoke"),
    path("jobs/<int:job_id>/", views.job_short_link, name="job-short"),
    path("workspaces/<slug:slug>/", views.workspace_dashboard, name="workspace"),
    path("workspaces/<slug:slug>/reliability/", views.reliability, name="reliability"),
    path("workspaces/<slug:slug>/jobs/", views.job_list, name="job-list"),
    path("workspaces/<slug:slug>/jobs/new/", views.job_new, name="job-new"),
    path("workspaces/<slug:slug>/jobs/new/flags/", views.flags_preview, name="flags-preview"),
    path("workspaces/<slug:slug>/jobs/<int:job_id>/", views.job_detail, name="job-detail"),
    path("workspaces/<slug:slug>/jobs/<int:job_id>/row/", views.job_row, name="job-row"),
    path("workspaces/<slug:slug>/jobs/<int:job_id>/parts/<slug:part>/", views.job_fragment, name="job-part"),
    path("workspaces/<slug:slug>/jobs/<int:job_id>/stop/", views.job_stop, name="job-stop"),
    path("workspaces/<slug:slug>/jobs/<int:job_id>/token/", views.job_token_reset, name="job-token"),
    path(
        "workspaces/<slug:slug>/jobs/<int:job_id>/retryable-keyword/", views.retryable_keyword, name="retryable-keyword"
    ),
    path("workspaces/<slug:slug>/jobs/<int:job_id>/restarts/", views.restart_records, name="restarts"),
    path(
        "workspaces/<slug:slug>/jobs/<int:job_id>/restarts/aggregated/",
        views.restart_aggregate,
        name="restarts-aggregated",
    ),
    path("workspaces/<slug:slug>/jobs/<int:job_id>/diagnoses/<int:diagnosis_id>/", views.diagnosis, name="diagnosis"),
    path("workspaces/<slug:slug>/jobs/<int:job_id>/restarts/<int:record_id>/", views.restart_record, name="restart"),
    path(
        "workspaces/<slug:slug>/jobs/<int:job_id>/attempts/<int:number>/logs/<str:instance>/download/",
        views.log_download,
        name="log-download",
    ),
    path(
        "workspaces/<slug:slug>/jobs/<int:job_id>/attempts/<int:number>/logs/<str:instance>/at/<int:offset>/",
        views.log_line_at,
        name="log-line-at",
    ),
    path(
        "workspaces/<slug:slug>/jobs/<int:job_id>/attempts/<int:number>/logs.zip",
        views.attempt_logs_archive,
        name="attempt-logs",
    ),
]
