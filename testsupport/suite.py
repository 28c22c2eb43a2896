"""`make test`: the whole suite as two pytest processes at once, each with its own Redis
and its own test database.

    python -m testsupport.suite [pytest arguments]

Most of the suite's time is spent waiting on real things (processes starting, a browser,
a monitor tick), not computing, so two sessions side by side finish in a little more than
half the time of one on two cores. They share nothing that a test writes: each runs under
`console.devredis` (a private Redis, so per-job keys, leases and channels never meet),
SQLite's test database is named by the process id already, and on PostgreSQL each shard's
DATABASE_URL gets its own database name (pytest-django creates `test_<name>`).

The first shard takes the test directories and files listed in FIRST (the monitor and the
pure core, whose real DDP jobs are the longest tests, and enough of the rest to match the
second, which holds the Slurm clusters and the browser); the second takes every other
directory in pytest.ini's `testpaths`, less FIRST's files, so a directory added there is
never left out.

Run as one session instead, exactly as before, when the arguments name tests (a path or
a node id), when REDIS_URL is set (one Redis the two would share), or with
VIGIL_TEST_SHARDS=1. Each shard's output streams with its number in front; the exit code
is the first failing shard's (5, no tests collected, counts as a failure).
"""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

REPO = Path(__file__).resolve().parents[1]
# Directories of pytest.ini's testpaths, and single files from the others (which the second
# shard then --ignore's). Balanced on a PostgreSQL pass's --durations: 938 s against 1089 s
# of tests before console, sdk/tests and the chaos run (86 s) came over; console (about 40 s
# alone) and notifications (about 50 s) went back when the every-page browser test of the
# second shard dropped from 198 s to 82 s (the fresh-clone PostgreSQL pass had been 14:38
# against 14:12, each near its 15 minutes).
FIRST = ("monitoring", "core", "sdk/tests", "tests/test_chaos.py")


def testpaths() -> list[str]:
    ini = configparser.ConfigParser()
    ini.read(REPO / "pytest.ini")
    return ini.get("pytest", "testpaths").split()


def shards(paths: list[str]) -> list[list[str]]:
    """The two shards' pytest paths: FIRST's, and every other test path with FIRST's files
    under it ignored, so that no test runs twice and none is left out."""
    rest = [p for p in paths if p not in FIRST]
    moved = [f for f in FIRST if f not in paths and any(f.startswith(p.rstrip("/") + "/") for p in rest)]
    first = [p for p in paths if p in FIRST] + moved
    if rest:
        rest += [f"--ignore={f}" for f in moved]
    return [s for s in (first, rest) if s]


def names_tests(args: list[str]) -> bool:
    """Whether the arguments choose tests themselves (then they are run as given)."""
    return any(not a.startswith("-") and (REPO / a.split("::", 1)[0]).exists() for a in args)


def database_url_for(url: str, shard: int) -> str:
    """DATABASE_URL with its database name suffixed by the shard: vigil -> vigil_s1."""
    if not url or url.startswith("sqlite"):
        return url
    parts = urlsplit(url)
    name = parts.path.lstrip("/") or "vigil"
    return urlunsplit(parts._replace(path=f"/{name}_s{shard}"))


def _pytest(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "console.devredis", "--", sys.executable, "-m", "pytest", *args]


def _stream(proc: subprocess.Popen, prefix: str, out, lock: threading.Lock) -> None:
    assert proc.stdout is not None  # started with stdout=PIPE
    for line in proc.stdout:
        with lock:
            out.write(prefix + line)
            out.flush()


def run_sharded(args: list[str]) -> int:
    lock = threading.Lock()
    started = time.monotonic()
    running = []
    for number, paths in enumerate(shards(testpaths()), start=1):
        env = dict(os.environ)
        env.pop("REDIS_URL", None)
        env["DATABASE_URL"] = database_url_for(os.environ.get("DATABASE_URL", ""), number)
        if not env["DATABASE_URL"]:
            env.pop("DATABASE_URL")
        print(f"[{number}] pytest {' '.join(args + paths)}", flush=True)
        proc = subprocess.Popen(
            _pytest(args + paths),
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        reader = threading.Thread(target=_stream, args=(proc, f"[{number}] ", sys.stdout, lock), daemon=True)
        reader.start()
        running.append((number, paths, proc, reader))
    codes = []
    for number, paths, proc, reader in running:
        try:
            code = proc.wait()
        except KeyboardInterrupt:
            for _, _, other, _ in running:
                other.terminate()
            raise
        reader.join()
        codes.append(code)
        print(f"[{number}] {' '.join(paths)}: exit {code}", flush=True)
    minutes, seconds = divmod(int(time.monotonic() - started), 60)
    failed = next((c for c in codes if c != 0), 0)
    print(
        f"suite: {len(codes)} shards, {'all passed' if not failed else f'exit {failed}'} in {minutes}:{seconds:02d}",
        flush=True,
    )
    return failed


def main(args: list[str]) -> int:
    if names_tests(args) or os.environ.get("REDIS_URL") or os.environ.get("VIGIL_TEST_SHARDS") == "1":
        return subprocess.call(_pytest(args), cwd=REPO)
    return run_sharded(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
