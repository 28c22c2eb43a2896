"""How fast Vigil's local backend knows that an instance exited (a benchmark, not a test).

For each exit we take the child's own exit time (it writes time.time() to its log
as its very last act, then calls os._exit) and measure:

- on disk:    the shim's exit.json timestamp (written, then renamed, before anyone is told)
- announced:  the time a Redis subscriber received the PUBLISH of that exit
- polling:    for comparison, the same children started with subprocess.Popen and
              watched the way torchrun watches its workers: Popen.poll() every 100 ms

Run:  .venv/bin/python bench/exit_detection.py [--exits 100] [--redis redis://127.0.0.1:6379/0]
Target: announced p99 <= 50 ms.
"""

from __future__ import annotations

import _path  # noqa: F401  (first: the repository root on sys.path; bench/_path.py)
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import redis

from jobs.backends.base import AttemptLaunch, InstanceLaunch
from jobs.backends.local import LocalBackend

BATCH = 10  # instances per attempt; they exit one after the other
SPACING = 0.15  # seconds between two exits of a batch


def child_command(delay: float, code: int) -> str:
    # exec: the python process IS the instance, so its exit is the instance's exit.
    return (
        f"sleep {delay:.2f}; exec {sys.executable} -I -S -c "
        f"'import os, time; os.write(1, repr(time.time()).encode()); os._exit({code})'"
    )


def percentile(values, p):
    values = sorted(values)
    if not values:
        return float("nan")
    k = (len(values) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def describe(name, seconds):
    ms = [s * 1000 for s in seconds]
    return (
        f"{name:<34} n={len(ms):<4} p50={percentile(ms, 50):7.2f} ms  p99={percentile(ms, 99):7.2f} ms  "
        f"max={max(ms):7.2f} ms  mean={statistics.mean(ms):7.2f} ms"
    )


def run_vigil(exits: int, redis_url: str, data_dir: str):
    prefix = f"vigil-bench-{uuid.uuid4().hex[:8]}"
    backend = LocalBackend(
        data_dir=data_dir, redis_url=redis_url, channel_prefix=prefix, nodes=[{"name": "bench", "slots": BATCH}]
    )
    client = redis.Redis.from_url(redis_url)
    pubsub = client.pubsub()
    pubsub.subscribe(backend.exit_channel)
    pubsub.get_message(timeout=2.0)
    received: dict[tuple[str, str], float] = {}
    stop = threading.Event()

    def listen():
        while not stop.is_set():
            msg = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.2)
            if msg is not None:
                at = time.time()
                payload = json.loads(msg["data"])
                received[(payload["job_id"], payload["instance"])] = at

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    on_disk, announced, handles = [], [], []
    try:
        for b in range(-(-exits // BATCH)):
            n = min(BATCH, exits - b * BATCH)
            instances = tuple(
                InstanceLaunch(f"worker-{i}", "Worker", i, i, child_command(0.2 + SPACING * i, i % 2)) for i in range(n)
            )
            handle = backend.launch(AttemptLaunch(f"bench{b}", 1, "ElasticBatchJob", instances, {}))
            handles.append(handle)
            deadline = time.monotonic() + 0.2 + SPACING * n + 5
            while time.monotonic() < deadline:
                if all((handle["job_id"], i.name) in received for i in instances):
                    break
                time.sleep(0.05)
            for inst in instances:
                child_exit = float(backend.read_log(handle, inst.name))
                exit_file = Path(handle["dir"], inst.name, "exit.json")
                on_disk.append(json.loads(exit_file.read_text())["exited_at"] - child_exit)
                if (handle["job_id"], inst.name) in received:
                    announced.append(received[(handle["job_id"], inst.name)] - child_exit)
    finally:
        stop.set()
        listener.join(timeout=2)
        pubsub.close()
        client.close()
        backend.stop_everything(grace=0.5)
    return on_disk, announced


def run_polling(exits: int, interval: float = 0.1):
    detected = []
    for b in range(-(-exits // BATCH)):
        n = min(BATCH, exits - b * BATCH)
        procs = [
            subprocess.Popen(["/bin/sh", "-c", child_command(0.2 + SPACING * i, i % 2)], stdout=subprocess.PIPE)
            for i in range(n)
        ]
        seen: dict[int, float] = {}
        try:
            while len(seen) < n:
                for i, p in enumerate(procs):
                    if i not in seen and p.poll() is not None:
                        seen[i] = time.time()
                time.sleep(interval)
            for i, p in enumerate(procs):
                detected.append(seen[i] - float(p.stdout.read()))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait()
                p.stdout.close()
    return detected


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--exits", type=int, default=100, help="exits to measure per method (>= 50)")
    parser.add_argument("--redis", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    args = parser.parse_args()
    if args.exits < 50:
        parser.error("--exits: at least 50 so that p99 means something")

    print("exit detection benchmark")
    print(
        f"  machine: {platform.node()} {platform.platform()}, {os.cpu_count()} CPUs, "
        f"load avg {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(f"  python {platform.python_version()} ({sys.executable}), redis {args.redis}")
    print(
        f"  workload: {args.exits} exits per method, batches of {BATCH} instances exiting {SPACING * 1000:.0f} ms"
        " apart; each child writes time.time() then os._exit(0 or 1)"
    )
    print("  vigil: LocalBackend shim -> exit.json (tmp + rename) -> Redis PUBLISH -> subscriber thread")
    print("  polling: subprocess.Popen + Popen.poll() every 100 ms (how torchrun watches workers)")
    data_dir = tempfile.mkdtemp(prefix="vigil-bench-")
    from testsupport.jobs import let_jobs_reach

    let_jobs_reach(data_dir)  # run as root, the instances run as nobody (docs/security.md)
    try:
        started = time.monotonic()
        on_disk, announced = run_vigil(args.exits, args.redis, data_dir)
        polled = run_polling(args.exits)
        took = time.monotonic() - started
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    print()
    print(describe("vigil: exit on disk (exit.json)", on_disk))
    print(describe("vigil: exit announced (Redis sub)", announced))
    print(describe("polling every 100 ms", polled))
    missing = args.exits - len(announced)
    p99 = percentile(announced, 99) * 1000
    print()
    print(f"announcements missing: {missing}; total run time {took:.1f} s")
    print(f"target announced p99 <= 50 ms: {'met' if p99 <= 50 and not missing else 'NOT met'} ({p99:.2f} ms)")


if __name__ == "__main__":
    main()
