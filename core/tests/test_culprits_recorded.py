"""Culprits from what the ranks did (issue 27): core.stacks.find_culprits with the ranks'
collective records, and core.c4d's hang-time helpers.

The frames are those of real `py-spy dump --json` output of monitoring/tests/
ddp_hang_worker.py (torch 2.13 CPU, gloo, 2 ranks): rank 0 waiting in DDP's gradient
all-reduce shows only `backward` in Python, rank 1 in `compute_forever`; rank 0 of the
same script in its logging all_reduce; the barrier frame is test_culprits.py's."""

from __future__ import annotations

from core.c4d import (
    C4DKind,
    C4DResult,
    C4DState,
    C4DVerdict,
    CollectiveRecord,
    analyze_collectives,
    hang_envs,
    with_stacks,
)
from core.flags import C4DEnvs, C4DLogLevel
from core.stacks import (
    RULE_NEVER_ENTERED,
    RULE_NEVER_RETURNED,
    RULE_RECORDED_DESYNC,
    Frame,
    ProcessStacks,
    RecordedCollective,
    StackSnapshot,
    ThreadStack,
    find_culprits,
    recorded_positions,
)

WORKER = "monitoring/tests/ddp_hang_worker.py"
IN_BACKWARD = [
    ("_engine_run_backward", "torch/autograd/graph.py", 979),
    ("backward", "torch/autograd/__init__.py", 395),
    ("Tensor.backward", "torch/_tensor.py", 623),
    ("main", WORKER, 68),
    ("<module>", WORKER, 78),
]
IN_COMPUTE = [("compute_forever", WORKER, 36), ("main", WORKER, 59), ("<module>", WORKER, 78)]
IN_ALL_REDUCE = [
    ("all_reduce", "torch/distributed/distributed_c10d.py", 3252),
    ("_exception_logger.<locals>.wrapper", "torch/distributed/c10d_logger.py", 83),
    ("main", WORKER, 64),
    ("<module>", WORKER, 78),
]
IN_BARRIER = [
    ("barrier", "torch/distributed/distributed_c10d.py", 5356),
    ("_exception_logger.<locals>.wrapper", "torch/distributed/c10d_logger.py", 83),
    ("main", WORKER, 73),
    ("<module>", WORKER, 78),
]
NAMES = ["master-0", "worker-0", "worker-1", "worker-2"]


def rank(r: int, frames) -> ProcessStacks:
    thread = ThreadStack(1, "MainThread", tuple(Frame(f, file, line) for f, file, line in frames), os_thread_id=100 + r)
    return ProcessStacks(pid=100 + r, instance=NAMES[r], rank=r, threads=(thread,))


def suspects(culprits) -> list[tuple[int | None, str]]:
    return [(s.thread.rank, s.rule) for s in culprits.suspects]


def test_a_rank_in_backward_whose_peer_never_entered_the_all_reduce_is_waiting_and_the_peer_is_the_suspect():
    dumps = [rank(0, IN_BACKWARD), rank(1, IN_COMPUTE)]
    # Today's stack rules: two stacks that differ, no majority, nobody in a collective.
    assert find_culprits(dumps).suspects == ()
    recorded = {0: RecordedCollective(7, "all_reduce", True), 1: RecordedCollective(6, "all_reduce", False)}
    culprits = find_culprits(dumps, recorded=recorded)
    assert suspects(culprits) == [(1, RULE_NEVER_ENTERED)]
    assert "never entered all_reduce #7" in culprits.why and "compute_forever" in culprits.why, culprits.why
    assert "worker-0" in culprits.cause and "compute_forever" in culprits.cause


def test_the_records_decide_over_the_stacks_whatever_the_stack_shows():
    # Rank 3 never entered DDP's all-reduce #7 its peers are inside; its stack is in
    # backward too (it is slow inside autograd), yet it is the only suspect.
    dumps = [rank(r, IN_BACKWARD) for r in range(4)]
    recorded = {r: RecordedCollective(7, "all_reduce", True) for r in range(3)}
    recorded[3] = RecordedCollective(6, "all_reduce", False)
    assert suspects(find_culprits(dumps, recorded=recorded)) == [(3, RULE_NEVER_ENTERED)]


def test_a_rank_whose_stack_is_still_in_a_collective_the_records_count_as_done_never_returned():
    dumps = [rank(0, IN_BACKWARD), rank(1, IN_ALL_REDUCE)]
    recorded = {0: RecordedCollective(9, "all_reduce", True), 1: RecordedCollective(8, "all_reduce", False)}
    culprits = find_culprits(dumps, recorded=recorded)
    assert suspects(culprits) == [(1, RULE_NEVER_RETURNED)]
    assert "never returned" in culprits.why and "hung in communication" in culprits.why


def test_the_one_rank_in_another_collective_at_the_same_seq_is_out_of_step():
    dumps = [rank(0, IN_BACKWARD), rank(1, IN_BACKWARD), rank(2, IN_BACKWARD), rank(3, IN_BARRIER)]
    # The stacks alone blame the three in backward: they are outside any collective.
    assert [r for r, _ in suspects(find_culprits(dumps))] == [0, 1, 2]
    recorded = {r: RecordedCollective(10, "all_reduce", True) for r in range(3)}
    recorded[3] = RecordedCollective(10, "barrier", True)
    culprits = find_culprits(dumps, recorded=recorded)
    assert suspects(culprits) == [(3, RULE_RECORDED_DESYNC)]
    assert "barrier #10" in culprits.why and "all_reduce #10" in culprits.why


def test_every_rank_inside_the_same_collective_names_no_rank():
    dumps = [rank(0, IN_BACKWARD), rank(1, IN_COMPUTE)]
    recorded = {r: RecordedCollective(5, "all_reduce", True) for r in range(2)}
    culprits = find_culprits(dumps, recorded=recorded)
    assert culprits.suspects == () and "collective itself is stuck" in culprits.why


def test_without_records_the_snapshot_says_so_and_the_stacks_decide():
    dumps = [rank(0, IN_ALL_REDUCE), rank(1, IN_COMPUTE)]
    snap = StackSnapshot.of(dumps)
    assert "No collective records" in snap.summary_text() and snap.to_dict()["records"] == snap.records
    assert [s.thread.rank for s in snap.culprits.suspects] == [1]
    recorded = recorded_positions(
        {
            0: [CollectiveRecord(1, "all_reduce", 1.0, 1.1), CollectiveRecord(2, "all_reduce", 2.0)],
            1: [CollectiveRecord(1, "all_reduce", 1.0, 1.1)],
        }
    )
    assert recorded == {0: RecordedCollective(2, "all_reduce", True), 1: RecordedCollective(1, "all_reduce", False)}
    text = StackSnapshot.of(dumps, recorded=recorded, source="PyTorch's Flight Recorder").summary_text()
    assert "Collective records (PyTorch's Flight Recorder): rank 0 inside all_reduce #2; rank 1 last left" in text
    assert snap.in_collective() == {0: "all_reduce"}


def test_a_hang_caught_before_the_c4d_timeout_is_judged_with_the_silence_as_proof():
    envs = C4DEnvs()  # C4D_HANG_TIMEOUT 10 s
    records = {0: [CollectiveRecord(1, "all_reduce", 100.0)], 1: []}
    assert analyze_collectives(records, envs, now=106.0).verdicts == ()
    assert hang_envs(envs, 6.0).hang_timeout_us == 3_000_000
    assert hang_envs(envs, 60.0).hang_timeout_us == envs.hang_timeout_us  # never longer than the job's
    [v] = analyze_collectives(records, hang_envs(envs, 6.0), now=106.0).verdicts
    assert (v.rank, v.kind) == (1, C4DKind.NON_COMM_HANG)


def test_a_non_comm_hang_whose_stack_is_in_a_collective_becomes_a_comm_hang():
    records = {
        0: [CollectiveRecord(1, "all_reduce", 100.0, 100.1), CollectiveRecord(2, "all_reduce", 100.2)],
        1: [CollectiveRecord(1, "all_reduce", 100.0, 100.1)],
    }
    result = analyze_collectives(records, C4DEnvs(hang_timeout_us=1_000_000), now=110.0)
    [v] = with_stacks(result, {1: "all_reduce"}).verdicts
    assert (v.rank, v.kind, v.severity) == (1, C4DKind.COMM_HANG, C4DLogLevel.WARNING)
    assert v.message.startswith("Rank 1 never returned from all_reduce") and "Found hanging in 1" in v.message
    unchanged = C4DResult((C4DVerdict(0, C4DKind.COMM_HANG, C4DLogLevel.WARNING, "m"),), C4DState())
    assert with_stacks(unchanged, {0: "all_reduce"}) == unchanged
