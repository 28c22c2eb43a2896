"""Shapes of the REST API (SPEC section 8): what the API answers, and the one
validation of what it accepts. JobSubmitSerializer is the CreateJob rules for the
API, the submission form and scripts alike (jobs.actions.submit_job runs it);
RuntimeSerializer is the runtime PATCH. Every refusal names the field path the
caller sent (`job_specs.1.resource_config.gpu`) and says what is accepted; the
strict fields below take JSON as sent (a number is not text, true is not 1).
The SDK endpoints' bodies are jobs.sdk.serializers, built from the same fields."""

from __future__ import annotations

from typing import Any, cast

from django.conf import settings as django_settings
from django.utils.module_loading import import_string
from rest_framework import serializers
from rest_framework.utils.serializer_helpers import ReturnDict

from core.flags import FlagError, parse_flags
from core.replicas import layout_error
from core.stages import durations as stage_durations

from .access import masked_envs, sees_secrets
from .backends.base import Backend as JobBackend
from .inputs import InputError, flat_errors, text_problem, whole_number, workspace_ref
from .models import Attempt, Diagnosis, Instance, Job, JobEvent, JobType, Membership, RestartRecord, Workspace
from .submission import (
    ALLOWED_GPU_COUNTS,
    DENIED_ENV_NAMES,
    ENV_NAME_RE,
    JOB_TYPE_ROLES,
    MASKED_VALUE,
    MAX_COMMAND,
    MAX_DISPLAY_NAME,
    MAX_ENV_COUNT,
    MAX_ENV_VALUE,
    MAX_FLAGS,
    MAX_KEYWORD_LENGTH,
    MAX_KEYWORDS,
    MAX_REPLICAS,
    MEMORY_RE,
    REQUIRED_ROLES,
    RESERVED_ENV_NAMES,
    RoleSpec,
    ValidSubmission,
)


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
            "name",
            "role",
            "index",
            "rank",
            "status",
            "node",
            "exit_code",
            "signal",
            "backend_reason",
            "start",
            "start_reason",
            "started_at",
            "exited_at",
            "last_output_at",
            "restarts",
        ]


class AttemptSerializer(serializers.ModelSerializer):
    instances = InstanceSerializer(many=True, read_only=True)
    stages = serializers.SerializerMethodField()

    class Meta:
        model = Attempt
        fields = [
            "number",
            "status",
            "reason",
            "queued_at",
            "preparing_at",
            "starting_at",
            "running_at",
            "first_progress_at",
            "stopping_at",
            "ended_at",
            "detected_failure_at",
            "made_progress",
            "stages",
            "instances",
        ]

    def get_stages(self, a) -> dict:
        """Seconds spent in each stage (None while a stage has not ended), from the
        stamps made monotonic (core.stages): never negative, also for rows stored
        before the stamps were kept in order."""
        return stage_durations(
            {
                "queued": a.queued_at,
                "preparing": a.preparing_at,
                "starting": a.starting_at,
                "running": a.running_at,
                "stopping": a.stopping_at,
            },
            a.ended_at,
        )


class JobSerializer(serializers.ModelSerializer):
    workspace: Any = serializers.PrimaryKeyRelatedField(read_only=True)
    workspace_slug = serializers.CharField(source="workspace.slug", read_only=True)
    envs = serializers.SerializerMethodField()
    settings = serializers.SerializerMethodField()
    max_restarts = serializers.SerializerMethodField()
    last_restart_reason = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = [
            "id",
            "workspace",
            "workspace_slug",
            "display_name",
            "job_type",
            "job_specs",
            "user_command",
            "envs",
            "image",
            "workdir",
            "backend",
            "settings",
            "status",
            "reason",
            "restart_count",
            "max_restarts",
            "last_restart_reason",
            "current_attempt",
            "stop_requested",
            "hang_interval_override",
            "last_progress_at",
            "last_progress_step",
            "token_hint",
            "created_at",
            "started_at",
            "finished_at",
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
            roles = cast(dict, self.context)["_roles"] = dict(
                Membership.objects.filter(user=user).values_list("workspace_id", "role")
            )
        return (
            dict(job.envs or {}) if sees_secrets(roles.get(job.workspace_id), user.pk, job) else masked_envs(job.envs)
        )

    def get_settings(self, job) -> dict:
        return {
            "enable_error_monitoring_in_aimaster": job.fault_tolerance,
            "error_monitoring_args": job.error_monitoring_args,
            "retryable_errors": job.retryable_keywords,
            "sdk_retryable_errors": job.sdk_retryable_keywords,
            "parsed": job.ft_config,
        }

    def get_max_restarts(self, job) -> int:
        return job.restart_budget

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
            "id",
            "number",
            "kind",
            "attempt",
            "new_attempt",
            "restart_time",
            "node_name",
            "instance_name",
            "error_code",
            "error_message",
            "error_source",
            "rule",
            "reason",
            "cause",
            "next_step",
            "root_cause",
            "cascades",
            "log_offset",
            "verdict_kind",
            "failure_step",
            "failure_epoch",
            "failure_phase",
            "result",
            "duration_seconds",
            "completed_at",
        ]


class JobEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobEvent
        fields = ["id", "type", "level", "message", "payload", "attempt", "instance", "created_at"]


class DiagnosisSerializer(serializers.ModelSerializer):
    class Meta:
        model = Diagnosis
        fields = ["id", "attempt", "kind", "trigger", "summary", "data", "created_at"]


# --- strict fields: JSON taken as sent ----------------------------------------------


class Text(serializers.CharField):
    """A JSON string as sent (a number is not text here) that can be stored: no NUL
    character, no lone surrogate; with one_line, no control characters either.
    `invalid` is also the message for a missing, null or non-string value."""

    def __init__(self, *, invalid: str, one_line: bool = False, require_text: bool = False, **kwargs: Any) -> None:
        self.one_line = one_line
        self.require_text = require_text  # refuse blank text even when whitespace is kept
        messages = {"required": invalid, "null": invalid, "invalid": invalid, "blank": invalid}
        super().__init__(error_messages={**messages, **kwargs.pop("error_messages", {})}, **kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str) or (self.require_text and not data.strip()):
            self.fail("invalid")
        problem = text_problem(data, one_line=self.one_line)
        if problem:
            raise serializers.ValidationError(problem)
        return super().to_internal_value(data)


class WholeNumber(serializers.IntegerField):
    """An int, or ASCII digits with accept_digits (form posts); never true/false, 2.0 or "²"."""

    def __init__(self, *, accept_digits: bool = False, **kwargs: Any) -> None:
        self.accept_digits = accept_digits
        super().__init__(**kwargs)
        lo, hi = self.min_value, self.max_value
        self.error_messages.update(
            {
                "invalid": f"must be a whole number from {lo} to {hi} (ASCII digits).",
                "required": f"is required: a whole number from {lo} to {hi}.",
                "null": f"must be a whole number from {lo} to {hi}, not null.",
                "min_value": f"must be from {lo} to {hi}, got {{value}}.",
                "max_value": f"must be from {lo} to {hi}, got {{value}}.",
            }
        )
        self.validators = []  # the range is checked here, naming the value sent

    def to_internal_value(self, data: Any) -> int:
        value = whole_number(data) if self.accept_digits or not isinstance(data, str) else None
        if value is None:
            self.fail("invalid")
        assert value is not None
        if self.min_value is not None and value < self.min_value:
            self.fail("min_value", value=value)
        if self.max_value is not None and value > self.max_value:
            self.fail("max_value", value=value)
        return value


class KeywordList(serializers.ListField):
    """Log-line keywords matched literally: trimmed, non-empty, storable, each once."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            child=serializers.CharField(max_length=MAX_KEYWORD_LENGTH),
            max_length=MAX_KEYWORDS,
            allow_null=True,
            required=False,
            **kwargs,
        )

    def to_internal_value(self, data: Any) -> list[str]:
        if data in (None, ""):
            return []
        if not isinstance(data, list) or not all(isinstance(k, str) for k in data):
            raise serializers.ValidationError("must be a list of strings.")
        if len(data) > MAX_KEYWORDS:
            raise serializers.ValidationError(f"at most {MAX_KEYWORDS} keywords are accepted, got {len(data)}.")
        cleaned: list[str] = []
        errors: list[str] = []
        for keyword in (k.strip() for k in data):
            if not keyword:
                errors.append("keywords cannot be empty.")
            elif len(keyword) > MAX_KEYWORD_LENGTH:
                errors.append(f"each keyword must be at most {MAX_KEYWORD_LENGTH} characters.")
            elif problem := text_problem(keyword):
                errors.append(problem)
            elif keyword not in cleaned:
                cleaned.append(keyword)
        if errors:
            raise serializers.ValidationError(errors)
        return cleaned


class FlatErrorsSerializer(serializers.Serializer):
    """Errors keyed by the path the caller sent, for the API and the form alike."""

    @property
    def errors(self) -> ReturnDict:
        return ReturnDict(list(flat_errors(super().errors).items()), serializer=self)


# --- CreateJob ------------------------------------------------------------------------------


def gpu_count_error(gpu: Any) -> str | None:
    if isinstance(gpu, bool) or not isinstance(gpu, int) or gpu not in ALLOWED_GPU_COUNTS:
        return f"Invalid GPU count {gpu}, only supported: [{' '.join(map(str, ALLOWED_GPU_COUNTS))}]"
    return None


class GpuCount(serializers.IntegerField):
    def to_internal_value(self, data: Any) -> int:
        value = whole_number(data) if isinstance(data, str) else data
        error = gpu_count_error(value)
        if error:
            raise serializers.ValidationError(error)
        return cast(int, value)


class CpuCount(serializers.FloatField):
    def to_internal_value(self, data: Any) -> float:
        try:
            value = float(data)
            if not 0 < value <= 1024:
                raise ValueError
        except (TypeError, ValueError):
            raise serializers.ValidationError(
                f"must be a number of CPUs above 0 and at most 1024, got {data!r}."
            ) from None
        return value


class Memory(serializers.CharField):
    def to_internal_value(self, data: Any) -> str:
        if data in ("", None):
            return ""
        if not (isinstance(data, (str, int)) and not isinstance(data, bool) and MEMORY_RE.fullmatch(str(data))):
            raise serializers.ValidationError(f"must look like 512Mi, 4Gi or 16G, got {data!r}.")
        return str(data)


class ResourceConfigSerializer(serializers.Serializer):
    default_error_messages = {"invalid": "must be an object with cpu, memory and gpu."}

    cpu = CpuCount(required=False, default=1.0, help_text="CPUs per instance, above 0 and at most 1024")
    memory = Memory(required=False, default="", allow_null=True, allow_blank=True, help_text="e.g. 512Mi, 4Gi, 16G")
    gpu = GpuCount(required=False, default=0, help_text="GPUs per instance: " + ", ".join(map(str, ALLOWED_GPU_COUNTS)))


class RoleSpecSerializer(serializers.Serializer):
    """One role; whether the job type has it, and how many, is JobSubmitSerializer.validate_job_specs."""

    default_error_messages = {"invalid": "must be an object with type, pod_count and resource_config."}

    type = Text(
        invalid='must be the name of a role of the job type, e.g. "Worker".',
        help_text="a role of the job type: " + "; ".join(f"{t}: {', '.join(r)}" for t, r in JOB_TYPE_ROLES.items()),
    )
    pod_count = WholeNumber(
        accept_digits=True,
        min_value=1,
        max_value=MAX_REPLICAS,
        required=False,
        default=1,
        help_text="replicas of this role",
    )
    image = Text(
        invalid="must be a string of at most 512 characters.",
        one_line=True,
        max_length=512,
        required=False,
        allow_null=True,
        allow_blank=True,
        default="",
        error_messages={"max_length": "must be a string of at most 512 characters."},
    )
    resource_config = ResourceConfigSerializer(required=False, allow_null=True)


class Envs(serializers.DictField):
    """Environment variables every instance gets; names a job may not set are refused."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            child=serializers.CharField(max_length=MAX_ENV_VALUE), required=False, allow_null=True, **kwargs
        )

    def to_internal_value(self, data: Any) -> dict[str, str]:
        if data in (None, ""):
            return {}
        if not isinstance(data, dict):
            raise serializers.ValidationError("must be an object mapping names to string values.")
        errors: dict[str, list[str]] = {}
        if len(data) > MAX_ENV_COUNT:
            raise serializers.ValidationError(f"at most {MAX_ENV_COUNT} variables are accepted, got {len(data)}.")
        out: dict[str, str] = {}
        for name, value in data.items():
            problem = self._problem(name, value)
            if problem:
                errors[name] = [problem]
            else:
                out[name] = str(value)
        if errors:
            raise serializers.ValidationError(errors)
        return out

    @staticmethod
    def _problem(name: Any, value: Any) -> str | None:
        if not isinstance(name, str) or not ENV_NAME_RE.fullmatch(name):
            return "names must match ^[A-Za-z_][A-Za-z0-9_]*$."
        if name.upper() in DENIED_ENV_NAMES:
            return f"{name} cannot be set for a job (it changes how every process starts)."
        if name in RESERVED_ENV_NAMES:
            return f"{name} is set by Vigil for every instance and cannot be given by the job."
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            return "values must be strings."
        value = str(value)
        if len(value) > MAX_ENV_VALUE:
            return f"values must be at most {MAX_ENV_VALUE} characters."
        if problem := text_problem(value):
            return problem
        if value == MASKED_VALUE:
            return "is still the mask shown for a secret you may not see; enter the value itself."
        return None


class Backend(serializers.CharField):
    """One of settings.JOB_BACKENDS, read when the request comes (tests change it)."""

    def to_internal_value(self, data: Any) -> str:
        backends = tuple(django_settings.JOB_BACKENDS)
        backend = data or "local"
        if not isinstance(backend, str) or backend not in backends:
            raise serializers.ValidationError(f"{backend!r} is not configured; accepted: {', '.join(backends)}.")
        return backend


class Workdir(Text):
    def to_internal_value(self, data: Any) -> str:
        if data in ("", None):
            return ""
        if not isinstance(data, str) or len(data) > 1024 or not data.startswith("/"):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBoolean(serializers.BooleanField):
    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            raise serializers.ValidationError("must be true or false.")
        return data


class SubmissionSettingsSerializer(serializers.Serializer):
    default_error_messages = {
        "invalid": "must be an object with enable_error_monitoring_in_aimaster and error_monitoring_args."
    }

    enable_error_monitoring_in_aimaster = StrictBoolean(
        required=False, default=False, help_text="Automatic Fault Tolerance on or off"
    )
    error_monitoring_args = Text(
        invalid=f"must be a flag string of at most {MAX_FLAGS} characters.",
        max_length=MAX_FLAGS,
        required=False,
        allow_null=True,
        allow_blank=True,
        default="",
        error_messages={"max_length": f"must be a flag string of at most {MAX_FLAGS} characters."},
        help_text="fault-tolerance flags, e.g. --enable-job-restart=True --max-num-of-job-restart=3",
    )
    retryable_errors = KeywordList(help_text="log-line keywords that make a failure retryable")

    def validate_error_monitoring_args(self, value: str | None) -> str:
        try:
            parse_flags(value or "")
        except FlagError as exc:
            raise serializers.ValidationError(str(exc)) from None
        return (value or "").strip()


def _backend_class(name: str) -> type[JobBackend]:
    """The configured backend's class, for its capability flags (nothing is started)."""
    return cast("type[JobBackend]", import_string(django_settings.JOB_BACKENDS[name]["BACKEND"]))


class WorkspaceRef(serializers.CharField):
    """A workspace id (an int, or digits) or slug, as jobs.inputs.workspace_ref reads it."""

    def __init__(self, **kwargs: Any) -> None:
        required = "is required: the id (digits) or slug (starts with a letter) of one of your workspaces."
        super().__init__(error_messages={"required": required, "null": required, "blank": required}, **kwargs)

    def to_internal_value(self, data: Any) -> Any:
        try:
            workspace_ref(data, self.field_name or "workspace")
        except InputError as exc:
            raise serializers.ValidationError(exc.message) from None
        return data


class JobSubmitSerializer(FlatErrorsSerializer):
    """The CreateJob body (SPEC section 8). The workspace is looked up and the
    caller's role checked by jobs.actions.submit_job, which runs this serializer."""

    default_error_messages = {"invalid": "the request body must be a JSON object."}

    workspace = WorkspaceRef(help_text="id (digits) or slug (starts with a letter) of one of your workspaces")
    display_name = Text(
        invalid="is required: a name for the job.",
        one_line=True,
        max_length=MAX_DISPLAY_NAME,
        error_messages={"max_length": f"must be at most {MAX_DISPLAY_NAME} printable characters."},
    )
    job_type = serializers.ChoiceField(
        choices=JobType.choices,
        error_messages={
            "invalid_choice": f"{{input!r}} is not accepted; use one of {', '.join(JOB_TYPE_ROLES)}.",
            "required": f"None is not accepted; use one of {', '.join(JOB_TYPE_ROLES)}.",
            "null": f"None is not accepted; use one of {', '.join(JOB_TYPE_ROLES)}.",
        },
    )
    job_specs = RoleSpecSerializer(
        many=True,
        allow_empty=False,
        error_messages={
            key: 'must be a non-empty list of roles, e.g. [{{"type": "Worker", "pod_count": 2}}].'  # fail() formats
            for key in ("required", "null", "not_a_list", "empty")
        },
    )
    user_command = Text(
        invalid="is required: the shell command every instance runs.",
        require_text=True,
        trim_whitespace=False,
        max_length=MAX_COMMAND,
        error_messages={"max_length": f"must be at most {MAX_COMMAND} characters."},
    )
    envs = Envs(help_text="NAME to value; secrets are masked for those who may not see them")
    backend = Backend(
        required=False,
        allow_null=True,
        allow_blank=True,
        default="local",
        help_text="one of settings.JOB_BACKENDS you may run on",
    )
    workdir = Workdir(
        invalid="must be an absolute path of at most 1024 characters.",
        one_line=True,
        required=False,
        allow_null=True,
        allow_blank=True,
        default="",
    )
    settings = SubmissionSettingsSerializer(required=False, allow_null=True)

    def to_internal_value(self, data: Any) -> Any:
        try:
            return super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if isinstance(exc.detail, dict) and "job_type" in exc.detail:
                # Roles are judged against a known job type (its roles, their caps): fix the type first.
                exc.detail.pop("job_specs", None)
            raise

    def validate_job_specs(self, specs: list[dict]) -> list[dict]:
        """The roles against the job type: known, each once, within its cap, the required ones there."""
        job_type = self.initial_data.get("job_type") if isinstance(self.initial_data, dict) else None
        if not isinstance(job_type, str) or job_type not in JOB_TYPE_ROLES:
            return specs  # job_type names its own error
        allowed = JOB_TYPE_ROLES[job_type]
        by_lower = {r.lower(): r for r in allowed}
        errors: dict[int, dict[str, list[str]]] = {}
        seen: list[str] = []
        for i, spec in enumerate(specs):
            role = by_lower.get(spec["type"].lower())
            if role is None:
                errors[i] = {"type": [f"{spec['type']!r} is not a role of {job_type}; accepted: {', '.join(allowed)}."]}
            elif role in seen:
                errors[i] = {"type": [f"role {role} is given twice; give each role once with its pod_count."]}
            else:
                seen.append(role)
                spec["type"] = role
                cap = allowed[role] or MAX_REPLICAS
                if spec["pod_count"] > cap:
                    errors[i] = {"pod_count": [f"must be from 1 to {cap}, got {spec['pod_count']}."]}
        if errors:
            raise serializers.ValidationError(cast(Any, errors))  # item index -> field -> messages
        missing = [f"{job_type} needs a {r} role." for r in REQUIRED_ROLES.get(job_type, ()) if r not in seen]
        if job_type == "TFJob" and seen and not {"Worker", "Chief"} & set(seen):
            missing.append("TFJob needs a Worker or a Chief role.")
        if missing:
            raise serializers.ValidationError(missing)
        return specs

    def validate(self, attrs: dict) -> dict:
        """Replica groups against the roles: the flag string alone cannot say whether N
        divides the instances (core.replicas)."""
        args = (attrs.get("settings") or {}).get("error_monitoring_args", "")
        groups = parse_flags(args).replica_groups
        instances = sum(spec["pod_count"] for spec in attrs["job_specs"])
        error = layout_error(groups, instances, attrs["job_type"])
        backend = attrs.get("backend") or "local"
        if not error and groups and not _backend_class(backend).can_run_replica_groups:
            error = f"--replica-groups: the {backend!r} backend cannot run replica groups (it starts no Lighthouse)"
        if error:
            raise serializers.ValidationError({"settings": {"error_monitoring_args": [error]}})
        return attrs

    def valid_submission(self) -> ValidSubmission:
        data = self.validated_data
        job_settings = data.get("settings") or {}
        args = job_settings.get("error_monitoring_args", "")
        roles = []
        for spec in data["job_specs"]:
            res = spec.get("resource_config") or {}
            roles.append(
                RoleSpec(
                    spec["type"],
                    spec["pod_count"],
                    spec.get("image") or "",
                    res.get("cpu", 1.0),
                    res.get("memory") or "",
                    res.get("gpu", 0),
                )
            )
        return ValidSubmission(
            display_name=data["display_name"].strip(),
            job_type=data["job_type"],
            roles=tuple(roles),
            user_command=data["user_command"],
            envs=data.get("envs") or {},
            backend=data.get("backend") or "local",
            fault_tolerance=job_settings.get("enable_error_monitoring_in_aimaster", False),
            error_monitoring_args=args,
            ft_config=parse_flags(args),
            retryable_keywords=tuple(job_settings.get("retryable_errors") or ()),
            workdir=data.get("workdir") or "",
        )


# --- a retryable keyword from a verdict (the job page, issue 13) -------------------------------


class RetryableKeywordSerializer(serializers.Serializer):
    """The job page's "make this line retryable" post."""

    keyword = serializers.CharField(max_length=MAX_KEYWORD_LENGTH, trim_whitespace=True)
    scope = serializers.ChoiceField(choices=["job", "workspace"])

    def validate_keyword(self, value: str) -> str:
        if "\n" in value or "\r" in value:
            raise serializers.ValidationError("one line only: the keyword is matched within a line.")
        return value


# --- runtime PATCH -----------------------------------------------------------------------------

MAX_HANG_INTERVAL = 30 * 24 * 3600


def hang_interval_error(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        return "must be a whole number of seconds, -1 to suspend hang detection, or null to restore the job's setting."
    if value != -1 and not 0 < value <= MAX_HANG_INTERVAL:
        return f"must be from 1 to {MAX_HANG_INTERVAL} seconds, or -1 to suspend hang detection; got {value}."
    return None


class HangInterval(serializers.IntegerField):
    """Seconds of silence before a hang, -1 to suspend detection, null to restore the
    job's --job-hang-interval. With accept_digits, "60" is 60 (the API takes form posts)."""

    def __init__(self, *, accept_digits: bool = True, refusal_prefix: str = "", **kwargs: Any) -> None:
        self.accept_digits = accept_digits
        self.refusal_prefix = refusal_prefix  # the SDK's refusals are sentences that start with the field
        kwargs.setdefault("help_text", "seconds > 0, -1 to suspend hang detection, null to restore the job's setting")
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> int:
        if self.accept_digits and isinstance(data, str) and whole_number(data) is not None:
            data = whole_number(data)
        error = hang_interval_error(data)
        if error:
            raise serializers.ValidationError(self.refusal_prefix + error)
        return data


REQUIRED_HANG_INTERVAL = "is required: seconds > 0, -1 to suspend, or null."


class RuntimeSerializer(serializers.Serializer):
    """PATCH /api/v1/jobs/<id>/runtime/: the hang interval while the job runs."""

    job_hang_interval = HangInterval(allow_null=True, error_messages={"required": REQUIRED_HANG_INTERVAL})

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, dict):  # the one field it needs names what is missing
            raise serializers.ValidationError({"job_hang_interval": [REQUIRED_HANG_INTERVAL]})
        return super().to_internal_value(data)
