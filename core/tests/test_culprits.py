"""The culprit ranking (core.stacks.find_culprits) on py-spy-shaped dumps.

Every thread below is a thread of a real `py-spy dump --json` of examples/ddp_train.py
(torch 2.13 CPU, gloo, the SDK's progress reporter and C4D recorder running), taken
by the real-process tests in test_stacks.py: rank 1 hung in compute with rank 0 in
the loss all_reduce (FAULT=hang_compute), and rank 1 in the barrier after skipping
the all_reduce its 3 peers wait in (FAULT=skip_collective); and test_stacks.py's
STUCK script without torch (one process in `stuck_here`, the others in
`waiting_together`). Larger worlds repeat those threads; nothing here is a frame
py-spy would not print.
"""

from __future__ import annotations

import json

from core.stacks import (
    RULE_DESYNC,
    RULE_DIFFERENT_FRAME,
    RULE_ODD_ONE_OUT,
    RULE_OUTSIDE_COLLECTIVE,
    StackSnapshot,
    find_culprits,
    hang_classification,
    last_log_line,
    parse_py_spy_json,
)

THREADING = "threading.py"
C10D = "torch/distributed/distributed_c10d.py"
LOGGER = "torch/distributed/c10d_logger.py"
BOOT = [
    ("Thread.run", THREADING, 982),
    ("Thread._bootstrap_inner", THREADING, 1045),
    ("Thread._bootstrap", THREADING, 1002),
]

VIGIL_PROGRESS = (
    "vigil-progress",
    [("Condition.wait", THREADING, 327), ("_ProgressReporter._run", "vigil/job_monitor.py", 457), *BOOT],
)
VIGIL_C4D = (
    "vigil-c4d",
    [("Condition.wait", THREADING, 331), ("Event.wait", THREADING, 629), ("Recorder._run", "vigil/c4d.py", 123), *BOOT],
)
IN_ALL_REDUCE = (
    "MainThread",
    [
        ("all_reduce", C10D, 3252),
        ("_exception_logger.<locals>.wrapper", LOGGER, 83),
        ("main", "ddp_train.py", 294),
        ("<module>", "ddp_train.py", 317),
    ],
)
IN_ALL_REDUCE_C4D = (
    "MainThread",
    [
        ("all_reduce", C10D, 3252),
        ("_exception_logger.<locals>.wrapper", LOGGER, 83),
        ("_wrap.<locals>.instrumented", "vigil/c4d.py", 276),
        ("main", "ddp_train.py", 294),
        ("<module>", "ddp_train.py", 317),
    ],
)
IN_BARRIER_C4D = (
    "MainThread",
    [
        ("barrier", C10D, 5356),
        ("_exception_logger.<locals>.wrapper", LOGGER, 83),
        ("_wrap.<locals>.instrumented", "vigil/c4d.py", 276),
        ("skip_collective", "ddp_train.py", 124),
        ("main", "ddp_train.py", 292),
        ("<module>", "ddp_train.py", 317),
    ],
)
HELPER = (
    "helper",
    [("Condition.wait", THREADING, 327), ("Event.wait", THREADING, 629), ("helper", "stuck.py", 12), *BOOT],
)
STUCK_HERE = ("MainThread", [("stuck_here", "stuck.py", 5), ("<module>", "stuck.py", 17)])
WAITING_TOGETHER = ("MainThread", [("waiting_together", "stuck.py", 9), ("<module>", "stuck.py", 19)])
# A rank in DDP's start-up check that every rank's parameters have the same shapes.
IN_DDP_INIT = (
    "MainThread",
    [
        ("_verify_param_shape_across_processes", "torch/distributed/utils.py", 286),
        ("DistributedDataParallel.__init__", "torch/nn/parallel/distributed.py", 1064),
        ("main", "ddp_train.py", 242),
        ("<module>", "ddp_train.py", 321),
    ],
)
IN_COMPUTE = (
    "MainThread",
    [("compute_forever", "ddp_train.py", 109), ("main", "ddp_train.py", 264), ("<module>", "ddp_train.py", 317)],
)


def instance(rank: int) -> str:
    return "master-0" if rank == 0 else f"worker-{rank - 1}"


def dump(rank: int, *threads):
    """One rank's dump as `py-spy dump --json` prints it, parsed as the shells parse it."""
    raw = [
        {
            "pid": 4000 + rank,
            "thread_id": 7000 + i,
            "thread_name": name,
            "os_thread_id": 4000 + rank if name == "MainThread" else 9000 + i,
            "active": False,
            "owns_gil": False,
            "frames": [
                {
                    "name": f,
                    "filename": f"/venv/lib/python3.11/site-packages/{short}",
                    "module": None,
                    "short_filename": short,
                    "line": line,
                    "locals": None,
                    "is_entry": False,
                    "is_shim_entry": False,
                }
                for f, short, line in frames
            ],
        }
        for i, (name, frames) in enumerate(threads)
    ]
    return parse_py_spy_json(json.dumps(raw), 4000 + rank, instance(rank), rank)


def suspects_of(snapshot: StackSnapshot) -> list[tuple[int | None, str]]:
    return [(s.thread.rank, s.rule) for s in snapshot.culprits.suspects]


def test_two_ranks_the_one_outside_the_collective_is_the_only_suspect_not_the_waiting_one():
    snapshot = StackSnapshot.of([dump(0, VIGIL_PROGRESS, IN_ALL_REDUCE), dump(1, IN_COMPUTE)])
    assert suspects_of(snapshot) == [(1, RULE_OUTSIDE_COLLECTIVE)]
    assert [s.frames[0].function for s in snapshot.suspects] == ["compute_forever"]
    progress = next(s for s in snapshot.stacks if s.threads[0].thread_name == "vigil-progress")
    assert progress.vigil and not progress.suspect and progress.count == 1
    assert snapshot.culprits.why == (
        "worker-0 (rank 1) is not inside any collective (it is in compute_forever "
        "(ddp_train.py:109)) while master-0 (rank 0) waits in all_reduce: the collective waits for it."
    )
    assert snapshot.culprits.cause == (
        "worker-0 stopped making progress in `compute_forever` while master-0 waited in `all_reduce`"
    )
    assert "compute_forever" in snapshot.culprits.next_step
    assert snapshot.stacks[0].suspect and snapshot.stacks[0].why == snapshot.culprits.why
    text = snapshot.summary_text()
    assert "1 suspect(s)" in text and "[vigil, idle]" in text
    assert "Suspect: worker-0 (rank 1) is not inside any collective" in text


def test_a_thousand_ranks_with_one_in_compute_name_that_one_and_summarise_the_waiting_peers():
    dumps = [dump(r, VIGIL_C4D, IN_ALL_REDUCE_C4D) for r in range(1000) if r != 617]
    dumps.append(dump(617, VIGIL_C4D, IN_COMPUTE))
    culprits = find_culprits(dumps)
    assert [(s.thread.rank, s.rule) for s in culprits.suspects] == [(617, RULE_OUTSIDE_COLLECTIVE)]
    assert (
        "while 999 ranks (master-0 (rank 0), worker-0 (rank 1), worker-1 (rank 2), …) wait in "
        "all_reduce" in culprits.why
    )


def test_four_ranks_the_one_in_a_different_collective_is_the_desync_suspect():
    dumps = [dump(r, VIGIL_C4D, IN_ALL_REDUCE_C4D) for r in (0, 2, 3)] + [dump(1, VIGIL_C4D, IN_BARRIER_C4D)]
    snapshot = StackSnapshot.of(dumps)
    assert suspects_of(snapshot) == [(1, RULE_DESYNC)]
    assert snapshot.culprits.why.startswith(
        "worker-0 (rank 1) waits in barrier while master-0 (rank 0), worker-1 (rank 2) and "
        "worker-2 (rank 3) are in all_reduce: it is out of step"
    )
    assert snapshot.culprits.cause.startswith(
        "worker-0 waited in `barrier` while master-0, worker-1 and worker-2 waited in `all_reduce`"
    )
    assert not any(s.suspect for s in snapshot.stacks if s.vigil)


def test_with_sequence_numbers_the_rank_behind_in_the_same_collective_is_the_suspect():
    dumps = [dump(r, VIGIL_C4D, IN_ALL_REDUCE_C4D) for r in range(4)]
    culprits = find_culprits(dumps, sequences={0: 12, 1: 12, 2: 11, 3: 12})
    assert [(s.thread.rank, s.rule) for s in culprits.suspects] == [(2, RULE_DESYNC)]
    assert "waits in all_reduce #11 while" in culprits.why and "are in all_reduce #12" in culprits.why
    assert "behind" in culprits.why


def test_every_rank_in_the_same_collective_is_no_suspect_rather_than_all_of_them():
    for world in (2, 4, 1000):
        snapshot = StackSnapshot.of([dump(r, VIGIL_C4D, IN_ALL_REDUCE_C4D) for r in range(world)])
        assert snapshot.culprits.suspects == () and not any(s.suspect for s in snapshot.stacks)
        assert snapshot.culprits.why == (
            f"No suspect: all {world} ranks wait in all_reduce, so the stacks cannot say which "
            "rank the collective waits for (C4D's records can)."
        )
        assert "names no suspect" in snapshot.culprits.cause


def test_two_ranks_in_different_collectives_without_sequence_numbers_are_no_suspect():
    culprits = find_culprits([dump(0, VIGIL_C4D, IN_ALL_REDUCE_C4D), dump(1, VIGIL_C4D, IN_BARRIER_C4D)])
    assert culprits.suspects == ()
    assert culprits.why.startswith("No suspect: the ranks wait in different collectives")
    behind = find_culprits(
        [dump(0, VIGIL_C4D, IN_ALL_REDUCE_C4D), dump(1, VIGIL_C4D, IN_BARRIER_C4D)], sequences={0: 5, 1: 4}
    )
    assert [s.thread.rank for s in behind.suspects] == [1]


def test_outside_any_collective_a_stack_that_differs_from_the_majority_in_its_own_code_is_the_suspect():
    dumps = [dump(r, HELPER, WAITING_TOGETHER) for r in (0, 1, 3)] + [dump(2, HELPER, STUCK_HERE)]
    culprits = find_culprits(dumps)
    assert [(s.thread.rank, s.rule) for s in culprits.suspects] == [(2, RULE_DIFFERENT_FRAME)]
    assert culprits.suspects[0].where == "stuck_here"
    assert culprits.why == (
        "worker-1 (rank 2) is in stuck_here (stuck.py:5) where master-0 (rank 0), "
        "worker-0 (rank 1) and worker-2 (rank 3) are in waiting_together "
        "(stuck.py:9): its stack differs from theirs outside any wait."
    )
    assert culprits.cause == (
        "worker-1 stopped making progress in `stuck_here` while master-0, "
        "worker-0 and worker-2 were in `waiting_together`"
    )


def test_a_stack_that_differs_only_in_its_waits_is_the_odd_one_out_last():
    # Rank 3 runs without the C4D wrapper: same collective, same code, one wait frame less.
    dumps = [dump(r, IN_ALL_REDUCE_C4D) for r in range(3)] + [dump(3, IN_ALL_REDUCE)]
    culprits = find_culprits(dumps)
    assert [(s.thread.rank, s.rule) for s in culprits.suspects] == [(3, RULE_ODD_ONE_OUT)]


def test_two_ranks_that_differ_outside_collectives_have_no_majority_and_no_suspect():
    culprits = find_culprits([dump(0, HELPER, WAITING_TOGETHER), dump(1, HELPER, STUCK_HERE)])
    assert culprits.suspects == () and culprits.why.startswith("No suspect: the 2 ranks' stacks differ")


def test_vigil_threads_are_never_suspects_even_when_a_rank_has_nothing_else():
    # A rank whose only thread is Vigil's has nothing to judge; the others decide alone.
    culprits = find_culprits([dump(0, VIGIL_PROGRESS), dump(1, IN_COMPUTE), dump(2, IN_ALL_REDUCE)])
    assert [(s.thread.rank, s.thread.thread_name) for s in culprits.suspects] == [(1, "MainThread")]


def test_one_process_alone_is_no_suspect():
    culprits = find_culprits([dump(0, VIGIL_PROGRESS, IN_COMPUTE)])
    assert culprits.suspects == () and culprits.why.startswith("No suspect: 1 process(es)")


def test_the_hang_record_takes_cause_and_next_step_from_the_culprits_and_the_last_line_as_evidence():
    snapshot = StackSnapshot.of([dump(0, VIGIL_PROGRESS, IN_ALL_REDUCE), dump(1, IN_COMPUTE)])
    c = hang_classification(
        "All 2 instances silent for 6 s.",
        snapshot.culprits.to_dict(),
        "2026-12-01T19:23:03.824278Z step=4 rank=1 entering compute_forever",
    )
    assert (c.rule, c.error_code, c.source, c.retryable) == ("hang", "HANG", "Hang", True)
    assert c.cause == ("worker-0 stopped making progress in `compute_forever` while master-0 waited in `all_reduce`.")
    assert c.next_step.startswith("Look at worker-0's stack in the snapshot")
    assert c.evidence.endswith("entering compute_forever") and c.message.startswith("All 2")
    none = hang_classification("silent", None)
    assert "no stack snapshot could be taken" in none.cause and none.evidence == ""


def test_the_last_log_line_skips_trailing_blank_lines_and_says_where_it_starts():
    tail = b"step=1 loss=0.5\nstep=2 loss=0.4\n\n"
    assert last_log_line(tail) == ("step=2 loss=0.4", 16)
    assert last_log_line(b"only line") == ("only line", 0)
    assert last_log_line(b"\n \n") == ("", -1)


def test_a_rank_inside_torch_distributed_code_waits_for_its_peers_even_without_a_collective_name():
    culprits = find_culprits([dump(0, IN_DDP_INIT), dump(1, IN_DDP_INIT), dump(2, IN_COMPUTE)])
    assert [(s.thread.rank, s.rule) for s in culprits.suspects] == [(2, RULE_OUTSIDE_COLLECTIVE)]
    assert "wait in _verify_param_shape_across_processes" in culprits.why
