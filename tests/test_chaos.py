"""The chaos suite's CI subset (issue 20): `bench/chaos.py --quick` starts its own console
(daphne, `celery worker --beat`, `listen_exits`, a private redis-server, a temporary data
dir with its SQLite database), kills the worker mid-job and SIGSTOPs Redis under real
2-rank jobs submitted through the REST API, and checks the invariants after each. Every
row of its report must hold. On the suite's PostgreSQL pass (DATABASE_URL) the subset
runs on PostgreSQL instead, in a database of its own. Deselect with `-m "not chaos"`;
`make chaos` runs the full suite."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
QUICK = {"worker-kill", "redis-stop"}

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="the chaos suite needs redis-server on PATH"),
]


def database_args() -> tuple[str, list[str]]:
    """SQLite; on the suite's PostgreSQL pass (DATABASE_URL), PostgreSQL in a database of the
    suite's own beside the test database (<name>_chaos, dropped and created again)."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        return "sqlite", ["--db", "sqlite"]
    parts = urlsplit(url)
    name = re.sub(r"\W", "_", parts.path.lstrip("/") or "vigil") + "_chaos"
    return "postgres", ["--db", "postgres", "--pg-url", urlunsplit(parts._replace(path=f"/{name}"))]


def test_quick_chaos_subset_holds(tmp_path):
    report = tmp_path / "chaos.json"
    db, args = database_args()
    # The suite cuts itself off after --timeout and stops everything it started; SIGTERM
    # (which it handles the same way) is the last resort.
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "bench" / "chaos.py"),
            "--quick",
            *args,
            "--timeout",
            "200",
            "--report",
            str(report),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, _ = proc.communicate(timeout=260)
    except subprocess.TimeoutExpired:
        proc.terminate()
        stdout, _ = proc.communicate(timeout=120)
    out = stdout[-8000:]
    rows = json.loads(report.read_text())
    assert {(r["db"], r["experiment"]) for r in rows} == {(db, name) for name in QUICK}, out
    failed = [
        f"{r['experiment']}: " + "; ".join(f"{c}: {e}" for c, ok, e in r["checks"] if not ok)
        for r in rows
        if not r["held"]
    ]
    assert not failed, "\n".join(failed) + "\n" + out
    for row in rows:  # each row checked something: the job's outcome at least
        assert any(check == "status" and ok for check, ok, _ in row["checks"]), row
    assert proc.returncode == 0, out
