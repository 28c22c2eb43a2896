"""Read-mostly admin: operators inspect everything here; state changes go
through the console so that they are compare-and-set and recorded as events."""

from django.contrib import admin

from .models import (
    ApiToken,
    Attempt,
    C4DReport,
    Diagnosis,
    Instance,
    Job,
    JobEvent,
    Membership,
    NodeError,
    NodeFault,
    RestartRecord,
    Workspace,
)


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    list_display = ("name", "slug", "run_as", "slurm_account", "created_at")
    fieldsets = (
        (None, {"fields": ("name", "slug", "created_at", "retryable_keywords")}),
        ("Where its jobs run (docs/security.md)", {"fields": ("run_as", "slurm_account")}),
        ("Defaults of its jobs", {"fields": ("warm_restart_default",)}),
    )
    search_fields = ("name", "slug")
    prepopulated_fields = {"slug": ("name",)}
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("workspace", "user", "role")
    list_filter = ("role",)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("hint", "user", "name", "created_at", "last_used_at", "revoked_at")
    readonly_fields = ("digest", "hint", "created_at", "last_used_at")
    actions = ["revoke"]

    def has_add_permission(self, request, obj=None):
        return False  # tokens are issued with `manage.py createapitoken`, shown once

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request, queryset):
        for token in queryset:
            token.revoke()


class InstanceInline(admin.TabularInline):
    model = Instance
    extra = 0
    can_delete = False
    readonly_fields = [f.name for f in Instance._meta.fields]


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = ("id", "display_name", "workspace", "job_type", "status", "restart_count", "created_at")
    list_filter = ("status", "job_type", "backend")
    search_fields = ("display_name",)
    exclude = ("token_digest", "token_sealed")


@admin.register(Attempt)
class AttemptAdmin(ReadOnlyAdmin):
    list_display = ("job", "number", "status", "queued_at", "running_at", "ended_at")
    list_filter = ("status",)
    inlines = [InstanceInline]


@admin.register(Instance)
class InstanceAdmin(ReadOnlyAdmin):
    list_display = ("name", "attempt", "status", "node", "exit_code", "signal", "last_output_at")
    list_filter = ("status",)


@admin.register(RestartRecord)
class RestartRecordAdmin(ReadOnlyAdmin):
    list_display = (
        "job",
        "number",
        "kind",
        "restart_time",
        "instance_name",
        "error_code",
        "result",
        "duration_seconds",
    )
    list_filter = ("kind", "result", "error_source")


@admin.register(JobEvent)
class JobEventAdmin(ReadOnlyAdmin):
    list_display = ("job", "type", "level", "created_at", "message")
    list_filter = ("type", "level")


@admin.register(Diagnosis)
class DiagnosisAdmin(ReadOnlyAdmin):
    list_display = ("job", "attempt", "kind", "trigger", "created_at")
    list_filter = ("kind",)


@admin.register(C4DReport)
class C4DReportAdmin(ReadOnlyAdmin):
    list_display = ("job", "attempt", "rank", "updated_at")


@admin.register(NodeError)
class NodeErrorAdmin(ReadOnlyAdmin):
    """Read-only: proposals are decided on the nodes page, which keeps who, when and why."""

    list_display = ("node", "backend", "job", "kind", "state", "decided_by", "created_at")
    list_filter = ("state", "backend")


@admin.register(NodeFault)
class NodeFaultAdmin(ReadOnlyAdmin):
    list_display = ("node", "backend", "error_code", "retryable", "created_at")
    list_filter = ("node", "retryable")
