"""C4D classification over reported collective records: pure cases first, then real DDP
ranks reporting through the real SDK to a loopback receiver."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from core.c4d import (
    C4DKind,
    C4DResult,
    C4DState,
    CollectiveRecord,
    analyze_collectives,
    visible,
)
from core.flags import C4DEnvs, C4DLogLevel
from testsupport.ports import free_port

ENVS = C4DEnvs(hang_timeout_us=10_000_000, hang_times=3)  # 10 s
T0 = 1_000_000.0
STEP = 0.1  # seconds per step outside collectives
COMM = 0.01  # seconds inside a collective once every rank has arrived


def healthy(ranks=4, steps=10, extra_outside=None, extra_comm=None):
    """Records of `steps` all_reduce calls where every rank behaves, except the extras
    given per rank (seconds added outside / inside each collective)."""
    extra_outside = extra_outside or {}
    extra_comm = extra_comm or {}
    recs = {r: [] for r in range(ranks)}
    t = T0
    for seq in range(1, steps + 1):
        enters = {r: t + STEP + extra_outside.get(r, 0.0) for r in range(ranks)}
        all_in = max(enters.values())
        for r in range(ranks):
            recs[r].append(CollectiveRecord(seq, "all_reduce", enters[r], all_in + COMM + extra_comm.get(r, 0.0)))
        t = max(rec[-1].exit for rec in recs.values())
    return recs, t


def kinds(result: C4DResult):
    return [(v.rank, v.kind, v.severity) for v in result.verdicts]


def test_healthy_ranks_get_no_verdict():
    recs, t = healthy()
    assert analyze_collectives(recs, ENVS, now=t + 0.05).verdicts == ()


def test_a_rank_that_never_enters_the_collective_the_others_wait_in_is_a_non_comm_hang():
    recs, t = healthy()
    for r in (0, 2, 3):
        recs[r].append(CollectiveRecord(11, "all_reduce", t + STEP))
    result = analyze_collectives(recs, ENVS, now=t + 30)
    assert kinds(result) == [(1, C4DKind.NON_COMM_HANG, C4DLogLevel.WARNING)]
    v = result.verdicts[0]
    assert v.evidence["waiting_ranks"] == [0, 2, 3] and v.evidence["seq"] == 11
    assert "Rank 1 never entered all_reduce #11" in v.message
    assert "hung outside communication" in v.message


def test_waiting_less_than_the_hang_timeout_is_not_a_hang():
    recs, t = healthy()
    for r in (0, 2, 3):
        recs[r].append(CollectiveRecord(11, "all_reduce", t + STEP))
    assert analyze_collectives(recs, ENVS, now=t + 9).verdicts == ()


def test_a_rank_stuck_in_a_collective_the_others_finished_is_a_comm_hang():
    recs, t = healthy()
    recs[2].append(CollectiveRecord(11, "all_reduce", t + STEP))
    for r in (0, 1, 3):
        recs[r].append(CollectiveRecord(11, "all_reduce", t + STEP, t + STEP + COMM))
        recs[r].append(CollectiveRecord(12, "all_reduce", t + 2 * STEP))  # waiting for rank 2
    result = analyze_collectives(recs, ENVS, now=t + 40)
    assert kinds(result) == [(2, C4DKind.COMM_HANG, C4DLogLevel.WARNING)]
    assert result.verdicts[0].evidence["finished_ranks"] == [0, 1, 3]
    assert "already finished: it is hung in communication" in result.verdicts[0].message


def test_a_rank_in_a_collective_nobody_else_joined_is_a_comm_hang():
    """The example's hang_collective: rank 1 waits in a broadcast while the others wait
    in the step's all_reduce; both are the 11th call of each rank."""
    recs, t = healthy()
    recs[1].append(CollectiveRecord(11, "broadcast", t + 0.001))
    for r in (0, 2, 3):
        recs[r].append(CollectiveRecord(11, "all_reduce", t + STEP))
    result = analyze_collectives(recs, ENVS, now=t + 60)
    assert kinds(result) == [(1, C4DKind.COMM_HANG, C4DLogLevel.WARNING)]
    assert result.verdicts[0].evidence["peers_op"] == "all_reduce"


def test_all_ranks_stuck_in_the_same_collective_blame_no_single_rank():
    recs, t = healthy()
    for r in range(4):
        recs[r].append(CollectiveRecord(11, "all_reduce", t + STEP + r))  # rank 3 last in
    result = analyze_collectives(recs, ENVS, now=t + 60)
    assert kinds(result) == [(None, C4DKind.COMM_HANG, C4DLogLevel.WARNING)]
    v = result.verdicts[0]
    assert v.evidence["last_to_enter"] == 3 and v.evidence["ranks"] == [0, 1, 2, 3]
    assert "no single rank can be blamed" in v.message
    assert result.state.count(None) == 1


def test_a_rank_that_reported_nothing_is_hung_before_its_first_collective_when_world_size_is_known():
    recs = {r: [CollectiveRecord(1, "all_reduce", T0)] for r in (0, 1, 3)}
    result = analyze_collectives(recs, ENVS, now=T0 + 20, world_size=4)
    assert kinds(result) == [(2, C4DKind.NON_COMM_HANG, C4DLogLevel.WARNING)]
    assert "has not entered any collective" in result.verdicts[0].message


def test_a_hang_becomes_an_error_after_hang_times_consecutive_checks_and_resets_when_it_clears():
    recs, t = healthy()
    for r in (0, 2, 3):
        recs[r].append(CollectiveRecord(11, "all_reduce", t + STEP))
    state = C4DState()
    severities = []
    for check in range(4):
        result = analyze_collectives(recs, ENVS, now=t + 20 + check * 10, state=state)
        severities.append(result.verdicts[0].severity)
        state = result.state
    assert severities == [C4DLogLevel.WARNING, C4DLogLevel.WARNING, C4DLogLevel.ERROR, C4DLogLevel.ERROR]
    assert state.count(1) == 4 and [v.rank for v in result.errors] == [1]
    assert "reached C4D_HANG_TIMES=3" in result.verdicts[0].message
    # The state survives a JSON round trip (the monitor stores it between ticks).
    assert C4DState.from_dict(state.to_dict()) == state

    # Rank 1 catches up: the hang clears and the count starts again from zero.
    recs[1].append(CollectiveRecord(11, "all_reduce", t + 80))
    for r in range(4):
        recs[r][-1] = CollectiveRecord(11, "all_reduce", recs[r][-1].enter, t + 80.01)
    cleared = analyze_collectives(recs, ENVS, now=t + 81, state=state)
    assert cleared.verdicts == () and cleared.state.count(1) == 0


def test_a_rank_that_keeps_the_others_waiting_is_non_comm_slow_with_severity_by_magnitude():
    recs, t = healthy(extra_outside={3: 0.5})  # 6x the peers' 0.1 s
    result = analyze_collectives(recs, ENVS, now=t)
    assert kinds(result) == [(3, C4DKind.NON_COMM_SLOW, C4DLogLevel.WARNING)]
    assert "consistently slower outside collectives" in result.verdicts[0].message

    recs, t = healthy(extra_outside={3: 0.08})  # 1.8x
    assert kinds(analyze_collectives(recs, ENVS, now=t)) == [(3, C4DKind.NON_COMM_SLOW, C4DLogLevel.INFO)]


def test_a_rank_slow_inside_collectives_is_comm_slow_and_early_arrivals_are_not():
    recs, t = healthy(extra_comm={0: 0.05}, extra_outside={2: 0.002})  # 6x inside
    assert kinds(analyze_collectives(recs, ENVS, now=t)) == [(0, C4DKind.COMM_SLOW, C4DLogLevel.WARNING)]


def test_slowness_needs_consistency_not_one_bad_collective():
    recs, t = healthy()
    one = recs[1][4]
    recs[1][4] = CollectiveRecord(one.seq, one.op, one.enter + 1.0, one.exit + 1.0)
    for r in (0, 2, 3):  # the others waited for it that once
        rec = recs[r][4]
        recs[r][4] = CollectiveRecord(rec.seq, rec.op, rec.enter, rec.exit + 1.0)
    for r in range(4):  # shift the later calls by the same second
        recs[r][5:] = [CollectiveRecord(x.seq, x.op, x.enter + 1.0, x.exit + 1.0) for x in recs[r][5:]]
    assert analyze_collectives(recs, ENVS, now=t + 2).verdicts == ()


def test_verdicts_are_filtered_by_the_c4d_log_level():
    recs, t = healthy(extra_outside={3: 0.08})  # an Info
    for r in (0, 1, 3):
        recs[r].append(CollectiveRecord(11, "all_reduce", t + STEP))
    result = analyze_collectives(recs, ENVS, now=t + 30)
    assert kinds(result) == [
        (2, C4DKind.NON_COMM_HANG, C4DLogLevel.WARNING),
        (3, C4DKind.NON_COMM_SLOW, C4DLogLevel.INFO),
    ]
    assert [v.rank for v in result.shown(C4DLogLevel.INFO)] == [2, 3]
    assert [v.rank for v in result.shown("Warning")] == [2]
    assert result.shown(C4DLogLevel.ERROR) == []
    with pytest.raises(ValueError, match="c4d_log_level: 'Debug' is not one of Info, Warning, Error"):
        visible(result.verdicts, "Debug")


def test_records_from_json_are_validated_naming_the_field():
    rec = CollectiveRecord.from_dict({"seq": 3, "op": "all_reduce", "enter": 5.0, "exit": None})
    assert rec == CollectiveRecord(3, "all_reduce", 5.0, None)
    assert analyze_collectives({0: [rec.to_dict()]}, ENVS, now=6.0).verdicts == ()
    for bad, field in (
        ({"seq": "3", "op": "x", "enter": 1.0}, "seq"),
        ({"seq": 3, "op": "", "enter": 1.0}, "op"),
        ({"seq": 3, "op": "x", "enter": "now"}, "enter"),
        ({"seq": 3, "op": "x", "enter": 2.0, "exit": 1.0}, "exit"),
    ):
        with pytest.raises(ValueError, match=f"^{field}:"):
            CollectiveRecord.from_dict(bad)


def test_the_rank_left_waiting_by_a_straggler_is_not_called_comm_slow():
    recs, t = healthy(ranks=2, extra_outside={1: 0.5})  # rank 0 waits 0.5 s in every call
    assert kinds(analyze_collectives(recs, ENVS, now=t)) == [(1, C4DKind.NON_COMM_SLOW, C4DLogLevel.WARNING)]


# --- end to end: real DDP ranks, the real SDK, a real loopback HTTP receiver ------


REPO = Path(__file__).resolve().parents[2]
SDK_SRC = REPO / "sdk" / "src"


class C4DReceiver(BaseHTTPRequestHandler):
    """Takes the SDK's POST .../c4d/ and .../progress/ bodies; keeps the C4D records."""

    records: dict  # rank -> {seq: record}
    lock = threading.Lock()

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path.endswith("/c4d/"):
            with self.lock:
                ranked = self.server.records.setdefault(body["rank"], {})
                for rec in body["records"]:
                    ranked[rec["seq"]] = rec  # upsert: the exit arrives in a later flush
        self.send_response(202)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


@contextmanager
def serving_receiver():
    """A C4DReceiver on a loopback port, in a thread, for as long as the block runs."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), C4DReceiver)
    server.records = {}
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def receiver():
    with serving_receiver() as server:
        yield server


def start_reporting_ranks(receiver, world: int, **fault) -> list[subprocess.Popen]:
    """The DDP example as `world` real ranks with the SDK's C4D on, reporting to `receiver`."""
    port = free_port()
    procs = []
    for rank in range(world):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FAULT", "VIGIL_"))}
        env.update(
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            WORLD_SIZE=str(world),
            RANK=str(rank),
            VIGIL_EXAMPLE_PG_TIMEOUT="120",
            PYTHONPATH=os.pathsep.join(filter(None, [str(SDK_SRC), env.get("PYTHONPATH")])),
            VIGIL_CONSOLE_URL=f"http://127.0.0.1:{receiver.server_address[1]}",
            VIGIL_JOB_ID="7",
            VIGIL_JOB_TOKEN="vjt_test",
            VIGIL_ATTEMPT="1",
            VIGIL_RANK=str(rank),
            VIGIL_C4D="1",
            VIGIL_C4D_FLUSH_SECONDS="0.2",
            **fault,
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, str(REPO / "examples/ddp_train.py")],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    return procs


def received(receiver) -> dict:
    with C4DReceiver.lock:
        return {r: list(recs.values()) for r, recs in receiver.records.items()}


def kill_all(procs) -> None:
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
        p.wait()


def needs_sdk_and_torch(test):
    test = pytest.mark.skipif(
        not (SDK_SRC / "vigil" / "c4d.py").exists(), reason="the vigil SDK (sdk/src/vigil) is absent"
    )(test)
    return pytest.mark.torch(test)


@needs_sdk_and_torch
@pytest.mark.parametrize(
    "fault, kind", [("hang_compute", C4DKind.NON_COMM_HANG), ("hang_collective", C4DKind.COMM_HANG)]
)
def test_the_example_hung_rank_is_named_from_the_records_the_sdk_reports(receiver, fault, kind):
    pytest.importorskip("torch", reason="PyTorch is not installed: pip install torch==2.13.0 (CPU)")
    procs = start_reporting_ranks(receiver, 4, FAULT=fault, FAULT_RANK="1", FAULT_STEP="4")
    try:
        envs = C4DEnvs(hang_timeout_us=1_000_000, hang_times=2)
        deadline = time.monotonic() + 180
        state, result = C4DState(), None
        while time.monotonic() < deadline:
            time.sleep(0.5)
            result = analyze_collectives(received(receiver), envs, now=time.time(), state=state, world_size=4)
            state = result.state
            if result.errors:
                break
        assert [p.poll() for p in procs] == [None] * 4, "the ranks should still be hung"
    finally:
        kill_all(procs)
    assert result is not None and [(v.rank, v.kind) for v in result.errors] == [(1, kind)], (
        [v.message for v in result.verdicts] if result else None
    )


@needs_sdk_and_torch
def test_the_example_slow_rank_is_non_comm_slow_from_the_records_the_sdk_reports(receiver):
    pytest.importorskip("torch", reason="PyTorch is not installed: pip install torch==2.13.0 (CPU)")
    procs = start_reporting_ranks(
        receiver,
        4,
        FAULT="slow",
        FAULT_RANK="2",
        FAULT_STEP="2",
        VIGIL_EXAMPLE_STEPS="16",
        VIGIL_EXAMPLE_SLOW_SECONDS="0.15",
    )
    try:
        assert [p.wait(timeout=240) for p in procs] == [0, 0, 0, 0]
    finally:
        kill_all(procs)
    records = received(receiver)
    assert sorted(records) == [0, 1, 2, 3] and all(len(r) >= 16 for r in records.values())
    result = analyze_collectives(records, ENVS, now=time.time())
    assert [(v.rank, v.kind, v.severity) for v in result.verdicts] == [
        (2, C4DKind.NON_COMM_SLOW, C4DLogLevel.WARNING)
    ], [v.message for v in result.verdicts]
