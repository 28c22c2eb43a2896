"""Routes of the SDK endpoints (jobs.sdk_api); console.urls includes this module at the root."""

from django.urls import path

from . import sdk_api

PREFIX = "api/v1/sdk/jobs/<str:job_id>/"

urlpatterns = [
    path(PREFIX + "messages/", sdk_api.MessageView.as_view(), name="sdk-messages"),
    path(PREFIX + "retryable-errors/", sdk_api.RetryableErrorsView.as_view(), name="sdk-retryable-errors"),
    path(PREFIX + "config/", sdk_api.ConfigView.as_view(), name="sdk-config"),
    path(PREFIX + "progress/", sdk_api.ProgressView.as_view(), name="sdk-progress"),
    path(PREFIX + "c4d/", sdk_api.C4DView.as_view(), name="sdk-c4d"),
]
