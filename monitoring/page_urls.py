"""Page URLs of the monitor (console.urls includes this module at the root)."""

from django.urls import path

from . import views

app_name = "monitoring"

urlpatterns = [
    path(
        "workspaces/<slug:slug>/jobs/<int:job_id>/retryable-keyword/preview/",
        views.keyword_preview,
        name="keyword-preview",
    ),
]
