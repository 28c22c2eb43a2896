"""Every benchmark in bench/ still starts (issue 28, point 2): each runs as a subprocess from
the repository root with the command its own docstring prints (read from the docstring, so
the docstring cannot rot), plus a short mode (`--quick` or small sizes, seconds each), and
must exit 0 and print every figure it prints in full, by label. Values are not checked:
these runs are far too short and the machine is shared; the full runs are for a quiet machine.

The environment is a person's shell, not the suite's: no DATABASE_URL or
DJANGO_SETTINGS_MODULE (the benches build their own throwaway databases and must never meet
the suite's), and no PYTHONPATH entry for the repository, so a bench that cannot find the
project's packages by itself (bench/_path.py) fails here as it fails in a fresh clone.

Marker `bench` (~3 min in all on 2 cores); deselect with `-m "not bench"`. bench/chaos.py is
run in its short mode by tests/test_chaos.py (marker `chaos`); here only its docstring's
command is checked to start (`--help`). Benches that need torch skip with the reason when it
is absent; node_loss.py starts the test Slurm cluster and skips with the reason where it cannot
run; none needs PostgreSQL by default (monitor_scale.py --postgres and
chaos.py's PostgreSQL pass are options)."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HAS_TORCH = importlib.util.find_spec("torch") is not None
NO_TORCH = "torch is not installed (.ci/run installs torch==2.13.0)"

# Each bench has its own timeout below (the bench is stopped by SIGTERM and its output shown);
# pytest-timeout is only the backstop.
pytestmark = [pytest.mark.bench, pytest.mark.timeout(420)]


@dataclass(frozen=True)
class Bench:
    short: tuple[str, ...]  # appended to the docstring's command (argparse: the last one wins)
    labels: tuple[str, ...]  # printed by the full run as by the short one
    torch: bool = False
    torch_labels: tuple[str, ...] = ()  # printed only where torch is installed
    # The exit status says whether the targets were met: 1 with every figure printed and no
    # traceback is a figure, not a failure to start.
    exit_is_verdict: bool = False
    timeout: float = 150.0
    slurm: bool = False  # starts the test Slurm cluster (root, slurm-wlm, munge)


BENCHES = {
    "classify_corpus.py": Bench(
        short=("--repeat", "2"),
        labels=(
            "overall agreement:",
            "held-back agreement:",
            "false-retryable:",
            "scored by the policy's decision",
            "confusion (rows",
            "per family",
            "misses:",
            "ms per MiB of corpus log",
            "64 KiB tail of corpus text:",
            "targets scored by the first verdict:",
            "targets scored by the policy's decision:",
        ),
        exit_is_verdict=True,
    ),
    "decision_outcomes.py": Bench(
        short=("--quick",),
        labels=(
            "decision outcomes:",
            "machine:",
            "held back:",
            "scenario: rerun",
            "  whole ",
            "  training ",
            "  held back ",
            "  holdout ",
            "  batch 1 ",
            "torchrun: recovered",
            "targets on the held-back part:",
            "misses:",
            "targets ",
        ),
        exit_is_verdict=True,
    ),
    "stacks.py": Bench(
        short=("--repeat", "1", "--ddp-ranks", "2"),
        labels=(
            "1. py-spy dump of 8 hung plain-Python processes",
            "plain python: 8 processes, parallel=1: median",
            "plain python: 8 processes, parallel=4: median",
            "3. aggregation of 1,024 dumps",
            "aggregate_stacks: 1024 dumps",
            "StackSnapshot.of + summary_text: median",
        ),
        torch_labels=("2. py-spy dump of 2 hung DDP ranks", "DDP ranks: 2 processes, parallel=1: median"),
    ),
    "monitor_scale.py": Bench(
        short=("--sizes", "20", "--workers", "1", "--exits", "3", "--sweeps", "1", "--steady-seconds", "2"),
        labels=(
            "monitor sweep scale benchmark",
            "machine:",
            "database: sqlite",
            "first ",
            "steady sweep median",
            "scheduled checks late by",
            "quiet period by shard",
            "per job per round:",
            "decision latency p50",
            "fitted cost per job",
            "load average at end:",
        ),
    ),
    "log_stream.py": Bench(
        short=("--viewers", "2", "--rate", "200", "--seconds", "2", "--max-rate", "5000"),
        labels=(
            "Vigil log streaming benchmark",
            "machine:",
            "phase 1:",
            "latency  p50",
            "lines lost",
            "phase 2:",
            "5,000 lines/s: lost",
            "highest rate without loss:",
        ),
    ),
    "hang_detection.py": Bench(
        short=("--intervals", "2", "--startup", "3", "--timeout", "90"),
        labels=(
            "hang detection lateness",
            "machine:",
            "interval  2 s  attempt 1: hang flagged",
            "interval  2 s  -> n=",
            "all: n=",
            "start-up scenario (interval 6 s, attempt 2 silent for 3 s at start)",
        ),
    ),
    "exit_detection.py": Bench(
        short=("--quick",),  # its own short mode; before that existed, 50 exits (see short_args)
        labels=(
            "exit detection benchmark",
            "machine:",
            "vigil: exit on disk (exit.json)",
            "vigil: exit announced (Redis sub)",
            "polling every 100 ms",
            "announcements missing:",
            "target announced p99",
        ),
    ),
    "c4d_overhead.py": Bench(
        short=("--quick",),
        labels=(
            "c4d_overhead: examples/plain_ddp.py",
            "machine:",
            "round  1",
            "round  2",
            "baseline: median",
            "SDK imported: median",
            "no code change: median",
            "SDK calls received by endpoint:",
            "target each path at most 2 % slower:",
        ),
        torch=True,
    ),
    "restart_latency.py": Bench(
        short=("--quick", "--timeout", "40"),
        labels=(
            "restart latency: SIGKILL of rank 1 at step 10",
            "machine:",
            "run 1 Vigil  ",
            "run 1 Vigil warm",
            "run 1 torchrun (shared store)",
            "run 1 torchrun (fresh store)",
            "fault -> all ranks of the new attempt training:",
            "replica groups",  # its run, or why it was skipped (torchft not installed)
            "goodput lost per fault (rank-seconds",
            "load average at the end:",
        ),
        torch=True,
        timeout=300.0,
    ),
}
BENCHES["node_loss.py"] = Bench(
    short=("--quick",),
    labels=(
        "node loss: a three-node job",
        "machine:",
        "slurm: slurm-wlm",
        "run 1 Vigil  : n3 down",
        "run 1 Slurm requeue: n3 down",
        "node death -> n3 DOWN in Slurm: median",
        "node death -> Vigil's restart decision: median",
        "node death -> training again: Vigil median",
        "load average at the end:",
    ),
    slurm=True,
    timeout=240.0,
)
ELSEWHERE = {"chaos.py": "tests/test_chaos.py runs bench/chaos.py --quick"}


def docstring_command(script: Path) -> tuple[str, list[str]]:
    """The interpreter and arguments of the first `python bench/<script>` command in the
    script's docstring; the optional `[--flag N]` parts and `# comments` are left out."""
    doc = ast.get_docstring(ast.parse(script.read_text())) or ""
    found = re.search(rf"(\S*python)\s+bench/{re.escape(script.name)}\b(.*)$", doc, re.M)
    assert found, f"{script.name}: its docstring prints no `.venv/bin/python bench/{script.name}` command"
    args = []
    for token in shlex.split(found.group(2), comments=True):
        if token.startswith("["):
            break
        args.append(token)
    return found.group(1), args


def shell_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")}
    env.pop("VIGIL_DATA_DIR", None)
    paths = [p for p in env.pop("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != ROOT]
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def run(args: list[str], timeout: float, env: dict[str, str]) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # SIGTERM: the benches stop what they started on it (their own cleanup).
        proc.terminate()
        out, _ = proc.communicate(timeout=60)
        pytest.fail(f"{args[0]} did not finish within {timeout:.0f} s:\n{out[-6000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def short_args(name: str, bench: Bench, env: dict[str, str]) -> list[str]:
    short = list(bench.short)
    if name == "exit_detection.py":
        helptext = run([f"bench/{name}", "--help"], 60, env).stdout
        if "--quick" not in helptext:
            short = ["--exits", "50"]
    return short


@pytest.fixture(scope="module")
def redis_url():
    """exit_detection.py subscribes to a Redis: the suite's (REDIS_URL), else one of its own."""
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
        return
    from console.devredis import PrivateRedis

    server = PrivateRedis().start()
    try:
        yield server.url
    finally:
        server.stop()


def test_every_bench_is_run_here_or_named_elsewhere():
    scripts = {p.name for p in (ROOT / "bench").glob("*.py") if not p.name.startswith("_")}
    assert scripts == set(BENCHES) | set(ELSEWHERE), "add the new bench to BENCHES with its short mode and labels"


@pytest.mark.parametrize("name", sorted(ELSEWHERE))
def test_bench_run_elsewhere_starts_with_its_docstring_command(name):
    python, args = docstring_command(ROOT / "bench" / name)
    assert python == ".venv/bin/python"
    done = run([f"bench/{name}", *args, "--help"], 60, shell_env())
    assert done.returncode == 0 and "usage:" in done.stdout, done.stdout[-4000:]


@pytest.mark.parametrize("name", sorted(BENCHES))
def test_bench_runs_from_the_repository_root_with_its_docstring_command_in_short_mode(name, redis_url):
    bench = BENCHES[name]
    if bench.torch and not HAS_TORCH:
        pytest.skip(f"{name} needs torch: {NO_TORCH}")
    if bench.slurm:
        from jobs.tests.slurm_cluster import why_cluster_cannot_run

        if why_cluster_cannot_run():
            pytest.skip(f"{name} needs the test Slurm cluster: {why_cluster_cannot_run()}")
    python, args = docstring_command(ROOT / "bench" / name)
    # The README's venv; the suite's interpreter is that venv in CI (and the shared one in a
    # worktree, whose checkout has no .venv of its own).
    assert python == ".venv/bin/python", f"{name}: its docstring runs it with {python}"
    env = shell_env()
    extra = ["--redis", redis_url] if name == "exit_detection.py" else []
    done = run([f"bench/{name}", *args, *short_args(name, bench, env), *extra], bench.timeout, env)
    out = done.stdout
    tail = f"\n--- {name} printed (last 6000 characters):\n{out[-6000:]}"
    # A crash exits 1 too: a verdict's 1 counts only without a traceback. (Other benches may
    # relay a peer's traceback, e.g. torchrun's shared store failing to restart, as a figure.)
    verdict = bench.exit_is_verdict and done.returncode == 1 and "Traceback (most recent call last)" not in out
    assert done.returncode == 0 or verdict, f"{name} exited {done.returncode}{tail}"
    labels = bench.labels + (bench.torch_labels if HAS_TORCH else ())
    missing = [label for label in labels if label not in out]
    assert not missing, f"{name} did not print {missing}{tail}"
