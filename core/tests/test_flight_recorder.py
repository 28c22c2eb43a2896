"""C4D from PyTorch's Flight Recorder, over real dumps: a real 3-rank gloo job that never
imports vigil runs with Vigil's start-up hook (jobs/backends/fr_boot.py as
sitecustomize) and TORCH_FR_BUFFER_SIZE, one rank misbehaves before the fourth
all_reduce, and the dumps torch wrote are judged. No trace here is written by hand."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.c4d import C4DKind, C4DState
from core.flags import C4DEnvs, C4DLogLevel
from core.flight_recorder import analyze_flight_recorder, load_dump, records_from_dump

REPO = Path(__file__).resolve().parents[2]
BOOT = REPO / "jobs" / "backends" / "fr_boot.py"
WORKER = Path(__file__).with_name("fr_worker.py")
ENVS = C4DEnvs(hang_timeout_us=2_000_000, hang_times=2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_until_hung(tmp: Path, world: int, fault: str, fault_rank: int) -> tuple[dict, dict]:
    """Start the ranks, wait until every rank's dumps show the hang, stop them by PID;
    the dumps' bytes per rank, from the hook (JSON) and from torch's pickle API."""
    boot, fr, pk = tmp / "boot", tmp / "fr", tmp / "pk"
    for d in (boot, fr, pk):
        d.mkdir()
    shutil.copy(BOOT, boot / "sitecustomize.py")
    port = free_port()
    procs = []
    for rank in range(world):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VIGIL_", "TORCH_", "PYTHONPATH"))}
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world), RANK=str(rank),
                   PYTHONPATH=str(boot), VIGIL_FR_DIR=str(fr), VIGIL_C4D_FLUSH_SECONDS="0.2",
                   TORCH_FR_BUFFER_SIZE="200", FR_PICKLE_DIR=str(pk), FR_FAULT=fault,
                   FR_FAULT_RANK=str(fault_rank))
        procs.append(subprocess.Popen([sys.executable, str(WORKER)], env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))

    def seq4(path: Path):
        try:
            recs = records_from_dump(load_dump(path.read_bytes())).records
        except (OSError, ValueError):
            return False
        behind = fault in ("sleep", "subgroup") and (path.name.endswith(f"_{fault_rank}")
                                                     or path.name == f"fr_{fault_rank}.json")
        return recs and recs[-1].seq == (3 if behind else 4)

    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            time.sleep(0.3)
            assert [p.poll() for p in procs] == [None] * world, "a rank ended: it should hang"
            if all(seq4(fr / f"fr_{r}.json") and seq4(pk / f"nccl_trace_rank_{r}") for r in range(world)):
                time.sleep(0.5)  # one more period: each file holds the hung state
                break
        else:
            pytest.fail("the dumps never showed the hang")
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
            p.wait()
    return ({r: (fr / f"fr_{r}.json").read_bytes() for r in range(world)},
            {r: (pk / f"nccl_trace_rank_{r}").read_bytes() for r in range(world)})


def judge(raw: dict) -> list:
    dumps = {r: load_dump(b) for r, b in raw.items()}
    latest = max(rec.enter for d in dumps.values() for rec in records_from_dump(d).records)
    state, result = C4DState(), None
    for check in range(2):  # C4D_HANG_TIMES=2 consecutive checks make an Error
        result = analyze_flight_recorder(dumps, ENVS, now=latest + 5 + check, state=state, world_size=len(raw))
        state = result.state
    assert result is not None
    return [(v.rank, v.kind, v.severity) for v in result.verdicts]


pytestmark = pytest.mark.torch


@pytest.fixture(scope="module", autouse=True)
def _torch():
    pytest.importorskip("torch", reason="PyTorch is not installed: pip install torch==2.13.0 (CPU)")


def test_a_rank_that_never_reaches_the_collective_is_named_from_gloo_flight_recorder_dumps(tmp_path):
    as_json, as_pickle = run_until_hung(tmp_path, 3, "sleep", fault_rank=2)
    # What gloo records, as torch wrote it: every call, seq ids, no completion times
    # (null in the pickle form, 0 in the JSON form).
    dump = json.loads(as_json[0])
    entries = [(e["collective_seq_id"], e["profiling_name"], e["retired"], e["time_discovered_completed_ns"] or None)
               for e in dump["entries"]]
    assert all(e["state"] == "scheduled" for e in dump["entries"])
    assert entries == [(1, "gloo:all_reduce", True, None), (2, "gloo:all_reduce", True, None),
                       (3, "gloo:all_reduce", True, None), (4, "gloo:all_reduce", False, None)]
    trace = records_from_dump(load_dump(as_json[2]))
    assert [(r.seq, r.op, r.exit is not None) for r in trace.records] == [
        (1, "all_reduce", True), (2, "all_reduce", True), (3, "all_reduce", True)]
    assert trace.backend == "gloo" and not trace.timed
    # The hang and its culprit, the same from either form of the dump.
    expected = [(2, C4DKind.NON_COMM_HANG, C4DLogLevel.ERROR)]
    assert judge(as_json) == expected
    assert judge(as_pickle) == expected
    assert [records_from_dump(load_dump(b)).records for b in as_pickle.values()] == \
           [records_from_dump(load_dump(b)).records for b in as_json.values()]


def test_a_rank_that_skips_the_collective_for_another_is_the_comm_hang_from_gloo_dumps(tmp_path):
    as_json, _ = run_until_hung(tmp_path, 3, "skip", fault_rank=1)
    ops = {r: [(rec.seq, rec.op, rec.exit is None) for rec in records_from_dump(load_dump(b)).records][-1]
           for r, b in as_json.items()}
    assert ops == {0: (4, "all_reduce", True), 1: (4, "barrier", True), 2: (4, "all_reduce", True)}
    assert judge(as_json) == [(1, C4DKind.COMM_HANG, C4DLogLevel.ERROR)]


def test_a_rank_waiting_in_a_subgroup_collective_is_the_comm_hang_naming_the_group(tmp_path):
    as_json, _ = run_until_hung(tmp_path, 3, "subgroup", fault_rank=1)
    trace = records_from_dump(load_dump(as_json[1]))
    assert [r.seq for r in trace.records] == [1, 2, 3]
    assert [(op, seq) for _, seq, op, _ in trace.open_elsewhere] == [("broadcast", 1)]
    verdicts = judge(as_json)
    assert verdicts == [(1, C4DKind.COMM_HANG, C4DLogLevel.ERROR)]


def test_a_dump_that_is_not_a_flight_recorder_trace_is_refused_naming_why():
    # A pickle that would call something when loaded is refused before it runs.
    with pytest.raises(ValueError, match="holds no classes, found posix.system"):
        load_dump(pickle.dumps({"entries": [os.system]}))
    with pytest.raises(ValueError, match="holds no classes"):
        load_dump(pickle.dumps(Path("/etc")))
    with pytest.raises(ValueError, match="dump: not a Flight Recorder dump"):
        load_dump(b"\x00garbage")
    with pytest.raises(ValueError, match="'entries' list"):
        load_dump(b'{"entries": 3}')
