"""Framework environments: what each instance of an attempt must find in its env.

Pure functions over plain data (no processes, no sockets, no clock), shared by
every backend that starts processes itself (local, Slurm). The backend decides
where instances run (node, host, a port per instance, a directory) and calls
`framework_setup`; it gets back, per instance, the variables to set and the
files to write (MPI's hostfile).

What each job type gets:

- every instance: VIGIL_ATTEMPT, VIGIL_ROLE, VIGIL_INDEX, VIGIL_RANK,
  VIGIL_INSTANCE, VIGIL_NODE (the console URL, job id and token arrive in
  AttemptLaunch.env from the console).
- PyTorchJob (roles Master, Worker): MASTER_ADDR and MASTER_PORT of rank 0,
  WORLD_SIZE, RANK (Master is 0, then the Workers by index), LOCAL_RANK and
  LOCAL_WORLD_SIZE (position and count among the attempt's instances on the same
  node), NODE_RANK (order of that node among the attempt's nodes, by first rank).
  The backend gives every attempt a fresh MASTER_PORT, never the previous one's.
- TFJob (roles Chief, PS, Worker, Evaluator, any subset): TF_CONFIG =
  {"cluster": {<role lower-case>: ["host:port", ...by index]}, "task":
  {"type": <role lower-case>, "index": i}} with every role present in the cluster.
- MPIJob (roles Launcher, Worker): the Launcher gets a hostfile listing the
  workers' hosts with their slots (merged per host) and the variables that
  Open MPI (4 and 5), MPICH/Hydra and Intel MPI read it from, plus
  VIGIL_MPI_HOSTFILE and VIGIL_MPI_NUM_PROCS (total slots).
- ElasticBatchJob (role Worker): VIGIL_INSTANCE_INDEX / VIGIL_INSTANCE_COUNT
  (index and replica count within the role) and the same values as
  ELASTICBATCH_INSTANCE_INDEX / ELASTICBATCH_INSTANCE_COUNT.

Precedence (see `instance_environment`): inherited base < attempt env (user +
console) < the instance's own env < framework and VIGIL_* instance variables.
A user cannot override the framework variables: a wrong RANK or MASTER_PORT
would silently break the rendezvous that Vigil is responsible for, so the user's
value is replaced and the replaced names are reported by `overridden_names`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .base import InstanceLaunch

PYTORCH = "PyTorchJob"
TENSORFLOW = "TFJob"
MPI = "MPIJob"
ELASTIC_BATCH = "ElasticBatchJob"

# Roles of each job type in rank order (the first role gets rank 0).
ROLES: dict[str, tuple[str, ...]] = {
    PYTORCH: ("Master", "Worker"),
    TENSORFLOW: ("Chief", "PS", "Worker", "Evaluator"),
    MPI: ("Launcher", "Worker"),
    ELASTIC_BATCH: ("Worker",),
}
JOB_TYPES = tuple(ROLES)

MPI_HOSTFILE = "hostfile"


class FrameworkError(ValueError):
    """Bad input to a framework function; the message names the field."""

    def __init__(self, field_name: str, message: str):
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message


@dataclass(frozen=True)
class Placement:
    """Where one instance runs in this attempt, as the backend decided."""

    node: str
    host: str  # the address peers use to reach the instance
    port: int  # a port reserved for this instance for this attempt
    dir: str = ""  # the instance's directory (files like the MPI hostfile go there)
    slots: int = 1  # slots this instance offers to MPI


@dataclass(frozen=True)
class InstanceSetup:
    env: dict[str, str]
    files: dict[str, str] = field(default_factory=dict)  # path -> content


def instance_name(role: str, index: int) -> str:
    return f"{role.lower()}-{index}"


def check_job_type(job_type: str) -> None:
    if job_type not in ROLES:
        raise FrameworkError("job_type", f"{job_type!r} is not one of {', '.join(JOB_TYPES)}")


def build_instances(
    job_type: str, replicas: Mapping[str, int], command: str | Mapping[str, str]
) -> tuple[InstanceLaunch, ...]:
    """The instances of one attempt, in rank order, with canonical names and ranks.

    `replicas` maps role -> count; `command` is one command for all or role -> command.
    """
    check_job_type(job_type)
    allowed = ROLES[job_type]
    for role, count in replicas.items():
        if role not in allowed:
            raise FrameworkError(
                "job_specs.type", f"{role!r} is not a role of {job_type} (accepted: {', '.join(allowed)})"
            )
        if not isinstance(count, int) or count < 0:
            raise FrameworkError("job_specs.pod_count", f"{role}: {count!r} is not a count >= 0")
    if job_type == PYTORCH and replicas.get("Master", 0) > 1:
        raise FrameworkError("job_specs.pod_count", "PyTorchJob takes at most 1 Master")
    if job_type == MPI and replicas.get("Launcher", 0) != 1:
        raise FrameworkError("job_specs.pod_count", "MPIJob needs exactly 1 Launcher")
    if job_type == TENSORFLOW and replicas.get("Chief", 0) > 1:
        raise FrameworkError("job_specs.pod_count", "TFJob takes at most 1 Chief")
    out = []
    rank = 0
    for role in allowed:
        for index in range(replicas.get(role, 0)):
            cmd = command if isinstance(command, str) else command.get(role, "")
            if not cmd:
                raise FrameworkError("user_command", f"no command for role {role}")
            out.append(InstanceLaunch(instance_name(role, index), role, index, rank, cmd, {}))
            rank += 1
    if not out:
        raise FrameworkError("job_specs", "at least one instance is needed")
    return tuple(out)


def _ordered(instances: Iterable[InstanceLaunch]) -> list[InstanceLaunch]:
    return sorted(instances, key=lambda i: i.rank)


def _node_ranks(ordered: list[InstanceLaunch], placements: Mapping[str, Placement]):
    node_rank: dict[str, int] = {}
    local_rank: dict[str, int] = {}
    local_size: dict[str, int] = {}
    for inst in ordered:
        node = placements[inst.name].node
        node_rank.setdefault(node, len(node_rank))
        local_rank[inst.name] = local_size.get(node, 0)
        local_size[node] = local_size.get(node, 0) + 1
    return node_rank, local_rank, local_size


def _check(job_type: str, instances: tuple[InstanceLaunch, ...], placements: Mapping[str, Placement]):
    check_job_type(job_type)
    names = [i.name for i in instances]
    if len(set(names)) != len(names):
        raise FrameworkError("instances", "instance names must be unique")
    missing = [n for n in names if n not in placements]
    if missing:
        raise FrameworkError("placements", f"no placement for {', '.join(missing)}")
    ranks = sorted(i.rank for i in instances)
    if ranks != list(range(len(instances))):
        raise FrameworkError("instances.rank", f"ranks must be 0..{len(instances) - 1} once each, got {ranks}")
    allowed = ROLES[job_type]
    for inst in instances:
        if inst.role not in allowed:
            raise FrameworkError(
                "instances.role", f"{inst.role!r} is not a role of {job_type} (accepted: {', '.join(allowed)})"
            )


def framework_setup(
    job_type: str,
    attempt: int,
    instances: tuple[InstanceLaunch, ...],
    placements: Mapping[str, Placement],
    replica_groups: int = 0,
    lighthouse: str = "",
) -> dict[str, InstanceSetup]:
    """Per instance name: the framework and VIGIL_* variables, and files to write.

    With replica groups (PyTorchJob, issue 30) each group gets its own rendezvous: the
    MASTER_ADDR/PORT of its first rank, RANK and WORLD_SIZE within the group, plus what
    torchft reads (TORCHFT_LIGHTHOUSE, the Lighthouse's URL) and REPLICA_GROUP_ID /
    NUM_REPLICA_GROUPS, which torchft's own examples read to name the group."""
    _check(job_type, instances, placements)
    ordered = _ordered(instances)
    node_rank, local_rank, local_size = _node_ranks(ordered, placements)
    result: dict[str, InstanceSetup] = {}
    for inst in ordered:
        p = placements[inst.name]
        env = {
            "VIGIL_ATTEMPT": str(attempt),
            "VIGIL_ROLE": inst.role,
            "VIGIL_INDEX": str(inst.index),
            "VIGIL_RANK": str(inst.rank),
            "VIGIL_INSTANCE": inst.name,
            "VIGIL_NODE": p.node,
        }
        result[inst.name] = InstanceSetup(env=env, files={})

    if job_type == PYTORCH and replica_groups:
        # Imported here: this file also runs on Slurm's nodes (vigil_runtime, the standard
        # library only), where no job has replica groups (the Slurm backend refuses them).
        from core.replicas import GroupLayout

        layout = GroupLayout(replica_groups, len(ordered))
        for position, inst in enumerate(ordered):
            group = layout.group_of(position)
            master = placements[ordered[layout.members(group)[0]].name]
            node = placements[inst.name].node
            result[inst.name].env.update(
                MASTER_ADDR=master.host,
                MASTER_PORT=str(master.port),
                WORLD_SIZE=str(layout.size),
                RANK=str(layout.rank_in_group(position)),
                LOCAL_RANK=str(local_rank[inst.name]),
                LOCAL_WORLD_SIZE=str(local_size[node]),
                NODE_RANK=str(node_rank[node]),
                TORCHFT_LIGHTHOUSE=lighthouse,
                REPLICA_GROUP_ID=str(group),
                NUM_REPLICA_GROUPS=str(replica_groups),
                VIGIL_REPLICA_GROUP=str(group),
            )
    elif job_type == PYTORCH:
        master = placements[ordered[0].name]
        for inst in ordered:
            node = placements[inst.name].node
            result[inst.name].env.update(
                MASTER_ADDR=master.host,
                MASTER_PORT=str(master.port),
                WORLD_SIZE=str(len(ordered)),
                RANK=str(inst.rank),
                LOCAL_RANK=str(local_rank[inst.name]),
                LOCAL_WORLD_SIZE=str(local_size[node]),
                NODE_RANK=str(node_rank[node]),
            )
    elif job_type == TENSORFLOW:
        cluster: dict[str, list[str]] = {}
        for role in ROLES[TENSORFLOW]:
            members = sorted((i for i in ordered if i.role == role), key=lambda i: i.index)
            if members:
                cluster[role.lower()] = [f"{placements[i.name].host}:{placements[i.name].port}" for i in members]
        for inst in ordered:
            tf_config = {"cluster": cluster, "task": {"type": inst.role.lower(), "index": inst.index}}
            result[inst.name].env["TF_CONFIG"] = json.dumps(tf_config, separators=(",", ":"))
    elif job_type == MPI:
        slots_by_host: dict[str, int] = {}
        for inst in ordered:
            if inst.role == "Worker":
                p = placements[inst.name]
                slots_by_host[p.host] = slots_by_host.get(p.host, 0) + p.slots
        hostfile_text = "".join(f"{host} slots={n}\n" for host, n in slots_by_host.items())
        total = sum(slots_by_host.values())
        for inst in ordered:
            env = result[inst.name].env
            env["VIGIL_MPI_NUM_PROCS"] = str(total)
            if inst.role != "Launcher":
                continue
            path = _join(placements[inst.name].dir, MPI_HOSTFILE)
            result[inst.name].files[path] = hostfile_text
            env.update(
                VIGIL_MPI_HOSTFILE=path,
                OMPI_MCA_orte_default_hostfile=path,  # Open MPI 4
                PRTE_MCA_prte_default_hostfile=path,  # Open MPI 5 (PRRTE)
                HYDRA_HOST_FILE=path,  # MPICH
                I_MPI_HYDRA_HOST_FILE=path,  # Intel MPI
                OMPI_MCA_orte_keep_fqdn_hostnames="true",
            )
    elif job_type == ELASTIC_BATCH:
        counts: dict[str, int] = {}
        for inst in ordered:
            counts[inst.role] = counts.get(inst.role, 0) + 1
        for inst in ordered:
            index, count = str(inst.index), str(counts[inst.role])
            result[inst.name].env.update(
                VIGIL_INSTANCE_INDEX=index,
                VIGIL_INSTANCE_COUNT=count,
                ELASTICBATCH_INSTANCE_INDEX=index,
                ELASTICBATCH_INSTANCE_COUNT=count,
            )
    return result


def _join(directory: str, name: str) -> str:
    if not directory:
        return name
    return directory.rstrip("/") + "/" + name


def instance_environment(
    base: Mapping[str, str],
    attempt_env: Mapping[str, str],
    instance_env: Mapping[str, str],
    framework_env: Mapping[str, str],
) -> dict[str, str]:
    """The final env of one instance; framework variables win over the user's."""
    env: dict[str, str] = {}
    for layer in (base, attempt_env, instance_env, framework_env):
        for key, value in layer.items():
            env[str(key)] = str(value)
    return env


def overridden_names(
    attempt_env: Mapping[str, str], instance_env: Mapping[str, str], framework_env: Mapping[str, str]
) -> list[str]:
    """Names the user set that the framework replaced (to tell the user)."""
    user = set(attempt_env) | set(instance_env)
    return sorted(
        k for k in user & set(framework_env) if str({**attempt_env, **instance_env}[k]) != str(framework_env[k])
    )
