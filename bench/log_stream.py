"""Benchmark (not a test): live log streaming over the job WebSocket.

What it runs, all real and on loopback:
  * a fresh data directory with its own SQLite database (migrated here), one
    user, one workspace, and the user's session cookie;
  * daphne serving console.asgi (a subprocess; Redis channel layer);
  * jobs on the real local backend: one instance (ElasticBatchJob, 1 Worker)
    whose process writes numbered lines stamped with time.time() at a fixed
    rate, starting only when every viewer is connected;
  * WebSocket viewers (a minimal RFC 6455 client below, no extra packages)
    that log in with the session cookie and read the instance log from offset 0.

Phase 1: 1,000 lines/s for 30 s, 20 viewers: latency from write to receipt
(p50, p95, p99, max) and lines lost or doubled per viewer (targets: p95 <= 250 ms,
0 lost).
Phase 2: one viewer, rising rates for 5 s each: the highest rate received
completely (no line lost, every line within 2 s after the writer stopped) with
p95 latency under 1 s (target: >= 10,000 lines/s).

Run:  .venv/bin/python bench/log_stream.py [--viewers 20] [--rate 1000] [--seconds 30]
"""

from __future__ import annotations

import _path  # first: the repository root on sys.path (bench/_path.py)
import argparse
import asyncio
import base64
import json
import os
import platform
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path

ROOT = _path.ROOT

WRITER = textwrap.dedent("""
    import os, sys, time
    rate = int(os.environ["BENCH_RATE"]); seconds = float(os.environ["BENCH_SECONDS"])
    start_file = os.environ["BENCH_START"]
    while not os.path.exists(start_file):
        time.sleep(0.005)
    pad = "x" * 60
    total = int(rate * seconds)
    t0 = time.time(); n = 0
    out = sys.stdout
    while n < total:
        due = min(total, int((time.time() - t0) * rate) + 1)
        if due > n:
            now = time.time()
            out.write("".join(f"{i} {now:.6f} step loss=0.{i % 997:03d} {pad}\\n" for i in range(n, due)))
            out.flush()
            n = due
        time.sleep(0.002)
    sys.stdout.write("END\\n"); sys.stdout.flush()
    time.sleep(3600)
""")


# --- a minimal WebSocket client (text frames; enough for this benchmark) --------------


class WebSocket:
    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, host, port, path, headers):
        reader, writer = await asyncio.open_connection(host, port, limit=2**24)
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [
            f"GET {path} HTTP/1.1",
            f"Host: {host}:{port}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {key}",
            "Sec-WebSocket-Version: 13",
        ] + [f"{k}: {v}" for k, v in headers.items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        await writer.drain()
        status = await reader.readline()
        if b" 101 " not in status:
            raise ConnectionError(f"handshake refused: {status!r}")
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        return cls(reader, writer)

    async def send_text(self, text: str):
        payload = text.encode()
        mask = os.urandom(4)
        n = len(payload)
        head = bytes([0x81]) + (
            bytes([0x80 | n])
            if n < 126
            else bytes([0x80 | 126]) + struct.pack(">H", n)
            if n < 65536
            else bytes([0x80 | 127]) + struct.pack(">Q", n)
        )
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.writer.write(head + mask + masked)
        await self.writer.drain()

    async def recv_text(self) -> str | None:
        parts = []
        while True:
            b1, b2 = await self.reader.readexactly(2)
            opcode, n = b1 & 0x0F, b2 & 0x7F
            if n == 126:
                n = struct.unpack(">H", await self.reader.readexactly(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", await self.reader.readexactly(8))[0]
            data = await self.reader.readexactly(n)
            if opcode == 0x8:
                return None
            if opcode == 0x9:
                continue
            if opcode in (0x1, 0x0):
                parts.append(data)
                if b1 & 0x80:
                    return b"".join(parts).decode()

    def close(self):
        self.writer.close()


# --- viewers ------------------------------------------------------------------------------


class Viewer:
    def __init__(self):
        self.latencies: list[float] = []
        self.seqs: list[int] = []
        self.ended = asyncio.Event()
        self.kinds: dict[str, int] = {}

    async def run(self, port, job_id, cookie):
        ws = await WebSocket.connect(
            "127.0.0.1",
            port,
            f"/ws/jobs/{job_id}/",
            {"Origin": f"http://127.0.0.1:{port}", "Cookie": f"sessionid={cookie}"},
        )
        await ws.send_text(
            json.dumps(
                {
                    "type": "hello",
                    "after_event": None,
                    "logs": {"attempt": 1, "instances": ["worker-0"], "offsets": {"1:worker-0": 0}},
                }
            )
        )
        self.ws = ws
        self.connected = True
        try:
            while True:
                text = await ws.recv_text()
                if text is None:
                    return
                received = time.time()
                msg = json.loads(text)
                self.kinds[msg.get("type")] = self.kinds.get(msg.get("type"), 0) + 1
                if msg.get("type") != "log":
                    continue
                for line in msg["lines"]:
                    if line == "END":
                        self.ended.set()
                        continue
                    seq, stamp, _ = line.split(" ", 2)
                    self.seqs.append(int(seq))
                    self.latencies.append(received - float(stamp))
        except (asyncio.IncompleteReadError, ConnectionError):
            return


def pct(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


# --- the world ----------------------------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def setup_django(data_dir: Path, prefix: str):
    settings_dir = data_dir / "settings"
    settings_dir.mkdir()
    (settings_dir / "bench_settings.py").write_text(
        textwrap.dedent(f"""
        from console.settings import *  # noqa
        CHANNEL_LAYERS = {{"default": {{"BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {{"hosts": [{{"address": REDIS_URL, "socket_timeout": 30}}], "prefix": {prefix!r}}}}}}}
        CELERY_TASK_ALWAYS_EAGER = True
        VIGIL_STOP_GRACE_SECONDS = 1.0
        LOGGING["root"]["level"] = "WARNING"
    """)
    )
    os.environ["VIGIL_DATA_DIR"] = str(data_dir)
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench_settings"
    sys.path[:0] = [str(ROOT), str(settings_dir)]
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(settings_dir), os.environ.get("PYTHONPATH", "")])
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def make_people():
    from django.contrib.auth import get_user_model
    from django.contrib.sessions.backends.db import SessionStore

    from jobs.access import backend_permission
    from jobs.models import Membership, Role, Workspace

    user = get_user_model().objects.create_user("bench", "bench@example.com", "bench-password-123")
    user.user_permissions.add(backend_permission("local"))  # the site permission to run jobs
    ws = Workspace.objects.create(name="Bench", slug="bench")
    Membership.objects.create(workspace=ws, user=user, role=Role.OWNER)
    session = SessionStore()
    session["_auth_user_id"] = str(user.pk)
    session["_auth_user_backend"] = "django.contrib.auth.backends.ModelBackend"
    session["_auth_user_hash"] = user.get_session_auth_hash()
    session.create()
    return user, ws, session.session_key


def submit_writer(user, ws, rate, seconds, start_file):
    from jobs import actions

    body = {
        "workspace": ws.slug,
        "display_name": f"writer-{rate}",
        "job_type": "ElasticBatchJob",
        "job_specs": [{"type": "Worker", "pod_count": 1, "resource_config": {"cpu": 1, "memory": "", "gpu": 0}}],
        "user_command": f"{shlex.quote(sys.executable)} -u -c {shlex.quote(WRITER)}",
        "envs": {"BENCH_RATE": str(rate), "BENCH_SECONDS": str(seconds), "BENCH_START": start_file},
        "backend": "local",
    }
    job, _ = actions.submit_job(user, body)  # launched after commit, in this process
    job.refresh_from_db()
    assert job.attempts.get(number=1).backend_handle, "the writer did not launch"
    return job


def start_daphne(port, log_path):
    env = dict(os.environ)
    proc = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "console.asgi:application"],
        cwd=ROOT,
        env=env,
        start_new_session=True,
        stdout=open(log_path, "wb"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return proc
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.2)
    raise RuntimeError(f"daphne did not start: {Path(log_path).read_text()[-2000:]}")


async def run_phase(port, user, ws, cookie, rate, seconds, viewers, data_dir, tag):
    from asgiref.sync import sync_to_async

    start_file = str(data_dir / f"start-{tag}")
    job = await sync_to_async(submit_writer)(user, ws, rate, seconds, start_file)
    people = [Viewer() for _ in range(viewers)]
    tasks = [asyncio.create_task(v.run(port, job.pk, cookie)) for v in people]
    await asyncio.sleep(1.0 + viewers * 0.05)  # every viewer connected and tailing
    Path(start_file).touch()
    total = rate * seconds
    try:
        await asyncio.wait_for(asyncio.gather(*(v.ended.wait() for v in people)), timeout=seconds + 2.0)
        complete = True
    except asyncio.TimeoutError:
        complete = False
    for v in people:
        v.ws.close()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await sync_to_async(stop_job)(job)
    results = []
    for v in people:
        got = set(v.seqs)
        results.append(
            {
                "lost": total - len(got & set(range(total))),
                "doubled": len(v.seqs) - len(got),
                "latencies": v.latencies,
                "kinds": v.kinds,
            }
        )
    return complete, results


def stop_job(job):
    from jobs.backends import get_backend

    attempt = job.attempts.get(number=1)
    get_backend("local").stop(attempt.backend_handle, grace=0.5)


def machine() -> str:
    model = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()
    return (
        f"{platform.node()} · {platform.system()} {platform.release()} · {model or platform.processor()} · "
        f"{os.cpu_count()} CPUs · Python {platform.python_version()} · load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--viewers", type=int, default=20)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--max-rate", type=int, default=80_000)
    parser.add_argument("--keep", action="store_true", help="keep the data directory (daphne.log, job logs)")
    args = parser.parse_args()

    data_dir = Path(tempfile.mkdtemp(prefix="vigil-bench-"))
    from testsupport.jobs import let_jobs_reach

    let_jobs_reach(data_dir)  # run as root, the writer job runs as nobody (docs/security.md)
    prefix = f"vigil-bench-{os.getpid()}"
    daphne = None
    try:
        setup_django(data_dir, prefix)
        user, ws, cookie = make_people()
        port = free_port()
        daphne = start_daphne(port, data_dir / "daphne.log")
        print("Vigil log streaming benchmark")
        print(f"machine: {machine()}")
        print(
            f"server:  daphne console.asgi on 127.0.0.1:{port} (pid {daphne.pid}), Redis channel layer, "
            f"SQLite {data_dir}/vigil.sqlite3, local backend (real processes), consumer tick 100 ms"
        )
        print("lines:   ~100 bytes, stamped with time.time() when written; latency = receipt time - stamp")
        print()

        complete, results = asyncio.run(
            run_phase(port, user, ws, cookie, args.rate, int(args.seconds), args.viewers, data_dir, "p1")
        )
        lat = [x for r in results for x in r["latencies"]]
        if not lat:
            raise SystemExit(f"no line arrived; messages by type: {results[0].get('kinds')}; see --keep")
        print(f"phase 1: 1 job writing {args.rate:,} lines/s for {args.seconds:g} s, {args.viewers} viewers")
        print(
            f"  latency  p50 {pct(lat, 50) * 1000:.0f} ms · p95 {pct(lat, 95) * 1000:.0f} ms · "
            f"p99 {pct(lat, 99) * 1000:.0f} ms · max {max(lat) * 1000:.0f} ms  (target p95 <= 250 ms)"
        )
        print(
            f"  lines lost {sum(r['lost'] for r in results)} · doubled {sum(r['doubled'] for r in results)} "
            f"(over {args.viewers} viewers x {int(args.rate * args.seconds):,} lines; target 0) · "
            f"all viewers saw the end: {complete}"
        )
        print()

        print("phase 2: one viewer, 5 s per rate, highest rate received completely with p95 < 1 s")
        best = 0
        rate = 5_000
        while rate <= args.max_rate:
            complete, (r,) = asyncio.run(run_phase(port, user, ws, cookie, rate, 5, 1, data_dir, f"p2-{rate}"))
            p95 = pct(r["latencies"], 95)
            ok = complete and r["lost"] == 0 and r["doubled"] == 0 and p95 < 1.0
            print(
                f"  {rate:>7,} lines/s: lost {r['lost']}, doubled {r['doubled']}, p50 "
                f"{pct(r['latencies'], 50) * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms -> {'ok' if ok else 'too much'}"
            )
            if not ok:
                break
            best = rate
            rate *= 2
        print(f"  highest rate without loss: {best:,} lines/s (target >= 10,000)")
    finally:
        if daphne is not None and daphne.poll() is None:
            os.kill(daphne.pid, signal.SIGTERM)
            try:
                daphne.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.kill(daphne.pid, signal.SIGKILL)
        try:
            from jobs.backends import get_backend

            get_backend("local").stop_everything(grace=0.5)
        except Exception as exc:  # noqa: BLE001 - clean-up must go on
            print(f"clean-up: {exc}", file=sys.stderr)
        if args.keep:
            print(f"kept {data_dir}")
        else:
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
