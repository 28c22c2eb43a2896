"""Framework environments (pure): exactly what each instance finds in its env."""

from __future__ import annotations

import json

import pytest

from jobs.backends.base import InstanceLaunch
from jobs.backends.frameworks import (
    FrameworkError,
    Placement,
    build_instances,
    framework_setup,
    instance_environment,
    overridden_names,
)


def placements(instances, nodes=("n0",), host_of=None, port0=30000, dirs=False, slots=1):
    """Instances spread over `nodes` in rank order, fill-first, 2 per node unless one node."""
    per_node = max(1, -(-len(instances) // len(nodes)))
    out = {}
    for inst in sorted(instances, key=lambda i: i.rank):
        node = nodes[min(inst.rank // per_node, len(nodes) - 1)]
        host = host_of(node) if host_of else f"{node}.cluster"
        out[inst.name] = Placement(
            node=node, host=host, port=port0 + inst.rank, dir=f"/data/{inst.name}" if dirs else "", slots=slots
        )
    return out


def test_instances_are_named_after_role_and_index_with_master_at_rank_zero():
    insts = build_instances("PyTorchJob", {"Worker": 2, "Master": 1}, "python train.py")
    assert [(i.name, i.role, i.index, i.rank) for i in insts] == [
        ("master-0", "Master", 0, 0),
        ("worker-0", "Worker", 0, 1),
        ("worker-1", "Worker", 1, 2),
    ]
    assert all(i.command == "python train.py" for i in insts)


def test_pytorch_variables_are_exactly_right_for_every_instance():
    insts = build_instances("PyTorchJob", {"Master": 1, "Worker": 3}, "x")
    setup = framework_setup("PyTorchJob", 4, insts, placements(insts, nodes=("a", "b")))

    def expect(rank, local, node):
        return {
            "MASTER_ADDR": "a.cluster",
            "MASTER_PORT": "30000",
            "WORLD_SIZE": "4",
            "RANK": str(rank),
            "LOCAL_RANK": str(local),
            "LOCAL_WORLD_SIZE": "2",
            "NODE_RANK": str(node),
        }

    got = {name: {k: v for k, v in s.env.items() if not k.startswith("VIGIL_")} for name, s in setup.items()}
    assert got == {
        "master-0": expect(0, 0, 0),
        "worker-0": expect(1, 1, 0),
        "worker-1": expect(2, 0, 1),
        "worker-2": expect(3, 1, 1),
    }


def test_a_pytorch_job_without_master_rendezvous_at_worker_zero():
    insts = build_instances("PyTorchJob", {"Worker": 2}, "x")
    setup = framework_setup("PyTorchJob", 1, insts, placements(insts))
    assert setup["worker-1"].env["MASTER_PORT"] == "30000" and setup["worker-1"].env["RANK"] == "1"
    assert setup["worker-0"].env["RANK"] == "0"


def test_every_instance_gets_its_vigil_identity():
    insts = build_instances("TFJob", {"PS": 1, "Worker": 2}, "x")
    env = framework_setup("TFJob", 3, insts, placements(insts))["worker-1"].env
    assert {k: v for k, v in env.items() if k.startswith("VIGIL_")} == {
        "VIGIL_ATTEMPT": "3",
        "VIGIL_ROLE": "Worker",
        "VIGIL_INDEX": "1",
        "VIGIL_RANK": "2",
        "VIGIL_INSTANCE": "worker-1",
        "VIGIL_NODE": "n0",
    }


def test_tf_config_lists_every_role_in_lower_case_and_the_instances_own_task():
    insts = build_instances("TFJob", {"Chief": 1, "PS": 2, "Worker": 2, "Evaluator": 1}, "x")
    setup = framework_setup("TFJob", 1, insts, placements(insts, nodes=("h",), host_of=lambda n: "10.0.0.1"))

    cluster = {
        "chief": ["10.0.0.1:30000"],
        "ps": ["10.0.0.1:30001", "10.0.0.1:30002"],
        "worker": ["10.0.0.1:30003", "10.0.0.1:30004"],
        "evaluator": ["10.0.0.1:30005"],
    }
    for inst in insts:
        assert json.loads(setup[inst.name].env["TF_CONFIG"]) == {
            "cluster": cluster,
            "task": {"type": inst.role.lower(), "index": inst.index},
        }


def test_tf_config_leaves_out_roles_that_have_no_replicas():
    insts = build_instances("TFJob", {"Worker": 2}, "x")
    tf = json.loads(framework_setup("TFJob", 1, insts, placements(insts))["worker-0"].env["TF_CONFIG"])
    assert list(tf["cluster"]) == ["worker"]


def test_the_mpi_launcher_gets_a_hostfile_with_the_workers_slots_merged_per_host():
    insts = build_instances("MPIJob", {"Launcher": 1, "Worker": 3}, "mpirun python train.py")
    where = {"launcher-0": "h0", "worker-0": "h1", "worker-1": "h1", "worker-2": "h2"}
    pl = {i.name: Placement(node=where[i.name], host=where[i.name], port=1, dir=f"/d/{i.name}", slots=4) for i in insts}

    setup = framework_setup("MPIJob", 1, insts, pl)

    launcher = setup["launcher-0"]
    assert launcher.files == {"/d/launcher-0/hostfile": "h1 slots=8\nh2 slots=4\n"}
    for var in (
        "OMPI_MCA_orte_default_hostfile",
        "PRTE_MCA_prte_default_hostfile",
        "HYDRA_HOST_FILE",
        "I_MPI_HYDRA_HOST_FILE",
        "VIGIL_MPI_HOSTFILE",
    ):
        assert launcher.env[var] == "/d/launcher-0/hostfile"
    assert launcher.env["VIGIL_MPI_NUM_PROCS"] == "12"
    assert setup["worker-0"].files == {} and "VIGIL_MPI_HOSTFILE" not in setup["worker-0"].env


def test_elastic_batch_instances_know_their_index_and_count():
    insts = build_instances("ElasticBatchJob", {"Worker": 3}, "x")
    setup = framework_setup("ElasticBatchJob", 1, insts, placements(insts))
    got = [
        (
            s.env["VIGIL_INSTANCE_INDEX"],
            s.env["VIGIL_INSTANCE_COUNT"],
            s.env["ELASTICBATCH_INSTANCE_INDEX"],
            s.env["ELASTICBATCH_INSTANCE_COUNT"],
        )
        for s in setup.values()
    ]
    assert got == [("0", "3", "0", "3"), ("1", "3", "1", "3"), ("2", "3", "2", "3")]


def test_framework_variables_win_over_the_users_and_the_override_is_reported():
    env = instance_environment(
        {"PATH": "/bin", "RANK": "base"},
        {"RANK": "9", "LR": "0.1"},
        {"MASTER_PORT": "1"},
        {"RANK": "2", "MASTER_PORT": "30000"},
    )
    assert env == {"PATH": "/bin", "RANK": "2", "LR": "0.1", "MASTER_PORT": "30000"}
    assert overridden_names(
        {"RANK": "9", "LR": "0.1"}, {"MASTER_PORT": "1"}, {"RANK": "2", "MASTER_PORT": "30000"}
    ) == ["MASTER_PORT", "RANK"]
    assert overridden_names({"RANK": "2"}, {}, {"RANK": "2"}) == []


@pytest.mark.parametrize(
    ("job_type", "replicas", "field"),
    [
        ("JaxJob", {"Worker": 1}, "job_type"),
        ("PyTorchJob", {"Chief": 1}, "job_specs.type"),
        ("PyTorchJob", {"Master": 2}, "job_specs.pod_count"),
        ("MPIJob", {"Worker": 2}, "job_specs.pod_count"),
        ("ElasticBatchJob", {"Worker": -1}, "job_specs.pod_count"),
        ("ElasticBatchJob", {"Worker": 0}, "job_specs"),
    ],
)
def test_bad_job_shapes_are_refused_naming_the_field(job_type, replicas, field):
    with pytest.raises(FrameworkError) as err:
        build_instances(job_type, replicas, "x")
    assert err.value.field == field and str(err.value).startswith(field)


def test_ranks_must_cover_every_instance_once():
    insts = (InstanceLaunch("master-0", "Master", 0, 0, "x"), InstanceLaunch("worker-0", "Worker", 0, 0, "x"))
    with pytest.raises(FrameworkError, match="instances.rank"):
        framework_setup("PyTorchJob", 1, insts, placements(insts))


def test_an_instance_without_placement_is_refused():
    insts = build_instances("ElasticBatchJob", {"Worker": 2}, "x")
    with pytest.raises(FrameworkError, match="no placement for worker-1"):
        framework_setup("ElasticBatchJob", 1, insts, {"worker-0": Placement("n", "h", 1)})


def test_replica_groups_get_their_own_rendezvous_and_the_lighthouse():
    """Issue 30: 4 ranks as 2 torchft groups: ranks 0-1 and 2-3, each with its first rank's
    address, ranks within the group, and what torchft reads."""
    insts = build_instances("PyTorchJob", {"Master": 1, "Worker": 3}, "x")
    setup = framework_setup(
        "PyTorchJob", 1, insts, placements(insts, nodes=("a", "b")), replica_groups=2, lighthouse="http://h:29510"
    )
    keys = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "REPLICA_GROUP_ID", "NUM_REPLICA_GROUPS")
    got = {name: tuple(s.env[k] for k in keys) for name, s in setup.items()}
    assert got == {
        "master-0": ("a.cluster", "30000", "2", "0", "0", "2"),
        "worker-0": ("a.cluster", "30000", "2", "1", "0", "2"),
        "worker-1": ("b.cluster", "30002", "2", "0", "1", "2"),
        "worker-2": ("b.cluster", "30002", "2", "1", "1", "2"),
    }
    assert {s.env["TORCHFT_LIGHTHOUSE"] for s in setup.values()} == {"http://h:29510"}
    assert [setup[n].env["VIGIL_RANK"] for n in ("master-0", "worker-0", "worker-1", "worker-2")] == [
        "0",
        "1",
        "2",
        "3",
    ]
