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
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.c4d import C4DKind, C4DState, CollectiveRecord
from core.flags import C4DEnvs, C4DLogLevel
from core.flight_recorder import (
    FLIGHT_RECORDER,
    SDK,
    RankTrace,
    Sources,
    analyze_flight_recorder,
    choose_sources,
    judge_sources,
    load_dump,
    records_from_dump,
)
from core.tests.test_c4d import free_port, kill_all, received, serving_receiver

REPO = Path(__file__).resolve().parents[2]
BOOT = REPO / "jobs" / "backends" / "fr_boot.py"
WORKER = Path(__file__).with_name("fr_worker.py")
ENVS = C4DEnvs(hang_timeout_us=2_000_000, hang_times=2)


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
        env.update(
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            WORLD_SIZE=str(world),
            RANK=str(rank),
            PYTHONPATH=str(boot),
            VIGIL_FR_DIR=str(fr),
            VIGIL_C4D_FLUSH_SECONDS="0.2",
            TORCH_FR_BUFFER_SIZE="200",
            FR_PICKLE_DIR=str(pk),
            FR_FAULT=fault,
            FR_FAULT_RANK=str(fault_rank),
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, str(WORKER)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        )

    def seq4(path: Path):
        try:
            recs = records_from_dump(load_dump(path.read_bytes())).records
        except (OSError, ValueError):
            return False
        behind = fault in ("sleep", "subgroup") and (
            path.name.endswith(f"_{fault_rank}") or path.name == f"fr_{fault_rank}.json"
        )
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
    return (
        {r: (fr / f"fr_{r}.json").read_bytes() for r in range(world)},
        {r: (pk / f"nccl_trace_rank_{r}").read_bytes() for r in range(world)},
    )


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
    entries = [
        (e["collective_seq_id"], e["profiling_name"], e["retired"], e["time_discovered_completed_ns"] or None)
        for e in dump["entries"]
    ]
    assert all(e["state"] == "scheduled" for e in dump["entries"])
    assert entries == [
        (1, "gloo:all_reduce", True, None),
        (2, "gloo:all_reduce", True, None),
        (3, "gloo:all_reduce", True, None),
        (4, "gloo:all_reduce", False, None),
    ]
    trace = records_from_dump(load_dump(as_json[2]))
    assert [(r.seq, r.op, r.exit is not None) for r in trace.records] == [
        (1, "all_reduce", True),
        (2, "all_reduce", True),
        (3, "all_reduce", True),
    ]
    assert trace.backend == "gloo" and not trace.timed
    # The hang and its culprit, the same from either form of the dump.
    expected = [(2, C4DKind.NON_COMM_HANG, C4DLogLevel.ERROR)]
    assert judge(as_json) == expected
    assert judge(as_pickle) == expected
    assert [records_from_dump(load_dump(b)).records for b in as_pickle.values()] == [
        records_from_dump(load_dump(b)).records for b in as_json.values()
    ]


def test_a_rank_that_skips_the_collective_for_another_is_the_comm_hang_from_gloo_dumps(tmp_path):
    as_json, _ = run_until_hung(tmp_path, 3, "skip", fault_rank=1)
    ops = {
        r: [(rec.seq, rec.op, rec.exit is None) for rec in records_from_dump(load_dump(b)).records][-1]
        for r, b in as_json.items()
    }
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


# --- the fallback: the SDK's instrumentation injected where the recorder has no times ---

PLAIN = REPO / "examples" / "plain_ddp.py"


@pytest.fixture
def posts():
    """What the ranks' SDK posts to the console, received on a real loopback HTTP server."""
    with serving_receiver() as server:
        yield server


SDK_SRC = REPO / "sdk" / "src"
SLOW_ENVS = C4DEnvs(hang_timeout_us=5_000_000, hang_times=2)


def run_plain(tmp: Path, posts, world: int, *, hook: bool = True, job_sdk: bool = False, **env_extra):
    """The plain DDP loop as `world` real ranks to its end, C4D on as the local backend
    sets it (the start-up hook, TORCH_FR_BUFFER_SIZE, the backend's SDK copy under
    VIGIL_C4D_SDK), reporting to `posts`. job_sdk: the job has its own vigil on its
    PYTHONPATH (this tree's); else its path holds an unrelated package named vigil, so
    the hook must use the backend's copy. hook=False: no hook, the job imports the SDK.
    Returns the SDK records received, the ranks' dumps and their stdout."""
    boot, fr, other = tmp / "boot", tmp / "fr", tmp / "other"
    for d in (boot, fr, other / "vigil"):
        d.mkdir(parents=True)
    shutil.copy(BOOT, boot / "sitecustomize.py")
    shutil.copytree(SDK_SRC / "vigil", boot / "sdk" / "vigil", ignore=shutil.ignore_patterns("__pycache__", "cli.py"))
    (other / "vigil" / "__init__.py").write_text('"""Somebody else\'s package named vigil."""\n')
    port = free_port()
    path = [str(boot)] if hook else []
    path.append(str(SDK_SRC) if job_sdk or not hook else str(other))
    procs, outs = [], []
    for rank in range(world):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VIGIL_", "TORCH_", "PYTHONPATH", "PLAIN_"))}
        env.update(
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            WORLD_SIZE=str(world),
            RANK=str(rank),
            PYTHONPATH=os.pathsep.join(path),
            VIGIL_C4D="1",
            VIGIL_C4D_FLUSH_SECONDS="0.2",
            VIGIL_CONSOLE_URL=f"http://127.0.0.1:{posts.server_address[1]}",
            VIGIL_JOB_ID="7",
            VIGIL_JOB_TOKEN="vjt_test",
            VIGIL_ATTEMPT="1",
            VIGIL_RANK=str(rank),
            **env_extra,
        )
        if hook:
            env.update(VIGIL_FR_DIR=str(fr), TORCH_FR_BUFFER_SIZE="200", VIGIL_C4D_SDK=str(boot / "sdk"))
        out = tmp / f"out_{rank}"
        outs.append(out)
        with open(out, "wb") as f:
            procs.append(subprocess.Popen([sys.executable, str(PLAIN)], env=env, stdout=f, stderr=subprocess.STDOUT))
    try:
        codes = [p.wait(timeout=240) for p in procs]
    finally:
        kill_all(procs)
    logs = [o.read_text() for o in outs]
    assert codes == [0] * world, logs
    dumps = {r: load_dump((fr / f"fr_{r}.json").read_bytes()) for r in range(world)} if hook else {}
    return received(posts), dumps, logs


def judged(sdk: dict, dumps: dict, world: int):
    traces = {r: records_from_dump(d) for r, d in dumps.items()}
    records = {r: [CollectiveRecord.from_dict(x) for x in recs] for r, recs in sdk.items()}
    result, sources = judge_sources(records, traces, SLOW_ENVS, now=time.time(), world_size=world)
    return [(v.rank, v.kind, v.evidence["source"]) for v in result.verdicts], sources


@pytest.mark.parametrize(
    "job_sdk, imports",
    [(False, False), (True, False), (True, True)],
    ids=["backends-sdk-copy", "jobs-own-sdk", "jobs-own-sdk-imported-too"],
)
def test_a_rank_slow_in_compute_is_non_comm_slow_without_code_changes_as_with_the_sdk_imported(
    tmp_path, posts, job_sdk, imports
):
    fault = dict(
        PLAIN_FAULT="slow_compute", PLAIN_FAULT_RANK="2", PLAIN_STEPS="16", PLAIN_IMPORT_SDK="1" if imports else "0"
    )
    sdk, dumps, logs = run_plain(tmp_path, posts, 3, job_sdk=job_sdk, **fault)
    # The backend's copy instruments the job and leaves the job's modules as they were;
    # the job's own SDK is the one module, whether the job imports it too or not.
    assert all(f"vigil-in-job={job_sdk}" in log for log in logs), logs
    # Gloo's recorder saw every collective (DDP's too) but timed none: alone it cannot say.
    assert all(not records_from_dump(d).timed and len(records_from_dump(d).records) > 16 for d in dumps.values())
    assert judged({}, dumps, 3) == ([], Sources(FLIGHT_RECORDER, None))
    # The injected SDK timed the loop's calls: 16 all_reduce and the last barrier per rank,
    # each once (also when the job instruments itself too: nothing counted twice), each
    # with its exit.
    assert {
        r: [(x["seq"], x["op"], x["exit"] is not None) for x in sorted(recs, key=lambda x: x["seq"])]
        for r, recs in sdk.items()
    } == {r: [(s, "all_reduce", True) for s in range(1, 17)] + [(17, "barrier", True)] for r in range(3)}
    assert judged(sdk, dumps, 3) == ([(2, C4DKind.NON_COMM_SLOW, SDK)], Sources(FLIGHT_RECORDER, SDK))
    if imports:
        return
    # The same job importing the SDK itself, no hook: the same verdict.
    posts.records.clear()
    imported, _, _ = run_plain(tmp_path / "imported", posts, 3, hook=False, **{**fault, "PLAIN_IMPORT_SDK": "1"})
    assert judged(imported, {}, 3) == ([(2, C4DKind.NON_COMM_SLOW, SDK)], Sources(SDK, SDK))


def test_a_rank_slow_inside_a_collective_is_comm_slow_without_code_changes(tmp_path, posts):
    sdk, dumps, _ = run_plain(
        tmp_path,
        posts,
        3,
        PLAIN_FAULT="slow_comm",
        PLAIN_FAULT_RANK="1",
        PLAIN_STEPS="16",
        PLAIN_SLOW_SECONDS="0.08",
        PLAIN_DDP="0",
    )
    verdicts, sources = judged(sdk, dumps, 3)
    assert (verdicts, sources) == ([(1, C4DKind.COMM_SLOW, SDK)], Sources(FLIGHT_RECORDER, SDK)), verdicts


# --- which source answers which question (pure) ----------------------------------------


def rec(seq: int, enter: float, exit_: float | None) -> CollectiveRecord:
    return CollectiveRecord(seq=seq, op="all_reduce", enter=enter, exit=exit_)


def steps(n: int, late: dict[int, float], ranks: int = 3, timed: bool = True) -> dict[int, list[CollectiveRecord]]:
    """n collectives per rank, 10 ms of compute between them, `late` ranks that much slower."""
    out: dict[int, list[CollectiveRecord]] = {r: [] for r in range(ranks)}
    t = 1000.0
    for seq in range(1, n + 1):
        enters = {r: t + 0.01 + late.get(r, 0.0) for r in range(ranks)}
        done = max(enters.values()) + 0.001
        for r in range(ranks):
            out[r].append(rec(seq, enters[r], done if timed else enters[r]))
        t = done
    return out


def trace(records: list[CollectiveRecord], timed: bool) -> RankTrace:
    return RankTrace(tuple(records), timed, "nccl" if timed else "gloo")


def test_slowness_comes_from_the_sdk_when_the_recorder_has_no_times_and_hangs_from_the_recorder():
    sdk = steps(12, {1: 0.05})
    fr = {r: trace(recs, timed=False) for r, recs in steps(30, {}).items()}
    assert choose_sources(sdk, fr) == Sources(FLIGHT_RECORDER, SDK)
    result, _ = judge_sources(sdk, fr, ENVS, now=2000.0, world_size=3)
    assert [(v.rank, v.kind, v.evidence["source"]) for v in result.verdicts] == [(1, C4DKind.NON_COMM_SLOW, SDK)]


def test_a_recorder_with_completion_times_answers_both_and_the_sdk_goes_unused():
    sdk = steps(12, {2: 0.05})  # the SDK would blame rank 2...
    timed = {r: trace(recs, timed=True) for r, recs in steps(12, {1: 0.05}).items()}
    assert choose_sources(sdk, timed) == Sources(FLIGHT_RECORDER, FLIGHT_RECORDER)
    result, _ = judge_sources(sdk, timed, ENVS, now=2000.0, world_size=3)
    # ...the recorder, which saw every collective with its times, blames rank 1.
    assert [(v.rank, v.kind, v.evidence["source"]) for v in result.verdicts] == [
        (1, C4DKind.NON_COMM_SLOW, FLIGHT_RECORDER)
    ]


def test_without_dumps_the_sdk_answers_both_and_without_either_nothing_is_judged():
    sdk = steps(4, {})
    sdk[0].append(rec(5, 1500.0, None))
    sdk[1].append(rec(5, 1500.0, None))  # rank 2 never entered #5: hung in compute
    assert choose_sources(sdk, {}) == Sources(SDK, SDK)
    result, _ = judge_sources(sdk, {}, ENVS, now=1600.0, world_size=3)
    assert [(v.rank, v.kind, v.evidence["source"]) for v in result.verdicts] == [(2, C4DKind.NON_COMM_HANG, SDK)]
    assert choose_sources({}, {0: trace([], timed=False)}) == Sources(None, None)
    assert judge_sources({}, {}, ENVS, now=1600.0)[0].verdicts == ()


def test_a_rank_the_recorder_finds_hung_is_not_also_called_slow_by_the_sdk():
    sdk = steps(12, {1: 0.05})
    fr = {r: trace(recs, timed=False) for r, recs in steps(8, {}).items()}
    fr = {
        0: trace([*fr[0].records, rec(9, 1500.0, None)], False),
        1: fr[1],
        2: trace([*fr[2].records, rec(9, 1500.0, None)], False),
    }
    result, _ = judge_sources(sdk, fr, ENVS, now=1600.0, world_size=3)
    assert [(v.rank, v.kind, v.evidence["source"]) for v in result.verdicts] == [
        (1, C4DKind.NON_COMM_HANG, FLIGHT_RECORDER)
    ]
