"""The DDP example job (examples/ddp_train.py) trains on real gloo ranks and injects faults.

Four real processes (rank 0 as master + 3 workers) rendezvous over loopback; every
process is killed by PID at teardown, also when a test fails.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from testsupport.ports import free_port

pytestmark = pytest.mark.torch
pytest.importorskip("torch", reason="PyTorch is not installed: pip install torch==2.13.0 (CPU)")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ddp_train.py"
STEP_LINE = re.compile(
    r"^(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z) step=(?P<step>\d+) rank=(?P<rank>\d+) "
    r"loss=(?P<loss>\S+) step_time=(?P<step_time>\d+\.\d+)$"
)


class Ranks:
    """Starts the example as WORLD_SIZE real processes and kills them all at the end."""

    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen] = []

    def start(self, world: int = 4, **env: str) -> list[subprocess.Popen]:
        port = free_port()
        started = []
        for rank in range(world):
            full = dict(os.environ)
            for key in ("FAULT", "FAULT_RANK", "FAULT_STEP", "FAULT_ONCE", "VIGIL_JOB_ID"):
                full.pop(key, None)
            full.update(
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                WORLD_SIZE=str(world),
                RANK=str(rank),
                VIGIL_EXAMPLE_STEPS="20",
                VIGIL_EXAMPLE_PG_TIMEOUT="120",
                PYTHONUNBUFFERED="1",
            )
            full.update(env)
            proc = subprocess.Popen(
                [sys.executable, str(EXAMPLE)],
                env=full,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            self.procs.append(proc)
            started.append(proc)
        return started

    def finish(self, procs, timeout: float = 240.0) -> list[tuple[int, str, str]]:
        deadline = time.monotonic() + timeout
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            results.append((proc.returncode, out, err))
        return results

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
            proc.communicate()


@pytest.fixture
def ranks(tmp_path):
    r = Ranks(tmp_path)
    yield r
    r.kill_all()


def step_lines(out: str) -> list[re.Match]:
    return [m for m in map(STEP_LINE.match, out.splitlines()) if m]


def test_four_ranks_train_to_the_end_and_every_step_line_parses(ranks):
    results = ranks.finish(ranks.start(world=4))
    for rank, (code, out, err) in enumerate(results):
        assert code == 0, f"rank {rank} exited {code}: {err[-2000:]}"
        lines = step_lines(out)
        assert [int(m["step"]) for m in lines] == list(range(1, 21))
        assert {int(m["rank"]) for m in lines} == {rank}
        assert all(float(m["step_time"]) >= 0 for m in lines)
    # DDP keeps the replicas in sync: all ranks see finite losses that went down.
    losses = [float(m["loss"]) for m in step_lines(results[0][1])]
    assert losses[-1] < losses[0]


def test_a_crash_with_fault_once_fails_the_first_attempt_and_the_retry_trains(ranks, tmp_path):
    marker = tmp_path / "crash-fired"
    fault = {"FAULT": "crash", "FAULT_RANK": "1", "FAULT_STEP": "5", "FAULT_ONCE": str(marker)}

    first = ranks.finish(ranks.start(world=4, **fault))
    code, out, err = first[1]
    assert code != 0
    assert "RuntimeError: injected crash at step 5 on rank 1" in err
    assert max(int(m["step"]) for m in step_lines(out)) == 4
    assert marker.exists()

    second = ranks.finish(ranks.start(world=4, **fault))
    for rank, (code, out, err) in enumerate(second):
        assert code == 0, f"rank {rank} exited {code} on the retry: {err[-2000:]}"
        assert int(step_lines(out)[-1]["step"]) == 20


def test_a_deterministic_bug_fails_every_attempt_despite_fault_once(ranks, tmp_path):
    fault = {"FAULT": "bug", "FAULT_STEP": "3", "FAULT_ONCE": str(tmp_path / "bug")}
    for _ in range(2):
        results = ranks.finish(ranks.start(world=2, **fault))
        assert results[1][0] != 0
        assert "ValueError: bad batch shape" in results[1][2]


def test_nccl_fault_prints_a_retryable_nccl_error_and_exits_1(ranks):
    results = ranks.finish(ranks.start(world=2, FAULT="nccl", FAULT_STEP="2"))
    code, _, err = results[1]
    assert code == 1
    assert "ncclSystemError: System call (e.g. socket, malloc)" in err
    assert "NCCL WARN NET/Socket : Connection reset by peer" in err


def test_sigkill_fault_kills_the_rank_with_that_signal(ranks):
    results = ranks.finish(ranks.start(world=2, FAULT="sigkill", FAULT_STEP="2"))
    assert results[1][0] == -signal.SIGKILL


def test_exit_hang_fault_exits_one_rank_with_0_while_its_peers_stay_blocked(ranks):
    procs = ranks.start(world=3, FAULT="exit_hang", FAULT_RANK="1", FAULT_STEP="3")
    code, out, _ = ranks.finish([procs[1]])[0]
    assert code == 0 and "finished early (injected exit hang)" in out
    time.sleep(2.0)
    assert procs[0].poll() is None and procs[2].poll() is None  # still waiting for rank 1


def test_nan_fault_turns_the_loss_nan_and_training_goes_on(ranks):
    results = ranks.finish(ranks.start(world=2, FAULT="nan", FAULT_STEP="4"))
    assert [code for code, _, _ in results] == [0, 0]
    losses = [m["loss"] for m in step_lines(results[1][1])]
    assert losses[:3] != ["nan"] * 3 and losses[3:] == ["nan"] * 17


def test_an_unknown_fault_is_rejected_naming_the_accepted_ones(ranks):
    code, _, err = ranks.finish(ranks.start(world=1, FAULT="melt"))[0]
    assert code == 1 and "FAULT='melt' is not valid: expected one of crash, nccl" in err
