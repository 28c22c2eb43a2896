"""How late Vigil flags a hang after the hang interval has passed (a benchmark, not a test).

Three real local jobs run at once, with --job-hang-interval 2, 5 and 10 s (Sync, hang
detection on, restarts on with a budget of 3). Each has 2 ranks (Master + Worker)
that print a step line every 0.1 s for 1 s and then go silent forever, on every
attempt. Vigil runs as in production: the Procfile's `worker` (celery worker with
the 1 s beat sweep) and `exits` processes, a private Redis, a throwaway SQLite
database in a temporary VIGIL_DATA_DIR (bench/restart_latency.py's VigilStack).

Every attempt gives one sample: lateness = time of the attempt's hang JobEvent -
(last output of any rank of that attempt + interval). "Last output" is the time
stamped by the rank in its last line, so it is the truth, not the monitor's view.
A hang restarts the job, so a job yields up to 4 samples until its budget is spent.

Then issue 14's scenario: one more job with --job-hang-interval 6 (the start-up interval left at
its default, the larger of 600 s and the hang interval) whose attempt 1 hangs after its first
steps and whose attempt 2 is silent for --startup seconds (30: importing, loading a checkpoint)
before it trains and ends. Start-up silence is not a stall: the job must restart once (the
hang) and finish on attempt 2. torchrun has no hang detection to compare with (PEERS.md): a
hung rank there waits for the collective timeout (30 min by default) or forever.

Run:  .venv/bin/python bench/hang_detection.py [--intervals 2,5,10] [--startup 30]
Target: every hang flagged within 1 s after the interval; the start-up job restarts once and
succeeds on attempt 2.
"""

from __future__ import annotations

import _path  # noqa: F401  (first: the repository root on sys.path; bench/_path.py)
import argparse
import os
import statistics
import textwrap
from pathlib import Path

from restart_latency import PYTHON, VigilStack, machine_line, wait_until

RANK = textwrap.dedent("""
    import time
    for step in range(1, 11):
        print(f"{time.time():.6f} step={step}", flush=True)
        time.sleep(0.1)
    while True:  # silent from here on: a hang
        time.sleep(3600)
""")


# Attempt 1 trains for a second, then hangs; attempt 2 is silent through a slow start-up,
# then trains for a second and ends.
SLOW_START_RANK = textwrap.dedent("""
    import os, sys, time
    if os.environ["VIGIL_ATTEMPT"] != "1":
        time.sleep(float(os.environ["STARTUP_SECONDS"]))
    for step in range(1, 11):
        print(f"{time.time():.6f} step={step}", flush=True)
        time.sleep(0.1)
    if os.environ["VIGIL_ATTEMPT"] != "1":
        sys.exit(0)
    while True:  # attempt 1: a hang after the first progress
        time.sleep(3600)
""")


def last_output(log: Path) -> float | None:
    stamps = []
    for line in log.read_text(errors="replace").splitlines():
        head = line.split(" ", 1)[0]
        try:
            stamps.append(float(head))
        except ValueError:
            continue
    return max(stamps) if stamps else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--intervals", default="2,5,10")
    parser.add_argument("--timeout", type=float, default=180.0)
    parser.add_argument(
        "--startup",
        type=float,
        default=30.0,
        help="seconds of silent start-up in the scenario job's attempt 2 (0: skip the scenario)",
    )
    args = parser.parse_args()
    intervals = [int(x) for x in args.intervals.split(",")]

    print("hang detection lateness: hang event time - (last output + interval)")
    print(f"  machine: {machine_line()}")
    stack = VigilStack()
    try:
        from jobs.models import Attempt, EventType, Job, JobEvent, JobStatus

        print(
            f"  Vigil: Procfile processes {stack.commands}; beat sweep every "
            f"{os.environ.get('VIGIL_MONITOR_SWEEP_SECONDS', '1')} s; private Redis; throwaway data dir"
        )
        script = Path(stack.tmp) / "silent_rank.py"
        script.write_text(RANK)
        slow = Path(stack.tmp) / "slow_start_rank.py"
        slow.write_text(SLOW_START_RANK)
        jobs = {}
        startup_job = None
        if args.startup > 0:
            startup_job = stack.submit(
                "hang-then-slow-start",
                "--job-execution-mode=Sync --enable-job-restart=True "
                "--max-num-of-job-restart=3 --enable-job-hang-detection=True --job-hang-interval=6",
                f"exec {PYTHON} {slow}",
                {"STARTUP_SECONDS": str(args.startup)},
                roles=(("Master", 1), ("Worker", 1)),
            )
        for interval in intervals:
            flags = (
                "--job-execution-mode=Sync --enable-job-restart=True --max-num-of-job-restart=3 "
                f"--enable-job-hang-detection=True --job-hang-interval={interval}"
            )
            jobs[interval] = stack.submit(
                f"hang-{interval}s", flags, f"exec {PYTHON} {script}", {}, roles=(("Master", 1), ("Worker", 1))
            )
        print(
            f"  jobs: {', '.join(f'{i} s -> job {j.pk}' for i, j in jobs.items())}; 2 ranks each, "
            "10 lines in 1 s then silence\n"
        )
        watched = list(jobs.values()) + ([startup_job] if startup_job else [])
        wait_until(
            lambda: all(
                Job.objects.get(pk=j.pk).status in (JobStatus.FAILED, JobStatus.SUCCEEDED, JobStatus.STOPPED)
                for j in watched
            ),
            args.timeout + args.startup,
            0.5,
        )
        all_late = []
        for interval, job in jobs.items():
            job.refresh_from_db()
            samples = []
            for ev in JobEvent.objects.filter(job=job, type=EventType.HANG).order_by("attempt"):
                handle = Attempt.objects.get(job=job, number=ev.attempt).backend_handle
                outs = [last_output(Path(handle["dir"]) / i["name"] / "output.log") for i in handle["instances"]]
                outs = [o for o in outs if o is not None]
                if not outs:
                    continue
                late = ev.created_at.timestamp() - (max(outs) + interval)
                samples.append(late)
                print(
                    f"  interval {interval:>2} s  attempt {ev.attempt}: hang flagged {late:+.3f} s after the interval"
                )
            all_late += samples
            if samples:
                print(
                    f"  interval {interval:>2} s  -> n={len(samples)} median {statistics.median(samples):+.3f} s "
                    f"max {max(samples):+.3f} s; job {job.status}: {job.reason[:120]}\n"
                )
            else:
                print(f"  interval {interval:>2} s  -> no hang flagged; job {job.status}: {job.reason[:160]}\n")
        if all_late:
            worst = max(all_late)
            print(
                f"all: n={len(all_late)} median {statistics.median(all_late):+.3f} s, worst {worst:+.3f} s "
                f"(target within 1 s: {'MET' if 0 <= worst <= 1.0 else 'MISSED'})"
            )
        if startup_job is not None:
            startup_job.refresh_from_db()
            hangs = list(
                JobEvent.objects.filter(job=startup_job, type=EventType.HANG).values_list("attempt", flat=True)
            )
            ok = startup_job.status == JobStatus.SUCCEEDED and startup_job.current_attempt == 2 and hangs == [1]
            print(
                f"\nstart-up scenario (interval 6 s, attempt 2 silent for {args.startup:g} s at start): job "
                f"{startup_job.pk} {startup_job.status} on attempt {startup_job.current_attempt}, hangs flagged in "
                f"attempts {hangs or 'none'}, restarts {startup_job.restart_count} "
                f"(target: one restart, Succeeded on attempt 2: {'MET' if ok else 'MISSED'})"
            )
    finally:
        stack.close()


if __name__ == "__main__":
    main()
