"""The client address login throttling counts failures against (console.auth)."""

from django.test import RequestFactory

from console.auth import client_ip


def test_the_peer_address_counts_unless_behind_a_proxy(settings):
    request = RequestFactory().post("/login/", REMOTE_ADDR="203.0.113.9", HTTP_X_FORWARDED_FOR="192.0.2.1, 192.0.2.2")
    settings.SECURE_PROXY_SSL_HEADER = None
    assert client_ip(request) == "203.0.113.9"  # a client's own X-Forwarded-For is not believed
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    assert client_ip(request) == "192.0.2.2"  # the entry the trusted proxy appended
    bare = RequestFactory().post("/login/", REMOTE_ADDR="203.0.113.9")
    assert client_ip(bare) == "203.0.113.9"
