"""What a job submission may hold (SPEC section 8's CreateJob shape) and what a
valid one is: the limits and the roles of each job type, the names a job may not
set, and ValidSubmission, what jobs.serializers.JobSubmitSerializer makes of a
request body that passes. Pure: no Django, no DRF."""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.flags import FaultToleranceConfig

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
        "VIGIL_CONSOLE_URL",
        "VIGIL_JOB_ID",
        "VIGIL_JOB_TOKEN",
        "VIGIL_ATTEMPT",
        "VIGIL_ROLE",
        "VIGIL_INDEX",
        "VIGIL_RANK",
        "VIGIL_INSTANCE",
        "VIGIL_NODE",
        "VIGIL_C4D",
        "VIGIL_JOB_HANG_INTERVAL",
        "VIGIL_INSTANCE_INDEX",
        "VIGIL_INSTANCE_COUNT",
        "VIGIL_MPI_HOSTFILE",
        "VIGIL_MPI_NUM_PROCS",
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
