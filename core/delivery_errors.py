"""Readable text for a failed notification delivery.

requests/urllib3 describe a failed connection as a connection-pool repr
("HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded with url:
/hook (Caused by NewConnectionError(...: [Errno 111] Connection refused))"). An
admin reading the delivery log needs the cause and the address, in a sentence:
"connection refused by 127.0.0.1:9". Pure text in, text out, so the same words
come from a fresh failure and from a row stored before this existed."""

from __future__ import annotations

import re

_POOL = re.compile(r"\bHTTPS?ConnectionPool\(host='(?P<host>[^']*)',\s*port=(?P<port>\d+)\)")
# (what urllib3/requests/the OS say, the sentence); first match wins, most specific first
_CAUSES: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"Connection refused", re.I), "connection refused by {where}"),
    (
        re.compile(
            r"Name or service not known|nodename nor servname|Temporary failure in name resolution"
            r"|No address associated with hostname|getaddrinfo failed|NameResolutionError",
            re.I,
        ),
        "could not resolve {host}",
    ),
    (
        re.compile(r"CERTIFICATE_VERIFY_FAILED|certificate verify failed", re.I),
        "{where} presented a TLS certificate that is not trusted",
    ),
    (re.compile(r"SSLError|SSL:|TLS", re.I), "the TLS handshake with {where} failed"),
    (re.compile(r"timed out|ConnectTimeout|ReadTimeout", re.I), "{where} did not answer in time"),
    (re.compile(r"Connection reset", re.I), "connection reset by {where}"),
    (re.compile(r"No route to host|Network is unreachable|Host is unreachable", re.I), "no route to {where}"),
    (
        re.compile(r"RemoteDisconnected|Connection aborted|closed connection without response", re.I),
        "{where} closed the connection without answering",
    ),
    (re.compile(r"too many redirects|ResponseError", re.I), "{where} answered with too many redirects or errors"),
)


def _where(host: str, port: str) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def readable_error(text: str) -> str:
    """`text` with a connection-pool repr replaced by a short sentence naming the
    cause and host:port; text without one comes back unchanged. Whatever came
    before the repr ("could not connect: ") is kept."""
    match = _POOL.search(text or "")
    if match is None:
        return text
    host, port = match.group("host"), match.group("port")
    rest = text[match.end() :]
    sentence = f"could not reach {_where(host, port)}"
    for pattern, words in _CAUSES:
        if pattern.search(rest):
            sentence = words.format(where=_where(host, port), host=host)
            break
    return text[: match.start()] + sentence


def is_failing(recent_statuses: list[str], threshold: int) -> bool:
    """A channel is failing when its `threshold` most recent finished deliveries
    (newest first) all failed: one failure is noise, a run of them is an outage."""
    return len(recent_statuses) >= threshold and all(s == "failed" for s in recent_statuses[:threshold])
