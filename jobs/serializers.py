"""Shapes of the REST API (SPEC section 8). Read-only serializers: writes go
through jobs.actions, which validates with jobs.submission."""

from rest_framework import serializers

from .access import masked_envs, sees_secrets
from .models import Attempt, Diagnosis, Instance, Job, JobEvent, JobType, Membership, RestartRecord, Workspace


class WorkspaceSerializer(serializers.ModelSerializer):
    role = serializers.SerializerMethodField()

    class Meta:
        model = Workspace
        fields = ["id", "name", "slug", "created_at", "role"]
        read_only_fields = ["id", "created_at", "role"]
        extra_kwargs = {"slug": {"required": False}}

    def get_role(self, ws) -> str | None:
        request = self.context.get("request")
        return ws.role_of(request.user) if request else None


class InstanceSerializer(serializers.ModelSerializer):
    class Meta:
        model = Instance
        fields = [
            "name", "role", "index", "rank", "status", "node", "exit_code", "signal", "backend_reason",
            "started_at", "exited_at", "last_output_at", "restarts",
        ]


class AttemptSerializer(serializers.ModelSerializer):
    instances = InstanceSerializer(many=True, read_only=True)
    stages = serializers.SerializerMethodField()

    class Meta:
        model = Attempt
        fields = [
            "number", "status", "reason", "queued_at", "preparing_at", "starting_at", "running_at",
            "first_progress_at", "stopping_at", "ended_at", "detected_failure_at", "made_progress", "stages", "instances",
        ]

    def get_stages(self, a) -> dict:
        """Seconds spent in each stage (None while a stage has not ended)."""
        def span(start, end):
            return round((end - start).total_seconds(), 3) if start and end else None

        return {
            "queued": span(a.queued_at, a.preparing_at),
            "preparing": span(a.preparing_at, a.starting_at),
            "starting": span(a.starting_at, a.running_at),
            "running": span(a.running_at, a.stopping_at or a.ended_at),
            "stopping": span(a.stopping_at, a.ended_at),
        }


class JobSerializer(serializers.ModelSerializer):
    workspace = serializers.PrimaryKeyRelatedField(read_only=True)
    workspace_slug = serializers.CharField(source="workspace.slug", read_only=True)
    envs = serializers.SerializerMethodField()
    settings = serializers.SerializerMethodField()
    max_restarts = serializers.SerializerMethodField()
    last_restart_reason = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = [
            "id", "workspace", "workspace_slug", "display_name", "job_type", "job_specs", "user_command", "envs",
            "image", "workdir", "backend", "settings", "status", "reason", "restart_count", "max_restarts",
            "last_restart_reason", "current_attempt", "stop_requested", "hang_interval_override",
            "last_progress_at", "last_progress_step", "token_hint", "created_at", "started_at", "finished_at",
        ]

    def get_envs(self, job) -> dict[str, str]:
        """In full for owners, admins and the job's submitter; secret-looking values
        masked for everyone else (jobs.access.sees_secrets), and when no caller is known."""
        request = self.context.get("request")
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return masked_envs(job.envs)
        roles = self.context.get("_roles")
        if roles is None:  # once per response, shared by every job of a list
            roles = self.context["_roles"] = dict(
                Membership.objects.filter(user=user).values_list("workspace_id", "role"))
        return dict(job.envs or {}) if sees_secrets(roles.get(job.workspace_id), user.pk, job) else masked_envs(job.envs)

    def get_settings(self, job) -> dict:
        return {
            "enable_error_monitoring_in_aimaster": job.fault_tolerance,
            "error_monitoring_args": job.error_monitoring_args,
            "retryable_errors": job.retryable_keywords,
            "sdk_retryable_errors": job.sdk_retryable_keywords,
            "parsed": job.ft_config,
        }

    def get_max_restarts(self, job) -> int:
        return int((job.ft_config or {}).get("max_num_of_job_restart", 3))

    def get_last_restart_reason(self, job) -> str:
        last = job.restart_records.order_by("-id").only("reason").first()
        return last.reason if last else ""


class JobDetailSerializer(JobSerializer):
    attempt = serializers.SerializerMethodField()

    class Meta(JobSerializer.Meta):
        fields = JobSerializer.Meta.fields + ["attempt"]

    def get_attempt(self, job) -> dict | None:
        attempt = job.attempts.filter(number=job.current_attempt).prefetch_related("instances").first()
        return AttemptSerializer(attempt).data if attempt else None


class RestartRecordSerializer(serializers.ModelSerializer):
    class Meta:
        model = RestartRecord
        fields = [
            "id", "number", "kind", "attempt", "new_attempt", "restart_time", "node_name", "instance_name",
            "error_code", "error_message", "error_source", "rule", "reason", "cause", "next_step", "root_cause",
            "cascades", "log_offset", "result", "duration_seconds", "completed_at",
        ]


class JobEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobEvent
        fields = ["id", "type", "level", "message", "payload", "attempt", "instance", "created_at"]


class DiagnosisSerializer(serializers.ModelSerializer):
    class Meta:
        model = Diagnosis
        fields = ["id", "attempt", "kind", "trigger", "summary", "data", "created_at"]


class JobSubmitSerializer(serializers.Serializer):
    """Documents the CreateJob body for the schema; validation is jobs.submission."""

    workspace = serializers.CharField(help_text="id (digits) or slug (starts with a letter) of one of your workspaces")
    display_name = serializers.CharField(max_length=128)
    job_type = serializers.ChoiceField(choices=JobType.choices)
    job_specs = serializers.ListField(child=serializers.DictField())
    user_command = serializers.CharField()
    envs = serializers.DictField(child=serializers.CharField(), required=False)
    backend = serializers.CharField(required=False, default="local")
    workdir = serializers.CharField(required=False)
    settings = serializers.DictField(required=False)
