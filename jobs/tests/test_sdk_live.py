"""The SDK and the console together, for real: training scripts that use
`from vigil import job_monitor as jm` run as jobs on the real local backend and
talk over HTTP to a live console (pytest-django's live_server), while the test
drives the monitor tick by tick, as the sweep would."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from django.core.cache import cache

from jobs.models import Attempt, C4DReport, EventType, Job, JobEvent, JobStatus, RestartRecord
from monitoring.failures import keywords_of
from testsupport.monitor import finished, tick_until
from testsupport import factory

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
SDK = ROOT / "sdk"
EXAMPLES = SDK / "tests" / "examples"  # the seed's examples with the import changed, kept by the SDK's tests
PY = sys.executable
SYNC_RESTART = "--job-execution-mode=Sync --enable-job-restart=True --fault-tolerant-policy=ExitCodeAndErrorMsg"
HANG_600 = "--job-execution-mode=Sync --enable-job-hang-detection=True --job-hang-interval=600"


@pytest.fixture(autouse=True)
def _quick_people_and_a_roomy_rate(settings):
    # Autouse fixtures run before alice is created: a fast hasher saves seconds per test.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # The staged example alone makes a dozen calls in well under a second.
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"sdk": "200/s"}}
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def console(live_server, settings):
    """The live console's URL, given to every instance as VIGIL_CONSOLE_URL."""
    settings.VIGIL_CONSOLE_URL = live_server.url
    return live_server.url


@pytest.fixture
def api(alice, alice_ws, api_as):
    return api_as(alice)


def submit(api, workspace, command: str, flags: str | None, **envs) -> Job:
    # The SDK from the source tree; VIGIL_* come from the console, never from envs.
    return factory.submit(
        api,
        workspace,
        display_name="sdk-live",
        user_command=command,
        envs={"PYTHONPATH": str(SDK / "src"), **envs},
        job_specs=[{"type": "Master", "pod_count": 1, "resource_config": {"cpu": 1, "memory": "1Gi", "gpu": 0}}],
        # monitoring is on even with no flags ("" = the defaults): the SDK's reports are read
        settings={"enable_error_monitoring_in_aimaster": flags is not None, "error_monitoring_args": flags or ""},
    )


def log_of(backend, job: Job, number: int | None = None) -> str:
    attempt = Attempt.objects.get(job=job, number=number or job.current_attempt)
    return backend.read_log(attempt.backend_handle, "master-0").decode("utf-8", "replace")


def script(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def hang_intervals_set(job: Job) -> list[int]:
    return [
        e.payload["job_hang_interval"]
        for e in JobEvent.objects.filter(job=job, type=EventType.DECISION).order_by("id")
        if "job_hang_interval" in e.payload
    ]


# --- the seed's examples -------------------------------------------------------------


def test_the_seeds_examples_run_as_a_real_job_and_reach_the_live_console(api, alice_ws, console, local_backend):
    examples = ["custom_message.py", "retryable_errors_pytorch.py", "reset_config.py", "staged_hang_detection.py"]
    command = " && ".join(f"{PY} {EXAMPLES / name}" for name in examples)
    job = submit(api, alice_ws, command, HANG_600)
    job = tick_until(job, finished, backend=local_backend, what="finish")
    assert job.status == JobStatus.SUCCEEDED, job.reason
    assert log_of(local_backend, job) == ""  # every st.ok(): the example printed nothing

    [message] = JobEvent.objects.filter(job=job, type=EventType.CUSTOM_MESSAGE)
    assert message.message == "The training loss for the job is NaN." and message.level == "info"
    assert job.sdk_retryable_keywords == ["connect timeout", "error_yyy", "error_zzz"]
    assert keywords_of(job) == ("connect timeout", "error_yyy", "error_zzz")
    # reset_config.py: Monitor(1800), the dict (1800 again: no change), 10, 10 again;
    # staged_hang_detection.py: Monitor(1800), then per epoch train 180 -> back, test -1 -> back; then 600.
    assert hang_intervals_set(job) == [1800, 10, 1800, 180, 1800, -1, 1800, 180, 1800, -1, 1800, 600]
    assert job.hang_interval_override == 600


# --- retryable keywords set by the code ------------------------------------------------

FAIL_ONCE = """
    import os, sys, time
    from vigil import job_monitor as jm

    monitor = jm.Monitor(config=jm.PyTorchConfig())
    if os.environ.get("KEYWORDS"):
        st = monitor.set_retryable_errors(os.environ["KEYWORDS"].split(","))
        print("set_retryable_errors:", st.to_string(), flush=True)
    marker = os.path.join(os.environ["MARKERS"], "failed-once")
    if not os.path.exists(marker):
        open(marker, "w").close()
        time.sleep(1.0)  # some training before the fault (the monitor reads keywords at the start of a tick)
        # a programming error by its class: deterministic by the public reports (no line
        # of its own would do: an unrecognised exit is ambiguous, probed once anyway)
        raise KeyError("error_yyy happened")
    print("attempt", os.environ["VIGIL_ATTEMPT"], "trained to the end", flush=True)
"""


def test_keywords_set_by_the_code_make_the_monitor_restart_a_failure_and_the_job_succeeds(
    api, alice_ws, console, local_backend, tmp_path
):
    train = script(tmp_path, "train.py", FAIL_ONCE)
    job = submit(
        api, alice_ws, f"{PY} {train}", SYNC_RESTART, KEYWORDS="connect timeout,error_yyy", MARKERS=str(tmp_path)
    )
    job = tick_until(job, finished, backend=local_backend, what="finish")
    assert (job.status, job.current_attempt) == (JobStatus.SUCCEEDED, 2), job.reason
    record = RestartRecord.objects.get(job=job)
    assert record.error_source == "UserKeyword" and "error_yyy" in record.error_message + record.reason
    assert "set_retryable_errors: OK" in log_of(local_backend, job, 1)
    assert "attempt 2 trained to the end" in log_of(local_backend, job, 2)


def test_without_the_keyword_the_same_failure_fails_the_job(api, alice_ws, console, local_backend, tmp_path):
    # a KeyError is a programming error, deterministic: only the keyword the code sets retries it
    train = script(tmp_path, "train.py", FAIL_ONCE)
    job = submit(api, alice_ws, f"{PY} {train}", SYNC_RESTART, MARKERS=str(tmp_path))
    job = tick_until(job, finished, backend=local_backend, what="finish")
    assert (job.status, job.current_attempt) == (JobStatus.FAILED, 1)
    assert not RestartRecord.objects.filter(job=job).exists()
    assert job.sdk_retryable_keywords == []


# --- the hang interval the code sets ----------------------------------------------------

SILENT = """
    import os, time
    from vigil import job_monitor as jm

    monitor = jm.Monitor(config=jm.PyTorchConfig())
    print("reset_config:", monitor.reset_config(job_hang_interval=2).to_string(), flush=True)

    def evaluate():
        time.sleep(4)  # silent: no output at all
        if os.environ.get("SAY_DONE"):
            print("evaluation done", flush=True)

    if os.environ.get("SUSPEND"):
        evaluate = jm.hang_detect(-1)(evaluate)
    evaluate()
    time.sleep(float(os.environ.get("THEN_SILENT", "0")))  # training resumes quietly
    print("evaluated", flush=True)
"""


def test_reset_config_shortens_the_hang_interval_so_a_silent_job_is_caught(
    api, alice_ws, console, local_backend, tmp_path
):
    job = submit(api, alice_ws, f"{PY} {script(tmp_path, 'silent.py', SILENT)}", HANG_600)
    job = tick_until(
        job,
        lambda j: JobEvent.objects.filter(job=j, type=EventType.HANG).exists(),
        backend=local_backend,
        seconds=12,
        what="show a hang",
    )
    hang = JobEvent.objects.get(job=job, type=EventType.HANG)
    assert "hang interval of 2 s" in hang.message
    assert hang_intervals_set(job) == [2]
    assert "reset_config: OK" in log_of(local_backend, job)


def test_hang_detect_minus_one_suspends_hang_detection_for_a_silent_step(
    api, alice_ws, console, local_backend, tmp_path
):
    job = submit(api, alice_ws, f"{PY} {script(tmp_path, 'silent.py', SILENT)}", HANG_600, SUSPEND="1", SAY_DONE="1")
    job = tick_until(job, finished, backend=local_backend, seconds=15, what="finish")
    assert job.status == JobStatus.SUCCEEDED, job.reason
    assert not JobEvent.objects.filter(job=job, type=EventType.HANG).exists()
    # 2 from reset_config, -1 for evaluate's scope, 2 again when it ended.
    assert hang_intervals_set(job) == [2, -1, 2]
    assert "evaluated" in log_of(local_backend, job)


def test_leaving_a_suspended_scope_does_not_count_the_silence_inside_it_as_a_hang(
    api, alice_ws, console, local_backend, tmp_path
):
    # 4 s silent inside hang_detect(-1), then 1 s silent under the 2 s interval: not a hang.
    job = submit(api, alice_ws, f"{PY} {script(tmp_path, 'silent.py', SILENT)}", HANG_600, SUSPEND="1", THEN_SILENT="1")
    job = tick_until(job, finished, backend=local_backend, seconds=15, what="finish")
    assert job.status == JobStatus.SUCCEEDED, job.reason
    assert not JobEvent.objects.filter(job=job, type=EventType.HANG).exists()


def test_a_hang_detect_scope_restores_the_jobs_own_flag_interval(api, alice_ws, console, local_backend, tmp_path):
    code = script(
        tmp_path,
        "staged.py",
        """
        from vigil import job_monitor as jm

        @jm.hang_detect(180)
        def train():
            print("training", flush=True)

        train()
    """,
    )
    job = submit(api, alice_ws, f"{PY} {code}", HANG_600)
    job = tick_until(job, finished, backend=local_backend, what="finish")
    assert job.status == JobStatus.SUCCEEDED, job.reason
    assert hang_intervals_set(job) == [180, 600]  # VIGIL_JOB_HANG_INTERVAL carries the flag's 600


# --- progress ----------------------------------------------------------------------------


def test_progress_reported_by_the_code_marks_the_attempt_for_the_restart_loop_breaker(
    api, alice_ws, console, local_backend, tmp_path
):
    code = script(
        tmp_path,
        "progress.py",
        """
        from vigil import job_monitor as jm

        monitor = jm.Monitor(config=jm.PyTorchConfig())
        for step in range(1, 4):
            print("report_progress:", monitor.report_progress(step, {"loss": 1.0 / step}).to_string(), flush=True)
        # the newest report is sent at exit
    """,
    )
    job = submit(api, alice_ws, f"{PY} {code}", SYNC_RESTART)
    job = tick_until(job, finished, backend=local_backend, what="finish")
    assert job.status == JobStatus.SUCCEEDED, job.reason
    attempt = Attempt.objects.get(job=job, number=1)
    assert attempt.made_progress and attempt.first_progress_at is not None
    assert job.last_progress_step == 3 and job.last_progress_at >= attempt.first_progress_at


# --- C4D records -------------------------------------------------------------------------------


def test_collective_records_of_a_rank_reach_the_console_as_its_c4d_report(
    api, alice_ws, console, local_backend, tmp_path
):
    code = script(
        tmp_path,
        "collectives.py",
        """
        import vigil.c4d as c4d

        for op in ("all_reduce", "broadcast", "all_reduce"):
            with c4d.collective(op):
                pass
        print("flush:", c4d.flush().to_string(), flush=True)
    """,
    )
    flags = HANG_600 + " --enable-c4d-hang-detection=True"  # gives the instances VIGIL_C4D=1
    job = submit(api, alice_ws, f"{PY} {code}", flags)
    job = tick_until(job, finished, backend=local_backend, what="finish")
    assert job.status == JobStatus.SUCCEEDED, job.reason
    assert "flush: OK" in log_of(local_backend, job)
    report = C4DReport.objects.get(job=job, attempt=1, rank=0)
    assert [(r["seq"], r["op"]) for r in report.records] == [(1, "all_reduce"), (2, "broadcast"), (3, "all_reduce")]
    assert all(r["exit"] is not None and r["exit"] >= r["enter"] for r in report.records)


# --- the rate limit and the token, as the code sees them -------------------------------------


def test_over_the_rate_the_code_gets_a_not_ok_status_with_the_wait_and_goes_on(
    api, alice_ws, console, local_backend, tmp_path, settings
):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"sdk": "2/min"}}
    code = script(
        tmp_path,
        "chatty.py",
        """
        from vigil import job_monitor as jm

        monitor = jm.Monitor(config=jm.PyTorchConfig())
        for i in range(3):
            print(monitor.send_custom_message(content="message %d" % i).to_string(), flush=True)
    """,
    )
    job = submit(api, alice_ws, f"{PY} {code}", None)
    job = tick_until(job, finished, backend=local_backend, what="finish")
    assert job.status == JobStatus.SUCCEEDED, job.reason
    first, second, third = log_of(local_backend, job).splitlines()
    assert first == second == "OK"
    assert third.startswith(f"RATE_LIMITED: rate limit: job {job.pk} may make 2/min SDK calls per process")
    assert "(HTTP 429, retry after " in third
    assert [e.message for e in JobEvent.objects.filter(job=job, type=EventType.CUSTOM_MESSAGE).order_by("id")] == [
        "message 0",
        "message 1",
    ]


RESET_DURING_RUN = """
    import os, sys, time
    from vigil import job_monitor as jm

    monitor = jm.Monitor(config=jm.PyTorchConfig())
    if os.environ["VIGIL_ATTEMPT"] == "1":
        monitor.set_retryable_errors(["error_yyy"])
        print("before reset:", monitor.send_custom_message(content="before reset").to_string(), flush=True)
        marker = os.path.join(os.environ["MARKERS"], "token-reset")
        deadline = time.monotonic() + 10
        while not os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        print("after reset:", monitor.send_custom_message(content="after reset").to_string(), flush=True)
        # a programming error by its class: deterministic by the public reports (no line
        # of its own would do: an unrecognised exit is ambiguous, probed once anyway)
        raise KeyError("error_yyy happened")
    print("attempt 2:", monitor.send_custom_message(content="from attempt 2").to_string(), flush=True)
"""


def test_a_token_reset_refuses_the_running_code_at_once_and_the_next_attempt_gets_the_new_token(
    api, alice_ws, console, local_backend, tmp_path
):
    code = script(tmp_path, "reset.py", RESET_DURING_RUN)
    job = submit(api, alice_ws, f"{PY} {code}", SYNC_RESTART, MARKERS=str(tmp_path))

    def said_before_reset(j):
        attempt = Attempt.objects.filter(job=j, number=1).exclude(backend_handle={}).first()
        return attempt is not None and "before reset:" in log_of(local_backend, j, 1)

    job = tick_until(job, said_before_reset, backend=local_backend, what="send its first message")
    r = api.post(f"/api/v1/jobs/{job.pk}/reset-token/")
    assert r.status_code == 200, r.content
    (tmp_path / "token-reset").touch()
    job = tick_until(job, finished, backend=local_backend, what="finish")
    assert (job.status, job.current_attempt) == (JobStatus.SUCCEEDED, 2), job.reason
    first = log_of(local_backend, job, 1)
    assert "before reset: OK" in first
    assert "after reset: UNAUTHENTICATED: Invalid job token: it was reset" in first
    assert "attempt 2: OK" in log_of(local_backend, job, 2)
    assert [e.message for e in JobEvent.objects.filter(job=job, type=EventType.CUSTOM_MESSAGE).order_by("id")] == [
        "before reset",
        "from attempt 2",
    ]


# --- a console that does not answer ---------------------------------------------------------


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_a_console_that_cannot_be_reached_leaves_the_job_running_to_success(api, alice_ws, local_backend, settings):
    settings.VIGIL_CONSOLE_URL = closed_port_url()
    job = submit(api, alice_ws, f"{PY} {EXAMPLES / 'custom_message.py'}", None)
    job = tick_until(job, finished, backend=local_backend, what="finish")
    assert job.status == JobStatus.SUCCEEDED, job.reason
    out = log_of(local_backend, job)
    assert out.startswith(
        f"failed to send message, error UNAVAILABLE: cannot reach the console at {settings.VIGIL_CONSOLE_URL}"
    ), out
    assert not JobEvent.objects.filter(job=job, type=EventType.CUSTOM_MESSAGE).exists()


# --- packaging ------------------------------------------------------------------------------


def test_the_sdk_builds_and_installs_with_pip_into_a_clean_virtual_environment(tmp_path):
    """Offline: build the wheel with this venv's setuptools (no build isolation, so
    nothing is downloaded), install it with pip into a venv that has nothing but
    the standard library, and use it from outside the source tree. (With network,
    `python -m venv v && v/bin/pip install ./sdk` does both steps at once.)"""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "PIP_NO_INDEX": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_FIND_LINKS": "",
    }
    probe = subprocess.run(
        [
            PY,
            "-c",
            "import setuptools, sys; sys.exit(tuple(map(int, setuptools.__version__.split('.')[:2])) < (70, 1))",
        ],
        capture_output=True,
    )
    if probe.returncode != 0:
        pytest.skip(
            f"{PY} needs setuptools >= 70.1 (it builds wheels without the wheel package) to build the SDK offline"
        )
    # Build from a copy: an in-tree build would leave build/ and *.egg-info in sdk/.
    source = tmp_path / "sdk"
    shutil.copytree(SDK, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "tests"))
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [PY, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(source)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=180,
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    [wheel] = wheels.glob("vigil-*.whl")
    assert wheel.name.endswith("-py3-none-any.whl")  # pure Python: one wheel for every training image

    venv = tmp_path / "clean"
    subprocess.run([PY, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True, timeout=60)
    python = venv / "bin" / "python"
    installed = subprocess.run(
        [PY, "-m", "pip", "--python", str(python), "install", "--no-deps", str(wheel)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=180,
    )
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-2000:]
    use = subprocess.run(
        [
            python,
            "-c",
            "import vigil; from vigil import job_monitor as jm; print(vigil.__file__); "
            "print(jm.Monitor(config=jm.PyTorchConfig()).send_custom_message(content='hi').to_string())",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert use.returncode == 0, use.stderr
    where, status = use.stdout.splitlines()
    assert where.startswith(str(venv)) and "site-packages" in where  # the installed copy, not the source tree
    assert status.startswith("NOT_IN_JOB: not running under Vigil")
