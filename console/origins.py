"""Which browser pages may open the console's WebSockets: the console's own origin
(scheme, host and port) or one named in CSRF_TRUSTED_ORIGINS, nothing else.

Channels' AllowedHostsOriginValidator compares only the Origin's host with
ALLOWED_HOSTS, so a page served from any other port of 127.0.0.1 (which any job
can serve) opened a job's socket with the visitor's session cookie and read its
events and logs (issue 31, finding 2). The rule here is the one Django's CSRF
check applies to form posts, so pages and sockets trust the same origins:
the request's own scheme (honouring SECURE_PROXY_SSL_HEADER behind a proxy) and
Host (validated against ALLOWED_HOSTS; X-Forwarded-Host only with
USE_X_FORWARDED_HOST), or an entry of CSRF_TRUSTED_ORIGINS (``*.`` subdomain
wildcards as Django reads them)."""

from __future__ import annotations

from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.utils.http import is_same_domain


def _headers(scope) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in scope.get("headers", []):
        out.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
    return out


def own_origin(scope) -> str | None:
    """The console's origin as this request reached it, or None for a Host the
    console does not serve."""
    headers = _headers(scope)
    host = headers.get("host", "")
    if settings.USE_X_FORWARDED_HOST and headers.get("x-forwarded-host"):
        host = headers["x-forwarded-host"].split(",")[0].strip()
    domain, _port = split_domain_port(host)
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]  # what Django's get_host allows
    if not domain or not validate_host(domain, allowed):
        return None
    secure = scope.get("scheme") in ("wss", "https")
    if settings.SECURE_PROXY_SSL_HEADER:
        header, value = settings.SECURE_PROXY_SSL_HEADER
        name = header.removeprefix("HTTP_").replace("_", "-").lower()
        if name in headers:
            secure = headers[name].split(",")[0].strip() == value
    return f"{'https' if secure else 'http'}://{host.lower()}"


def trusted(origin: str) -> bool:
    """Whether a page of `origin` is one of the configured CSRF_TRUSTED_ORIGINS."""
    if origin in settings.CSRF_TRUSTED_ORIGINS:
        return True
    parsed = urlsplit(origin)
    for entry in settings.CSRF_TRUSTED_ORIGINS:
        want = urlsplit(entry)
        if "*" in want.netloc and want.scheme == parsed.scheme:
            if is_same_domain(parsed.netloc, want.netloc.replace("*", "", 1)):
                return True
    return False


def origin_allowed(scope) -> bool:
    origin = _headers(scope).get("origin")
    if not origin or origin == "null":
        return False  # browsers always send one; a missing or opaque origin is not ours
    origin = origin.lower()
    own = own_origin(scope)
    return (own is not None and origin == own) or trusted(origin)


class SameOriginValidator:
    """ASGI middleware: a WebSocket handshake from another origin is refused
    (closed before the consumer runs), like Channels' OriginValidator."""

    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket" and not origin_allowed(scope):
            denier = WebsocketDenier()
            return await denier(scope, receive, send)
        return await self.application(scope, receive, send)
