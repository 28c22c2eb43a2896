"""Notification channels, event rules and deliveries (SPEC section 7).

A Channel is somewhere to send (a chat service, e-mail, a signed webhook) given
by URL; an EventRule says which events of which jobs go to which channels; a
Delivery is one event sent to one channel (never two: a unique constraint), and
every try at it is a DeliveryAttempt row."""

from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone

from core.delivery_errors import is_failing
from jobs.inputs import validate_name
from jobs.models import NOTIFIABLE_EVENT_TYPES, JobEvent, Workspace

from .matching import rule_matches


def new_signing_secret() -> str:
    return secrets.token_hex(32)


class ChannelKind(models.TextChoices):
    WEBHOOK = "webhook", "Webhook (signed JSON)"
    SLACK = "slack", "Slack"
    DISCORD = "discord", "Discord"
    TELEGRAM = "telegram", "Telegram"
    MATTERMOST = "mattermost", "Mattermost"
    DINGTALK = "dingtalk", "DingTalk"
    FEISHU = "feishu", "Feishu / Lark"
    WECOM = "wecom", "WeCom"
    EMAIL = "email", "E-mail"
    APPRISE_JSON = "apprise_json", "JSON endpoint (Apprise)"


class Channel(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="notification_channels")
    name = models.CharField(max_length=100, validators=[validate_name])
    kind = models.CharField(max_length=20, choices=ChannelKind.choices)
    # The URL carries the service's tokens: shown to workspace admins only.
    url = models.TextField()
    # HMAC key of the webhook signature (X-Vigil-Signature); admins only.
    signing_secret = models.CharField(max_length=128, default=new_signing_secret)
    enabled = models.BooleanField(default=True)
    disabled_reason = models.TextField(blank=True, default="")
    disabled_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["workspace", "name", "id"]
        constraints = [models.UniqueConstraint(fields=["workspace", "name"], name="one_channel_name_per_workspace")]

    def __str__(self):
        return f"{self.name} ({self.get_kind_display()})"

    @property
    def masked_url(self) -> str:
        """What members and viewers see: the scheme only."""
        scheme = self.url.split("://", 1)[0] if "://" in self.url else ""
        return f"{scheme}://••••••" if scheme else "••••••"

    def disable(self, reason: str) -> bool:
        """Stop delivering here until an admin saves the channel again; True if
        this call did it (a second failing delivery does not overwrite the reason)."""
        return bool(
            Channel.objects.filter(pk=self.pk, enabled=True).update(
                enabled=False, disabled_reason=reason[:2000], disabled_at=timezone.now()
            )
        )

    FAILING_AFTER = 3

    def recent_outcomes(self, n: int = FAILING_AFTER) -> list[str]:
        """The statuses of its last `n` finished deliveries of events, newest first."""
        return list(
            self.deliveries.filter(is_test=False, status__in=("sent", "failed"))
            .order_by("-last_attempt_at", "-id")
            .values_list("status", flat=True)[:n]
        )

    @property
    def failing(self) -> bool:
        """Its last FAILING_AFTER deliveries all failed: worth an admin's look even
        while it stays enabled (transient failures do not disable a channel)."""
        return is_failing(self.recent_outcomes(), self.FAILING_AFTER)

    def last_delivery(self):
        return self.deliveries.exclude(attempts=0).order_by("-last_attempt_at", "-id").first()


class JobScope(models.TextChoices):
    ALL = "all", "All jobs"
    PATTERN = "pattern", "Jobs whose name matches a pattern"


class EventRule(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="event_rules")
    name = models.CharField(max_length=100, validators=[validate_name])
    event_types = models.JSONField(default=list)  # values of jobs.models.EventType
    job_scope = models.CharField(max_length=10, choices=JobScope.choices, default=JobScope.ALL)
    # fnmatch-style glob over the job's display name, case-insensitive ("resnet-*").
    job_pattern = models.CharField(max_length=200, blank=True, default="")
    channels = models.ManyToManyField(Channel, related_name="rules")
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["workspace", "name", "id"]

    def __str__(self):
        return self.name

    @property
    def pattern(self) -> str:
        return self.job_pattern if self.job_scope == JobScope.PATTERN else ""

    def matches(self, event_type: str, job_name: str) -> bool:
        return self.enabled and rule_matches(self.event_types, self.pattern, event_type, job_name)

    def event_type_labels(self) -> list[str]:
        labels = dict((t.value, t.label) for t in NOTIFIABLE_EVENT_TYPES)
        return [labels.get(t, t) for t in self.event_types]


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    SENDING = "sending", "Sending"
    RETRYING = "retrying", "Retrying"
    SENT = "sent", "Sent"
    FAILED = "failed", "Failed"
    SKIPPED = "skipped", "Skipped"


class Delivery(models.Model):
    """One event to one channel. A test delivery ("Send test") has no event."""

    event = models.ForeignKey(JobEvent, null=True, blank=True, on_delete=models.CASCADE, related_name="deliveries")
    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="deliveries")
    # The first rule that asked for it; every rule that matched is in matched_rules.
    rule = models.ForeignKey(EventRule, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    matched_rules = models.ManyToManyField(EventRule, blank=True, related_name="deliveries")
    is_test = models.BooleanField(default=False)
    status = models.CharField(max_length=10, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True, default="")
    # What the last attempt sent (a webhook's JSON body, a chat service's title and
    # text), for the delivery log; no URL and no signature, so members may read it.
    payload = models.TextField(blank=True, default="")
    permanent_error = models.BooleanField(default=False)
    status_code = models.IntegerField(null=True, blank=True)
    duration_ms = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["event", "channel"], name="one_delivery_per_event_and_channel")]

    def __str__(self):
        return f"delivery {self.pk} of event {self.event_id} to {self.channel_id}: {self.status}"


class DeliveryAttempt(models.Model):
    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempt_log")
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField(default=timezone.now)
    duration_ms = models.FloatField(default=0)
    ok = models.BooleanField(default=False)
    permanent = models.BooleanField(default=False)
    status_code = models.IntegerField(null=True, blank=True)
    error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["delivery", "number"]
        constraints = [models.UniqueConstraint(fields=["delivery", "number"], name="one_row_per_delivery_attempt")]
