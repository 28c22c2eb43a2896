"""Notifications over the REST API: a workspace's channels, event rules and
deliveries, under /api/v1/workspaces/<id or slug>/notifications/.

One source of validation: the write serializers only check JSON types (a list is a
list, a boolean a boolean); every rule about the values (names, kinds, URLs and the
outbound-address guard, event types, patterns, channels of this workspace) is the
pages' form (notifications.forms), run on the request's values, and its errors come
back as a 400 naming the field. Access as on the pages: everyone in the workspace
reads (channel URLs and signing secrets only for owners and admins), owners and
admins change; people outside the workspace get 404."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import exceptions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from jobs.exceptions import Conflict
from jobs.inputs import MAX_BIGINT, InputError, query_int, workspace_ref
from jobs.models import ADMIN_ROLES, NOTIFIABLE_EVENT_TYPES, Workspace

from . import dispatch
from .backtest import rule_backtest
from .forms import ChannelForm, EventRuleForm
from .models import Channel, ChannelKind, Delivery, DeliveryStatus, EventRule

ADMINS_ONLY = "Only the workspace's owners and admins change notifications."
WORKSPACE_PARAM = OpenApiParameter("workspace", str, OpenApiParameter.PATH, description="workspace id or slug")


# --- shapes ---------------------------------------------------------------------------


class ChannelSerializer(serializers.ModelSerializer):
    url = serializers.SerializerMethodField()
    signing_secret = serializers.SerializerMethodField()

    class Meta:
        model = Channel
        fields = [
            "id",
            "name",
            "kind",
            "url",
            "signing_secret",
            "enabled",
            "disabled_reason",
            "disabled_at",
            "created_at",
            "updated_at",
        ]

    def _admin(self) -> bool:
        return bool(self.context.get("is_admin"))

    def get_url(self, channel) -> str:
        """The URL carries the service's tokens: masked for members and viewers."""
        return channel.url if self._admin() else channel.masked_url

    def get_signing_secret(self, channel) -> str | None:
        return channel.signing_secret if self._admin() else None


class EventRuleSerializer(serializers.ModelSerializer):
    channels: Any = serializers.PrimaryKeyRelatedField(many=True, read_only=True)

    class Meta:
        model = EventRule
        fields = [
            "id",
            "name",
            "event_types",
            "job_scope",
            "job_pattern",
            "channels",
            "enabled",
            "created_at",
            "updated_at",
        ]


class DeliverySerializer(serializers.ModelSerializer):
    event_type = serializers.CharField(source="event.type", read_only=True, default=None)
    job = serializers.IntegerField(source="event.job_id", read_only=True, default=None)
    channel_kind = serializers.CharField(source="channel.kind", read_only=True)
    matched_rules: Any = serializers.PrimaryKeyRelatedField(many=True, read_only=True)

    class Meta:
        model = Delivery
        fields = [
            "id",
            "event",
            "event_type",
            "job",
            "channel",
            "channel_kind",
            "rule",
            "matched_rules",
            "is_test",
            "status",
            "attempts",
            "error",
            "permanent_error",
            "status_code",
            "duration_ms",
            "created_at",
            "last_attempt_at",
            "next_attempt_at",
            "sent_at",
        ]


def _text(**kw):
    # Blank and padded text reach the form, which says what it accepts.
    return serializers.CharField(allow_blank=True, trim_whitespace=False, **kw)


class FormValidated(serializers.Serializer):
    """JSON types here; the values are the page form's business (`form_class`)."""

    form_class: type[ChannelForm] | type[EventRuleForm]

    def current(self, instance) -> dict:
        """The instance's values, under a partial update's changes."""
        return {}

    def defaults(self) -> dict:
        """What the form's unticked checkboxes would mean when a field is left out of a create."""
        return {}

    def validate(self, attrs):
        data = {**(self.current(self.instance) if self.instance is not None else self.defaults()), **attrs}
        form = self.form_class(data, instance=self.instance, workspace=self.context["workspace"])
        if not form.is_valid():
            raise serializers.ValidationError(
                {("non_field_errors" if f == "__all__" else f): list(errors) for f, errors in form.errors.items()}
            )
        self.form = form
        return attrs

    def save(self, **kwargs):
        obj = self.form.save(commit=False)
        if obj.pk is None:
            obj.created_by = self.context["request"].user
        with transaction.atomic():
            obj.save()
            self.form.save_m2m()
        self.instance = obj
        return obj


class ChannelWriteSerializer(FormValidated):
    form_class = ChannelForm
    name = _text()
    kind = _text(help_text="one of: " + ", ".join(ChannelKind.values))
    url = _text(
        help_text="webhook: an http(s) URL; chat and e-mail: the service's Apprise URL (slack://, mailtos://...)"
    )
    rotate_secret = serializers.BooleanField(required=False, help_text="updates only: a new signing secret")

    def current(self, channel):
        return {"name": channel.name, "kind": channel.kind, "url": channel.url}


class EventRuleWriteSerializer(FormValidated):
    form_class = EventRuleForm
    name = _text()
    event_types = serializers.ListField(
        child=_text(), help_text="any of: " + ", ".join(t.value for t in NOTIFIABLE_EVENT_TYPES)
    )
    job_scope = _text(required=False, help_text='"all" (default) or "pattern"')
    job_pattern = _text(required=False)
    channels = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=MAX_BIGINT), help_text="ids of this workspace's channels"
    )
    enabled = serializers.BooleanField(required=False, help_text="default true")

    def defaults(self):
        return {"job_scope": "all", "job_pattern": "", "enabled": True}

    def current(self, rule):
        return {
            "name": rule.name,
            "event_types": list(rule.event_types),
            "job_scope": rule.job_scope,
            "job_pattern": rule.job_pattern,
            "channels": list(rule.channels.values_list("pk", flat=True)),
            "enabled": rule.enabled,
        }


# --- views ----------------------------------------------------------------------------


class InWorkspace(viewsets.GenericViewSet):
    """A workspace's notification objects; the caller must be in the workspace (else
    404) and an owner or admin to change anything (else 403)."""

    lookup_value_regex = r"\d+"

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        if request.method in ("POST", "PUT", "PATCH"):
            _ = request.data  # a malformed body is a 400 before any lookup, as on every JSON endpoint

    def get_workspace(self) -> Workspace:
        if not hasattr(self, "_workspace"):
            try:
                key, ref = workspace_ref(self.kwargs["workspace"])
            except InputError:
                raise exceptions.NotFound("No such workspace.") from None
            ws = Workspace.objects.for_user(self.request.user).filter(**{key: ref}).first()
            if ws is None:
                raise exceptions.NotFound("No such workspace.")
            self._workspace = ws
            self._is_admin = ws.role_of(self.request.user) in ADMIN_ROLES
        return self._workspace

    def is_admin(self) -> bool:
        self.get_workspace()
        return self._is_admin

    def require_admin(self) -> None:
        if not self.is_admin():
            raise exceptions.PermissionDenied(ADMINS_ONLY)

    def get_serializer_context(self):
        context = super().get_serializer_context()
        if "workspace" in self.kwargs:  # absent while drf-spectacular builds the schema
            context.update(workspace=self.get_workspace(), is_admin=self.is_admin())
        return context

    def write(self, request, serializer_class, instance=None, *, partial=False, created=False):
        self.require_admin()
        serializer = serializer_class(
            instance, data=request.data, partial=partial, context=self.get_serializer_context()
        )
        serializer.is_valid(raise_exception=True)
        obj = serializer.save()
        return Response(
            self.get_serializer(obj).data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK
        )

    def list(self, request, *args, **kwargs):
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    def retrieve(self, request, *args, **kwargs):
        return Response(self.get_serializer(self.get_object()).data)


class Writable(InWorkspace):
    write_serializer_class: type[FormValidated]

    def destroy(self, request, *args, **kwargs):
        self.require_admin()
        self.get_object().delete()
        return Response(status=status.HTTP_204_NO_CONTENT)

    def create(self, request, *args, **kwargs):
        return self.write(request, self.write_serializer_class, created=True)

    def update(self, request, *args, **kwargs):
        self.require_admin()
        return self.write(request, self.write_serializer_class, self.get_object(), partial=kwargs.get("partial", False))

    def partial_update(self, request, *args, **kwargs):
        return self.update(request, *args, partial=True, **kwargs)


def _schema(write, read, name):
    return extend_schema_view(
        list=extend_schema(parameters=[WORKSPACE_PARAM], summary=f"The workspace's {name}s"),
        retrieve=extend_schema(parameters=[WORKSPACE_PARAM]),
        create=extend_schema(
            parameters=[WORKSPACE_PARAM],
            request=write,
            responses={201: read},
            summary=f"Add a {name} (owners and admins; the page's validation)",
        ),
        update=extend_schema(parameters=[WORKSPACE_PARAM], request=write, responses=read),
        partial_update=extend_schema(parameters=[WORKSPACE_PARAM], request=write, responses=read),
        destroy=extend_schema(parameters=[WORKSPACE_PARAM], responses={204: None}),
    )


@_schema(ChannelWriteSerializer, ChannelSerializer, "channel")
class ChannelViewSet(Writable):
    """Where notifications go: a chat service, e-mail or a signed webhook, by URL. URLs
    and signing secrets are shown to the workspace's owners and admins only."""

    serializer_class = ChannelSerializer
    write_serializer_class = ChannelWriteSerializer
    queryset = Channel.objects.none()  # for the schema; get_queryset scopes by workspace

    def get_queryset(self):
        return Channel.objects.filter(workspace=self.get_workspace()).order_by("name", "id")

    @extend_schema(
        parameters=[WORKSPACE_PARAM],
        request=None,
        responses=DeliverySerializer,
        summary="Send a test message now (one try, no retries); the delivery says how it went",
    )
    @action(detail=True, methods=["post"])
    def test(self, request, *args, **kwargs):
        self.require_admin()
        delivery = dispatch.send_test(self.get_object())
        return Response(DeliverySerializer(delivery).data)


@_schema(EventRuleWriteSerializer, EventRuleSerializer, "event rule")
class EventRuleViewSet(Writable):
    """Which event types of which jobs (all, or a name pattern) go to which channels."""

    serializer_class = EventRuleSerializer
    write_serializer_class = EventRuleWriteSerializer
    queryset = EventRule.objects.none()

    def get_queryset(self):
        return (
            EventRule.objects.filter(workspace=self.get_workspace()).prefetch_related("channels").order_by("name", "id")
        )

    @extend_schema(
        parameters=[WORKSPACE_PARAM],
        request=EventRuleWriteSerializer,
        responses={200: dict},
        summary="Which past events a rule would have matched, and who would have been told; saves nothing",
    )
    @action(detail=False, methods=["post"])
    def preview(self, request, *args, **kwargs):
        """Validated as a create is (the page's form); nothing is saved (issue 26)."""
        self.require_admin()
        serializer = self.write_serializer_class(data=request.data, context=self.get_serializer_context())
        serializer.is_valid(raise_exception=True)
        return Response(rule_backtest(self.get_workspace(), serializer.form.cleaned_data))


class DeliveryFilter(serializers.Serializer):
    rule = serializers.IntegerField(required=False, help_text="a rule id")
    channel = serializers.IntegerField(required=False, help_text="a channel id")
    status = serializers.ChoiceField(choices=DeliveryStatus.choices, required=False)
    type = serializers.CharField(required=False, help_text="event type")


@extend_schema_view(
    list=extend_schema(parameters=[WORKSPACE_PARAM, DeliveryFilter], summary="Deliveries, newest first"),
    retrieve=extend_schema(parameters=[WORKSPACE_PARAM]),
)
class DeliveryViewSet(InWorkspace):
    """One event sent to one channel, with its outcome; test messages have no event."""

    serializer_class = DeliverySerializer
    queryset = Delivery.objects.none()

    def get_queryset(self):
        qs = (
            Delivery.objects.filter(channel__workspace=self.get_workspace())
            .select_related("event", "channel")
            .prefetch_related("matched_rules")
            .order_by("-created_at", "-id")
        )
        if self.action != "list":
            return qs
        params = self.request.query_params
        given = DeliveryFilter(data={k: params[k] for k in ("status", "type") if k in params})
        given.is_valid(raise_exception=True)
        f = given.validated_data
        # Ids as everywhere in the API: ASCII digits within a database column (jobs.inputs).
        rule, channel = query_int(params, "rule", minimum=1), query_int(params, "channel", minimum=1)
        if rule is not None:
            qs = qs.filter(matched_rules=rule)
        if channel is not None:
            qs = qs.filter(channel_id=channel)
        if "status" in f:
            qs = qs.filter(status=f["status"])
        if "type" in f:
            qs = qs.filter(event__type=f["type"])
        return qs

    @extend_schema(
        parameters=[WORKSPACE_PARAM],
        request=None,
        responses={202: DeliverySerializer},
        summary="Try a finished delivery once more (sent, failed or skipped; its channel enabled)",
    )
    @action(detail=True, methods=["post"])
    def redeliver(self, request, *args, **kwargs):
        self.require_admin()
        delivery = self.get_object()
        try:
            dispatch.redeliver(delivery)
        except dispatch.CannotRedeliver as exc:
            raise Conflict(str(exc)) from None
        delivery.refresh_from_db()
        return Response(DeliverySerializer(delivery).data, status=status.HTTP_202_ACCEPTED)
