"""Validation of a job submission (SPEC section 8's CreateJob shape), as a pure
function over plain data: the API, the form and the SDK all go through it via
jobs.actions.submit_job. Errors are keyed by the field path the caller sent
(`job_specs.1.resource_config.gpu`) and say what is accepted."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from core.flags import FaultToleranceConfig, FlagError, parse_flags

from .inputs import text_problem, whole_number

ALLOWED_GPU_COUNTS = (0, 1, 2, 4, 8, 16)
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MEMORY_RE = re.compile(r"[0-9]+(\.[0-9]+)?\s*([KMGT]i?B?|[kmgt]i?b?)?", re.ASCII)
# Variables that change how the shell or the dynamic loader behave before the
# user's command runs; a job must not be able to set them for every instance.
DENIED_ENV_NAMES = frozenset(
    {
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LD_AUDIT",
        "BASH_ENV",
        "ENV",
        "SHELLOPTS",
        "BASHOPTS",
        "PS4",
        "PROMPT_COMMAND",
        "IFS",
        "PATH",
        "PYTHONSTARTUP",
        "PYTHONINSPECT",
    }
)
# Variables Vigil sets for every instance; a job's own value would be replaced,
# so it is refused instead of silently ignored. (Other VIGIL_* names, such as the
# SDK's VIGIL_SDK_TIMEOUT, are the job's to set.)
RESERVED_ENV_NAMES = frozenset(
    {
        "VIGIL_CONSOLE_URL", "VIGIL_JOB_ID", "VIGIL_JOB_TOKEN", "VIGIL_ATTEMPT", "VIGIL_ROLE", "VIGIL_INDEX",
        "VIGIL_RANK", "VIGIL_INSTANCE", "VIGIL_NODE", "VIGIL_C4D", "VIGIL_JOB_HANG_INTERVAL",
        "VIGIL_INSTANCE_INDEX", "VIGIL_INSTANCE_COUNT", "VIGIL_MPI_HOSTFILE", "VIGIL_MPI_NUM_PROCS",
    }
)

# What people who may not see a secret-looking variable see instead of its value
# (jobs.access); submitted back from a cloned form, it is refused, not run.
MASKED_VALUE = "••••••••"

MAX_DISPLAY_NAME = 128
MAX_COMMAND = 64 * 1024
MAX_ENV_COUNT = 200
MAX_ENV_VALUE = 32 * 1024
MAX_REPLICAS = 1024
MAX_FLAGS = 4096
MAX_KEYWORDS = 100
MAX_KEYWORD_LENGTH = 256

# Roles per job type: name -> the most replicas that role may have (None: no cap).
JOB_TYPE_ROLES: dict[str, dict[str, int | None]] = {
    "PyTorchJob": {"Master": 1, "Worker": None},
    "TFJob": {"PS": None, "Chief": 1, "Worker": None, "Evaluator": 1},
    "MPIJob": {"Launcher": 1, "Worker": None},
    "ElasticBatchJob": {"Worker": None},
}
# Roles a job type cannot run without.
REQUIRED_ROLES = {"MPIJob": ("Launcher", "Worker"), "ElasticBatchJob": ("Worker",)}


@dataclass(frozen=True)
class RoleSpec:
    role: str
    replicas: int
    image: str = ""
    cpu: float = 1.0
    memory: str = ""
    gpu: int = 0

    @property
    def name_prefix(self) -> str:
        return self.role.lower()

    def to_dict(self) -> dict:
        return {
            "type": self.role,
            "pod_count": self.replicas,
            "image": self.image,
            "resource_config": {"cpu": self.cpu, "memory": self.memory, "gpu": self.gpu},
        }


@dataclass(frozen=True)
class ValidSubmission:
    display_name: str
    job_type: str
    roles: tuple[RoleSpec, ...]
    user_command: str
    envs: dict
    backend: str
    fault_tolerance: bool
    error_monitoring_args: str
    ft_config: FaultToleranceConfig
    retryable_keywords: tuple[str, ...] = ()
    workdir: str = ""


@dataclass
class SubmissionErrors:
    errors: dict[str, list[str]] = field(default_factory=dict)

    def add(self, path: str, message: str) -> None:
        self.errors.setdefault(path, []).append(message)

    def __bool__(self) -> bool:
        return bool(self.errors)


class SubmissionError(ValueError):
    def __init__(self, errors: dict[str, list[str]]):
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


def gpu_count_error(gpu) -> str | None:
    if isinstance(gpu, bool) or not isinstance(gpu, int) or gpu not in ALLOWED_GPU_COUNTS:
        return f"Invalid GPU count {gpu}, only supported: [{' '.join(map(str, ALLOWED_GPU_COUNTS))}]"
    return None


def _text_ok(value: str, path: str, errs: SubmissionErrors, *, one_line: bool = False) -> bool:
    problem = text_problem(value, one_line=one_line)
    if problem:
        errs.add(path, problem)
    return problem is None


def _int_field(value, path: str, errs: SubmissionErrors, lo: int, hi: int) -> int | None:
    value = whole_number(value)
    if value is None:
        errs.add(path, f"must be a whole number from {lo} to {hi} (ASCII digits).")
        return None
    if not lo <= value <= hi:
        errs.add(path, f"must be from {lo} to {hi}, got {value}.")
        return None
    return value


def _role_specs(job_type: str, specs, errs: SubmissionErrors) -> list[RoleSpec]:
    if not isinstance(specs, list) or not specs:
        errs.add("job_specs", "must be a non-empty list of roles, e.g. [{\"type\": \"Worker\", \"pod_count\": 2}].")
        return []
    allowed = JOB_TYPE_ROLES.get(job_type)
    by_lower = {r.lower(): r for r in (allowed or {})}
    out: list[RoleSpec] = []
    seen: set[str] = set()
    for i, spec in enumerate(specs):
        path = f"job_specs.{i}"
        if not isinstance(spec, dict):
            errs.add(path, "must be an object with type, pod_count and resource_config.")
            continue
        raw_role = spec.get("type")
        role = by_lower.get(str(raw_role).lower()) if isinstance(raw_role, str) else None
        if allowed is not None and role is None:
            errs.add(f"{path}.type", f"{raw_role!r} is not a role of {job_type}; accepted: {', '.join(allowed)}.")
            continue
        if role in seen:
            errs.add(f"{path}.type", f"role {role} is given twice; give each role once with its pod_count.")
            continue
        seen.add(role)
        cap = (allowed or {}).get(role) or MAX_REPLICAS
        replicas = _int_field(spec.get("pod_count", 1), f"{path}.pod_count", errs, 1, cap)
        res = spec.get("resource_config") or {}
        if not isinstance(res, dict):
            errs.add(f"{path}.resource_config", "must be an object with cpu, memory and gpu.")
            res = {}
        gpu = res.get("gpu", 0)
        if isinstance(gpu, str) and whole_number(gpu) is not None:
            gpu = whole_number(gpu)
        gpu_err = gpu_count_error(gpu)
        if gpu_err:
            errs.add(f"{path}.resource_config.gpu", gpu_err)
        cpu = res.get("cpu", 1)
        try:
            cpu = float(cpu)
            if not 0 < cpu <= 1024:
                raise ValueError
        except (TypeError, ValueError):
            errs.add(f"{path}.resource_config.cpu", f"must be a number of CPUs above 0 and at most 1024, got {cpu!r}.")
            cpu = 1.0
        memory = res.get("memory", "")
        if memory not in ("", None) and not (isinstance(memory, (str, int)) and MEMORY_RE.fullmatch(str(memory))):
            errs.add(f"{path}.resource_config.memory", f"must look like 512Mi, 4Gi or 16G, got {memory!r}.")
        image = spec.get("image") or ""
        if not isinstance(image, str) or len(image) > 512:
            errs.add(f"{path}.image", "must be a string of at most 512 characters.")
            image = ""
        elif not _text_ok(image, f"{path}.image", errs, one_line=True):
            image = ""
        if replicas is not None and role is not None and not gpu_err:
            out.append(RoleSpec(role, replicas, image, cpu, str(memory or ""), gpu))
    for required in REQUIRED_ROLES.get(job_type, ()):
        if required not in seen and not errs.errors.get("job_specs"):
            errs.add("job_specs", f"{job_type} needs a {required} role.")
    if job_type == "TFJob" and seen and not seen & {"Worker", "Chief"}:
        errs.add("job_specs", "TFJob needs a Worker or a Chief role.")
    return out


def _envs(envs, errs: SubmissionErrors) -> dict:
    if envs in (None, ""):
        return {}
    if not isinstance(envs, dict):
        errs.add("envs", "must be an object mapping names to string values.")
        return {}
    if len(envs) > MAX_ENV_COUNT:
        errs.add("envs", f"at most {MAX_ENV_COUNT} variables are accepted, got {len(envs)}.")
    out = {}
    for name, value in envs.items():
        path = f"envs.{name}"
        if not isinstance(name, str) or not ENV_NAME_RE.fullmatch(name):
            errs.add(path, "names must match ^[A-Za-z_][A-Za-z0-9_]*$.")
            continue
        if name.upper() in DENIED_ENV_NAMES:
            errs.add(path, f"{name} cannot be set for a job (it changes how every process starts).")
            continue
        if name in RESERVED_ENV_NAMES:
            errs.add(path, f"{name} is set by Vigil for every instance and cannot be given by the job.")
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            errs.add(path, "values must be strings.")
            continue
        value = str(value)
        if len(value) > MAX_ENV_VALUE:
            errs.add(path, f"values must be at most {MAX_ENV_VALUE} characters.")
            continue
        if not _text_ok(value, path, errs):
            continue
        if value == MASKED_VALUE:
            errs.add(path, "is still the mask shown for a secret you may not see; enter the value itself.")
            continue
        out[name] = value
    return out


def validate_keywords(keywords, path: str, errs: SubmissionErrors) -> tuple[str, ...]:
    if keywords in (None, ""):
        return ()
    if not isinstance(keywords, list) or not all(isinstance(k, str) for k in keywords):
        errs.add(path, "must be a list of strings.")
        return ()
    if len(keywords) > MAX_KEYWORDS:
        errs.add(path, f"at most {MAX_KEYWORDS} keywords are accepted, got {len(keywords)}.")
        return ()
    cleaned = []
    for k in keywords:
        k = k.strip()
        if not k:
            errs.add(path, "keywords cannot be empty.")
        elif len(k) > MAX_KEYWORD_LENGTH:
            errs.add(path, f"each keyword must be at most {MAX_KEYWORD_LENGTH} characters.")
        elif not _text_ok(k, path, errs):
            pass
        elif k not in cleaned:
            cleaned.append(k)
    return tuple(cleaned)


def validate_submission(data: dict, backends: tuple[str, ...] = ("local",)) -> ValidSubmission:
    """Check a CreateJob request; raise SubmissionError naming every bad field."""
    errs = SubmissionErrors()
    if not isinstance(data, dict):
        raise SubmissionError({"non_field_errors": ["the request body must be a JSON object."]})

    name = data.get("display_name")
    if not isinstance(name, str) or not name.strip():
        errs.add("display_name", "is required: a name for the job.")
    elif len(name.strip()) > MAX_DISPLAY_NAME:
        errs.add("display_name", f"must be at most {MAX_DISPLAY_NAME} printable characters.")
    else:
        _text_ok(name, "display_name", errs, one_line=True)
    job_type = data.get("job_type")
    known_type = isinstance(job_type, str) and job_type in JOB_TYPE_ROLES  # an object or a list is not hashable
    if not known_type:
        errs.add("job_type", f"{job_type!r} is not accepted; use one of {', '.join(JOB_TYPE_ROLES)}.")
    roles = _role_specs(job_type, data.get("job_specs"), errs) if known_type else []

    command = data.get("user_command")
    if not isinstance(command, str) or not command.strip():
        errs.add("user_command", "is required: the shell command every instance runs.")
    elif len(command) > MAX_COMMAND:
        errs.add("user_command", f"must be at most {MAX_COMMAND} characters.")
    else:
        _text_ok(command, "user_command", errs)
    envs = _envs(data.get("envs"), errs)

    backend = data.get("backend") or "local"
    if not isinstance(backend, str) or backend not in backends:
        errs.add("backend", f"{backend!r} is not configured; accepted: {', '.join(backends)}.")

    workdir = data.get("workdir") or ""
    if not isinstance(workdir, str) or len(workdir) > 1024 or (workdir and not workdir.startswith("/")):
        errs.add("workdir", "must be an absolute path of at most 1024 characters.")
        workdir = ""
    elif not _text_ok(workdir, "workdir", errs, one_line=True):
        workdir = ""

    settings = data.get("settings") or {}
    if not isinstance(settings, dict):
        errs.add("settings", "must be an object with enable_error_monitoring_in_aimaster and error_monitoring_args.")
        settings = {}
    enabled = settings.get("enable_error_monitoring_in_aimaster", False)
    if not isinstance(enabled, bool):
        errs.add("settings.enable_error_monitoring_in_aimaster", "must be true or false.")
        enabled = False
    args = settings.get("error_monitoring_args") or ""
    ft_config = FaultToleranceConfig()
    if not isinstance(args, str) or len(args) > MAX_FLAGS:
        errs.add("settings.error_monitoring_args", f"must be a flag string of at most {MAX_FLAGS} characters.")
    elif not _text_ok(args, "settings.error_monitoring_args", errs):
        pass
    else:
        try:
            ft_config = parse_flags(args)
        except FlagError as exc:
            errs.add("settings.error_monitoring_args", str(exc))
    keywords = validate_keywords(settings.get("retryable_errors"), "settings.retryable_errors", errs)

    if errs:
        raise SubmissionError(errs.errors)
    return ValidSubmission(
        display_name=name.strip(),
        job_type=job_type,
        roles=tuple(roles),
        user_command=command,
        envs=envs,
        backend=backend,
        fault_tolerance=enabled,
        error_monitoring_args=args.strip(),
        ft_config=ft_config,
        retryable_keywords=keywords,
        workdir=workdir,
    )


def instance_names(roles) -> list[tuple[str, str, int, int]]:
    """(name, role, index, rank) for every replica: Master/Chief/Launcher first, so
    that rank 0 is the coordinator the frameworks expect."""
    order = {"Master": 0, "Chief": 0, "Launcher": 0, "PS": 1, "Worker": 2, "Evaluator": 3}
    out = []
    rank = 0
    for spec in sorted(roles, key=lambda r: order.get(r.role, 9)):
        for index in range(spec.replicas):
            out.append((f"{spec.role.lower()}-{index}", spec.role, index, rank))
            rank += 1
    return out
