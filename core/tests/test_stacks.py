"""Stack snapshots: real py-spy dumps of real hung processes, and their aggregation."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from core import stacks
from core.stacks import (
    Frame,
    ProcessStacks,
    StackSnapshot,
    ThreadStack,
    aggregate_stacks,
    dump_process_stacks,
    dump_processes,
    find_python_processes,
    parse_py_spy_json,
)

needs_py_spy = pytest.mark.skipif(stacks.find_py_spy() is None, reason="py-spy is not installed (pip install py-spy)")

STUCK = textwrap.dedent("""\
    import sys, threading, time

    def stuck_here():
        while True:
            time.sleep(0.5)

    def waiting_together():
        while True:
            time.sleep(0.5)

    def helper():
        threading.Event().wait()

    threading.Thread(target=helper, name="helper", daemon=True).start()
    print("ready", flush=True)
    if sys.argv[1] == "odd":
        stuck_here()
    else:
        waiting_together()
""")


class Processes:
    def __init__(self):
        self.procs: list[subprocess.Popen] = []

    def start(self, argv, **kw) -> subprocess.Popen:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, **kw)
        self.procs.append(proc)
        return proc

    def kill_all(self):
        for proc in self.procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture
def procs():
    p = Processes()
    yield p
    p.kill_all()


@pytest.fixture
def stuck_script(tmp_path) -> Path:
    path = tmp_path / "stuck.py"
    path.write_text(STUCK)
    return path


def start_stuck(procs, script, role) -> subprocess.Popen:
    proc = procs.start([sys.executable, str(script), role])
    assert proc.stdout.readline().strip() == "ready"
    return proc


@needs_py_spy
def test_a_dump_of_a_hung_process_names_the_function_and_line_it_is_stuck_in(procs, stuck_script):
    proc = start_stuck(procs, stuck_script, "odd")
    dump = dump_process_stacks(proc.pid, timeout=10, instance="worker-0", rank=0)
    assert dump.ok, dump.error
    main = next(t for t in dump.threads if t.thread_name == "MainThread")
    assert main.frames[0] == Frame("stuck_here", "stuck.py", 5, str(stuck_script))
    assert [f.function for f in main.frames] == ["stuck_here", "<module>"]
    helper = next(t for t in dump.threads if t.thread_name == "helper")
    assert helper.idle and not main.idle


@needs_py_spy
def test_eight_processes_where_seven_share_a_stack_make_the_eighth_the_suspect(procs, stuck_script):
    roles = ["together"] * 7 + ["odd"]
    started = [start_stuck(procs, stuck_script, role) for role in roles]
    dumps = dump_processes([(f"worker-{i}", i, p.pid) for i, p in enumerate(started)], timeout=15)
    assert all(d.ok for d in dumps), [d.error for d in dumps if not d.ok]

    snapshot = StackSnapshot.of(dumps)
    first = snapshot.stacks[0]
    assert first.suspect and first.count == 1
    assert first.frames[0].function == "stuck_here" and first.frames[0].line == 5
    assert [(t.instance, t.rank, t.pid) for t in first.threads] == [("worker-7", 7, started[7].pid)]
    shared = next(s for s in snapshot.stacks if s.frames[0].function == "waiting_together")
    assert shared.count == 7 and not shared.suspect
    helpers = next(s for s in snapshot.stacks if s.idle)
    assert helpers.count == 8
    assert [s for s in snapshot.stacks if s.suspect] == [first]
    text = snapshot.summary_text()
    assert "8 process(es): 8 dumped" in text
    assert "#1 x1 [SUSPECT]: worker-7 rank 7" in text
    assert "stuck_here (stuck.py:5)" in text


@needs_py_spy
def test_a_process_that_is_gone_gives_an_error_result_not_an_exception(procs):
    proc = procs.start([sys.executable, "-c", "pass"])
    proc.wait()
    dump = dump_process_stacks(proc.pid, timeout=5, instance="worker-3", rank=3)
    assert not dump.ok and dump.error_code == stacks.PROCESS_GONE
    assert str(proc.pid) in dump.error and dump.threads == ()


@needs_py_spy
def test_a_process_that_exited_but_was_not_reaped_is_gone(procs):
    proc = procs.start([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    dump = dump_process_stacks(proc.pid, timeout=5)
    assert dump.error_code == stacks.PROCESS_GONE and "zombie" in dump.error


@needs_py_spy
def test_a_process_that_is_not_python_gives_a_not_python_result(procs):
    proc = procs.start(["sleep", "30"])
    time.sleep(0.1)
    dump = dump_process_stacks(proc.pid, timeout=5)
    assert dump.error_code == stacks.NOT_PYTHON, dump.error


@needs_py_spy
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run py-spy as another user")
def test_no_ptrace_permission_gives_a_permission_result(procs, stuck_script, tmp_path):
    proc = start_stuck(procs, stuck_script, "odd")
    as_nobody = tmp_path / "py-spy-as-nobody"
    as_nobody.write_text(
        f'#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups {stacks.find_py_spy()} "$@"\n'
    )
    as_nobody.chmod(0o755)
    dump = dump_process_stacks(proc.pid, timeout=10, py_spy=str(as_nobody))
    assert dump.error_code == stacks.PERMISSION_DENIED, dump.error
    assert "ptrace" in dump.error


def test_a_missing_py_spy_gives_a_py_spy_missing_result(tmp_path):
    dump = dump_process_stacks(os.getpid(), py_spy=str(tmp_path / "no-such-py-spy"))
    assert dump.error_code == stacks.PY_SPY_MISSING


@needs_py_spy
def test_a_dump_that_takes_too_long_gives_a_timeout_result(procs, tmp_path):
    slow = tmp_path / "slow-py-spy"
    slow.write_text("#!/bin/sh\nexec sleep 30\n")
    slow.chmod(0o755)
    started = time.monotonic()
    dump = dump_process_stacks(os.getpid(), timeout=0.5, py_spy=str(slow))
    assert dump.error_code == stacks.TIMEOUT
    assert time.monotonic() - started < 5


def test_python_processes_under_a_shell_are_found_and_the_shell_is_not(procs):
    shell = procs.start(
        [
            "/bin/sh",
            "-c",
            f"{sys.executable} -c 'import time; time.sleep(30)' & "
            f"{sys.executable} -c 'import time; time.sleep(30)' & sleep 30; wait",
        ]
    )
    deadline = time.monotonic() + 10
    found: list[int] = []
    while time.monotonic() < deadline and len(found) < 2:
        found = find_python_processes([shell.pid])
        time.sleep(0.05)
    try:
        children = psutil.Process(shell.pid).children(recursive=True)
        assert len(found) == 2 and shell.pid not in found
        assert set(found) <= {c.pid for c in children}
    finally:
        for child in psutil.Process(shell.pid).children(recursive=True):
            child.kill()


def test_bad_py_spy_output_is_a_dump_failed_result():
    dump = parse_py_spy_json("Error: something else", pid=5, instance="worker-0")
    assert dump.error_code == stacks.DUMP_FAILED and "not a stack dump" in dump.error


def thread(name, *frames) -> ThreadStack:
    return ThreadStack(
        thread_id=hash(name) & 0xFFFF, thread_name=name, frames=tuple(Frame(f, "train.py", line) for f, line in frames)
    )


C10D = "torch/distributed/distributed_c10d.py"


def test_aggregation_sorts_suspects_first_then_by_count_and_keeps_idle_threads():
    def dump(rank, main_frames, idle=True):
        threads = [ThreadStack(0, "MainThread", tuple(Frame(*f) for f in main_frames))]
        if idle:
            threads.append(ThreadStack(1, "pool", (Frame("Condition.wait", "threading.py", 327),)))
        return ProcessStacks(pid=100 + rank, instance=f"worker-{rank}", rank=rank, threads=tuple(threads))

    in_all_reduce = [("all_reduce", C10D, 3252), ("main", "train.py", 50)]
    dumps = [dump(r, in_all_reduce) for r in range(4)]
    dumps += [dump(r, [("backward", "torch/autograd/__init__.py", 395), ("main", "train.py", 51)]) for r in (4, 5)]
    dumps += [dump(6, [("compute_forever", "train.py", 30), ("main", "train.py", 52)], idle=False)]
    dumps += [
        ProcessStacks(
            pid=999, instance="worker-7", rank=7, error_code=stacks.TIMEOUT, error="py-spy took longer than 5 s"
        )
    ]
    result = aggregate_stacks(dumps)
    # Ranks 4-6 are all outside the collective ranks 0-3 wait in: suspects, in rank order.
    assert [(s.frames[0].function, s.count, s.suspect, s.idle) for s in result] == [
        ("backward", 2, True, False),
        ("compute_forever", 1, True, False),
        ("all_reduce", 4, False, False),
        ("Condition.wait", 6, False, True),
    ]
    text = StackSnapshot.of(dumps).summary_text()
    assert "worker-7 (pid 999, rank 7): no stacks: py-spy took longer than 5 s" in text
    assert "7 dumped, 1 not" in text


def test_a_single_thread_alone_is_not_a_suspect():
    only = ProcessStacks(pid=1, threads=(thread("MainThread", ("main", 1)),))
    assert [s.suspect for s in aggregate_stacks([only])] == [False]


def test_the_same_code_under_different_install_prefixes_groups_together():
    raw = (
        '[{"thread_id": 1, "thread_name": "MainThread", "frames": [{"name": "all_reduce", '
        '"filename": "%s/torch/distributed/distributed_c10d.py", "short_filename": '
        '"torch/distributed/distributed_c10d.py", "line": 2800}]}]'
    )
    a = parse_py_spy_json(raw % "/home/a/venv/lib", pid=1, rank=0)
    b = parse_py_spy_json(raw % "/opt/venv/lib", pid=2, rank=1)
    [group] = aggregate_stacks([a, b])
    assert group.count == 2 and group.to_dict()["threads"][1]["rank"] == 1


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ddp_train.py"


def start_ddp(procs, world: int, **env) -> list[subprocess.Popen]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = []
    for rank in range(world):
        full = {k: v for k, v in os.environ.items() if not k.startswith(("FAULT", "VIGIL_"))}
        full.update(
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            WORLD_SIZE=str(world),
            RANK=str(rank),
            VIGIL_EXAMPLE_STEPS="30",
            VIGIL_EXAMPLE_PG_TIMEOUT="120",
            **env,
        )
        started.append(procs.start([sys.executable, str(EXAMPLE)], env=full, stderr=subprocess.DEVNULL))
    return started


def wait_for_line(proc, needle: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if needle in line:
            return
        if not line and proc.poll() is not None:
            raise AssertionError(f"pid {proc.pid} exited {proc.returncode} before {needle!r}")
    raise AssertionError(f"no {needle!r} from pid {proc.pid} within {timeout} s")


@needs_py_spy
@pytest.mark.torch
@pytest.mark.parametrize(
    "fault, culprit", [("hang_compute", "compute_forever"), ("hang_collective", "collective_forever")]
)
def test_the_hung_ddp_rank_is_the_suspect_and_its_stack_names_where_it_hangs(procs, fault, culprit):
    pytest.importorskip("torch", reason="PyTorch is not installed: pip install torch==2.13.0 (CPU)")
    ranks = start_ddp(procs, 4, FAULT=fault, FAULT_RANK="1", FAULT_STEP="4")
    wait_for_line(ranks[1], f"entering {culprit}")
    for rank in (0, 2, 3):
        wait_for_line(ranks[rank], "step=3 ")
    # The healthy ranks need a moment to reach the collective they will wait in.
    deadline = time.monotonic() + 60
    while True:
        dumps = dump_processes([(f"worker-{r}", r, p.pid) for r, p in enumerate(ranks)], timeout=15)
        assert all(d.ok for d in dumps), [d.error for d in dumps if not d.ok]
        snapshot = StackSnapshot.of(dumps)
        if any(s.count == 3 and not s.idle for s in snapshot.stacks) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    suspects = [s for s in snapshot.suspects if not s.idle]
    assert len(suspects) == 1, snapshot.summary_text()
    assert [t.rank for t in suspects[0].threads] == [1]
    assert culprit in [f.function for f in suspects[0].frames]
    waiting = next(s for s in snapshot.stacks if s.count == 3 and not s.idle)
    assert {t.rank for t in waiting.threads} == {0, 2, 3}
    assert "all_reduce" in [f.function for f in waiting.frames], snapshot.summary_text()


# The SDK's threads run as in a managed job (progress reporter on rank 0, C4D recorder on
# every rank), reporting to a console that is not there: they must be shown, never suspected.
SDK_ENV = {
    "PYTHONPATH": str(EXAMPLE.parents[1] / "sdk" / "src"),
    "VIGIL_JOB_ID": "1",
    "VIGIL_JOB_TOKEN": "not-a-token",
    "VIGIL_CONSOLE_URL": "http://127.0.0.1:9",
    "VIGIL_SDK_TIMEOUT": "0.5",
    "VIGIL_C4D": "1",
}


def snapshot_when(procs_by_rank, settled, timeout: float = 60) -> StackSnapshot:
    """Dump every rank until `settled(snapshot)` (peers need a moment to reach their wait)."""
    deadline = time.monotonic() + timeout
    while True:
        dumps = dump_processes(
            [("master-0" if r == 0 else f"worker-{r - 1}", r, p.pid) for r, p in enumerate(procs_by_rank)], timeout=15
        )
        assert all(d.ok for d in dumps), [d.error for d in dumps if not d.ok]
        snapshot = StackSnapshot.of(dumps)
        if settled(snapshot) or time.monotonic() > deadline:
            return snapshot
        time.sleep(0.5)


def in_collective(snapshot: StackSnapshot, op: str) -> set[int | None]:
    return {
        t.rank
        for s in snapshot.stacks
        for t in s.threads
        if t.thread_name == "MainThread" and s.frames and s.frames[0].function == op
    }


def assert_vigil_threads_shown_never_suspected(snapshot: StackSnapshot, ranks: set[int]) -> None:
    vigil = [s for s in snapshot.stacks if s.vigil]
    assert {t.rank for s in vigil for t in s.threads} == ranks, snapshot.summary_text()
    assert not any(s.suspect for s in vigil)
    suspected = {(r.pid, r.thread_id) for s in snapshot.stacks if s.suspect for r in s.threads}
    assert not any(t.vigil for d in snapshot.dumps for t in d.threads if (d.pid, t.thread_id) in suspected)


@needs_py_spy
@pytest.mark.torch
def test_two_ranks_the_rank_hung_in_compute_is_the_only_suspect_not_the_one_waiting(procs):
    pytest.importorskip("torch", reason="PyTorch is not installed: pip install torch==2.13.0 (CPU)")
    ranks = start_ddp(procs, 2, FAULT="hang_compute", FAULT_RANK="1", FAULT_STEP="4", **SDK_ENV)
    wait_for_line(ranks[1], "entering compute_forever")
    wait_for_line(ranks[0], "step=3 ")
    snapshot = snapshot_when(
        ranks,
        lambda s: (
            in_collective(s, "all_reduce") == {0}
            and any(t.thread_name == "vigil-progress" for d in s.dumps for t in d.threads)
        ),
    )
    assert [(s.thread.rank, s.rule, s.where) for s in snapshot.culprits.suspects] == [
        (1, stacks.RULE_OUTSIDE_COLLECTIVE, "compute_forever")
    ], snapshot.summary_text()
    [suspect] = snapshot.suspects
    assert [t.rank for t in suspect.threads] == [1] and suspect.frames[0].function == "compute_forever"
    assert snapshot.culprits.cause == (
        "worker-0 stopped making progress in `compute_forever` while master-0 waited in `all_reduce`"
    )
    assert suspect.why.startswith("worker-0 (rank 1) is not inside any collective")
    assert_vigil_threads_shown_never_suspected(snapshot, {0, 1})


@needs_py_spy
@pytest.mark.torch
def test_four_ranks_the_rank_that_skipped_a_collective_is_the_only_suspect(procs):
    pytest.importorskip("torch", reason="PyTorch is not installed: pip install torch==2.13.0 (CPU)")
    ranks = start_ddp(procs, 4, FAULT="skip_collective", FAULT_RANK="1", FAULT_STEP="4", **SDK_ENV)
    wait_for_line(ranks[1], "skipping the loss all_reduce")
    for rank in (0, 2, 3):
        wait_for_line(ranks[rank], "step=3 ")
    snapshot = snapshot_when(
        ranks, lambda s: in_collective(s, "all_reduce") == {0, 2, 3} and in_collective(s, "barrier") == {1}
    )
    assert [(s.thread.rank, s.rule, s.where) for s in snapshot.culprits.suspects] == [
        (1, stacks.RULE_DESYNC, "barrier")
    ], snapshot.summary_text()
    [suspect] = snapshot.suspects
    assert [t.rank for t in suspect.threads] == [1]
    assert "skip_collective" in [f.function for f in suspect.frames]
    assert suspect.why.startswith(
        "worker-0 (rank 1) waits in barrier while master-0 (rank 0), "
        "worker-1 (rank 2) and worker-2 (rank 3) are in all_reduce"
    )
    assert_vigil_threads_shown_never_suspected(snapshot, {0, 1, 2, 3})


def test_every_collective_the_sdk_instruments_is_a_wait_the_stack_analysis_recognises():
    # The two lists live apart on purpose (the SDK ships alone, standard library only, and
    # the core imports no SDK); a collective added to one must not be missing from the other,
    # or a rank waiting in it would read as "outside any collective" and become the suspect.
    from vigil import c4d as sdk_c4d

    assert set(sdk_c4d.COLLECTIVES) <= stacks.COLLECTIVES, set(sdk_c4d.COLLECTIVES) - stacks.COLLECTIVES
