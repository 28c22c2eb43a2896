"""The OS user a local job runs as, checked as that user (issues 31 and 28).

Run as root, as CI is: the real local backend runs each job as `nobody`. These
tests build real 0700 directories owned by root and show that a job can neither
start in one (issue 31, finding 1) nor learn from the refusal whether a path in
one exists."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time

import pytest

from jobs.backends.base import AttemptLaunch, BackendError, InstanceLaunch
from jobs.backends import shim
from console.management.commands.bootstrap import run_as_warning
from jobs.backends.local import LocalBackend, _program
from testsupport.jobs import let_jobs_reach

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root, as CI runs: only root can switch users")
SECRET = "root-only-contents"


@pytest.fixture
def backend(tmp_path):
    let_jobs_reach(tmp_path)
    made = LocalBackend(data_dir=str(tmp_path / "data"), redis_url=None, grace=0.5)
    yield made
    made.stop_everything(grace=0.2)


@pytest.fixture
def closed(tmp_path):
    """A 0700 root-only directory holding a 0755 subdirectory with a 0644 file."""
    parent = tmp_path / "closed"
    sub = parent / "sub"
    sub.mkdir(parents=True)
    (sub / "file.txt").write_text(SECRET)
    os.chmod(sub / "file.txt", 0o644)
    os.chmod(sub, 0o755)
    os.chmod(parent, 0o700)
    return sub


def attempt(command, workdir=None, job_id="job1", **kw) -> AttemptLaunch:
    return AttemptLaunch(
        job_id, 1, "PyTorchJob", (InstanceLaunch("master-0", "Master", 0, 0, command),), {}, workdir=workdir, **kw
    )


def finished_log(backend, handle, timeout=10.0) -> str:
    deadline = time.monotonic() + timeout
    while not all(s.state.finished for s in backend.poll(handle)):
        assert time.monotonic() < deadline, backend.read_log(handle, "master-0")
        time.sleep(0.02)
    return backend.read_log(handle, "master-0").decode()


@as_root
def test_a_workdir_behind_a_root_only_directory_is_refused_as_the_jobs_user(backend, closed):
    with pytest.raises(BackendError) as refused:
        backend.launch(attempt(f"ls; cat file.txt; echo {SECRET}-was-read", workdir=str(closed)))
    assert "workdir" in str(refused.value) and "(nobody)" in str(refused.value)
    # and the settings that get the job going (issue 28: the README's demo on a root box)
    assert "VIGIL_LOCAL_RUN_AS" in str(refused.value) and "VIGIL_LOCAL_ALLOW_ROOT=1" in str(refused.value)
    assert not os.path.exists(backend.attempt_dir("job1", 1))  # nothing ran


@as_root
def test_the_refusal_is_the_same_for_a_missing_and_an_unreachable_workdir(backend, closed):
    messages = []
    for path in (closed, closed / "no-such-dir", closed.parent / "no-such-dir"):
        with pytest.raises(BackendError) as refused:
            backend.launch(attempt("true", workdir=str(path)))
        messages.append(str(refused.value).replace(repr(str(path)), "<path>"))
    assert len(set(messages)) == 1, messages


@as_root
def test_a_reachable_workdir_still_works(backend, closed):
    os.chmod(closed.parent, 0o711)  # search only: nobody passes through, never lists
    handle = backend.launch(attempt("pwd; cat file.txt", workdir=str(closed)))
    log = finished_log(backend, handle)
    assert str(closed) in log and SECRET in log


@as_root
def test_the_shim_enters_the_workdir_after_dropping_privileges(backend, closed, monkeypatch):
    """Defence in depth: were the backend's check skipped (a spec.json from elsewhere, a
    directory closed between the check and the start), the shim itself enters the
    directory as the job's user, and the job does not run there."""
    monkeypatch.setattr(LocalBackend, "_check_workdir", lambda self, workdir, who: None)
    handle = backend.launch(attempt(f"ls; cat file.txt; echo {SECRET}-was-read", workdir=str(closed)))
    log = finished_log(backend, handle)
    [status] = backend.poll(handle)
    assert status.exit_code == 127, log
    assert "cannot enter the working directory as OS user nobody: Permission denied" in log
    assert SECRET not in log and "file.txt" not in log


# -- one OS user, one workspace at a time (issue 31, finding 5) ---------------------------


@as_root
def test_a_second_workspaces_job_is_refused_under_the_shared_user_while_the_first_runs(backend):
    first = backend.launch(attempt("sleep 30", job_id="ws1-job", workspace="1"))
    with pytest.raises(BackendError) as refused:
        backend.launch(attempt("true", job_id="ws2-job", workspace="2"))
    reason = str(refused.value)
    assert "'nobody'" in reason and "another workspace" in reason
    assert "VIGIL_SHARED_RUN_AS=1" in reason and "run_as" in reason
    # The same workspace's next job shares the user, as before.
    finished_log(backend, backend.launch(attempt("true", job_id="ws1-other", workspace="1")))
    backend.stop(first, grace=0.2)
    finished_log(backend, first)
    deadline = time.monotonic() + 10  # its shim cleans up what the job left, then ends
    while shim._any_shim_alive(first["dir"]):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    # Once the first workspace's jobs have ended, the user is free for another.
    assert "ok" in finished_log(backend, backend.launch(attempt("echo ok", job_id="ws2-job", workspace="2")))


@as_root
def test_workspaces_share_the_user_when_the_operator_says_so_or_have_their_own(tmp_path, backend):
    backend.launch(attempt("sleep 30", job_id="ws1-job", workspace="1"))
    # A workspace with its own OS user does not meet the first one's processes.
    own = backend.launch(attempt("id -un", job_id="ws2-job", workspace="2", run_as="daemon"))
    assert "daemon" in finished_log(backend, own)
    shared = LocalBackend(data_dir=backend.data_dir, redis_url=None, grace=0.5, shared_run_as=True)
    assert "ok" in finished_log(shared, shared.launch(attempt("echo ok", job_id="ws3-job", workspace="3")))


# -- Python under a 0700 home, run as nobody (issue 28, point 1) --------------------------


@pytest.fixture
def closed_venv(tmp_path, monkeypatch):
    """A venv (its python a symlink to this interpreter) under a 0700 root-only home, first
    on the console's PATH as `make run` puts .venv/bin: how a fresh root machine looks."""
    let_jobs_reach(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(home / "venv")], check=True)
    os.chmod(home, 0o700)
    # The system's own directories after it (they hold no `python`, only python3).
    monkeypatch.setenv("PATH", os.pathsep.join([str(home / "venv" / "bin"), "/usr/bin", "/bin"]))
    return home


@as_root
def test_a_command_the_jobs_user_cannot_execute_is_refused_with_the_user_and_the_settings(backend, closed_venv):
    with pytest.raises(BackendError) as refused:
        backend.launch(attempt("python -c 'print(\"hello\")'"))
    reason = str(refused.value)
    assert "'python'" in reason and str(closed_venv / "venv" / "bin" / "python") in reason
    assert "'nobody'" in reason and "VIGIL_LOCAL_RUN_AS" in reason and "VIGIL_LOCAL_ALLOW_ROOT=1" in reason
    assert "chmod" not in reason
    assert not os.path.exists(backend.attempt_dir("job1", 1))


@as_root
def test_after_either_way_out_the_same_command_runs(tmp_path, backend, closed_venv):
    command = "python -c 'import sys; print(\"hello from\", sys.prefix)'"
    as_root_too = LocalBackend(data_dir=str(tmp_path / "root-data"), redis_url=None, grace=0.5, allow_root=True)
    try:
        assert "hello from" in finished_log(as_root_too, as_root_too.launch(attempt(command)))
    finally:
        as_root_too.stop_everything(grace=0.2)
    os.chmod(closed_venv, 0o711)  # a run-as user who can: here nobody, once it may pass through
    assert "hello from" in finished_log(backend, backend.launch(attempt(command)))


def test_commands_that_are_not_one_plain_program_are_left_to_the_shell():
    assert _program("python train.py --lr 1") == "python"
    assert _program("FOO=1 BAR='a b' ./run.sh") == "./run.sh"
    assert _program("/opt/py/bin/python -m x") == "/opt/py/bin/python"
    for command in ("cd sub && python x.py", "exec python x.py", "(python x.py)", "echo 'unterminated", "$PY x"):
        assert _program(command) is None, command


@as_root
def test_the_banner_says_when_the_jobs_user_cannot_run_the_venvs_python_or_read_the_repo(closed_venv, settings):
    settings.LOCAL_JOBS_SWITCH_USER = True
    python = str(closed_venv / "venv" / "bin" / "python")
    warning = run_as_warning(python, str(closed_venv))
    assert f"cannot execute {python}" in warning and f"cannot read the repository {closed_venv}" in warning
    assert "'nobody'" in warning and "VIGIL_LOCAL_RUN_AS" in warning and "VIGIL_LOCAL_ALLOW_ROOT=1" in warning
    os.chmod(closed_venv, 0o755)
    assert run_as_warning(python, str(closed_venv)) == ""
    settings.LOCAL_JOBS_SWITCH_USER = False  # not root, or root jobs on purpose: nothing to say
    os.chmod(closed_venv, 0o700)
    assert run_as_warning(python, str(closed_venv)) == ""


@pytest.mark.django_db
@as_root
def test_make_runs_bootstrap_prints_the_warning_in_its_banner(closed_venv, settings, monkeypatch, tmp_path):
    from django.core.management import call_command

    settings.LOCAL_JOBS_SWITCH_USER = True
    settings.DATA_DIR = tmp_path
    monkeypatch.setattr(sys, "executable", str(closed_venv / "venv" / "bin" / "python"))
    out = io.StringIO()
    call_command("bootstrap", stdout=out)
    assert "cannot execute" in out.getvalue() and "VIGIL_LOCAL_ALLOW_ROOT=1" in out.getvalue()


@pytest.mark.parametrize("log", ["", "/bin/sh: 1: python: Permission denied\n"])
def test_the_explanation_of_exit_126_names_the_run_as_settings_not_chmod(log):
    from core.classify import FailureInput, classify_failure

    got = classify_failure(FailureInput(exit_code=126, signal=None, log_tail=log))
    text = f"{got.cause} {got.next_step}"
    assert "VIGIL_LOCAL_RUN_AS" in text and "VIGIL_LOCAL_ALLOW_ROOT=1" in text and "chmod" not in text


# -- through the console: the refusal is the job's reason -----------------------------------


def _submit(user, workspace, command):
    from testsupport import factory

    return factory.submit(
        user,
        workspace,
        display_name="probe",
        user_command=command,
        job_specs=[{"type": "Master", "pod_count": 1, "resource_config": {"cpu": 1, "gpu": 0}}],
    )


def _failed_reason(job, timeout=20.0) -> str:
    from jobs.models import Job, JobStatus

    deadline = time.monotonic() + timeout
    while (job := Job.objects.get(pk=job.pk)).status != JobStatus.FAILED:
        assert time.monotonic() < deadline, (job.status, job.reason)
        time.sleep(0.05)
    return job.reason


@pytest.mark.django_db(transaction=True)
@as_root
def test_a_second_workspaces_submission_fails_with_the_reason_and_the_setting(
    alice, alice_ws, bob, bob_ws, local_backend
):
    from jobs.models import Attempt

    sleeper = _submit(alice, alice_ws, "sleep 30")
    deadline = time.monotonic() + 20
    while not Attempt.objects.get(job=sleeper, number=1).backend_handle:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    reason = _failed_reason(_submit(bob, bob_ws, "true"))
    assert "'nobody'" in reason and "VIGIL_SHARED_RUN_AS=1" in reason and "run_as" in reason


@pytest.mark.django_db(transaction=True)
@as_root
def test_a_submission_whose_python_the_jobs_user_cannot_run_fails_with_that_reason(
    alice, alice_ws, local_backend, closed_venv
):
    reason = _failed_reason(_submit(alice, alice_ws, "python -c 'print(1)'"))
    assert "'nobody'" in reason and "VIGIL_LOCAL_RUN_AS" in reason and "VIGIL_LOCAL_ALLOW_ROOT=1" in reason
    assert "chmod" not in reason


@as_root
def test_a_job_still_being_launched_holds_the_user_and_an_abandoned_claim_lets_go(backend):
    """Another worker's launch that has claimed the user but not yet started its shims
    (no launch.json yet) counts; once older than the start timeout it no longer does."""
    import json
    import pwd

    users = os.path.join(backend.data_dir, "users")
    os.makedirs(users, exist_ok=True)
    table = os.path.join(users, f"{pwd.getpwnam('nobody').pw_uid}.json")
    elsewhere = backend.attempt_dir("ws1-job", 1)
    with open(table, "w") as f:
        json.dump({"ws1-job": {"workspace": "1", "dir": elsewhere, "at": time.time()}}, f)
    with pytest.raises(BackendError, match="VIGIL_SHARED_RUN_AS=1"):
        backend.launch(attempt("true", job_id="ws2-job", workspace="2"))
    with open(table, "w") as f:
        json.dump({"ws1-job": {"workspace": "1", "dir": elsewhere, "at": time.time() - 3600}}, f)
    finished_log(backend, backend.launch(attempt("true", job_id="ws2-job", workspace="2")))
