"""C4D instrumentation overhead: the step time of a DDP job that never imports vigil
(examples/plain_ddp.py, 2 gloo ranks on CPU by default) in three arms:

  baseline        C4D off: no hook, no recorder, no SDK
  SDK imported    the job imports vigil.c4d and instruments torch.distributed itself
                  (PLAIN_IMPORT_SDK=1), C4D on: each collective appends a record, a
                  background thread posts them every second
  no code change  what the local backend sets up with C4D on, the script untouched:
                  PyTorch's Flight Recorder (TORCH_FR_BUFFER_SIZE), Vigil's start-up hook
                  (jobs/backends/fr_boot.py as sitecustomize) that writes the recorder's
                  dump every second when it changed and injects the SDK's instrumentation
                  (its copy under VIGIL_C4D_SDK, as the backend gives it)

Every arm posts to a loopback HTTP server that accepts every SDK call. Arms alternate
(A B C A B C ...) so that drift in the machine's load hits all three; the figure is rank
0's wall-clock time per step from step `--skip` to the last, and the overhead of an arm is
the median over rounds of its time against the baseline of the same round (paired), with
the interquartile range of those paired figures and the baseline's own run-to-run spread
(max - min over median, and IQR over median): an overhead inside the spread is not
measured. The load average is printed before every round and at the end.

    .venv/bin/python bench/c4d_overhead.py --runs 12 --steps 400 --ranks 2
Target: each instrumented arm at most 2 % slower. --quick (CI, tests/test_benches.py): 2 rounds
of 30 steps, the same lines, too few rounds to judge the target (it says so).
"""

from __future__ import annotations

import _path  # first: the repository root on sys.path (bench/_path.py)
import argparse
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = _path.ROOT
SCRIPT = ROOT / "examples" / "plain_ddp.py"
TIMING = re.compile(r"^timing rank=0 steps=\d+ skip=\d+ seconds_per_step=([0-9.]+)$", re.M)
ARMS = ("baseline", "SDK imported", "no code change")


class Accept(BaseHTTPRequestHandler):
    calls: dict = {}

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        endpoint = self.path.rstrip("/").rsplit("/", 1)[-1]
        Accept.calls[endpoint] = Accept.calls.get(endpoint, 0) + 1
        body = b'{"ok": true}'
        self.send_response(202)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_once(console: str, ranks: int, steps: int, skip: int, arm: str, sleep: float, scratch: str) -> float:
    """One run of `arm` (one of ARMS): rank 0's seconds per step."""
    port = free_port()
    boot, fr = os.path.join(scratch, "boot"), os.path.join(scratch, "fr")
    if not os.path.isdir(boot):
        os.makedirs(fr)
        os.makedirs(os.path.join(boot, "sdk"))
        shutil.copy(ROOT / "jobs" / "backends" / "fr_boot.py", os.path.join(boot, "sitecustomize.py"))
        shutil.copytree(
            ROOT / "sdk" / "src" / "vigil",
            os.path.join(boot, "sdk", "vigil"),
            ignore=shutil.ignore_patterns("__pycache__", "cli.py"),
        )
    arm_env = {
        "baseline": {"VIGIL_C4D": "0"},
        "SDK imported": {"VIGIL_C4D": "1", "PLAIN_IMPORT_SDK": "1"},
        "no code change": {
            "VIGIL_C4D": "1",
            "VIGIL_FR_DIR": fr,
            "TORCH_FR_BUFFER_SIZE": "200",
            "VIGIL_C4D_SDK": os.path.join(boot, "sdk"),
        },
    }[arm]
    path = ([boot] if arm == "no code change" else []) + [str(ROOT / "sdk" / "src")]
    procs = []
    for rank in range(ranks):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VIGIL_", "TORCH_", "PLAIN_"))}
        env.update(
            arm_env,
            PYTHONPATH=os.pathsep.join(path),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            WORLD_SIZE=str(ranks),
            RANK=str(rank),
            PLAIN_STEPS=str(steps),
            PLAIN_SKIP=str(skip),
            PLAIN_SLEEP=str(sleep),
            VIGIL_CONSOLE_URL=console,
            VIGIL_JOB_ID="1",
            VIGIL_JOB_TOKEN="vjt_bench",
            VIGIL_ATTEMPT="1",
            VIGIL_RANK=str(rank),
            VIGIL_INSTANCE=f"worker-{rank}",
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, str(SCRIPT)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                start_new_session=True,
            )
        )
    try:
        out = procs[0].communicate(timeout=600)[0]
        for p in procs[1:]:
            p.wait(timeout=60)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    if any(p.returncode != 0 for p in procs):
        raise RuntimeError(f"{arm}: a rank failed: exit codes {[p.returncode for p in procs]}")
    m = TIMING.search(out)
    if m is None:
        raise RuntimeError(f"{arm}: rank 0 printed no timing line")
    return float(m.group(1))


def quartiles(values: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=12, help="rounds (one run of each arm per round)")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--skip", type=int, default=20, help="warm-up steps left out")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument(
        "--sleep",
        type=float,
        default=0.0,
        help="extra seconds of compute per step (the tiny model steps in a few ms; real steps take tens of ms or more)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="2 rounds of 30 steps: every line printed, the target not judged"
    )
    args = parser.parse_args()
    if args.quick:  # that the bench still starts and prints its figures, in seconds
        args.runs, args.steps, args.skip = 2, 30, 10
    elif args.runs < 4:
        parser.error("--runs: at least 4 rounds, or the spread says nothing")
    import torch

    server = ThreadingHTTPServer(("127.0.0.1", 0), Accept)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    console = f"http://127.0.0.1:{server.server_address[1]}"
    print(
        f"c4d_overhead: examples/plain_ddp.py (never imports vigil), {args.ranks} gloo ranks on CPU, "
        f"{args.steps} steps (first {args.skip} left out), {args.sleep:g} s extra compute per step, "
        f"{args.runs} rounds of {len(ARMS)} arms, alternating"
    )
    print(
        f"machine: {platform.platform()}, {os.cpu_count()} CPUs, load average {_load()}; "
        f"python {platform.python_version()}, torch {torch.__version__}; SDK console: loopback {console}"
    )
    times: dict[str, list[float]] = {arm: [] for arm in ARMS}
    with tempfile.TemporaryDirectory(prefix="vigil-c4d-bench-") as scratch:
        for i in range(args.runs):
            load = _load()
            for arm in ARMS:
                times[arm].append(run_once(console, args.ranks, args.steps, args.skip, arm, args.sleep, scratch))
            print(
                f"  round {i + 1:2d} (load {load}): "
                + ", ".join(f"{arm} {times[arm][-1] * 1000:.3f} ms/step" for arm in ARMS),
                flush=True,
            )
        dumps = sorted(os.listdir(os.path.join(scratch, "fr")))
    base = times["baseline"]
    b_med = statistics.median(base)
    b_q1, b_q3 = quartiles(base)
    print(
        f"baseline: median {b_med * 1000:.3f} ms/step; run-to-run spread {(max(base) - min(base)) / b_med * 100:.1f} % "
        f"(max - min), IQR {(b_q3 - b_q1) / b_med * 100:.1f} % of the median"
    )
    verdicts = []
    for arm in ARMS[1:]:
        paired = [(t - b) / b * 100 for t, b in zip(times[arm], base)]
        q1, q3 = quartiles(paired)
        med = statistics.median(paired)
        extra = statistics.median((t - b) * 1e6 for t, b in zip(times[arm], base))
        print(
            f"{arm}: median {statistics.median(times[arm]) * 1000:.3f} ms/step; overhead against the same "
            f"round's baseline: median {med:+.2f} % ({extra:+.0f} us/step), IQR [{q1:+.2f} %, {q3:+.2f} %], "
            f"range [{min(paired):+.2f} %, {max(paired):+.2f} %]"
        )
        # Met or missed only when the middle half of the paired figures is on one side of 2 %.
        verdicts.append(
            f"{arm} "
            + (
                "not judged (--quick: 2 rounds)"
                if args.quick
                else "met"
                if q3 < 2
                else "MISSED"
                if q1 > 2
                else "not resolved (2 % is inside the IQR of the paired overheads)"
            )
        )
    print(f"SDK calls received by endpoint: {Accept.calls}; Flight Recorder dumps written: {dumps}")
    print(f"target each path at most 2 % slower: {'; '.join(verdicts)}; load average at the end {_load()}")
    server.shutdown()
    return 0


def _load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
