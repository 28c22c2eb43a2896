"""The job submission form: plain fields for every part of a CreateJob request,
and the fault-tolerance parameters of SPEC section 3 as fields beside the
"Other configuration" flag box.

Fields and box are one configuration: every field is validated by the same flag
parser the API uses (so the messages match), the fields are rendered into a
flag string with FaultToleranceConfig.to_flags(), and the box wins for every
flag it names (it is the place for pasting a flag string from a script or the
seed's examples). The combined canonical string is what the job stores; the
form previews it as you type. Submission itself is jobs.actions.submit_job.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from django import forms
from django.conf import settings

from core.flags import (
    C4D_RUNTIME_LOG_LEVELS,
    DEFAULT_WARM_MODULES,
    FLAGS,
    KNOWN_FLAGS,
    C4DEnvs,
    C4DLogLevel,
    ExecutionMode,
    FaultToleranceConfig,
    FaultTolerantPolicy,
    FlagError,
    parse_c4d_common_envs,
    parse_flags,
)

from .access import masked_envs
from .inputs import whole_number
from .models import JobType
from .serializers import JobSubmitSerializer
from .submission import ALLOWED_GPU_COUNTS, JOB_TYPE_ROLES, MAX_DISPLAY_NAME

ROLE_ROWS = 4
ALL_ROLES = ("Master", "Worker", "PS", "Chief", "Evaluator", "Launcher")
OTHER = "error_monitoring_args"
# Flags whose blank field means "not given" (their default is derived from other flags).
OPTIONAL_FIELDS = {f.field for f in FLAGS if f.optional}
# Fields whose blank means the flag's default (a form posted before the field existed, or cleared).
BLANK_IS_DEFAULT = {"warm_modules", "replica_groups", "lighthouse_heartbeat_timeout_ms"}

# Form field -> the flag it sets (None: a C4D environment variable).
FT_FIELD_FLAGS = {f.field: f.flag for f in FLAGS if f.field != "c4d_common_envs"}
FLAG_FIELDS = {flag: field for field, flag in FT_FIELD_FLAGS.items()}
# Form field -> C4D variable, for the --c4d-common-envs parts.
C4D_ENV_FIELDS = {
    "c4d_hang_timeout": ("C4D_HANG_TIMEOUT", "hang_timeout_us"),
    "c4d_hang_times": ("C4D_HANG_TIMES", "hang_times"),
    "c4d_conn_bw_check_period": ("C4D_CONN_BW_CHECK_PERIOD", "conn_bw_check_period"),
    "c4d_runtime_log_level": ("C4D_RUNTIME_LOG_LEVEL", "runtime_log_level"),
    "c4d_enable_stats_output": ("C4D_ENABLE_STATS_OUTPUT", "enable_stats_output"),
}
BOOL_FIELDS = {
    "enable_job_restart",
    "enable_warm_restart",
    "enable_job_hang_detection",
    "enable_c4d_hang_detection",
    "enable_job_exit_hang_detection",
    "c4d_enable_stats_output",
}


def _choices(enum) -> list[tuple[str, str]]:
    return [(m.value, m.value) for m in enum]


def _num(**attrs):
    return forms.TextInput(attrs={"inputmode": "numeric", "autocomplete": "off", **attrs})


class JobForm(forms.Form):
    # maxlength only helps the browser; the rule is JobSubmitSerializer's.
    display_name = forms.CharField(
        label="Name", required=False, widget=forms.TextInput(attrs={"maxlength": MAX_DISPLAY_NAME})
    )
    job_type = forms.ChoiceField(label="Job type", choices=JobType.choices, initial=JobType.PYTORCH)
    user_command = forms.CharField(
        label="Command",
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false", "class": "mono"}),
    )
    envs = forms.CharField(
        label="Environment",
        required=False,
        widget=forms.Textarea(
            attrs={"rows": 3, "spellcheck": "false", "class": "mono", "placeholder": "NAME=value, one per line"}
        ),
    )
    backend = forms.ChoiceField(label="Backend")
    workdir = forms.CharField(
        label="Working directory",
        required=False,
        widget=forms.TextInput(attrs={"class": "mono", "placeholder": "default: the job's own"}),
    )
    retryable_errors = forms.CharField(
        label="Retryable error keywords",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "class": "mono", "placeholder": "one per line, matched literally"}),
    )

    fault_tolerance = forms.BooleanField(label="Automatic Fault Tolerance", required=False)
    job_execution_mode = forms.ChoiceField(
        label="Execution mode", choices=_choices(ExecutionMode), initial=ExecutionMode.SYNC
    )
    enable_job_restart = forms.BooleanField(label="Allow whole-job restarts", required=False)
    max_num_of_job_restart = forms.CharField(label="Restart budget", initial="3", widget=_num())
    fault_tolerant_policy = forms.ChoiceField(
        label="Policy", choices=_choices(FaultTolerantPolicy), initial=FaultTolerantPolicy.EXIT_CODE_AND_ERROR_MSG
    )
    max_num_of_same_error = forms.CharField(label="Same-error cap", initial="10", widget=_num())
    max_tolerated_failure_rate = forms.CharField(
        label="Tolerated failure rate", initial="-1", widget=forms.TextInput(attrs={"inputmode": "decimal"})
    )
    enable_warm_restart = forms.BooleanField(label="Warm restarts", required=False)
    warm_modules = forms.CharField(
        label="Warm modules",
        required=False,
        initial=",".join(DEFAULT_WARM_MODULES),
        widget=forms.TextInput(attrs={"class": "mono", "spellcheck": "false"}),
    )
    # Blank: no replica groups (core.flags' 0); the serializer checks that N divides the instances.
    replica_groups = forms.CharField(label="Replica groups (torchft)", required=False, widget=_num(placeholder="off"))
    lighthouse_heartbeat_timeout_ms = forms.CharField(
        label="Lighthouse heartbeat timeout (ms)", required=False, initial="5000", widget=_num()
    )
    enable_job_hang_detection = forms.BooleanField(label="Hang Detection", required=False)
    job_hang_interval = forms.CharField(label="Hang interval (s)", initial="1800", widget=_num())
    # Blank: the larger of 600 s and the hang interval (core.flags), so it follows the hang interval.
    job_hang_startup_interval = forms.CharField(
        label="Start-up interval (s)", required=False, widget=_num(placeholder="600 or the hang interval")
    )
    enable_job_exit_hang_detection = forms.BooleanField(label="Exit-hang detection", required=False)
    job_exit_hang_interval = forms.CharField(label="Exit-hang interval (s)", initial="600", widget=_num())
    enable_c4d_hang_detection = forms.BooleanField(label="C4D Detection", required=False)
    c4d_log_level = forms.ChoiceField(label="C4D log level", choices=_choices(C4DLogLevel), initial=C4DLogLevel.WARNING)
    c4d_hang_timeout = forms.CharField(label="C4D_HANG_TIMEOUT (µs)", initial="10000000", widget=_num())
    c4d_hang_times = forms.CharField(label="C4D_HANG_TIMES", initial="18", widget=_num())
    c4d_conn_bw_check_period = forms.CharField(label="C4D_CONN_BW_CHECK_PERIOD (s)", initial="10", widget=_num())
    c4d_runtime_log_level = forms.ChoiceField(
        label="C4D_RUNTIME_LOG_LEVEL", choices=[(v, v) for v in C4D_RUNTIME_LOG_LEVELS], initial="INFO"
    )
    c4d_enable_stats_output = forms.BooleanField(label="C4D_ENABLE_STATS_OUTPUT", required=False)
    error_monitoring_args = forms.CharField(
        label="Other configuration",
        required=False,
        widget=forms.Textarea(
            attrs={
                "rows": 2,
                "spellcheck": "false",
                "class": "mono",
                "placeholder": "--job-execution-mode=Sync --enable-job-restart=True",
            }
        ),
    )

    def __init__(self, *args, backends=None, **kwargs):
        super().__init__(*args, **kwargs)
        # Only the backends the person may run on (jobs.access); all of them for
        # the flag preview, which submits nothing.
        backends = list(settings.JOB_BACKENDS) if backends is None else list(backends)
        self.fields["backend"].choices = [(b, b) for b in backends]
        if backends:
            self.fields["backend"].initial = "local" if "local" in backends else backends[0]
        for i in range(ROLE_ROWS):
            self.fields[f"role_{i}_type"] = forms.ChoiceField(
                label="Role", required=False, choices=[("", "—")] + [(r, r) for r in ALL_ROLES]
            )
            self.fields[f"role_{i}_replicas"] = forms.CharField(
                label="Replicas", required=False, initial="1", widget=_num(min="1")
            )
            self.fields[f"role_{i}_cpu"] = forms.CharField(
                label="CPU", required=False, initial="1", widget=forms.TextInput(attrs={"inputmode": "decimal"})
            )
            self.fields[f"role_{i}_memory"] = forms.CharField(
                label="Memory", required=False, widget=forms.TextInput(attrs={"placeholder": "4Gi"})
            )
            # A select of the allowed counts (issue 15); still a CharField, so a value posted
            # from elsewhere reaches the serializer and gets the seed's own message.
            self.fields[f"role_{i}_gpu"] = forms.CharField(
                label="GPUs",
                required=False,
                initial="0",
                widget=forms.Select(choices=[(str(n), str(n)) for n in ALLOWED_GPU_COUNTS]),
            )
            self.fields[f"role_{i}_image"] = forms.CharField(
                label="Image", required=False, widget=forms.TextInput(attrs={"class": "mono"})
            )
        for field, flag in FT_FIELD_FLAGS.items():
            if field in self.fields:
                self.fields[field].widget.attrs["data-flag"] = (
                    flag  # static/js/job-form.js keeps box and fields in step
                )
        if not self.is_bound and not self.initial.get("role_0_type"):
            self.initial.update({"role_0_type": "Master", "role_1_type": "Worker"})
        self.spec_rows: list[int] = []  # job_specs index -> role row
        self.merged_flags = ""
        self.box_flags: list[str] = []

    # -- presentation helpers -------------------------------------------------
    def role_rows(self):
        return [
            {k: self[f"role_{i}_{k}"] for k in ("type", "replicas", "cpu", "memory", "gpu", "image")} | {"index": i}
            for i in range(ROLE_ROWS)
        ]

    gpu_counts = ALLOWED_GPU_COUNTS
    job_type_roles = JOB_TYPE_ROLES

    def mark_invalid(self) -> None:
        """Tie each error to its input for assistive technology."""
        for name in self.errors:
            if name in self.fields:
                attrs = self.fields[name].widget.attrs
                attrs["aria-invalid"] = "true"
                attrs["aria-describedby"] = f"id_{name}-error"

    # -- validation -------------------------------------------------------------
    def clean(self):
        data = super().clean()
        if not data.get("fault_tolerance"):
            self.merged_flags = ""
            return data
        try:
            config, self.box_flags = fault_tolerance_from(data)
        except FieldFlagErrors as exc:
            for field, message in exc.errors:
                self.add_error(field, message)
            return data
        self.merged_flags = config.to_flags()
        return data

    def request_body(self, workspace) -> dict:
        """The CreateJob body (SPEC section 8) that submit_job validates."""
        data = self.cleaned_data
        specs = []
        self.spec_rows = []
        for i in range(ROLE_ROWS):
            role = data.get(f"role_{i}_type")
            if not role:
                continue
            self.spec_rows.append(i)
            specs.append(
                {
                    "type": role,
                    "pod_count": _int_or_text(data.get(f"role_{i}_replicas") or "1"),
                    "image": data.get(f"role_{i}_image") or "",
                    "resource_config": {
                        "cpu": data.get(f"role_{i}_cpu") or 1,
                        "memory": data.get(f"role_{i}_memory") or "",
                        "gpu": _int_or_text(data.get(f"role_{i}_gpu") or "0"),
                    },
                }
            )
        return {
            "workspace": workspace.slug,
            "display_name": data.get("display_name") or "",
            "job_type": data.get("job_type"),
            "job_specs": specs,
            "user_command": data.get("user_command") or "",
            "envs": self._envs(),
            "backend": data.get("backend"),
            "workdir": data.get("workdir") or "",
            "settings": {
                "enable_error_monitoring_in_aimaster": bool(data.get("fault_tolerance")),
                "error_monitoring_args": self.merged_flags,
                "retryable_errors": [k.strip() for k in (data.get("retryable_errors") or "").splitlines() if k.strip()],
            },
        }

    def _envs(self) -> dict:
        """The NAME=value lines; a line that is not one is an error at the field, and the
        others still go to the serializer, so their errors come in the same pass."""
        out = {}
        for n, line in enumerate((self.cleaned_data.get("envs") or "").splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, eq, value = line.partition("=")
            if not eq:
                self.add_error("envs", f"line {n}: {line[:40]!r} is not NAME=value.")
                continue
            out[name.strip()] = value
        return out

    def check_submission(self, body: dict, skip=()) -> None:
        """Every error of the form in one pass (issue 15): JobSubmitSerializer, the one
        validation of a submission, judges the body the valid fields make, and each of
        its errors goes beside its field, except fields in `skip` (those the field
        checks already refused: their value is not in the body, so the serializer's
        word on it would only repeat the refusal)."""
        serializer = JobSubmitSerializer(data=body)
        if not serializer.is_valid():
            self.add_submission_errors(serializer.errors, skip=skip)

    def add_submission_errors(self, errors: dict[str, list[str]], skip=()) -> None:
        """Put JobSubmitSerializer's field-path errors beside the fields they name."""
        for path, messages in errors.items():
            field = self.field_for_path(path)
            if field in skip:
                continue
            for message in messages:
                if path.startswith("envs.") and field == "envs":
                    message = f"{path[5:]}: {message}"
                self.add_error(field, message)

    def field_for_path(self, path: str) -> str | None:
        parts = path.split(".")
        if parts[0] in ("display_name", "job_type", "user_command", "backend", "workdir", "envs"):
            return parts[0]
        if parts[0] == "job_specs" and len(parts) >= 3 and parts[1].isascii() and parts[1].isdigit():
            k = int(parts[1])
            row = self.spec_rows[k] if k < len(self.spec_rows) else 0
            leaf = {"type": "type", "pod_count": "replicas", "image": "image"}.get(parts[2])
            if parts[2] == "resource_config":
                leaf = parts[3] if len(parts) > 3 and parts[3] in ("cpu", "memory", "gpu") else "gpu"
            return f"role_{row}_{leaf or 'type'}"
        if parts[0] == "job_specs":
            return "role_0_type"
        if path == "settings.error_monitoring_args":
            return OTHER
        if path == "settings.retryable_errors":
            return "retryable_errors"
        return None


def _int_or_text(value):
    """A whole number when the field holds ASCII digits, else the text itself for
    JobSubmitSerializer to refuse beside the field ("²" passes isdigit() but not int())."""
    text = str(value).strip()
    number = whole_number(text)
    return text if number is None else number


# --- fields + box -> one configuration (pure) -----------------------------------------


@dataclass
class FieldFlagErrors(Exception):
    errors: list[tuple[str, str]]


def flags_named(box: str) -> list[str]:
    """The known flags a flag string names, in order."""
    try:
        tokens = shlex.split(" ".join(box.split()))
    except ValueError:
        return []
    return [t.partition("=")[0] for t in tokens if t.partition("=")[0] in KNOWN_FLAGS]


def _field_value(field: str, raw) -> object:
    """One field's value, checked by the flag parser (the API's messages)."""
    if field in BOOL_FIELDS:
        return bool(raw)
    flag = FT_FIELD_FLAGS[field]
    text = "" if raw is None else str(raw).strip()
    if not text and field in OPTIONAL_FIELDS:
        return None
    if not text and field in BLANK_IS_DEFAULT:
        return getattr(FaultToleranceConfig(), field)
    if not text:
        raise FlagError(flag, "a value is missing")
    return getattr(parse_flags(f"{flag}={shlex.quote(text)}"), field)


def _env_value(field: str, raw) -> object:
    name, attr = C4D_ENV_FIELDS[field]
    if field == "c4d_enable_stats_output":
        return bool(raw)
    text = "" if raw is None else str(raw).strip()
    if not text:
        raise FlagError("--c4d-common-envs", f"{name}: a value is missing")
    return getattr(parse_c4d_common_envs(f"{name}={text}"), attr)


def fault_tolerance_from(data: dict) -> tuple[FaultToleranceConfig, list[str]]:
    """The configuration the form describes: its fields, overridden by the flags
    the Other configuration box names. Raises FieldFlagErrors naming form fields."""
    errors: list[tuple[str, str]] = []
    values: dict = {}
    for field in FT_FIELD_FLAGS:
        try:
            values[field] = _field_value(field, data.get(field))
        except FlagError as exc:
            errors.append((field, exc.message))
    envs: dict = {}
    for field, (_, attr) in C4D_ENV_FIELDS.items():
        try:
            envs[attr] = _env_value(field, data.get(field))
        except FlagError as exc:
            errors.append((field, exc.message))
    box = data.get(OTHER) or ""
    named: list[str] = []
    try:
        boxed = parse_flags(box)
        named = flags_named(box)
    except FlagError as exc:
        errors.append((OTHER, str(exc)))
        boxed = None
    if errors:
        raise FieldFlagErrors(errors)
    values["c4d_common_envs"] = C4DEnvs(**envs)
    for flag in named:
        field = next(f.field for f in FLAGS if f.flag == flag)
        values[field] = getattr(boxed, field)
    try:
        return FaultToleranceConfig(**values), named
    except FlagError as exc:
        where = OTHER if exc.flag in named else FLAG_FIELDS.get(exc.flag, OTHER)
        raise FieldFlagErrors([(where, exc.message if where != OTHER else str(exc))]) from None


def ft_warnings(config: FaultToleranceConfig) -> list[str]:
    """Settings that are valid but do nothing as combined (issue 15): shown beside the
    preview, not refused, since the API takes them too."""
    warnings = []
    defaults = FaultToleranceConfig()
    if not config.enable_job_hang_detection:
        set_ = [
            flag
            for flag, value, default in (
                ("--job-hang-interval", config.job_hang_interval, defaults.job_hang_interval),
                ("--job-hang-startup-interval", config.job_hang_startup_interval, defaults.job_hang_startup_interval),
            )
            if value != default
        ]
        if set_:
            warnings.append(
                f"{' and '.join(set_)} {'is' if len(set_) == 1 else 'are'} set but Hang Detection is "
                "off, so no hang is detected: turn Hang Detection on, or leave the interval at its "
                "default."
            )
    return warnings


def initial_from_job(job, show_secrets: bool = True) -> dict:
    """Form values that submit the same job again (Clone); secret-looking variables
    come masked for someone who may not see them (jobs.access.sees_secrets)."""
    envs = (job.envs or {}) if show_secrets else masked_envs(job.envs)
    initial = {
        "display_name": f"{job.display_name}-copy"[:128],
        "job_type": job.job_type,
        "user_command": job.user_command,
        "envs": "\n".join(f"{k}={v}" for k, v in envs.items()),
        "backend": job.backend,
        "workdir": job.workdir,
        "retryable_errors": "\n".join(job.retryable_keywords or []),
        "fault_tolerance": job.fault_tolerance,
    }
    for i, spec in enumerate((job.job_specs or [])[:ROLE_ROWS]):
        res = spec.get("resource_config") or {}
        initial.update(
            {
                f"role_{i}_type": spec.get("type", ""),
                f"role_{i}_replicas": str(spec.get("pod_count", 1)),
                f"role_{i}_cpu": _plain_number(res.get("cpu", 1)),
                f"role_{i}_memory": res.get("memory", "") or "",
                f"role_{i}_gpu": str(res.get("gpu", 0)),
                f"role_{i}_image": spec.get("image", "") or "",
            }
        )
    try:
        config = job.ft
    except FlagError:
        config = FaultToleranceConfig()
    initial.update(config_to_initial(config))
    return initial


def config_to_initial(config: FaultToleranceConfig) -> dict:
    out: dict[str, bool | str] = {}
    for field in FT_FIELD_FLAGS:
        value = getattr(config, field)
        if value is None or (field == "replica_groups" and value == 0):  # left out, or off: a blank field
            out[field] = ""
            continue
        if isinstance(value, tuple):  # the module list, as the flag writes it
            out[field] = ",".join(value)
            continue
        out[field] = (
            value if isinstance(value, bool) else (_plain_number(value) if isinstance(value, float) else str(value))
        )
    for field, (_, attr) in C4D_ENV_FIELDS.items():
        value = getattr(config.c4d_common_envs, attr)
        out[field] = value if isinstance(value, bool) else str(value)
    return out


def _plain_number(value) -> str:
    value = float(value)
    return str(int(value)) if value.is_integer() else repr(value)
