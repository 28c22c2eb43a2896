"""WebSocket routes: the job and workspace live streams."""

from monitoring.routing import websocket_urlpatterns

__all__ = ["websocket_urlpatterns"]
