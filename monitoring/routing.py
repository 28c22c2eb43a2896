"""WebSocket routes of the live pages (console.routing picks them up)."""

from django.urls import path

from .consumers import JobConsumer, WorkspaceConsumer

websocket_urlpatterns = [
    path("ws/jobs/<int:job_id>/", JobConsumer.as_asgi()),
    path("ws/workspaces/<slug:slug>/", WorkspaceConsumer.as_asgi()),
]
