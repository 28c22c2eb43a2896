"""WebSocket routes. Apps append their consumers here."""

websocket_urlpatterns: list = []

try:
    from monitoring.routing import websocket_urlpatterns as monitoring_routes
except ImportError:  # the live consumers arrive with the web console
    monitoring_routes = []

websocket_urlpatterns += monitoring_routes
