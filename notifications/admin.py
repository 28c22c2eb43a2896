from django.contrib import admin

from .models import Channel, Delivery, DeliveryAttempt, EventRule


@admin.register(Channel)
class ChannelAdmin(admin.ModelAdmin):
    list_display = ("name", "workspace", "kind", "enabled", "disabled_reason", "updated_at")
    list_filter = ("kind", "enabled")
    search_fields = ("name", "workspace__name")


@admin.register(EventRule)
class EventRuleAdmin(admin.ModelAdmin):
    list_display = ("name", "workspace", "job_scope", "job_pattern", "enabled")
    list_filter = ("enabled",)
    filter_horizontal = ("channels",)


class DeliveryAttemptInline(admin.TabularInline):
    model = DeliveryAttempt
    extra = 0
    readonly_fields = ("number", "started_at", "duration_ms", "ok", "permanent", "status_code", "error")


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = ("id", "event", "channel", "status", "attempts", "status_code", "created_at")
    list_filter = ("status", "is_test")
    raw_id_fields = ("event", "channel", "rule")
    inlines = [DeliveryAttemptInline]
