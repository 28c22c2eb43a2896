"""The `vigil` command line, installed from sdk/ the way a user installs it (pip,
console script), run as a subprocess against a live console (pytest-django's
live_server) with real jobs on the real local backend. The test ticks the monitor
as the sweep would while the command runs."""

from __future__ import annotations

import json
import os
import queue
import shutil
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from monitoring import tick
from testsupport.monitor import finished, tick_until

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
RESTART_ON_FAILURE = "--job-execution-mode=Sync --enable-job-restart=True --fault-tolerant-policy=OnFailure"


@pytest.fixture(scope="session")
def installed(tmp_path_factory):
    """`pip install ./sdk` into a private target: the console script and both packages."""
    base = tmp_path_factory.mktemp("vigil-install")
    source = base / "sdk"
    shutil.copytree(ROOT / "sdk", source, ignore=shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__"))
    target = base / "site"
    subprocess.run(
        [
            PY,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(target),
            str(source),
        ],
        check=True,
        timeout=120,
    )
    return target


@pytest.fixture
def home(tmp_path):
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def cli(installed, home):
    """cli(*args) -> CompletedProcess of the installed `vigil` script."""

    def env(extra=None):
        base = {k: v for k, v in os.environ.items() if not k.startswith("VIGIL_")}
        base.update({"PYTHONPATH": str(installed), "XDG_CONFIG_HOME": str(home / ".config"), "HOME": str(home)})
        base.update(extra or {})
        return base

    def run(*args, stdin=None, extra_env=None, timeout=60):
        return subprocess.run(
            [str(installed / "bin" / "vigil"), *map(str, args)],
            input=stdin,
            text=True,
            capture_output=True,
            env=env(extra_env),
            timeout=timeout,
        )

    def start(*args, extra_env=None):
        return subprocess.Popen(
            [str(installed / "bin" / "vigil"), *map(str, args)],
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env(extra_env),
        )

    run.start = start
    return run


@pytest.fixture
def console(live_server, settings):
    settings.VIGIL_CONSOLE_URL = live_server.url
    return live_server.url


@pytest.fixture
def token(alice, alice_ws):
    from jobs.models import ApiToken

    return ApiToken.issue(alice, name="cli")[1]


@pytest.fixture
def logged_in(cli, console, token):
    r = cli("login", "--url", console, stdin=token + "\n")
    assert r.returncode == 0, r.stderr
    return cli


def job_file(tmp_path: Path, command: str, flags: str | None = None, name: str = "cli-job", **envs) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        workspace: alice-lab
        display_name: {name}
        job_type: PyTorchJob
        job_specs:
          - type: Master
            pod_count: 1
        user_command: {json.dumps(command)}
        backend: local
        envs: {json.dumps(envs)}
        settings:
          enable_error_monitoring_in_aimaster: {json.dumps(flags is not None)}
          error_monitoring_args: {json.dumps(flags or "")}
        """)
    )
    return path


def submitted(cli, path, *more) -> int:
    r = cli("submit", path, "--json", *more)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["id"]


def job(job_id):
    from jobs.models import Job

    return Job.objects.get(pk=job_id)


class Reader:
    """Collects a running command's stdout lines in a thread, so the test can tick
    the monitor while it waits for a line."""

    def __init__(self, proc):
        self.proc = proc
        self.lines: list[str] = []
        self._q: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            self._q.put(line)
        self._q.put(None)

    def wait_for(self, text: str, job_id: int, seconds: float = 30.0) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            tick.run_job(job_id)
            try:
                while True:
                    line = self._q.get(timeout=0.1)
                    if line is None:
                        raise AssertionError(f"the command ended before printing {text!r}:\n{''.join(self.lines)}")
                    self.lines.append(line)
                    if text in line:
                        return
            except queue.Empty:
                pass
        raise AssertionError(f"no {text!r} within {seconds} s; printed so far:\n{''.join(self.lines)}")

    def finish(self, job_id: int, seconds: float = 30.0):
        deadline = time.monotonic() + seconds
        while self.proc.poll() is None and time.monotonic() < deadline:
            tick.run_job(job_id)
            time.sleep(0.1)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"the command did not end; printed:\n{''.join(self.lines)}")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            line = self._q.get(timeout=5)
            if line is None:
                break
            self.lines.append(line)
        return self.proc.returncode, "".join(self.lines), self.proc.stderr.read()


# --- installation and login ------------------------------------------------------------------


def test_pip_install_of_the_sdk_gives_the_vigil_command_and_both_packages(installed):
    assert os.access(installed / "bin" / "vigil", os.X_OK)
    assert (installed / "vigil" / "cli.py").exists() and (installed / "aimaster" / "job_monitor.py").exists()
    # The SDK's import stays free of the command line.
    probe = subprocess.run(
        [PY, "-c", "import sys, vigil, vigil.job_monitor; print('vigil.cli' in sys.modules)"],
        env={**os.environ, "PYTHONPATH": str(installed)},
        capture_output=True,
        text=True,
    )
    assert probe.stdout.strip() == "False", probe.stderr


def test_login_checks_the_token_then_stores_it_readable_only_by_the_user(cli, console, token, home):
    r = cli("login", "--url", console, stdin="vpt_not-a-real-token\n")
    assert r.returncode == 4 and "Invalid or revoked API token" in r.stderr
    config = home / ".config" / "vigil" / "config.json"
    assert not config.exists()

    r = cli("login", "--url", console + "/", stdin=token + "\n")
    assert r.returncode == 0, r.stderr
    assert "alice-lab" in r.stdout and str(config) in r.stdout
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert json.loads(config.read_text()) == {"url": console, "token": token}

    r = cli("ls", "--json")
    assert (r.returncode, json.loads(r.stdout)) == (0, [])


def test_without_login_or_console_the_exit_codes_say_which(cli, console, token):
    r = cli("ls")
    assert r.returncode == 4 and "vigil login" in r.stderr
    r = cli("ls", "--url", "http://127.0.0.1:9", "--token", token)
    assert r.returncode == 6 and "cannot reach the console" in r.stderr
    r = cli("status", "nope")
    assert r.returncode == 2


# --- submit, ls, status, logs -------------------------------------------------------------------


def test_submit_yaml_with_overrides_then_ls_status_and_logs(logged_in, tmp_path, local_backend):
    cli = logged_in
    path = job_file(tmp_path, f'{PY} -c \'import os; print("hello", os.environ["GREETING"])\'', GREETING="x")
    r = cli("submit", path, "--set", "display_name=greeter", "--set", "envs.GREETING=world")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Submitted job ") and "greeter" in r.stdout
    job_id = int(r.stdout.split()[2])

    tick_until(job(job_id), finished, backend=local_backend, what="finish")
    r = cli("status", job_id, "--wait", "--timeout", 30)
    assert r.returncode == 0, r.stderr
    assert "status:    Succeeded" in r.stdout and "master-0" in r.stdout

    listed = json.loads(cli("ls", "--json").stdout)
    assert [(j["id"], j["display_name"], j["status"]) for j in listed] == [(job_id, "greeter", "Succeeded")]
    table = cli("ls").stdout.splitlines()
    assert table[0].split()[:4] == ["ID", "NAME", "WORKSPACE", "STATUS"]
    assert table[1].split()[:5] == [str(job_id), "greeter", "alice-lab", "Succeeded", "0/3"]

    r = cli("logs", job_id)
    assert (r.returncode, r.stdout) == (0, "hello world\n")


def test_submit_prints_the_apis_field_messages_and_exits_3(logged_in, tmp_path):
    path = job_file(tmp_path, "true")
    r = logged_in("submit", path, "--set", "job_specs.0.pod_count=0", "--set", "job_type=NoSuchJob")
    assert r.returncode == 3
    assert r.stderr.splitlines() == [
        "vigil: the console refused the request (HTTP 400):",
        "  job_type: 'NoSuchJob' is not accepted; use one of PyTorchJob, TFJob, MPIJob, ElasticBatchJob.",
    ]
    r = logged_in("submit", path, "--set", "job_specs.0.pod_count=0")
    assert r.returncode == 3 and "job_specs.0.pod_count:" in r.stderr, r.stderr
    r = logged_in("submit", path, "--set", "job_specs.3.pod_count=1")
    assert r.returncode == 2 and "job_specs has 1 item(s)" in r.stderr
    from jobs.models import Job

    assert not Job.objects.exists()


def test_a_yaml_job_without_pyyaml_names_the_extra(logged_in, installed, tmp_path):
    no_yaml = tmp_path / "no-yaml"
    no_yaml.mkdir()
    (no_yaml / "yaml.py").write_text("raise ImportError('PyYAML is not installed')\n")
    env = {"PYTHONPATH": f"{no_yaml}{os.pathsep}{installed}"}
    r = logged_in("submit", job_file(tmp_path, "true"), extra_env=env)
    assert r.returncode == 2 and "pip install 'vigil[cli]'" in r.stderr
    body = tmp_path / "job.json"
    body.write_text(
        json.dumps(
            {
                "workspace": "alice-lab",
                "display_name": "json-job",
                "job_type": "PyTorchJob",
                "job_specs": [{"type": "Master"}],
                "user_command": "true",
                "backend": "local",
            }
        )
    )
    r = logged_in("submit", body, "--set", "backend=nowhere", extra_env=env)
    assert r.returncode == 3 and "backend:" in r.stderr


def test_another_workspaces_job_is_not_found(logged_in, bob, bob_ws, tmp_path, local_backend, console):
    from jobs.models import ApiToken

    bobs = ApiToken.issue(bob, name="bob")[1]
    job_id = submitted(logged_in, job_file(tmp_path, "true"))
    for command in (
        ["status", job_id],
        ["logs", job_id],
        ["events", job_id],
        ["restarts", job_id],
        ["stop", job_id],
        ["stacks", job_id],
    ):
        r = logged_in(*command, "--token", bobs)
        assert r.returncode == 5, (command, r.stderr)
    assert job(job_id).status != "Stopping"


# --- following a job across a restart ---------------------------------------------------------

FAIL_ONCE = """
    import os, sys, time
    attempt = os.environ["VIGIL_ATTEMPT"]
    gate = os.path.join(os.environ["GATES"], "go-" + attempt)
    print("attempt", attempt, "is training", flush=True)
    while not os.path.exists(gate):   # the test opens the gate once the CLI has printed the line above
        time.sleep(0.05)
    if attempt == "1":
        print("attempt 1 fails now", flush=True)
        sys.exit(1)
    print("attempt", attempt, "finished", flush=True)
"""


def test_logs_follow_streams_live_and_survives_a_restart(logged_in, tmp_path, local_backend):
    cli = logged_in
    train = tmp_path / "train.py"
    train.write_text(textwrap.dedent(FAIL_ONCE))
    gates = tmp_path / "gates"
    gates.mkdir()
    job_id = submitted(cli, job_file(tmp_path, f"{PY} {train}", RESTART_ON_FAILURE, GATES=str(gates)))

    logs = Reader(cli.start("logs", job_id, "-f", "--instance", "master-0", "--interval", 0.1))
    events = Reader(cli.start("events", job_id, "-f", "--json", "--interval", 0.1))
    logs.wait_for("attempt 1 is training", job_id)  # live: attempt 1 is still blocked on its gate
    (gates / "go-1").touch()
    logs.wait_for("==== attempt 2 of job", job_id)
    logs.wait_for("attempt 2 is training", job_id)
    (gates / "go-2").touch()
    code, out, err = logs.finish(job_id)
    assert code == 0, err
    assert out.splitlines() == [
        "attempt 1 is training",
        "attempt 1 fails now",
        "",
        out.splitlines()[3],  # the separator, with the restart's reason
        "attempt 2 is training",
        "attempt 2 finished",
    ]
    assert out.splitlines()[3].startswith(f"==== attempt 2 of job {job_id} (restart: ")

    code, out, err = events.finish(job_id)
    assert code == 0, err
    followed = [json.loads(line) for line in out.splitlines()]
    assert len({e["id"] for e in followed}) == len(followed)  # each event once
    assert any(e["type"] == "restart" for e in followed), [e["type"] for e in followed]

    r = cli("restarts", job_id, "--json")
    [record] = json.loads(r.stdout)
    assert (record["attempt"], record["new_attempt"], record["kind"]) == (1, 2, "job")
    r = cli("restarts", job_id)
    assert r.stdout.splitlines()[0].split()[:4] == ["#", "TIME", "KIND", "ATTEMPT"]
    assert "1->2" in r.stdout.splitlines()[1]

    # Each attempt's log on its own; the table of events names the restart.
    assert cli("logs", job_id, "--attempt", 1).stdout == "attempt 1 is training\nattempt 1 fails now\n"
    assert cli("logs", job_id, "--attempt", 3).returncode == 5
    assert cli("logs", job_id, "--instance", "worker-7").returncode == 3
    assert json.loads(cli("events", job_id, "--json", "--type", "restart").stdout)


def test_status_wait_exits_1_for_a_failed_job(logged_in, tmp_path, local_backend):
    job_id = submitted(logged_in, job_file(tmp_path, f"{PY} -c 'import sys; sys.exit(3)'"))
    proc = logged_in.start("status", job_id, "--wait", "--interval", 0.1)
    code, out, err = Reader(proc).finish(job_id)
    assert code == 1, err
    assert "status:    Failed" in out
    assert logged_in("status", job_id).returncode == 1
    r = logged_in("status", job_id, "--json")
    assert json.loads(r.stdout)["status"] == "Failed"


# --- stacks and stop -----------------------------------------------------------------------------

SLEEPER = """
    import time
    def stuck_in_a_collective():
        print("waiting", flush=True)
        while True:
            time.sleep(0.1)
    stuck_in_a_collective()
"""


def test_stacks_prints_the_aggregated_view_and_stop_wait_exits_7(logged_in, tmp_path, local_backend):
    script = tmp_path / "sleeper.py"
    script.write_text(textwrap.dedent(SLEEPER))
    job_id = submitted(logged_in, job_file(tmp_path, f"{PY} {script}"))
    Reader(logged_in.start("logs", job_id, "-f", "--interval", 0.1)).wait_for("waiting", job_id)

    r = logged_in("stacks", job_id)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Stack snapshot of 1 process(es)")
    from core.stacks import find_py_spy

    if find_py_spy() is not None and "1 dumped" in r.stdout:
        assert "    stuck_in_a_collective (sleeper.py:6)" in r.stdout.splitlines()
    r = logged_in("stacks", job_id, "--json")
    assert json.loads(r.stdout)["kind"] == "stacks"

    stopper = logged_in.start("stop", job_id, "--wait", "--interval", 0.1)
    code, out, err = Reader(stopper).finish(job_id)
    assert code == 7, err
    assert "status:    Stopped" in out
    r = logged_in("stacks", job_id)
    assert r.returncode == 3 and "job: has no running attempt" in r.stderr


def test_submit_needs_the_site_permission_for_the_backend_and_names_it(logged_in, alice, tmp_path):
    """The command line is one more way in: the same two checks hold (issue 12)."""
    from jobs.access import backend_permission
    from jobs.models import Job

    alice.user_permissions.remove(backend_permission("local"))
    r = logged_in("submit", job_file(tmp_path, "id -un"))
    assert r.returncode == 4, (r.returncode, r.stdout, r.stderr)
    assert "jobs.run_on_local" in r.stderr and "HTTP 403" in r.stderr
    assert not Job.objects.exists()
