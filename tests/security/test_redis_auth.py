"""`make run`'s private Redis asks for a password that jobs never get (issue 31, finding 5).

Jobs on this machine reach the private Redis's loopback port, and it carries the exit
channel and Celery's queues: without a password any job could read and write them."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from urllib.parse import unquote, urlsplit

import pytest
import redis

from console.devredis import PASSWORD_FILE, PrivateRedis, stored_password
from jobs.tests.test_local_backend import attempt, backends  # noqa: F401  (the fixture)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Run by `python -m console.devredis -- python -c PROBE`, as honcho's processes are by `make run`.
PROBE = textwrap.dedent(
    """
    import json, os, socket
    from urllib.parse import unquote, urlsplit
    import redis
    url = os.environ["REDIS_URL"]
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=5) as s:
        s.sendall(b"*1\\r\\n$4\\r\\nPING\\r\\n")
        anonymous = s.recv(200).decode()
    password = unquote(parts.password or "")
    shown = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if password and password.encode() in f.read():
                    shown.append(pid)
        except OSError:
            pass
    print(json.dumps({"url": url, "anonymous": anonymous, "with_password": redis.Redis.from_url(url).ping(),
                      "argv_showing_it": shown}))
    """
)


def run_under_devredis(data_dir) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env["VIGIL_DATA_DIR"] = str(data_dir)
    out = subprocess.run(
        [sys.executable, "-m", "console.devredis", "--", sys.executable, "-c", PROBE],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "password in" in out.stderr and unquote(urlsplit(json.loads(out.stdout)["url"]).password) not in out.stderr
    return json.loads(out.stdout)


def test_make_runs_private_redis_refuses_clients_without_its_password(tmp_path):
    first = run_under_devredis(tmp_path)
    assert first["anonymous"].startswith("-NOAUTH"), first
    assert first["with_password"] is True
    assert first["argv_showing_it"] == []  # the password is in a 0600 config file, not argv
    path = tmp_path / PASSWORD_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    password = path.read_text().strip()
    assert unquote(urlsplit(first["url"]).password) == password
    # Created once: the next run uses the same password (the URL of a running console's
    # processes stays valid across a restart of the command).
    second = run_under_devredis(tmp_path)
    assert urlsplit(second["url"]).password == urlsplit(first["url"]).password
    assert second["anonymous"].startswith("-NOAUTH")


def test_the_password_file_is_made_the_consoles_alone(tmp_path):
    (tmp_path / PASSWORD_FILE).write_text("an-older-one\n")
    os.chmod(tmp_path / PASSWORD_FILE, 0o644)
    assert stored_password(str(tmp_path)) == "an-older-one"
    assert stat.S_IMODE((tmp_path / PASSWORD_FILE).stat().st_mode) == 0o600


@pytest.mark.redis
def test_a_job_never_sees_the_password_and_its_exit_is_still_announced(backends, monkeypatch, tmp_path):  # noqa: F811
    private = PrivateRedis(password="job-must-not-see-this").start()
    try:
        # The console's own environment holds the URL, as honcho's processes do.
        monkeypatch.setenv("REDIS_URL", private.url)
        monkeypatch.setenv("CELERY_BROKER_URL", private.url)
        backend = backends(redis_url=private.url)
        client = redis.Redis.from_url(private.url)
        pubsub = client.pubsub()
        pubsub.subscribe(backend.exit_channel)
        pubsub.get_message(timeout=1.0)
        # It looks once its shim holds the authenticated connection it will announce the
        # exit on (`go`): in every argv and environment it can read, and at its own files
        # (the pattern is not the password, so that grep's own argv and the probe's do not match).
        go = tmp_path / "go"
        probe = (
            f"while [ ! -e {go} ]; do sleep 0.02; done; env; echo ==== its shim;"
            " cat /proc/$PPID/environ 2>/dev/null | tr '\\0' '\\n';"
            " echo ==== showing it; grep -l 'job-must-not-see-thi[s]' /proc/[0-9]*/cmdline /proc/[0-9]*/environ 2>/dev/null;"
            " echo ==== its files; ls -l /proc/$$/fd; exit 3"
        )
        handle = backend.launch(attempt(probe, job_id="job-redis-auth"))
        shim_connection = "vigil-shim:job-redis-auth/1/worker-0"
        deadline = time.monotonic() + 10
        while not any(c.get("name") == shim_connection for c in client.client_list()):
            assert time.monotonic() < deadline, "the shim did not connect to the password-protected Redis"
            time.sleep(0.02)
        go.touch()
        message = None
        deadline = time.monotonic() + 10
        while message is None and time.monotonic() < deadline:
            message = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.5)
        pubsub.close()
        client.close()
        assert message is not None, "no exit announcement through the password-protected Redis"
        assert json.loads(message["data"])["exit_code"] == 3
        own, _, rest = backend.read_log(handle, "worker-0").decode().partition("==== its shim")
        shims, _, rest = rest.partition("==== showing it")
        showing, _, files = rest.partition("==== its files")
        assert "PATH=" in own and "->" in files  # the probe ran
        assert "job-must-not-see-this" not in own and "REDIS_URL" not in own and "CELERY_BROKER_URL" not in own
        assert showing.strip() == ""  # no argv, nor environment it can read, holds the password
        assert "socket:" not in files  # nor does it hold a connection to Redis
        if os.geteuid() == 0:
            # As root, jobs run as another user, and their shim's environment (root's, with
            # the console's) is unreadable to them.
            assert "job-must-not-see-this" not in shims
    finally:
        private.stop()
