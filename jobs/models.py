"""The domain of SPEC section 2: workspaces, jobs, attempts, instances, restart
records and events. Every status change goes through a compare-and-set helper
that reports whether it happened, so a stale worker cannot move a job twice."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from enum import StrEnum

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone

from core.flags import FaultToleranceConfig

from .inputs import validate_name, validate_workspace_slug
from .tokens import seal, unseal
from .verdicts import describe, exit_status_text


def token_digest(token: str) -> str:
    # Tokens carry 256 bits of randomness, so a plain SHA-256 is enough (no KDF).
    return hashlib.sha256(token.encode()).hexdigest()


def new_token(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(32)


class WorkspaceQuerySet(models.QuerySet):
    def for_user(self, user):
        if not user.is_authenticated:
            return self.none()
        return self.filter(memberships__user=user).distinct()


OS_USER_NAME = RegexValidator(
    r"^[a-z_][a-z0-9_.-]{0,31}$", "An OS user name: lowercase letters, digits, '_', '.', '-'."
)
SLURM_ACCOUNT_NAME = RegexValidator(
    r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$", "A Slurm account: letters, digits, '_', '.', '-'."
)


class Workspace(models.Model):
    name = models.CharField(max_length=100, validators=[validate_name])
    # Starts with a letter, so that an all-digit reference is always an id.
    slug = models.SlugField(max_length=100, unique=True, validators=[validate_workspace_slug])
    created_at = models.DateTimeField(default=timezone.now)
    # Retryable error keywords that count for every job of the workspace (added by an
    # owner/admin from a failure's verdict, issue 13), after each job's own.
    retryable_keywords = models.JSONField(default=list, blank=True)
    # Set by staff only (admin): who this workspace's jobs run as on this machine and the
    # cluster, when the console may switch users (docs/security.md).
    run_as = models.CharField(
        "run as OS user",
        max_length=32,
        blank=True,
        default="",
        validators=[OS_USER_NAME],
        help_text="The OS user this workspace's jobs run as (local backend, and Slurm when the console "
        "runs as root). Empty: VIGIL_LOCAL_RUN_AS (nobody) locally, the console's "
        "own cluster user on Slurm.",
    )
    slurm_account = models.CharField(
        max_length=64,
        blank=True,
        default="",
        validators=[SLURM_ACCOUNT_NAME],
        help_text="The Slurm account (sbatch --account) this workspace's jobs are charged to. "
        "Empty: the backend's account option.",
    )
    # Set by an admin of the site (admin): --enable-warm-restart for jobs that do not say (issue 19).
    warm_restart_default = models.BooleanField(
        "warm restarts by default",
        default=False,
        help_text="Jobs with fault tolerance on that do not give --enable-warm-restart get it True: "
        "each instance keeps a parked interpreter for the next attempt (local backend).",
    )

    objects = WorkspaceQuerySet.as_manager()

    def __str__(self):
        return self.name

    def role_of(self, user) -> str | None:
        if not user.is_authenticated:
            return None
        m = self.memberships.filter(user=user).only("role").first()
        return m.role if m else None


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    ADMIN = "admin", "Admin"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer"


WRITE_ROLES = (Role.OWNER, Role.ADMIN, Role.MEMBER)
ADMIN_ROLES = (Role.OWNER, Role.ADMIN)


class Membership(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["workspace", "user"], name="one_membership_per_user")]

    def __str__(self):
        return f"{self.user} in {self.workspace} ({self.role})"


class ApiToken(models.Model):
    """A personal API token. Only its digest is stored; the prefix lets a person
    recognise it in a list and lets scanners spot a leaked one."""

    PREFIX = "vpt_"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, default="default")
    digest = models.CharField(max_length=64, unique=True)
    hint = models.CharField(max_length=16, help_text="first characters, for recognising the token")
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Null means it never expires (tokens made before expiry existed, and "never" on the page).
    expires_at = models.DateTimeField(null=True, blank=True)

    def __str__(self):
        return f"{self.hint}… ({self.user})"

    LAST_USED_EVERY = timedelta(seconds=60)

    @classmethod
    def issue(cls, user, name: str = "default", expires_at=None) -> tuple["ApiToken", str]:
        raw = new_token(cls.PREFIX)
        token = cls.objects.create(user=user, name=name, digest=token_digest(raw), hint=raw[:10], expires_at=expires_at)
        return token, raw

    @classmethod
    def authenticate(cls, raw: str):
        if not raw.startswith(cls.PREFIX):
            return None
        token = (
            cls.objects.select_related("user")
            .filter(digest=token_digest(raw), revoked_at__isnull=True)
            .filter(models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=timezone.now()))
            .first()
        )
        if token is None or not token.user.is_active:
            return None
        # At most one write a minute per token: a write on every request would queue
        # every read behind a busy SQLite writer.
        now = timezone.now()
        stale = now - cls.LAST_USED_EVERY
        if token.last_used_at is None or token.last_used_at < stale:
            cls.objects.filter(
                models.Q(last_used_at__isnull=True) | models.Q(last_used_at__lt=stale), pk=token.pk
            ).update(last_used_at=now)
        return token

    @property
    def expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    def revoke(self) -> bool:
        return bool(ApiToken.objects.filter(pk=self.pk, revoked_at__isnull=True).update(revoked_at=timezone.now()))


class JobType(models.TextChoices):
    PYTORCH = "PyTorchJob", "PyTorch"
    TENSORFLOW = "TFJob", "TensorFlow"
    MPI = "MPIJob", "MPI"
    ELASTIC_BATCH = "ElasticBatchJob", "ElasticBatch"


class JobStatus(models.TextChoices):
    CREATING = "Creating"
    QUEUING = "Queuing"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    STOPPING = "Stopping"
    STOPPED = "Stopped"


FINISHED_JOB_STATUSES = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED)
LIVE_JOB_STATUSES = (JobStatus.CREATING, JobStatus.QUEUING, JobStatus.RUNNING, JobStatus.RESTARTING)


def compare_and_set(model, pk, expected: str | tuple | list, new: str, **fields) -> bool:
    """Move one row from an expected status to a new one; True if this call did it."""
    expected = (expected,) if isinstance(expected, str) else tuple(expected)
    return model.objects.filter(pk=pk, status__in=expected).update(status=new, **fields) == 1


class StatusTransitions:
    """`transition()` for a model with a `status` field: a compare-and-set that
    refreshes this object only when it happened. A model that also stamps
    `updated_at` on each change lists it in STAMP_ON_TRANSITION."""

    STAMP_ON_TRANSITION: tuple[str, ...] = ()
    pk: int
    status: str

    def transition(self, expected: str | tuple | list, new: str, **fields) -> bool:
        now = timezone.now()
        stamps = {name: now for name in self.STAMP_ON_TRANSITION if name not in fields}
        ok = compare_and_set(type(self), self.pk, expected, new, **stamps, **fields)
        if ok:
            self.status = new
            for k, v in fields.items():
                setattr(self, k, v)
        return ok


class Job(StatusTransitions, models.Model):
    TOKEN_PREFIX = "vjt_"
    STAMP_ON_TRANSITION = ("updated_at",)
    # Not stored: set by submit_job on the instance it returns. False when the task
    # queue did not take the launch in time (the sweep launches it later), None when
    # not known yet.
    launch_queued: bool | None = None

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="jobs")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    display_name = models.CharField(max_length=128)
    job_type = models.CharField(max_length=20, choices=JobType.choices)
    # [{"type": "Worker", "pod_count": 3, "image": "", "resource_config": {"cpu": 1, "memory": "2Gi", "gpu": 0}}]
    job_specs = models.JSONField(default=list)
    user_command = models.TextField()
    envs = models.JSONField(default=dict, blank=True)
    image = models.CharField(max_length=512, blank=True, default="")
    workdir = models.CharField(max_length=1024, blank=True, default="")
    backend = models.CharField(max_length=32, default="local")

    # Fault tolerance: the toggle, the raw flag string as given, its parsed canonical form.
    fault_tolerance = models.BooleanField(default=False)
    error_monitoring_args = models.TextField(blank=True, default="")
    ft_config = models.JSONField(default=dict, blank=True)
    retryable_keywords = models.JSONField(default=list, blank=True)  # from the job's settings
    sdk_retryable_keywords = models.JSONField(default=list, blank=True)  # set by the SDK at run time
    # Runtime override of the hang interval (API or SDK); -1 suspends hang detection.
    hang_interval_override = models.IntegerField(null=True, blank=True)
    # When the override last changed: silence before it does not count against the
    # new interval (hang_detect(-1) around a silent step must not end in a hang).
    hang_interval_set_at = models.DateTimeField(null=True, blank=True)

    status = models.CharField(max_length=12, choices=JobStatus.choices, default=JobStatus.CREATING, db_index=True)
    reason = models.TextField(blank=True, default="")
    restart_count = models.PositiveIntegerField(default=0)
    current_attempt = models.PositiveIntegerField(default=0)
    stop_requested = models.BooleanField(default=False)
    stopped_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    last_progress_at = models.DateTimeField(null=True, blank=True)
    last_progress_step = models.BigIntegerField(null=True, blank=True)

    token_digest = models.CharField(max_length=64, blank=True, default="", db_index=True)
    token_hint = models.CharField(max_length=16, blank=True, default="")
    token_created_at = models.DateTimeField(null=True, blank=True)
    # The plain token is kept only to hand it to new instances of this job; it
    # never leaves the server in an API response after the submit call.
    token_sealed = models.TextField(blank=True, default="")

    # Small per-job monitor memory (C4D consecutive counts, seen watchdog hints...),
    # read and written only through monitoring.state.MonitorState; the version makes
    # its save a compare-and-set, so two workers cannot both write it.
    monitor_state = models.JSONField(default=dict, blank=True)
    monitor_state_version = models.PositiveIntegerField(default=0)
    # When the sweep must next tick this Running job (monitoring.schedule): its next hang
    # deadline or periodic check. Null: every sweep. An event (an announced exit, the SDK's
    # first progress, a new hang interval) sets it back to null and bumps monitor_state_version,
    # so a tick that read the job before the event cannot schedule past it.
    monitor_next_check_at = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["workspace", "status"])]

    def __str__(self):
        return f"{self.display_name} (#{self.pk})"

    @property
    def finished(self) -> bool:
        return self.status in FINISHED_JOB_STATUSES

    @property
    def ft(self) -> FaultToleranceConfig:
        """The parsed fault-tolerance flags (parsed again only when ft_config changed)."""
        raw = self.ft_config or {}
        cached = self.__dict__.get("_ft")
        if cached is None or cached[0] != raw:
            cached = (dict(raw), FaultToleranceConfig.from_dict(raw))
            self.__dict__["_ft"] = cached
        return cached[1]

    @property
    def restart_budget(self) -> int:
        """How many whole-job restarts the flags allow (--max-num-of-job-restart)."""
        return self.ft.max_num_of_job_restart

    def reset_token(self) -> str:
        raw = new_token(self.TOKEN_PREFIX)
        self.token_digest = token_digest(raw)
        self.token_hint = raw[:10]
        self.token_created_at = timezone.now()
        self.token_sealed = seal(raw)
        Job.objects.filter(pk=self.pk).update(
            token_digest=self.token_digest,
            token_hint=self.token_hint,
            token_created_at=self.token_created_at,
            token_sealed=self.token_sealed,
        )
        return raw

    def plain_token(self) -> str:
        return unseal(self.token_sealed) if self.token_sealed else ""

    def role_counts(self) -> dict[str, int]:
        return {spec["type"]: int(spec.get("pod_count", 1)) for spec in self.job_specs}


class AttemptStatus(models.TextChoices):
    QUEUING = "Queuing"
    STARTING = "Starting"
    RUNNING = "Running"
    STOPPING = "Stopping"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    STOPPED = "Stopped"


LIVE_ATTEMPT_STATUSES = (AttemptStatus.QUEUING, AttemptStatus.STARTING, AttemptStatus.RUNNING, AttemptStatus.STOPPING)


# Progress reports kept per attempt for the cadence: the SDK sends at most one a second,
# so 240 cover the last 4 minutes at least, enough step times for a p99.
PROGRESS_SAMPLES = 240


class Attempt(StatusTransitions, models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveIntegerField()
    status = models.CharField(max_length=10, choices=AttemptStatus.choices, default=AttemptStatus.QUEUING)
    reason = models.TextField(blank=True, default="")
    backend_handle = models.JSONField(default=dict, blank=True)
    master_port = models.PositiveIntegerField(null=True, blank=True)
    # Stage timestamps (SPEC: queued, preparing, starting, running, stopping).
    queued_at = models.DateTimeField(default=timezone.now)
    preparing_at = models.DateTimeField(null=True, blank=True)
    starting_at = models.DateTimeField(null=True, blank=True)
    running_at = models.DateTimeField(null=True, blank=True)  # first output of any instance
    first_progress_at = models.DateTimeField(null=True, blank=True)
    stopping_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    # When the failure that ended the previous attempt was detected (goodput ledger).
    detected_failure_at = models.DateTimeField(null=True, blank=True)
    made_progress = models.BooleanField(default=False)
    # The step cadence from report_progress, for the hang-interval suggestion when the
    # logs carry no timestamped step lines: [epoch seconds, step] per report that went
    # past the newest kept step (ranks repeat each other's steps), the last PROGRESS_SAMPLES.
    progress_samples = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["job", "number"]
        constraints = [models.UniqueConstraint(fields=["job", "number"], name="one_attempt_number_per_job")]

    def __str__(self):
        return f"{self.job_id}#{self.number}"


class InstanceStatus(models.TextChoices):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    STOPPED = "Stopped"
    LOST = "Lost"


class Instance(StatusTransitions, models.Model):
    attempt = models.ForeignKey(Attempt, on_delete=models.CASCADE, related_name="instances")
    role = models.CharField(max_length=20)
    index = models.PositiveIntegerField()
    name = models.CharField(max_length=64)  # "<role lower>-<index>"
    rank = models.PositiveIntegerField(default=0)
    node = models.CharField(max_length=128, blank=True, default="")
    status = models.CharField(max_length=10, choices=InstanceStatus.choices, default=InstanceStatus.PENDING)
    exit_code = models.IntegerField(null=True, blank=True)
    signal = models.IntegerField(null=True, blank=True)
    backend_reason = models.CharField(max_length=256, blank=True, default="")
    # How the backend started it (warm restarts, issue 19): "warm" (a parked interpreter),
    # "cold", or "" when the backend does not say; start_reason says why it was cold.
    start = models.CharField(max_length=8, blank=True, default="")
    start_reason = models.CharField(max_length=256, blank=True, default="")
    started_at = models.DateTimeField(null=True, blank=True)
    exited_at = models.DateTimeField(null=True, blank=True)
    last_output_at = models.DateTimeField(null=True, blank=True)
    restarts = models.PositiveIntegerField(default=0)  # instance-level (Async) restarts
    handle = models.JSONField(default=dict, blank=True)
    # Failure already handled by the monitor (idempotency: exit seen once).
    handled_exit_key = models.CharField(max_length=128, blank=True, default="")

    class Meta:
        ordering = ["attempt", "rank", "role", "index"]
        constraints = [models.UniqueConstraint(fields=["attempt", "name"], name="one_instance_name_per_attempt")]
        # Every failure decision asks which other jobs failed on the same node within the same
        # minute (monitoring.failures.context_of, issue 26): without it, a scan of every instance.
        indexes = [models.Index(fields=["node", "exited_at"], name="instance_node_exited")]

    def __str__(self):
        return f"{self.name} of {self.attempt}"


class RestartKind(models.TextChoices):
    JOB = "job", "Whole job"
    INSTANCE = "instance", "One instance"


class RestartResult(models.TextChoices):
    PENDING = "Pending"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class RestartRecord(models.Model):
    """One restart decision (SPEC section 1's fields)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="restart_records")
    number = models.PositiveIntegerField(help_text="restarts of this kind so far, this one included")
    kind = models.CharField(max_length=10, choices=RestartKind.choices)
    attempt = models.PositiveIntegerField(help_text="the attempt that failed")
    new_attempt = models.PositiveIntegerField(null=True, blank=True)
    restart_time = models.DateTimeField(default=timezone.now)
    node_name = models.CharField(max_length=128, blank=True, default="")
    instance_name = models.CharField(max_length=64, blank=True, default="")
    error_code = models.CharField(max_length=64, blank=True, default="")
    error_message = models.TextField(blank=True, default="")
    error_source = models.CharField(max_length=20, blank=True, default="")
    rule = models.CharField(max_length=64, blank=True, default="")
    reason = models.TextField(blank=True, default="")
    cause = models.TextField(blank=True, default="")
    next_step = models.TextField(blank=True, default="")
    root_cause = models.BooleanField(default=True)
    cascades = models.JSONField(default=list, blank=True)  # [{"instance", "error_code", "message"}]
    log_offset = models.BigIntegerField(null=True, blank=True)  # byte offset of the line the classifier used
    # How sure the verdict is (issue 13): the failure family of the signature that decided,
    # the log line (or backend reason) it decided on ("" when only the exit status did),
    # and the training step the SDK had reported when it failed (the repeated-failure guard).
    family = models.CharField(max_length=32, blank=True, default="")
    evidence = models.TextField(blank=True, default="")
    progress_step = models.BigIntegerField(null=True, blank=True)
    # Where it failed (core.failpoint, issue 26): the last training step (the SDK's, else the
    # log's step lines) and the phase ("startup" before the first progress, "training";
    # "" on records older than failure points); with `evidence`, what the guard compares.
    failure_step = models.BigIntegerField(null=True, blank=True)
    failure_phase = models.CharField(max_length=10, blank=True, default="")
    # The epoch the log named beside a step with no total ("Epoch: 3 step: 20"): the guard
    # orders such points by (epoch, step); null when the step is global or the SDK's.
    failure_epoch = models.BigIntegerField(null=True, blank=True)
    # The verdict's kind (core.kinds: transient, deterministic, ambiguous; "" for a hang),
    # whose words and public-report counts the reason carries.
    verdict_kind = models.CharField(max_length=16, blank=True, default="")
    result = models.CharField(max_length=10, choices=RestartResult.choices, default=RestartResult.PENDING)
    duration_seconds = models.FloatField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    idempotency_key = models.CharField(max_length=200, unique=True)

    class Meta:
        ordering = ["job", "restart_time", "id"]

    def __str__(self):
        return f"restart {self.number} of job {self.job_id}"

    @property
    def verdict(self):
        """How sure the verdict was: what decided, its family and line (jobs.verdicts)."""
        return describe(self.error_source, self.family, self.evidence, self.error_code)

    @property
    def decided_by_exit_status(self) -> bool:
        return self.verdict.by_exit_status

    @property
    def stack_snapshot(self) -> "Diagnosis | None":
        """The stack snapshot taken when this record's attempt hung (None for other restarts)."""
        if self.error_source != "Hang":
            return None
        return (
            Diagnosis.objects.filter(
                job_id=self.job_id, attempt=self.attempt, kind=DiagnosisKind.STACKS, trigger=DiagnosisTrigger.HANG
            )
            .order_by("id")
            .first()
        )

    @property
    def exit_status_text(self) -> str:
        """ "exit code 1" / "signal SIGKILL", from the error code the exit status gave."""
        return exit_status_text(self.error_code)


class EventType(models.TextChoices):
    RESTART = "restart", "Restart"
    JOB_FAILED = "job_failed", "Job failed"
    HANG = "hang", "Hang"
    EXIT_HANG = "exit_hang", "Exit hang"
    C4D = "c4d", "C4D diagnosis"
    NODE_ISOLATED = "node_isolated", "Node isolated"
    STACK_ANALYSIS = "stack_analysis", "Stack analysis ready"
    CUSTOM_MESSAGE = "custom_message", "Custom message"
    DECISION = "decision", "Monitor decision"
    STATUS = "status", "Status change"
    SUGGESTION = "suggestion", "Suggestion"
    STRAGGLER = "straggler", "Straggler"


# The event types people subscribe to with event rules (SPEC section 7).
NOTIFIABLE_EVENT_TYPES = (
    EventType.RESTART,
    EventType.JOB_FAILED,
    EventType.HANG,
    EventType.EXIT_HANG,
    EventType.C4D,
    EventType.NODE_ISOLATED,
    EventType.CUSTOM_MESSAGE,
)


class EventLevel(models.TextChoices):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class JobEvent(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    type = models.CharField(max_length=20, choices=EventType.choices, db_index=True)
    level = models.CharField(max_length=10, choices=EventLevel.choices, default=EventLevel.INFO)
    message = models.TextField()
    payload = models.JSONField(default=dict, blank=True)
    attempt = models.PositiveIntegerField(null=True, blank=True)
    instance = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    # Same decision seen twice (re-delivered task, second worker) writes one row.
    idempotency_key = models.CharField(max_length=200, null=True, blank=True, unique=True)

    class Meta:
        ordering = ["job", "id"]

    def __str__(self):
        return f"{self.type}: {self.message[:60]}"


class DiagnosisKind(models.TextChoices):
    STACKS = "stacks", "Stack snapshot"
    C4D = "c4d", "C4D"
    STRAGGLER = "straggler", "Straggler"


class DiagnosisTrigger(StrEnum):
    """What asked for a diagnosis. Not field choices: the stored values stay free text
    in the schema, as they have always been."""

    HANG = "hang"  # the monitor, before a hang restart
    ON_DEMAND = "on_demand"  # a person, from the page or the API
    PERIODIC = "periodic"  # the monitor's periodic checks (C4D, stragglers)


class Diagnosis(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="diagnoses")
    attempt = models.PositiveIntegerField()
    kind = models.CharField(max_length=12, choices=DiagnosisKind.choices)
    trigger = models.CharField(max_length=20, default=DiagnosisTrigger.HANG)
    summary = models.TextField()
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["job", "-created_at", "-id"]


class C4DReport(models.Model):
    """Collective progress that one rank's SDK reported (C4D input)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="c4d_reports")
    attempt = models.PositiveIntegerField()
    rank = models.PositiveIntegerField()
    records = models.JSONField(default=list)  # the latest window: [{"seq","op","enter","exit"}]
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "attempt", "rank"], name="one_c4d_report_per_rank")]


class NodeFault(models.Model):
    """Classified faults counted per node across all jobs (node reputation)."""

    node = models.CharField(max_length=128, db_index=True)
    backend = models.CharField(max_length=32, default="local")
    job = models.ForeignKey(Job, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    error_code = models.CharField(max_length=64)
    retryable = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)


class NodeServiceKind(models.TextChoices):
    ISOLATE = "isolate", "Isolated"
    RESTORE = "restore", "Returned to service"


class NodeServiceAction(models.Model):
    """A node taken out of service (drained) or returned to it: by Vigil on its own
    evidence (`by` is None, `job` the job whose fault tipped it) or by a staff member,
    with why. The nodes page shows the latest per node."""

    backend = models.CharField(max_length=32)
    node = models.CharField(max_length=128, db_index=True)
    kind = models.CharField(max_length=10, choices=NodeServiceKind.choices)
    by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    job = models.ForeignKey(Job, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    reason = models.CharField(max_length=400)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self):
        return f"{self.get_kind_display()} {self.backend}:{self.node}"


class NodeErrorState(models.TextChoices):
    PROPOSED = "proposed", "Proposed for isolation"  # waits for staff
    ISOLATED = "isolated", "Isolated automatically"  # corroborated (core.isolation)
    CONFIRMED = "confirmed", "Isolated by staff"
    DISMISSED = "dismissed", "Dismissed by staff"
    NOTED = "noted", "Noted"  # the node was already out of service


class NodeError(models.Model):
    """One job attempt's C4D Error naming a node: the evidence core.isolation weighs,
    and while PROPOSED the isolation proposal staff confirm or dismiss on the nodes
    page. Who decided, when and why is kept."""

    backend = models.CharField(max_length=32)
    node = models.CharField(max_length=128, db_index=True)
    job = models.ForeignKey(Job, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    attempt = models.PositiveIntegerField(default=1)
    workspace_id_seen = models.IntegerField(null=True, blank=True)  # kept if the job is deleted
    submitter_id_seen = models.IntegerField(null=True, blank=True)
    rank = models.PositiveIntegerField(null=True, blank=True)
    kind = models.CharField(max_length=32)
    evidence = models.CharField(max_length=400, blank=True, default="")
    state = models.CharField(max_length=10, choices=NodeErrorState.choices, default=NodeErrorState.PROPOSED)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_reason = models.CharField(max_length=400, blank=True, default="")

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["job", "attempt", "backend", "node"], name="one_node_error_per_attempt")
        ]

    def __str__(self):
        return f"C4D {self.kind} on {self.backend}:{self.node} ({self.state})"
