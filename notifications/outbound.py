"""Outbound safety: every connection a notification makes goes through here.

A channel's URL is typed by a workspace admin, so it must not become a way to
reach the console's own network (loopback, private ranges, link-local, the cloud
metadata service...). Three places check: saving a channel, "Send test", and each
delivery attempt, and a redirect is checked hop by hop. Saving needs no DNS answer
(check_url_at_save): an address that resolves is checked, a name that does not yet
is left to the checks of every send, which never connect to an unchecked address.

How the check cannot be dodged:
- Hosts are resolved with getaddrinfo and *every* address is checked, so the odd
  spellings (`2130706433`, `0x7f.1`, `[::ffff:127.0.0.1]`, `a@127.0.0.1`,
  `0.0.0.0`) end up as the address they really mean.
- While `guarded()` is active, urllib3 (and so requests, and apprise's HTTP
  services) connects through `_checked_create_connection`: it resolves once,
  checks what it resolved and connects to exactly those addresses, by IP. A name
  that resolves to a public address at check time and a private one a moment
  later (DNS rebinding) therefore never reaches the private one. TLS SNI and the
  Host header still carry the name, because urllib3 takes those from the URL.
- smtplib (apprise's e-mail) connects the same way while guarded(): SMTP and
  SMTP_SSL open their socket through `_checked_smtp_socket`, so the SMTP server
  is reached at the address that was checked, never by a second lookup of
  smtplib's own; TLS still verifies the name.
- The webhook transport follows redirects itself (at most MAX_REDIRECTS), checking
  each Location before connecting to it.
- Special-purpose ranges are refused like private ones, each named for what it
  is (documentation, benchmarking, IETF protocol assignments, shared address
  space), and so is anything else `ipaddress` does not call global.
- What is stored about a failure never holds the destination's secrets:
  `scrub(text, url)` removes the URL's path, query, credentials (and, for
  service URLs such as slack://TokenA/..., its tokens) from error texts.

Addresses listed in settings.VIGIL_OUTBOUND_ALLOW (IPs or CIDRs) are let
through, except the metadata addresses, which are never allowed.
"""

from __future__ import annotations

import contextvars
import ipaddress
import re
import socket
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import quote, unquote, urljoin, urlsplit

from django.conf import settings

from core.delivery_errors import readable_error

HTTP_SCHEMES = ("http", "https")
MAX_REDIRECTS = 3
MAX_RESPONSE_BYTES = 64 * 1024

# Cloud instance-metadata endpoints: refused even when an allow-list covers them.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean
        "169.254.170.2",  # AWS ECS task metadata
        "fd00:ec2::254",  # AWS IPv6
        "100.100.100.200",  # Alibaba Cloud
        "168.63.129.16",  # Azure wire server
    )
)
# Ranges named by what they are (RFC 6890's special-purpose registries), judged
# before the general "private" and "not global": a documentation address is not
# somebody's private network, and the person reading the refusal should know that.
SPECIAL_PURPOSE = tuple(
    (ipaddress.ip_network(net), label)
    for net, label in (
        ("100.64.0.0/10", "in the shared address space (100.64.0.0/10, carrier-grade NAT)"),
        ("192.0.0.0/24", "an IETF protocol assignment (192.0.0.0/24)"),
        ("192.0.2.0/24", "a documentation address (TEST-NET-1, 192.0.2.0/24)"),
        ("198.51.100.0/24", "a documentation address (TEST-NET-2, 198.51.100.0/24)"),
        ("203.0.113.0/24", "a documentation address (TEST-NET-3, 203.0.113.0/24)"),
        ("2001:db8::/32", "a documentation address (2001:db8::/32)"),
        ("3fff::/20", "a documentation address (3fff::/20)"),
        ("198.18.0.0/15", "a benchmarking address (198.18.0.0/15)"),
        ("2001:2::/48", "a benchmarking address (2001:2::/48)"),
        ("64:ff9b:1::/48", "a local-use NAT64 address (64:ff9b:1::/48)"),
    )
)
NAT64 = ipaddress.ip_network("64:ff9b::/96")


class OutboundError(Exception):
    """A connection could not be made; `permanent` says whether retrying can help."""

    permanent = False


class RefusedDestination(OutboundError):
    """The destination is not one Vigil will connect to (permanent)."""

    permanent = True


class UnresolvableHost(OutboundError):
    """DNS gave no answer; may be temporary."""


# --- the pure part: is this address acceptable? ----------------------------------


def parse_allow_list(entries) -> tuple:
    networks = []
    for entry in entries or ():
        try:
            networks.append(ipaddress.ip_network(str(entry).strip(), strict=False))
        except ValueError:
            raise ValueError(
                f"VIGIL_OUTBOUND_ALLOW: {entry!r} is not an IP address or CIDR (e.g. 127.0.0.1 or 10.0.0.0/8)"
            ) from None
    return tuple(networks)


# The ipaddress properties that refuse an address, with what the refusal calls it.
_KINDS_FIRST = (
    ("is_unspecified", "the unspecified address"),
    ("is_loopback", "a loopback address"),
    ("is_link_local", "a link-local address"),
)
_KINDS_THEN = (
    ("is_multicast", "a multicast address"),
    ("is_reserved", "a reserved address"),
    ("is_private", "a private address"),
)


def refusal_reason(address, allow=()) -> str | None:
    """Why `address` may not be contacted, or None when it may."""
    ip = ipaddress.ip_address(str(address).split("%", 1)[0])
    if ip.version == 6:
        # An IPv4 address wrapped in IPv6 is judged as the IPv4 address it carries.
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is None and ip in NAT64:  # a NAT64 gateway reaches the IPv4 address in the low bits
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None:
            ip = embedded
    if ip in METADATA_ADDRESSES:
        return f"{ip} is a cloud metadata address"
    if any(ip.version == net.version and ip in net for net in allow):
        return None
    # In this order: the special-purpose blocks name themselves better than "private".
    for kind, label in _KINDS_FIRST:
        if getattr(ip, kind):
            return f"{ip} is {label}"
    for net, label in SPECIAL_PURPOSE:
        if ip.version == net.version and ip in net:
            return f"{ip} is {label}"
    for kind, label in _KINDS_THEN:
        if getattr(ip, kind):
            return f"{ip} is {label}"
    if not ip.is_global:
        return f"{ip} is not a public address"
    return None


# --- resolving and checking ------------------------------------------------------


def allowed_networks() -> tuple:
    return parse_allow_list(getattr(settings, "VIGIL_OUTBOUND_ALLOW", ()))


def resolve_checked(host: str, port: int, allow=None) -> list[tuple]:
    """getaddrinfo results for host:port, all of them acceptable; raises
    RefusedDestination naming the first unacceptable address."""
    host = (host or "").strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]  # apprise keeps an IPv6 literal's brackets
    if not host:
        raise RefusedDestination("the URL has no host")
    allow = allowed_networks() if allow is None else allow
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise UnresolvableHost(f"could not resolve {host}: {exc}") from None
    if not infos:
        raise UnresolvableHost(f"could not resolve {host}")
    refusal = first_refusal(host, [info[4][0] for info in infos], allow)
    if refusal:
        raise RefusedDestination(refusal)
    return infos


def first_refusal(host: str, addresses, allow=()) -> str | None:
    """The refusal for the first unacceptable address `host` resolved to: one bad
    address among good ones is enough to refuse (we might connect to any)."""
    for address in addresses:
        reason = refusal_reason(address, allow)
        if reason:
            shown = reason if host == address else f"{host} resolves to {address}; {reason}"
            return f"refused destination: {shown}"
    return None


@dataclass(frozen=True)
class Destination:
    url: str
    scheme: str
    host: str
    port: int


def parse_destination(url: str, schemes=HTTP_SCHEMES) -> Destination:
    """Split a URL into scheme, host and port, refusing other schemes and
    malformed hosts/ports. No network."""
    try:
        parts = urlsplit(str(url).strip())
        port = parts.port
    except ValueError as exc:
        raise RefusedDestination(f"not a valid URL: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in schemes:
        raise RefusedDestination(
            f"the scheme {scheme + '://' if scheme else '(none)'} is not accepted; use one of: "
            + ", ".join(s + "://" for s in schemes)
        )
    host = parts.hostname or ""
    if not host:
        raise RefusedDestination("the URL has no host")
    default_port = 443 if scheme.endswith("s") else 80
    return Destination(url=str(url).strip(), scheme=scheme, host=host, port=port or default_port)


def check_url(url: str, schemes=HTTP_SCHEMES) -> Destination:
    """Scheme, host and every resolved address checked (save-time and pre-send)."""
    dest = parse_destination(url, schemes)
    resolve_checked(dest.host, dest.port)
    return dest


def check_host(host: str, port: int) -> None:
    resolve_checked(host, port)


def check_url_at_save(url: str, schemes=HTTP_SCHEMES) -> Destination:
    """The check when a channel is saved: scheme and host, and every address the
    host resolves to, but a name that does not resolve right now is accepted (a
    receiver whose DNS is not set up yet, or a console without DNS, issue 15): no
    address is trusted because of it, since each send resolves and checks again
    and connects only to what it checked (guarded(), http_request)."""
    dest = parse_destination(url, schemes)
    check_host_at_save(dest.host, dest.port)
    return dest


def check_host_at_save(host: str, port: int) -> None:
    try:
        resolve_checked(host, port)
    except UnresolvableHost:
        try:
            host.strip("[]").encode("idna")
        except UnicodeError:
            raise RefusedDestination(f"{host} is not a valid host name") from None


# --- the connection guard --------------------------------------------------------


@dataclass
class GuardState:
    allow: tuple
    refusals: list = field(default_factory=list)


_guard: contextvars.ContextVar[GuardState | None] = contextvars.ContextVar("vigil_outbound_guard", default=None)
_original_create_connection = None
_original_smtp_get_socket = None


def _connect_checked(state: GuardState, host: str, port: int, connect):
    """Resolve host once, check every address, and connect (with `connect(ip)`)
    to the checked addresses themselves: no second lookup can answer differently."""
    try:
        infos = resolve_checked(host, port, state.allow)
    except RefusedDestination as exc:
        # Not an OSError, so urllib3 does not retry or wrap it; recorded because
        # apprise swallows exceptions and only logs them.
        state.refusals.append(str(exc))
        raise
    except UnresolvableHost as exc:
        raise socket.gaierror(str(exc)) from None
    last_error: OSError = OSError(f"could not connect to {host}")
    for info in infos:
        try:
            return connect(info[4][0])
        except OSError as exc:
            last_error = exc
    raise last_error


def _checked_create_connection(address, *args, **kwargs):
    state = _guard.get()
    if state is None:
        return _original_create_connection(address, *args, **kwargs)
    host, port = address
    return _connect_checked(state, host, port, lambda ip: _original_create_connection((ip, port), *args, **kwargs))


def _checked_smtp_socket(self, host, port, timeout):
    """smtplib.SMTP._get_socket (SMTP_SSL wraps what it returns, verifying `host`)."""
    state = _guard.get()
    if state is None:
        return _original_smtp_get_socket(self, host, port, timeout)
    if timeout is not None and not timeout:
        raise ValueError("Non-blocking socket (timeout=0) is not supported")
    return _connect_checked(
        state, host, port, lambda ip: socket.create_connection((ip, port), timeout, self.source_address)
    )


def _install() -> None:
    global _original_create_connection, _original_smtp_get_socket
    if _original_create_connection is not None:
        return
    import smtplib

    from urllib3 import connection as u3_connection
    from urllib3.util import connection as u3_util_connection

    _original_create_connection = u3_util_connection.create_connection
    # urllib3's HTTPConnection calls `connection.create_connection` through the
    # module, so replacing the module attribute covers every pool. Outside
    # guarded() the wrapper is a plain pass-through.
    u3_util_connection.create_connection = _checked_create_connection
    assert u3_connection.connection is u3_util_connection
    # SMTP_SSL._get_socket calls SMTP's through super(), so this covers both.
    _original_smtp_get_socket = smtplib.SMTP._get_socket  # type: ignore[attr-defined]
    smtplib.SMTP._get_socket = _checked_smtp_socket  # type: ignore[attr-defined]


@contextmanager
def guarded():
    """Inside this block every urllib3 connection is resolved, checked and pinned."""
    _install()
    state = GuardState(allow=allowed_networks())
    token = _guard.set(state)
    try:
        yield state
    finally:
        _guard.reset(token)


# --- the one HTTP function -------------------------------------------------------


@dataclass
class HttpResult:
    status: int
    url: str
    body: bytes
    headers: dict


def http_request(method: str, url: str, *, data: bytes | None = None, headers=None, timeout=10.0) -> HttpResult:
    """Send one request with redirects followed by hand, each hop checked.

    Raises RefusedDestination (permanent) or OutboundError (transient: timeout,
    connection refused, DNS). An HTTP error status is returned, not raised."""
    import requests

    headers = dict(headers or {})
    with guarded(), requests.Session() as session:
        session.trust_env = False  # no proxy from the environment: we connect where we checked
        for hop in range(MAX_REDIRECTS + 1):
            check_url(url)
            try:
                resp = session.request(
                    method, url, data=data, headers=headers, timeout=timeout, allow_redirects=False, stream=True
                )
            except RefusedDestination:
                raise
            except requests.Timeout as exc:
                raise OutboundError(f"timed out after {timeout:g} s ({exc.__class__.__name__})") from None
            except requests.RequestException as exc:
                # The cause in a sentence before any cut: a long URL in urllib3's repr would
                # otherwise push "Connection refused" past the 300 characters kept.
                raise OutboundError(f"could not connect: {_short(readable_error(str(exc)))}") from None
            try:
                body = resp.raw.read(MAX_RESPONSE_BYTES, decode_content=True) or b""
            except Exception:  # noqa: BLE001 - a half-read body does not change the outcome
                body = b""
            finally:
                resp.close()
            location = resp.headers.get("Location")
            if resp.status_code in (301, 302, 303, 307, 308) and location:
                if hop == MAX_REDIRECTS:
                    raise RefusedDestination(f"refused destination: more than {MAX_REDIRECTS} redirects")
                url = urljoin(url, location)
                if resp.status_code == 303 or (resp.status_code in (301, 302) and method.upper() == "POST"):
                    # What browsers and requests do: the redirected request is a GET without body.
                    method, data = "GET", None
                    headers.pop("Content-Type", None)
                continue
            return HttpResult(status=resp.status_code, url=url, body=body, headers=dict(resp.headers))
    raise AssertionError("unreachable")


# --- what may be stored about a failure ------------------------------------------------

_URL_IN_TEXT = re.compile(r"(?i)\b([a-z][a-z0-9+.-]{1,15})://([^\s'\"<>)\]]*)")
_URL_FIELD = re.compile(r"(?i)(\burl[:=]\s*)([^\s'\",<>)]+)")
_SEPARATORS = re.compile(r"[/?#&=@:;,]")
SCRUBBED = "…"


def _public_host(url: str) -> str:
    """The URL's host when it is a DNS name or an IP address (not a service token)."""
    try:
        host = (urlsplit(str(url or "").strip()).hostname or "").lower()
    except ValueError:
        return ""
    return host if "." in host or ":" in host else ""


def secrets_of(url: str) -> list[str]:
    """The parts of a destination URL that may be secret, longest first: its path,
    query, fragment and credentials, each piece of them, and, for a service URL
    whose host is not a DNS name (slack://TokenA/TokenB, tgram://BotToken/ChatID),
    the host too. A webhook URL's path is often its only secret."""
    url = str(url or "").strip()
    scheme, sep, rest = url.partition("://")
    if not sep:
        rest = url
    public_host = _public_host(url)
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    found = {rest[len(authority) :]} if len(rest) > len(authority) else set()
    if "@" in authority:
        found.add(authority.rsplit("@", 1)[0])
    for token in _SEPARATORS.split(rest):
        if (
            len(token) < 4
            or (token.isdigit() and len(token) <= 5)
            or (public_host and (public_host + ".").endswith(token.lower() + "."))
        ):
            continue  # too short to be a secret, a port, or the public host name (or its domain)
        found.update({token, unquote(token), quote(token, safe="")})
    return sorted((f for f in found if len(f) >= 4), key=len, reverse=True)


def scrub(text: str, url: str) -> str:
    """`text` (an error to store and show) without the secrets of the destination
    `url`, and with any URL in it cut to its scheme and host."""
    host = _public_host(url)
    if host:  # a secret path segment ("hooks") must not eat into the host name (hooks.example.com)
        text = re.sub(re.escape(host), "\x00", text, flags=re.IGNORECASE)
    for secret in secrets_of(url):
        text = text.replace(secret, SCRUBBED)
    text = text.replace("\x00", host)

    def host_only(match) -> str:
        rest = match.group(2)
        authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
        return f"{match.group(1)}://{authority.rsplit('@', 1)[-1]}" + (f"/{SCRUBBED}" if rest != authority else "")

    text = _URL_IN_TEXT.sub(host_only, text)
    return _URL_FIELD.sub(lambda m: m.group(1) + SCRUBBED, text)


def _short(exc: Exception | str) -> str:
    text = str(exc)
    return text if len(text) <= 300 else text[:297] + "..."
