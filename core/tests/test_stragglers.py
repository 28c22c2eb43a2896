"""Stragglers read from log timestamps, with no SDK in the training code."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from core.flags import C4DLogLevel
from core.stragglers import find_stragglers, parse_step_line, step_marks, step_times

START = datetime(2026, 11, 29, 23, 0, 0, tzinfo=timezone.utc)


def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def log(seconds_per_step: float, steps: int = 20, fmt=None, every: int = 1) -> list[str]:
    fmt = fmt or (lambda t, n: f"{iso(t)} step={n} loss=0.5")
    lines = ["some banner without a timestamp", f"{iso(START)} starting up"]
    for n in range(every, steps + 1, every):
        lines.append(fmt(START + timedelta(seconds=seconds_per_step * n), n))
        lines.append(f"{iso(START + timedelta(seconds=seconds_per_step * n))} saved metrics")
    return lines


def test_a_rank_whose_steps_take_twice_as_long_is_flagged_and_its_peers_are_not():
    logs = {0: log(0.10), 1: log(0.21), 2: log(0.10), 3: log(0.11)}
    [v] = find_stragglers(logs)
    assert v.rank == 1 and v.source == "timestamps"
    assert v.ratio == pytest.approx(2.1, abs=0.05) and v.severity == C4DLogLevel.INFO
    assert v.slow_samples == v.samples == 19
    assert v.message.startswith("Rank 1 is a straggler: its median step takes 0.210 s")


def test_a_much_slower_rank_is_a_warning():
    [v] = find_stragglers({"worker-0": log(0.1), "worker-1": log(0.1), "worker-2": log(0.5)})
    assert v.rank == "worker-2" and v.severity == C4DLogLevel.WARNING
    assert v.message.startswith("worker-2 is a straggler")


def test_ranks_within_the_ratio_are_not_stragglers():
    assert find_stragglers({0: log(0.10), 1: log(0.14), 2: log(0.10)}) == []


def test_too_few_steps_are_not_judged():
    assert find_stragglers({0: log(0.1, steps=4), 1: log(1.0, steps=4)}) == []
    assert find_stragglers({0: log(0.1, steps=6), 1: log(1.0, steps=6)}, min_steps=5)[0].rank == 1


def test_one_slow_step_is_not_a_straggler():
    fast = log(0.1)
    spiky = [f"{iso(START + timedelta(seconds=0.1 * n + (2.0 if n >= 10 else 0)))} step={n}" for n in range(1, 21)]
    assert find_stragglers({0: fast, 1: spiky, 2: fast}) == []


def test_only_the_recent_window_counts():
    became_slow = [
        f"{iso(START + timedelta(seconds=(0.1 * n if n <= 40 else 4 + 0.5 * (n - 40))))} step={n}" for n in range(1, 61)
    ]
    fast = log(0.1, steps=60)
    assert find_stragglers({0: fast, 1: became_slow, 2: fast}, window=20)[0].rank == 1
    assert find_stragglers({0: fast, 1: became_slow, 2: fast}, window=60) == []


@pytest.mark.parametrize(
    "fmt",
    [
        lambda t, n: f"{iso(t)} step={n} rank=1 loss=0.4312",
        lambda t, n: f"[{t.strftime('%Y-%m-%d %H:%M:%S')},{t.microsecond // 1000:03d}] INFO Step {n}/500 loss 0.43",
        lambda t, n: f"{t.strftime('%Y-%m-%d %H:%M:%S.%f')} iteration {n} lr 0.1",
        lambda t, n: f"{t.isoformat()} | Iter: {n} | loss 0.1",
        lambda t, n: f"[rank1]: {iso(t)} step: {n}",
    ],
    ids=["vigil-example", "python-logging", "iteration", "offset-iter", "torchrun-prefix"],
)
def test_common_log_formats_give_the_same_step_times(fmt):
    times = step_times(step_marks(log(0.25, steps=8, fmt=fmt)), use_step_time=False)
    assert times == pytest.approx([0.25] * 7, abs=0.002)


def test_logging_every_k_steps_gives_per_step_times():
    times = step_times(step_marks(log(0.2, steps=50, every=10)), use_step_time=False)
    assert times == pytest.approx([0.2] * 4, abs=1e-4)


def test_a_restart_that_starts_the_steps_again_is_not_a_negative_step_time():
    lines = log(0.1, steps=5) + [f"{iso(START + timedelta(seconds=30 + 0.1 * n))} step={n}" for n in range(1, 6)]
    assert step_times(step_marks(lines), use_step_time=False) == pytest.approx([0.1] * 8, abs=1e-4)


def test_lines_without_a_timestamp_or_a_step_are_ignored():
    assert parse_step_line("step=3 loss=1") is None
    assert parse_step_line(f"{iso(START)} loss=1 steps_per_second=4") is None
    assert parse_step_line(f"{iso(START)} global_step=4") is None
    mark = parse_step_line(b"2026-11-29T23:00:01.5+01:00 step=7".decode())
    assert mark.step == 7 and mark.at == START.timestamp() + 1.5 - 3600


def test_the_ranks_own_step_time_is_used_when_every_rank_prints_it():
    """Synchronous DDP: all ranks' lines advance together; step_time tells who is slow."""

    def sync_log(own: float):
        return [f"{iso(START + timedelta(seconds=0.25 * n))} step={n} step_time={own:.3f}" for n in range(1, 21)]

    [v] = find_stragglers({0: sync_log(0.01), 1: sync_log(0.22), 2: sync_log(0.012)})
    assert v.rank == 1 and v.source == "step_time" and v.severity == C4DLogLevel.WARNING


def test_bad_parameters_are_rejected_naming_them():
    with pytest.raises(ValueError, match="^ratio: expected a number above 1"):
        find_stragglers({}, ratio=1.0)
    with pytest.raises(ValueError, match="^min_steps:"):
        find_stragglers({}, min_steps=0)


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ddp_train.py"


@pytest.mark.torch
def test_the_slow_rank_of_a_real_ddp_job_is_found_from_its_log(tmp_path):
    pytest.importorskip("torch", reason="PyTorch is not installed: pip install torch==2.13.0 (CPU)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    try:
        for rank in range(4):
            env = {k: v for k, v in os.environ.items() if not k.startswith(("FAULT", "VIGIL_"))}
            env.update(
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                WORLD_SIZE="4",
                RANK=str(rank),
                VIGIL_EXAMPLE_STEPS="16",
                FAULT="slow",
                FAULT_RANK="2",
                FAULT_STEP="2",
                VIGIL_EXAMPLE_SLOW_SECONDS="0.15",
                VIGIL_EXAMPLE_PG_TIMEOUT="120",
            )
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(EXAMPLE)],
                    env=env,
                    text=True,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                )
            )
        outs = {f"worker-{r}": p.communicate(timeout=240)[0].splitlines() for r, p in enumerate(procs)}
        assert [p.returncode for p in procs] == [0, 0, 0, 0]
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
                p.wait()
    verdicts = find_stragglers(outs)
    assert [v.rank for v in verdicts] == ["worker-2"], [v.message for v in verdicts]
