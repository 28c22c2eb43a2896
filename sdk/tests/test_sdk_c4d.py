"""C4D: collectives are recorded in memory and flushed to the console in the
background; an open collective is reported as entered without exit."""

import os
import subprocess
import sys
import time

import pytest

from conftest import subprocess_env
from loopback_console import SERVER_ERROR, job_env
from vigil import c4d
from testsupport.ports import free_port


def records(console, rank=None):
    """Latest state per (rank, seq) over every c4d request, as the console would upsert them."""
    latest = {}
    for body in console.bodies("c4d"):
        if rank is not None and body["rank"] != rank:
            continue
        for r in body["records"]:
            latest[(body["rank"], r["seq"])] = r
    return latest


def eventually(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def closed(console, rank=None):
    return sorted((k, v) for k, v in records(console, rank).items() if v["exit"] is not None)


def test_the_context_manager_records_and_flushes(console):
    recorder = c4d.enable(job_env(console.url, VIGIL_RANK="3", VIGIL_ATTEMPT="2"), flush_seconds=0.1)
    before = time.time()
    for op in ("all_reduce", "broadcast", "barrier"):
        with c4d.collective(op):
            time.sleep(0.01)
    assert console.wait_for(lambda c: len(closed(c)) == 3, timeout=5)
    body = console.bodies("c4d")[0]
    assert (body["rank"], body["attempt"]) == (3, 2)
    got = closed(console)
    assert [(k[1], v["op"]) for k, v in got] == [(1, "all_reduce"), (2, "broadcast"), (3, "barrier")]
    for _, v in got:
        assert before <= v["enter"] < v["exit"] <= time.time()
        assert v["exit"] - v["enter"] >= 0.009
    assert eventually(lambda: recorder.last_status is not None and recorder.last_status.ok())


def test_a_rank_inside_a_collective_is_reported_as_entered_without_exit(console):
    c4d.enable(job_env(console.url), flush_seconds=0.1)
    with c4d.collective("all_reduce"):
        # reported on every flush while it is open, not just once
        assert console.wait_for(
            lambda c: sum(1 for b in c.bodies("c4d") for r in b["records"] if r["seq"] == 1 and r["exit"] is None) >= 2,
            timeout=5,
        )
    assert console.wait_for(lambda c: records(c).get((0, 1), {}).get("exit") is not None, timeout=5)


def test_an_exception_inside_the_collective_still_records_its_exit(console):
    c4d.enable(job_env(console.url), flush_seconds=0.1)
    with pytest.raises(RuntimeError, match="peer reset"):
        with c4d.collective("all_gather"):
            raise RuntimeError("peer reset")
    assert console.wait_for(lambda c: len(closed(c)) == 1, timeout=5)


def test_recording_does_no_io_in_the_callers_thread(silent_console):
    c4d.enable(job_env(silent_console.url, VIGIL_SDK_TIMEOUT="2"), flush_seconds=0.05)
    started = time.monotonic()
    for _ in range(2000):
        with c4d.collective("all_reduce"):
            pass
    # each collective would cost up to 2 s if it waited on this silent console
    assert time.monotonic() - started < 1.0


def test_records_survive_a_console_outage(console):
    console.mode = SERVER_ERROR
    recorder = c4d.enable(job_env(console.url), flush_seconds=0.1)
    with c4d.collective("reduce_scatter"):
        pass
    assert console.wait_for(lambda c: len(c.received("c4d")) >= 2, timeout=5)
    assert not recorder.last_status.ok()
    console.mode = "ok"
    assert console.wait_for(lambda c: len(c.received("c4d")) >= 3, timeout=5)
    assert eventually(lambda: recorder.last_status.ok())
    assert [v["op"] for _, v in closed(console)] == ["reduce_scatter"]


def test_c4d_is_off_unless_the_job_turns_it_on(console, monkeypatch):
    for name, value in job_env(console.url).items():
        monkeypatch.setenv(name, value)
    assert c4d.instrument_torch_distributed() is False
    with c4d.collective("all_reduce"):
        pass
    assert c4d.get_recorder() is None
    monkeypatch.setenv("VIGIL_C4D", "1")
    monkeypatch.setenv("VIGIL_C4D_FLUSH_SECONDS", "0.1")
    with c4d.collective("all_reduce"):
        pass
    assert c4d.get_recorder() is not None
    assert console.wait_for(lambda c: len(closed(c)) == 1, timeout=5)


def test_disable_sends_what_is_left(console):
    c4d.enable(job_env(console.url), flush_seconds=60)
    with c4d.collective("gather"):
        pass
    assert c4d.disable().ok()
    assert [v["op"] for _, v in closed(console)] == ["gather"]


def run_ranks(console, **extra):
    pytest.importorskip("torch", reason="PyTorch is not installed: the gloo C4D test needs torch.distributed")
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "c4d_worker.py")
    port = str(free_port())
    procs = []
    try:
        for rank in (0, 1):
            env = subprocess_env(
                console.url,
                VIGIL_RANK=str(rank),
                VIGIL_C4D="1",
                VIGIL_C4D_FLUSH_SECONDS="0.2",
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port,
                RANK=str(rank),
                WORLD_SIZE="2",
                **extra,
            )
            procs.append(
                subprocess.Popen(
                    [sys.executable, worker], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
                )
            )
        outputs = [p.communicate(timeout=120) for p in procs]
        return [p.returncode for p in procs], outputs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.torch
def test_two_gloo_ranks_report_collectives_with_matching_seq_numbers(console):
    codes, outputs = run_ranks(console)
    assert codes == [0, 0], outputs
    ops = ["all_reduce", "broadcast", "all_reduce", "all_reduce", "barrier"]
    for rank in (0, 1):
        got = closed(console, rank)
        assert [(k[1], v["op"]) for k, v in got] == list(enumerate(ops, start=1)), (rank, got)
        assert all(v["enter"] <= v["exit"] for _, v in got)
    assert {b["attempt"] for b in console.bodies("c4d")} == {1}


@pytest.mark.torch
def test_a_stalled_rank_shows_its_peer_waiting_inside_the_collective(console):
    codes, outputs = run_ranks(console, VIGIL_TEST_STALL_RANK="1", VIGIL_TEST_STALL_SECONDS="1.5")
    assert codes == [0, 0], outputs
    # While rank 1 computed, rank 0 was reported inside seq 3 with no exit...
    waiting = [
        b
        for b in console.bodies("c4d")
        if b["rank"] == 0 and any(r["seq"] == 3 and r["exit"] is None for r in b["records"])
    ]
    assert waiting, console.bodies("c4d")
    # ...and rank 1 entered seq 3 only after its stall, so rank 0 waited about that long.
    r0, r1 = records(console, 0)[(0, 3)], records(console, 1)[(1, 3)]
    assert r1["enter"] - r0["enter"] > 1.0
    assert r0["exit"] >= r1["enter"]
