"""Benchmark: how long a stack snapshot of a hung job takes.

Runs:
  1. py-spy dumps of 8 real hung Python processes, one by one and 4 at a time;
  2. the same for 8 real DDP ranks (examples/ddp_train.py, FAULT=hang_compute)
     when torch is installed, since torch processes have far more to read;
  3. aggregation of 1,024 dumps (1,023 alike, 1 odd; 3 threads and ~40 frames each,
     shaped like a DDP rank's dump) into stacks with suspects, plus its summary text.

Usage: .venv/bin/python bench/stacks.py [--repeat N]
"""

from __future__ import annotations

import _path  # first: the repository root on sys.path (bench/_path.py)
import argparse
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from core.stacks import (
    Frame,
    ProcessStacks,
    StackSnapshot,
    ThreadStack,
    aggregate_stacks,
    dump_processes,
    find_py_spy,
)

ROOT = _path.ROOT
STUCK = textwrap.dedent("""\
    import sys, threading, time
    def stuck_here():
        while True:
            time.sleep(0.5)
    threading.Thread(target=lambda: threading.Event().wait(), daemon=True).start()
    print("ready", flush=True)
    stuck_here()
""")


def timed(fn, repeat: int) -> tuple[float, float, object]:
    runs, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs), max(runs), result


def kill(procs):
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
        p.wait()


def bench_dumps(label: str, targets, repeat: int) -> list[ProcessStacks]:
    for parallel in (1, 4):
        med, worst, dumps = timed(lambda: dump_processes(targets, timeout=15, parallel=parallel), repeat)
        ok = sum(d.ok for d in dumps)
        per = statistics.median(d.duration_s for d in dumps)
        print(
            f"  {label}: {len(targets)} processes, parallel={parallel}: "
            f"median {med * 1000:.0f} ms, worst {worst * 1000:.0f} ms "
            f"(per process median {per * 1000:.0f} ms; {ok}/{len(dumps)} dumped)"
        )
    return dumps


def synthetic_dumps(n: int, template: ProcessStacks | None) -> list[ProcessStacks]:
    if template and template.threads:
        base = max(template.threads, key=lambda t: len(t.frames))
        frames = base.frames
    else:
        frames = tuple(Frame(f"fn{i}", f"pkg/mod{i % 7}.py", 10 + i) for i in range(40))
    idle = ThreadStack(
        2, "pin_memory", (Frame("Condition.wait", "threading.py", 327), Frame("Thread.run", "threading.py", 982))
    )
    watchdog = ThreadStack(3, "watchdog", (Frame("Event.wait", "threading.py", 629),) + frames[-3:])
    odd = (Frame("compute_forever", "ddp_train.py", 106),) + frames[-3:]
    dumps = []
    for rank in range(n):
        main = ThreadStack(1, "MainThread", odd if rank == n // 3 else frames)
        dumps.append(
            ProcessStacks(pid=10_000 + rank, instance=f"worker-{rank}", rank=rank, threads=(main, idle, watchdog))
        )
    return dumps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--ddp-ranks", type=int, default=8, help="DDP ranks to hang (0: skip)")
    args = parser.parse_args()
    py_spy = find_py_spy()
    try:
        ver = subprocess.run([py_spy, "--version"], capture_output=True, text=True).stdout.strip()
    except (OSError, TypeError):
        ver = "missing"
    print(
        f"bench/stacks.py on {platform.node()}: {os.cpu_count()} CPU(s), "
        f"Python {platform.python_version()}, {ver}, repeat={args.repeat}"
    )
    load = os.getloadavg()
    print(f"  load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")

    procs: list[subprocess.Popen] = []
    template = None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            script = Path(tmp) / "stuck.py"
            script.write_text(STUCK)
            for _ in range(8):
                procs.append(subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True))
            for p in procs:
                p.stdout.readline()
            print("1. py-spy dump of 8 hung plain-Python processes")
            bench_dumps("plain python", [(f"worker-{i}", i, p.pid) for i, p in enumerate(procs)], args.repeat)
        kill(procs)
        procs = []

        import importlib.util

        have_torch = importlib.util.find_spec("torch") is not None
        if have_torch and args.ddp_ranks > 0:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            for rank in range(args.ddp_ranks):
                env = {k: v for k, v in os.environ.items() if not k.startswith(("FAULT", "VIGIL_"))}
                env.update(
                    MASTER_ADDR="127.0.0.1",
                    MASTER_PORT=str(port),
                    WORLD_SIZE=str(args.ddp_ranks),
                    RANK=str(rank),
                    FAULT="hang_compute",
                    FAULT_STEP="3",
                    VIGIL_EXAMPLE_PG_TIMEOUT="300",
                )
                procs.append(
                    subprocess.Popen(
                        [sys.executable, str(ROOT / "examples/ddp_train.py")],
                        env=env,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL,
                        text=True,
                    )
                )
            for p in procs:
                while "step=2 " not in (line := p.stdout.readline()) and line:
                    pass
            time.sleep(1.0)
            print(f"2. py-spy dump of {args.ddp_ranks} hung DDP ranks (torch, gloo, FAULT=hang_compute)")
            dumps = bench_dumps("DDP ranks", [(f"worker-{i}", i, p.pid) for i, p in enumerate(procs)], args.repeat)
            snap = StackSnapshot.of(dumps)
            print(
                "   suspect: "
                + "; ".join(f"{s.top} on {[t.rank for t in s.threads]}" for s in snap.suspects if not s.idle)
            )
            template = next((d for d in dumps if d.ok and d.rank == 0), None)
        else:
            print("2. skipped: torch is not installed or --ddp-ranks=0")
    finally:
        kill(procs)

    print("3. aggregation of 1,024 dumps")
    dumps = synthetic_dumps(1024, template)
    frames = sum(len(t.frames) for d in dumps for t in d.threads)
    med, worst, stacks = timed(lambda: aggregate_stacks(dumps), max(args.repeat, 10))
    print(
        f"  aggregate_stacks: {len(dumps)} dumps, {len(dumps) * 3} threads, {frames} frames: "
        f"median {med * 1000:.1f} ms, worst {worst * 1000:.1f} ms -> {len(stacks)} stacks, "
        f"{sum(s.suspect for s in stacks)} suspect(s)"
    )
    med, worst, text = timed(lambda: StackSnapshot.of(dumps).summary_text(), max(args.repeat, 10))
    print(
        f"  StackSnapshot.of + summary_text: median {med * 1000:.1f} ms, "
        f"worst {worst * 1000:.1f} ms ({len(text)} characters)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
