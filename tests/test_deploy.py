"""docs/deploy.md's production layout, run for real as far as one machine allows:
the systemd units' commands (web, two workers, beat, exit listener) against the
test database and a Redis with a password, behind nginx with the shipped config
(TLS with a throwaway certificate, WebSockets). A job that fails once is submitted
and followed with the `vigil` command line through nginx, and the workers, beat and
exit listener restart it without any help from the test.

What is not exercised: systemd itself (no init here; the units are checked with
`systemd-analyze verify`), users and file permissions, several machines."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from testsupport.jobs import let_jobs_reach
from testsupport.processes import unit_commands
from testsupport.monitor import subprocess_database_url
from testsupport.ports import free_port

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
UNITS = [
    "vigil-web.service",
    "vigil-worker@.service",
    "vigil-beat.service",
    "vigil-exits.service",
    "vigil-decide.service",
]


def env_example() -> dict[str, str]:
    out = {}
    for line in (DEPLOY / "vigil.env.example").read_text().splitlines():
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            out[key] = value
    return out


def test_the_systemd_units_pass_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    names = []
    for name in UNITS:
        text = (DEPLOY / "systemd" / name).read_text().replace("/opt/vigil", str(ROOT))
        target = tmp_path / name.replace("@.", "@1.")
        target.write_text(text)
        names.append(str(target))
    r = subprocess.run([analyze, "verify", "--man=no", *names], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout + r.stderr) == (0, "")


def test_every_setting_the_example_env_names_is_read_by_the_settings():
    settings_text = "".join(
        (ROOT / path).read_text()
        for path in (
            "console/settings.py",
            "deploy/systemd/vigil-worker@.service",
            "deploy/systemd/vigil-decide.service",
        )
    )
    names = set(env_example()) | set(re.findall(r"^# (\w+)=", (DEPLOY / "vigil.env.example").read_text(), re.M))
    assert names and all(name in settings_text for name in names), names - {n for n in names if n in settings_text}


class Processes:
    """Every process this test starts, stopped by its PID (process group) at the end."""

    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path
        self.procs: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        out = open(self.tmp_path / f"{name}.log", "ab")
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        self.procs.append((name, proc))
        return proc

    def log(self, name: str) -> str:
        return (self.tmp_path / f"{name}.log").read_text(errors="replace")

    def check_alive(self) -> None:
        for name, proc in self.procs:
            assert proc.poll() is None, f"{name} exited with {proc.returncode}:\n{self.log(name)[-3000:]}"

    def stop_all(self) -> None:
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for _, proc in reversed(self.procs):
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)


def wait_for(predicate, seconds: float, what: str, procs: Processes, every: float = 0.25):
    deadline = time.monotonic() + seconds
    last = None
    while time.monotonic() < deadline:
        procs.check_alive()
        try:
            last = predicate()
        except (OSError, urllib.error.URLError) as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(every)
    raise AssertionError(f"no {what} within {seconds} s (last: {last!r})")


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def nginx_config(tmp_path: Path, web_port: int, http_port: int, https_port: int, cert: Path, key: Path) -> Path:
    """The shipped config with only ports, certificate paths and the include path changed."""
    site = (DEPLOY / "nginx" / "vigil.conf").read_text()
    replacements = [
        ("server 127.0.0.1:8000;", f"server 127.0.0.1:{web_port};"),
        ("    listen [::]:80;\n", ""),
        ("    listen [::]:443 ssl http2;\n", ""),
        ("listen 80;", f"listen 127.0.0.1:{http_port};"),
        ("listen 443 ssl http2;", f"listen 127.0.0.1:{https_port} ssl http2;"),
        ("/etc/ssl/vigil/fullchain.pem", str(cert)),
        ("/etc/ssl/vigil/privkey.pem", str(key)),
        ("/etc/nginx/snippets/vigil-locations.conf", str(DEPLOY / "nginx" / "vigil-locations.conf")),
    ]
    for old, new in replacements:
        assert old in site, old
        site = site.replace(old, new)
    (tmp_path / "vigil.conf").write_text(site)
    main = tmp_path / "nginx.conf"
    main.write_text(
        textwrap.dedent(f"""\
        worker_processes 1;
        pid {tmp_path}/nginx.pid;
        error_log {tmp_path}/nginx-error.log warn;
        events {{ worker_connections 256; }}
        http {{
            access_log {tmp_path}/nginx-access.log;
            client_body_temp_path {tmp_path}/body;
            proxy_temp_path {tmp_path}/proxy;
            fastcgi_temp_path {tmp_path}/fastcgi;
            uwsgi_temp_path {tmp_path}/uwsgi;
            scgi_temp_path {tmp_path}/scgi;
            include {tmp_path}/vigil.conf;
        }}
        """)
    )
    return main


def websocket_handshake(port: int, path: str, cookie: str | None, context: ssl.SSLContext) -> str:
    """The status line nginx relays for a WebSocket upgrade over TLS."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as s:
            lines = [
                f"GET {path} HTTP/1.1",
                f"Host: 127.0.0.1:{port}",
                "Upgrade: websocket",
                "Connection: Upgrade",
                "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
                "Sec-WebSocket-Version: 13",
                f"Origin: https://127.0.0.1:{port}",
            ]
            if cookie:
                lines.append(f"Cookie: sessionid={cookie}")
            s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
            return s.recv(4096).decode(errors="replace").split("\r\n", 1)[0]


FAIL_ONCE = """
    import os, sys, time
    attempt = os.environ["VIGIL_ATTEMPT"]
    for step in range(3):
        print(f"attempt {attempt} step {step}", flush=True)
        time.sleep(0.5)
    # Attempt 1 fails only once the test's follower has shown its lines (GO exists), so
    # the follower always starts on attempt 1, however slowly it starts on a loaded machine.
    deadline = time.monotonic() + 60
    while attempt == "1" and not os.path.exists(os.environ["GO"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    sys.exit(1 if attempt == "1" else 0)
"""


@pytest.mark.timeout(240)
@pytest.mark.skipif(NGINX is None, reason="nginx is not installed (apt-get install nginx-light)")
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not installed")
def test_the_production_layout_serves_follows_and_restarts_a_job_behind_nginx(
    tmp_path, settings, alice, alice_ws, client
):
    from jobs.models import ApiToken

    procs = Processes(tmp_path)
    try:
        # Redis with a password, nothing on disk.
        redis_port, password = free_port(), "s3cret-redis-password"
        procs.start(
            "redis",
            [
                "redis-server",
                "--bind",
                "127.0.0.1",
                "--port",
                str(redis_port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--requirepass",
                password,
            ],
            dict(os.environ),
        )
        web_port, http_port, https_port = free_port(), free_port(), free_port()
        base = f"https://127.0.0.1:{https_port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VIGIL_", "REDIS_", "CELERY_"))}
        env.update(env_example())
        env.update(
            {
                "SECRET_KEY": settings.SECRET_KEY,  # the test's sessions must be valid in the web process
                "ALLOWED_HOSTS": "127.0.0.1,localhost",
                "CSRF_TRUSTED_ORIGINS": base,
                "DATABASE_URL": subprocess_database_url(),
                "REDIS_URL": f"redis://:{password}@127.0.0.1:{redis_port}/0",
                "VIGIL_DATA_DIR": str(tmp_path / "data"),
                "VIGIL_CONSOLE_URL": base,
                "VIGIL_WORKER_CONCURRENCY": "2",
                "VIGIL_LOG_FORMAT": "plain",
                "PATH": os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""),
            }
        )
        (tmp_path / "data").mkdir()
        let_jobs_reach(tmp_path)  # run as root here, the workers run each job as nobody

        def argv(command: str, **subs: str) -> list[str]:
            # systemd's specifiers: %i the instance, %H the host name
            command = command.replace("/opt/vigil", str(ROOT)).replace("%H", socket.gethostname())
            command = command.replace("${VIGIL_WORKER_CONCURRENCY}", env["VIGIL_WORKER_CONCURRENCY"])
            command = command.replace("${VIGIL_DECIDERS}", env_example()["VIGIL_DECIDERS"])
            for old, new in subs.items():
                command = command.replace(old, new)
            return shlex.split(command)

        for pre in unit_commands("vigil-web.service", "ExecStartPre"):
            subprocess.run(argv(pre), cwd=ROOT, env=env, check=True, timeout=120)
        [web] = unit_commands("vigil-web.service", "ExecStart")
        procs.start("web", argv(web, **{"-p 8000": f"-p {web_port}"}), env)
        [worker] = unit_commands("vigil-worker@.service", "ExecStart")
        for i in ("1", "2"):
            procs.start(f"worker{i}", argv(worker, **{"%i": i, "/var/lib/vigil": str(tmp_path / "data")}), env)
        [beat] = unit_commands("vigil-beat.service", "ExecStart")
        procs.start("beat", argv(beat, **{"/var/lib/vigil": str(tmp_path / "data")}), env)
        [exits] = unit_commands("vigil-exits.service", "ExecStart")
        procs.start("exits", argv(exits), env)
        [decide] = unit_commands("vigil-decide.service", "ExecStart")
        procs.start("decide", argv(decide), env)

        cert, key = self_signed(tmp_path)
        conf = nginx_config(tmp_path, web_port, http_port, https_port, cert, key)
        procs.start(
            "nginx",
            [NGINX, "-p", str(tmp_path), "-c", str(conf), "-e", str(tmp_path / "nginx-error.log"), "-g", "daemon off;"],
            dict(os.environ),
        )
        tls = ssl.create_default_context(cafile=str(cert))

        def get(path, **headers):
            req = urllib.request.Request(base + path, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=10, context=tls) as r:
                    return r.status, r.read()
            except urllib.error.HTTPError as exc:
                return exc.code, exc.read()

        # Ready: database, the password Redis, the two workers and the decider fresh, the beat's
        # sweeps, the exit listener.
        def ready_with_both_workers():
            status, raw = get("/readyz")
            if status != 200:  # 502 from nginx until daphne listens, 503 until every part is up
                return None
            body = json.loads(raw)
            return body if body["checks"]["worker"]["detail"] == "3 of 3 worker(s) fresh" else None

        body = wait_for(ready_with_both_workers, 90, "a ready console with both workers, through nginx", procs)
        assert {c["state"] for c in body["checks"].values()} == {"ok"}

        # Plain HTTP is sent to HTTPS.
        conn = socket.create_connection(("127.0.0.1", http_port), timeout=5)
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        answer = conn.recv(4096).decode()
        conn.close()
        assert answer.startswith("HTTP/1.1 301") and "Location: https://127.0.0.1/healthz" in answer

        # WebSockets pass through nginx to Channels: a session gets 101, no session 403 (from Channels).
        client.force_login(alice)
        session = client.cookies["sessionid"].value
        assert (
            websocket_handshake(https_port, f"/ws/workspaces/{alice_ws.slug}/", session, tls)
            == "HTTP/1.1 101 Switching Protocols"
        )
        assert websocket_handshake(https_port, f"/ws/workspaces/{alice_ws.slug}/", None, tls).startswith("HTTP/1.1 403")

        # A job that fails once, submitted and followed with the CLI through nginx; the
        # workers, the beat and the exit listener restart it on their own.
        script = tmp_path / "train.py"
        script.write_text(textwrap.dedent(FAIL_ONCE))
        job = tmp_path / "job.json"
        job.write_text(
            json.dumps(
                {
                    "workspace": alice_ws.slug,
                    "display_name": "behind-nginx",
                    "job_type": "PyTorchJob",
                    "job_specs": [{"type": "Master", "pod_count": 1}, {"type": "Worker", "pod_count": 1}],
                    "user_command": f"{sys.executable} {script}",
                    "backend": "local",
                    "envs": {"GO": str(tmp_path / "go")},
                    "settings": {
                        "enable_error_monitoring_in_aimaster": True,
                        "error_monitoring_args": "--job-execution-mode=Sync --enable-job-restart=True --fault-tolerant-policy=OnFailure",
                    },
                }
            )
        )
        token = ApiToken.issue(alice, name="deploy")[1]
        cli_env = {k: v for k, v in os.environ.items() if not k.startswith("VIGIL_")}
        cli_env.update(
            {
                "VIGIL_API_URL": base,
                "VIGIL_API_TOKEN": token,
                "SSL_CERT_FILE": str(cert),
                "PYTHONPATH": str(ROOT / "sdk" / "src"),
                "XDG_CONFIG_HOME": str(tmp_path / "config"),
            }
        )

        def vigil(*args, timeout=120):
            return subprocess.run(
                [sys.executable, "-m", "vigil.cli", *map(str, args)],
                env=cli_env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )

        import redis

        # The instances' exit announcements reach the password Redis (the shim AUTHs).
        exits = redis.Redis.from_url(env["REDIS_URL"]).pubsub(ignore_subscribe_messages=True)
        exits.subscribe("vigil:instance-exit")
        r = vigil("submit", job, "--json")
        assert r.returncode == 0, r.stderr + procs.log("web")[-2000:]
        job_id = json.loads(r.stdout)["id"]
        follower = subprocess.Popen(
            [sys.executable, "-m", "vigil.cli", "logs", str(job_id), "-f", "--interval", "0.2", "--timeout", "90"],
            env=cli_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            shown: list[str] = []
            while not shown or shown[-1] != "attempt 1 step 2":
                line = follower.stdout.readline()
                assert line, f"the follower ended before attempt 1's last step: {shown} {follower.stderr.read()}"
                shown.append(line.rstrip("\n"))
            (tmp_path / "go").touch()
            rest, err = follower.communicate(timeout=120)
            assert follower.returncode == 0, err
        finally:
            if follower.poll() is None:
                os.killpg(follower.pid, signal.SIGKILL)
                follower.wait()
        lines = shown + rest.splitlines()
        assert lines[:3] == ["attempt 1 step 0", "attempt 1 step 1", "attempt 1 step 2"], r.stdout
        assert lines[4].startswith(f"==== attempt 2 of job {job_id} (restart: ")
        assert lines[5:] == ["attempt 2 step 0", "attempt 2 step 1", "attempt 2 step 2"], r.stdout
        announced = []
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:  # None is also the (ignored) subscription notice
            message = exits.get_message(timeout=0.2)
            if message is not None:
                announced.append(json.loads(message["data"]))
        exits.close()
        assert [str(a["job_id"]) for a in announced].count(str(job_id)) >= 4, announced  # 2 ranks x 2 attempts
        status = json.loads(vigil("status", job_id, "--json").stdout)
        assert (status["status"], status["restart_count"]) == ("Succeeded", 1)
        # The restart decision, logged once by whichever worker made it.
        decisions = [
            ln for n in ("worker1", "worker2", "decide") for ln in procs.log(n).splitlines() if "vigil.decisions" in ln
        ]
        assert len(decisions) == 1 and f"job {job_id} attempt 1 restart:" in decisions[0], decisions
    finally:
        procs.stop_all()
