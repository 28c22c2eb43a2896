"""Routes of the SDK endpoints (jobs.sdk.views); console.urls includes this module at the root."""

from django.urls import path

from . import views

PREFIX = "api/v1/sdk/jobs/<str:job_id>/"

urlpatterns = [
    path(PREFIX + "messages/", views.MessageView.as_view(), name="sdk-messages"),
    path(PREFIX + "retryable-errors/", views.RetryableErrorsView.as_view(), name="sdk-retryable-errors"),
    path(PREFIX + "config/", views.ConfigView.as_view(), name="sdk-config"),
    path(PREFIX + "progress/", views.ProgressView.as_view(), name="sdk-progress"),
    path(PREFIX + "c4d/", views.C4DView.as_view(), name="sdk-c4d"),
]
