"""Transports: how a notification reaches one kind of channel.

`TRANSPORTS` maps a channel kind to the dotted path of its class, imported on
first use (`transport_for(kind)`). A transport validates a channel URL at save
time (`validate_url`, which also applies the outbound-safety checks of
notifications.outbound) and sends one message (`send`), raising DeliveryFailure
with `kind` "permanent" (the channel is disabled), "transient" (retried) or
"rejected" (this delivery fails, the channel stays on).

Chat services and e-mail go through apprise, by URL. The generic webhook is ours:

Webhook request
---------------
    POST <channel URL>
    Content-Type: application/json
    User-Agent: Vigil-Webhook/1
    X-Vigil-Event: <event type, e.g. "restart"; "test" for Send test>
    X-Vigil-Delivery: <delivery id>
    X-Vigil-Timestamp: <unix seconds when sent; also "sent_at" in the body>
    X-Vigil-Signature: sha256=<hex HMAC-SHA256 of the raw body, keyed with the channel's signing secret>

    {
      "version": 1,
      "test": false,
      "sent_at": "2026-11-30T00:10:00.123456+00:00",
      "event": {
        "id": 42, "type": "restart", "type_label": "Restart", "level": "warning",
        "message": "Restarting the job: worker-1 exited with code 1",
        "payload": {...the event's payload, as stored...},
        "attempt": 2, "instance": "worker-1",
        "created_at": "2026-11-30T00:09:59.001+00:00"
      },
      "job": {"id": 7, "name": "resnet-ddp", "status": "Restarting",
              "url": "<VIGIL_CONSOLE_URL>/jobs/7/"},
      "workspace": {"slug": "alice-lab", "name": "Alice Lab"},
      "title": "[Vigil] Restart: resnet-ddp (#7)",
      "text": "<the same human-readable message the chat services get>"
    }

"job" is null for a test delivery. To verify: compute HMAC-SHA256 over the exact
bytes received with the secret shown on the channel's edit page and compare it
(constant-time) with the hex after "sha256="; reject old X-Vigil-Timestamp
values to stop replays. Any 2xx answer is success; 401, 403, 404 and 410
disable the channel; 408, 425, 429 and 5xx are retried; other answers fail
the delivery without retrying. Redirects are followed (at most 3), each hop
checked.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from urllib.parse import urlsplit

from django.utils.module_loading import import_string

from . import outbound
from .messages import EventInfo, compose, webhook_body

TRANSPORTS = {
    "webhook": "notifications.transports.WebhookTransport",
    "slack": "notifications.transports.SlackTransport",
    "discord": "notifications.transports.DiscordTransport",
    "telegram": "notifications.transports.TelegramTransport",
    "mattermost": "notifications.transports.MattermostTransport",
    "dingtalk": "notifications.transports.DingTalkTransport",
    "feishu": "notifications.transports.FeishuTransport",
    "wecom": "notifications.transports.WeComTransport",
    "email": "notifications.transports.EmailTransport",
    "apprise_json": "notifications.transports.AppriseJsonTransport",
}

PERMANENT_STATUSES = frozenset({401, 403, 404, 410})
TRANSIENT_STATUSES = frozenset({408, 425, 429})


class InvalidChannelURL(ValueError):
    """The URL cannot be used for this kind of channel; the text says what is accepted."""


class DeliveryFailure(Exception):
    def __init__(self, message: str, *, kind: str = "transient", status_code: int | None = None):
        super().__init__(message)
        self.kind = kind  # "permanent" | "transient" | "rejected"
        self.status_code = status_code

    @property
    def permanent(self) -> bool:
        return self.kind == "permanent"


def classify_status(code: int) -> str:
    """ "ok", "permanent", "transient" or "rejected" for an HTTP status."""
    if 200 <= code < 300:
        return "ok"
    if code in PERMANENT_STATUSES:
        return "permanent"
    if code in TRANSIENT_STATUSES or code >= 500:
        return "transient"
    return "rejected"


@dataclass
class SendResult:
    status_code: int | None = None
    detail: str = ""


@lru_cache(maxsize=None)
def transport_for(kind: str):
    try:
        return import_string(TRANSPORTS[kind])
    except KeyError:
        raise InvalidChannelURL(f"unknown channel kind {kind!r}; accepted: {', '.join(TRANSPORTS)}") from None


class Transport:
    kind = ""
    label = ""
    example = ""

    def __init__(self, url: str, signing_secret: str = ""):
        self.url = url
        self.signing_secret = signing_secret
        # What send() put on the wire (set before sending, so a failed send has it too).
        self.payload = ""

    @classmethod
    def validate_url(cls, url: str) -> str:
        raise NotImplementedError

    def send(self, info: EventInfo, *, delivery_id: int | None = None) -> SendResult:
        raise NotImplementedError


class WebhookTransport(Transport):
    kind = "webhook"
    label = "Webhook"
    example = "https://hooks.example.com/vigil"

    @classmethod
    def validate_url(cls, url: str) -> str:
        url = (url or "").strip()
        try:
            outbound.check_url_at_save(url)
        except outbound.OutboundError as exc:
            raise InvalidChannelURL(f"{exc}. A webhook URL looks like {cls.example} (http:// or https://).") from None
        return url

    def signed_request(self, info: EventInfo, *, delivery_id=None, now: float | None = None):
        now = time.time() if now is None else now
        body = json.dumps(
            webhook_body(info, datetime.fromtimestamp(now, tz=timezone.utc)), separators=(",", ":"), default=str
        ).encode()
        signature = hmac.new(self.signing_secret.encode(), body, hashlib.sha256).hexdigest()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "Vigil-Webhook/1",
            "X-Vigil-Event": info.type,
            "X-Vigil-Delivery": "" if delivery_id is None else str(delivery_id),
            "X-Vigil-Timestamp": str(int(now)),
            "X-Vigil-Signature": f"sha256={signature}",
        }
        return body, headers

    def send(self, info: EventInfo, *, delivery_id=None) -> SendResult:
        body, headers = self.signed_request(info, delivery_id=delivery_id)
        self.payload = body.decode()
        try:
            result = outbound.http_request("POST", self.url, data=body, headers=headers, timeout=10.0)
        except outbound.OutboundError as exc:
            raise DeliveryFailure(str(exc), kind="permanent" if exc.permanent else "transient") from None
        verdict = classify_status(result.status)
        if verdict == "ok":
            return SendResult(status_code=result.status)
        snippet = result.body[:200].decode("utf-8", "replace").strip()
        raise DeliveryFailure(
            f"HTTP {result.status} from {urlsplit(result.url).hostname}" + (f": {snippet}" if snippet else ""),
            kind=verdict,
            status_code=result.status,
        )


_APPRISE_STATUS = re.compile(r"\berror[=: ]\s*(\d{3})\b")


def status_from_apprise_logs(lines) -> int | None:
    """The HTTP status apprise's services log on failure ("... error=403.")."""
    for line in lines:
        match = _APPRISE_STATUS.search(line)
        if match:
            return int(match.group(1))
    return None


def _apprise_asset():
    import apprise

    # One service per call, in this thread (the outbound guard is a context
    # variable); no redirects (their hops would bypass our redirect limit); no
    # disk state.
    return apprise.AppriseAsset(async_mode=False, http_redirects=False, service_timeout=0, storage_mode="memory")


class AppriseTransport(Transport):
    """A service apprise knows, given by its apprise URL (or the service's own https URL)."""

    schemes: tuple[str, ...] = ()
    body_format = "text"

    @classmethod
    def accepted(cls) -> str:
        return ", ".join(s + "://" for s in cls.schemes)

    @classmethod
    def plugin_for(cls, url: str):
        import apprise

        url = (url or "").strip()
        scheme = urlsplit(url).scheme.lower() if "://" in url else ""
        if scheme not in cls.schemes and scheme not in outbound.HTTP_SCHEMES:
            raise InvalidChannelURL(
                f"the scheme {scheme + '://' if scheme else '(none)'} is not accepted for {cls.label}; "
                f"use {cls.accepted()} (e.g. {cls.example})"
            )
        plugin = apprise.Apprise.instantiate(url, asset=_apprise_asset(), suppress_exceptions=True)
        protocols = set()
        if plugin is not None:
            for attr in ("protocol", "secure_protocol"):
                value = getattr(plugin, attr, None)
                protocols.update([value] if isinstance(value, str) else list(value or ()))
        if plugin is None or not protocols & set(cls.schemes):
            raise InvalidChannelURL(
                f"not a valid {cls.label} URL; accepted schemes: {cls.accepted()} (e.g. {cls.example})"
            )
        return plugin

    @classmethod
    def user_hosts(cls, plugin) -> list[tuple[str, int]]:
        """Hosts the service contacts that come from the URL (self-hosted services);
        empty for services with a fixed public host."""
        return []

    @classmethod
    def check_hosts(cls, plugin, *, at_save: bool = False) -> None:
        """The URL's own hosts, resolved and checked; at save a name that does not resolve
        yet is accepted (outbound.check_host_at_save), and each send checks it again."""
        check = outbound.check_host_at_save if at_save else outbound.check_host
        for host, port in cls.user_hosts(plugin):
            check(host, port)

    @classmethod
    def validate_url(cls, url: str) -> str:
        plugin = cls.plugin_for(url)
        try:
            cls.check_hosts(plugin, at_save=True)
        except outbound.OutboundError as exc:
            raise InvalidChannelURL(str(exc)) from None
        return url.strip()

    def body(self, info: EventInfo) -> tuple[str, str]:
        message = compose(info)
        return message.title, (message.markdown if self.body_format == "markdown" else message.text)

    def send(self, info: EventInfo, *, delivery_id=None) -> SendResult:
        import apprise

        try:
            plugin = self.plugin_for(self.url)
            self.check_hosts(plugin)
        except InvalidChannelURL as exc:
            raise DeliveryFailure(f"bad URL: {exc}", kind="permanent") from None
        except outbound.OutboundError as exc:
            raise DeliveryFailure(str(exc), kind="permanent" if exc.permanent else "transient") from None
        title, body = self.body(info)
        self.payload = f"{title}\n\n{body}" if title else body
        with outbound.guarded() as guard:
            notifier = apprise.Apprise(asset=_apprise_asset())
            notifier.add(plugin)
            result = notifier.notify(body=body, title=title, body_format=self.body_format)
            lines = [entry.message for entry in result.logs()]
        if guard.refusals:
            raise DeliveryFailure(guard.refusals[0], kind="permanent")
        if result:
            return SendResult()
        code = status_from_apprise_logs(lines)
        detail = "; ".join(lines[-3:]) or f"{self.label} did not accept the notification"
        if code is None:
            raise DeliveryFailure(detail, kind="transient")
        verdict = classify_status(code)
        raise DeliveryFailure(detail, kind="transient" if verdict == "ok" else verdict, status_code=code)


def _default_port(plugin, secure_default=443, plain_default=80) -> int:
    return int(plugin.port or (secure_default if getattr(plugin, "secure", False) else plain_default))


class SlackTransport(AppriseTransport):
    kind, label, schemes, body_format = "slack", "Slack", ("slack",), "markdown"
    example = "slack://TokenA/TokenB/TokenC/#channel or https://hooks.slack.com/services/…"


class DiscordTransport(AppriseTransport):
    kind, label, schemes, body_format = "discord", "Discord", ("discord",), "markdown"
    example = "discord://WebhookID/WebhookToken or https://discord.com/api/webhooks/…"


class TelegramTransport(AppriseTransport):
    kind, label, schemes, body_format = "telegram", "Telegram", ("tgram",), "markdown"
    example = "tgram://BotToken/ChatID"


class MattermostTransport(AppriseTransport):
    kind, label, schemes, body_format = "mattermost", "Mattermost", ("mmost", "mmosts"), "markdown"
    example = "mmosts://mattermost.example.com/WebhookToken"

    @classmethod
    def user_hosts(cls, plugin):
        return [(plugin.host, _default_port(plugin, 443, 8065))]


class DingTalkTransport(AppriseTransport):
    kind, label, schemes, body_format = "dingtalk", "DingTalk", ("dingtalk",), "markdown"
    example = "dingtalk://AccessToken/ or dingtalk://Secret@AccessToken/"


class FeishuTransport(AppriseTransport):
    kind, label, schemes = "feishu", "Feishu / Lark", ("feishu", "lark")
    example = "feishu://WebhookToken or lark://WebhookToken"


class WeComTransport(AppriseTransport):
    kind, label, schemes, body_format = "wecom", "WeCom", ("wecombot",), "markdown"
    example = "wecombot://BotKey"


class EmailTransport(AppriseTransport):
    kind, label, schemes = "email", "E-mail", ("mailto", "mailtos")
    example = "mailtos://user:password@smtp.example.com?to=ops@example.com (mailto:// without TLS)"

    @classmethod
    def user_hosts(cls, plugin):
        # The SMTP connection is not HTTP, so only this check guards it.
        return [(plugin.smtp_host, int(plugin.port or 25))]


class AppriseJsonTransport(AppriseTransport):
    kind, label, schemes = "apprise_json", "JSON endpoint", ("json", "jsons")
    example = "jsons://hooks.example.com/path"

    @classmethod
    def user_hosts(cls, plugin):
        return [(plugin.host, _default_port(plugin))]
