"""C4D instrumentation overhead: step time of examples/ddp_train.py without C4D, with
the SDK's torch.distributed instrumentation (VIGIL_C4D=1), and with the no-code-change
path (PyTorch's Flight Recorder, TORCH_FR_BUFFER_SIZE, plus Vigil's start-up hook that
dumps its trace when it changed: jobs/backends/fr_boot.py as sitecustomize, as the
local backend sets it up).

Both arms run the same job with the SDK active (VIGIL_JOB_ID set, progress
reports on) against a loopback HTTP server that accepts every SDK call, so the
only difference is the instrumentation: every collective appends a record and a
background thread ships them (SDK), or torch records it and a thread writes its
dump every second when it changed (Flight Recorder). Arms alternate (A B C A B C ...)
so that drift in the machine's load hits all. The figure is the wall-clock time per step on rank 0
from step `--skip` to the last step, median over runs.

    .venv/bin/python bench/c4d_overhead.py --runs 5 --steps 300 --ranks 2
Target: each instrumented arm at most 2 % slower.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "ddp_train.py"
STEP = re.compile(r"^(\S+Z) step=(\d+) rank=0 ")


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
    """One run; arm: "plain", "sdk" (VIGIL_C4D=1) or "fr" (the Flight Recorder path)."""
    port = free_port()
    procs = []
    boot = os.path.join(scratch, "boot")
    os.makedirs(boot, exist_ok=True)
    shutil.copy(ROOT / "jobs" / "backends" / "fr_boot.py", os.path.join(boot, "sitecustomize.py"))
    fr_env = {"VIGIL_FR_DIR": scratch, "TORCH_FR_BUFFER_SIZE": "200"} if arm == "fr" else {}
    for rank in range(ranks):
        env = {
            **os.environ, **fr_env,
            "PYTHONPATH": os.pathsep.join(([boot] if arm == "fr" else []) + [str(ROOT / "sdk" / "src")]),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(ranks), "RANK": str(rank),
            "LOCAL_RANK": str(rank), "VIGIL_EXAMPLE_STEPS": str(steps), "VIGIL_EXAMPLE_SLEEP": str(sleep),
            "VIGIL_CONSOLE_URL": console, "VIGIL_JOB_ID": "1", "VIGIL_JOB_TOKEN": "vjt_bench", "VIGIL_ATTEMPT": "1",
            "VIGIL_RANK": str(rank), "VIGIL_INSTANCE": f"worker-{rank}", "VIGIL_C4D": "1" if arm == "sdk" else "0",
        }
        procs.append(subprocess.Popen([sys.executable, str(EXAMPLE)], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True, start_new_session=True))
    try:
        out = procs[0].communicate(timeout=600)[0]
        for p in procs[1:]:
            p.wait(timeout=60)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if any(p.returncode != 0 for p in procs):
        raise RuntimeError(f"a rank failed: exit codes {[p.returncode for p in procs]}")
    stamps = {}
    for line in out.splitlines():
        m = STEP.match(line)
        if m:
            stamps[int(m.group(2))] = dt.datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp()
    last = max(stamps)
    return (stamps[last] - stamps[skip]) / (last - skip)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--skip", type=int, default=20, help="warm-up steps left out")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--sleep", type=float, default=0.0,
                        help="extra seconds of compute per step (the example's tiny model steps in ~3 ms; "
                             "real steps take tens of ms or more)")
    args = parser.parse_args()
    import torch

    server = ThreadingHTTPServer(("127.0.0.1", 0), Accept)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    console = f"http://127.0.0.1:{server.server_address[1]}"
    print(f"c4d_overhead: examples/ddp_train.py, {args.ranks} gloo ranks on CPU, {args.steps} steps "
          f"(first {args.skip} left out), {args.sleep:g} s extra compute per step, {args.runs} runs per arm, alternating")
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; "
          f"python {platform.python_version()}, torch {torch.__version__}; SDK console: loopback {console}")
    plain, instrumented, recorder = [], [], []
    with tempfile.TemporaryDirectory(prefix="vigil-c4d-bench-") as scratch:
        for i in range(args.runs):
            plain.append(run_once(console, args.ranks, args.steps, args.skip, "plain", args.sleep, scratch))
            instrumented.append(run_once(console, args.ranks, args.steps, args.skip, "sdk", args.sleep, scratch))
            recorder.append(run_once(console, args.ranks, args.steps, args.skip, "fr", args.sleep, scratch))
            print(f"  run {i + 1}: without {plain[-1] * 1000:.2f} ms/step, SDK {instrumented[-1] * 1000:.2f} ms/step, "
                  f"Flight Recorder {recorder[-1] * 1000:.2f} ms/step")
        dumps = sorted(n for n in os.listdir(scratch) if n.startswith("fr_"))
    a, b, c = statistics.median(plain), statistics.median(instrumented), statistics.median(recorder)
    overhead, fr_overhead = (b - a) / a * 100, (c - a) / a * 100
    print(f"median step time: without instrumentation {a * 1000:.2f} ms, SDK {b * 1000:.2f} ms "
          f"({overhead:+.2f} %), Flight Recorder {c * 1000:.2f} ms ({fr_overhead:+.2f} %); "
          f"SDK calls received by endpoint: {Accept.calls}; Flight Recorder dumps written: {dumps}")
    spread = (max(plain) - min(plain)) / a * 100
    print(f"run-to-run spread without instrumentation: {spread:.1f} % of the median")
    print(f"target each path at most 2 % slower: SDK {'met' if overhead <= 2 else 'MISSED'}, "
          f"Flight Recorder {'met' if fr_overhead <= 2 else 'MISSED'}")
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
