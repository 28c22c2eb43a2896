"""Who is logging in from where, for login throttling (django-axes)."""

from django.conf import settings


def client_ip(request) -> str | None:
    """The client's address: the peer, or behind a trusted proxy (VIGIL_BEHIND_PROXY)
    the last X-Forwarded-For entry, the one that proxy appended (entries before it
    are whatever the client sent). Without this every login behind a proxy would
    count against the proxy's own address and lock everyone out together."""
    if settings.SECURE_PROXY_SSL_HEADER:
        forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if part.strip()]
        if forwarded:
            return forwarded[-1]
    return request.META.get("REMOTE_ADDR")
