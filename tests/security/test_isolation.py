"""As which OS user jobs run, and what they can read (issue 12).

Run as root, as CI is: the real local backend then runs each job as an
unprivileged user, and a job can read neither another job's files nor the
console's data directory, and its environment holds only its own token."""

from __future__ import annotations

import os
import pwd
import stat
import time
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.urls import reverse

from jobs import actions
from jobs.backends.base import BackendError
from jobs.backends.osuser import resolve_run_as
from jobs.models import Attempt, Job, JobStatus
from testsupport import factory

pytestmark = pytest.mark.django_db(transaction=True)  # the launch is sent on commit
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root, as CI runs: only root can switch users")


def submit(user, workspace, command) -> Job:
    return factory.submit(
        user,
        workspace,
        display_name="probe",
        user_command=command,
        job_specs=[{"type": "Master", "pod_count": 1, "resource_config": {"cpu": 1, "gpu": 0}}],
    )


def handle_of(job: Job) -> dict:
    handle = Attempt.objects.get(job=job, number=1).backend_handle
    assert handle, f"attempt 1 of job {job.pk} did not start: {Job.objects.get(pk=job.pk).reason}"
    return handle


def finished_log(backend, job: Job, timeout=20.0) -> str:
    handle = handle_of(job)
    deadline = time.monotonic() + timeout
    while not all(s.state.finished for s in backend.poll(handle)):
        assert time.monotonic() < deadline, backend.read_log(handle, "master-0")
        time.sleep(0.05)
    return backend.read_log(handle, "master-0").decode()


def lines(log: str) -> dict:
    return dict(line.split("=", 1) for line in log.splitlines() if "=" in line)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@as_root
def test_a_local_job_runs_unprivileged_and_reads_neither_another_jobs_spec_nor_the_data_dir(
    alice, alice_ws, local_backend
):
    sleeper = submit(alice, alice_ws, "sleep 30")
    other_spec = Path(handle_of(sleeper)["dir"]) / "master-0" / "spec.json"
    assert other_spec.exists()
    data = django_settings.DATA_DIR
    probe = "; ".join(
        [
            "echo uid=$(id -u)",
            f"cat {other_spec} >/dev/null 2>&1 && echo other_spec=read || echo other_spec=denied",
            "cat ../attempt-1/master-0/spec.json >/dev/null 2>&1 && echo own_spec=read || echo own_spec=denied",
            f"ls {data} >/dev/null 2>&1 && echo data_dir=listed || echo data_dir=denied",
            f"cat {data}/secret_key >/dev/null 2>&1 && echo secret_key=read || echo secret_key=denied",
            f"ls {local_backend.data_dir}/jobs >/dev/null 2>&1 && echo jobs=listed || echo jobs=denied",
            "touch $HOME/x $TMPDIR/y && echo home=writable || echo home=denied",
        ]
    )
    job = submit(alice, alice_ws, probe)
    seen = lines(finished_log(local_backend, job))
    assert seen["uid"] == str(pwd.getpwnam("nobody").pw_uid) != "0"
    assert seen["other_spec"] == "denied"
    assert seen["data_dir"] == "denied"
    assert seen["secret_key"] == "denied"
    assert seen["jobs"] == "denied"
    assert seen["home"] == "writable"
    assert handle_of(job)["run_as"] == "nobody"
    local_backend.stop(handle_of(sleeper), grace=0.2)


@as_root
def test_a_jobs_environment_holds_its_own_token_and_none_of_the_consoles_secrets(
    alice, alice_ws, local_backend, monkeypatch
):
    monkeypatch.setenv("REDIS_URL", django_settings.REDIS_URL)
    monkeypatch.setenv("SECRET_KEY", django_settings.SECRET_KEY)
    monkeypatch.setenv("DATABASE_URL", "postgres://vigil:db-password@127.0.0.1/vigil")
    job = submit(alice, alice_ws, "env")
    env = lines(finished_log(local_backend, job))
    job.refresh_from_db()
    assert env["VIGIL_JOB_TOKEN"] == job.plain_token()
    assert not {"REDIS_URL", "SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL"} & set(env)
    text = "\n".join(env.values())
    assert django_settings.SECRET_KEY not in text and "db-password" not in text
    # Its HOME, TMPDIR and caches are its own, not the console's.
    assert env["HOME"].startswith(handle_of(job)["dir"]) and env["USER"] == "nobody"


@as_root
def test_files_of_an_attempt_are_root_only_and_the_jobs_own_dirs_are_its_users(alice, alice_ws, local_backend):
    job = submit(alice, alice_ws, "true")
    finished_log(local_backend, job)
    attempt_dir = Path(handle_of(job)["dir"])
    idir = attempt_dir / "master-0"
    nobody = pwd.getpwnam("nobody").pw_uid
    for d in (local_backend.data_dir, attempt_dir.parent, attempt_dir, idir):
        assert (mode(d), os.stat(d).st_uid) == (0o711, 0), d  # pass through, never list
    for f in ("spec.json", "state.json", "exit.json", "output.log", "shim.log"):
        assert (mode(idir / f), os.stat(idir / f).st_uid) == (0o600, 0), f
    assert mode(attempt_dir / "attempt.json") == 0o600
    for d in (idir / "home", attempt_dir.parent / "work"):
        assert (mode(d), os.stat(d).st_uid) == (0o700, nobody), d
    data = django_settings.DATA_DIR
    assert mode(data) == 0o711 and mode(data / "secret_key") == 0o600
    db = django_settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        assert mode(db["NAME"]) == 0o600


@as_root
def test_a_workspace_with_its_own_os_user_runs_its_jobs_as_that_user(alice, alice_ws, local_backend):
    alice_ws.run_as = "daemon"
    alice_ws.save()
    job = submit(alice, alice_ws, "echo uid=$(id -u) user=$USER")
    seen = lines(finished_log(local_backend, job).replace(" ", "\n"))
    assert seen == {"uid": str(pwd.getpwnam("daemon").pw_uid), "user": "daemon"}


@as_root
def test_root_jobs_need_allow_root_and_the_job_page_says_so(alice, alice_ws, local_backend, settings, client):
    from jobs.backends import reset_backends

    alice_ws.run_as = "root"
    alice_ws.save()
    refused = submit(alice, alice_ws, "id -u")
    refused.refresh_from_db()
    assert refused.status == JobStatus.FAILED
    assert "refusing to run a job as root" in refused.reason and "VIGIL_LOCAL_ALLOW_ROOT=1" in refused.reason

    alice_ws.run_as = ""
    alice_ws.save()
    settings.JOB_BACKENDS["local"]["OPTIONS"]["allow_root"] = True
    reset_backends()
    backend = actions.get_backend_for(refused)
    job = submit(alice, alice_ws, "echo uid=$(id -u)")
    assert lines(finished_log(backend, job))["uid"] == "0"
    client.force_login(alice)
    page = client.get(reverse("pages:job-detail", args=[alice_ws.slug, job.pk])).content.decode()
    assert "Runs as OS user <code>root</code>" in page and "VIGIL_LOCAL_ALLOW_ROOT=1" in page
    backend.stop_everything(grace=0.2)


@as_root
def test_an_unknown_os_user_fails_the_launch_naming_it(alice, alice_ws, local_backend):
    alice_ws.run_as = "no-such-user-here"
    alice_ws.save()
    job = submit(alice, alice_ws, "true")
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and "no OS user 'no-such-user-here'" in job.reason


def test_staff_set_a_workspaces_os_user_and_slurm_account_in_the_admin(alice_ws, admin_client):
    url = reverse("admin:jobs_workspace_change", args=[alice_ws.pk])
    form = {
        "name": alice_ws.name,
        "slug": alice_ws.slug,
        "created_at_0": "2026-01-01",
        "created_at_1": "00:00:00",
        "retryable_keywords": "[]",
        "memberships-TOTAL_FORMS": "0",
        "memberships-INITIAL_FORMS": "0",
    }
    refused = admin_client.post(url, {**form, "run_as": "Root; rm -rf /", "slurm_account": "a b"})
    assert (
        refused.status_code == 200 and b"An OS user name" in refused.content and b"A Slurm account" in refused.content
    )
    alice_ws.refresh_from_db()
    assert (alice_ws.run_as, alice_ws.slurm_account) == ("", "")
    assert admin_client.post(url, {**form, "run_as": "daemon", "slurm_account": "team-a"}).status_code == 302
    alice_ws.refresh_from_db()
    assert (alice_ws.run_as, alice_ws.slurm_account) == ("daemon", "team-a")


def test_a_console_that_is_not_root_runs_jobs_as_itself_and_refuses_another_user():
    me = resolve_run_as("", euid=12345)
    assert (me.uid, me.switch) == (12345, False)
    with pytest.raises(BackendError, match="cannot switch users"):
        resolve_run_as("daemon", euid=12345)


def test_as_root_a_job_never_runs_as_root_unless_allowed():
    assert resolve_run_as("", euid=0).name == "nobody"
    with pytest.raises(BackendError, match="VIGIL_LOCAL_ALLOW_ROOT=1"):
        resolve_run_as("root", euid=0)
    allowed = resolve_run_as("", euid=0, allow_root=True)
    assert (allowed.uid, allowed.switch) == (0, False)


def test_an_existing_install_gets_its_secrets_made_private_at_start(tmp_path):
    from console.datadir import secure

    for name in ("secret_key", "vigil.sqlite3", "first-start.txt"):
        (tmp_path / name).write_text("x")
        os.chmod(tmp_path / name, 0o644)
    os.chmod(tmp_path, 0o755)
    secure(tmp_path)
    assert mode(tmp_path) == 0o700
    assert {mode(tmp_path / n) for n in ("secret_key", "vigil.sqlite3", "first-start.txt")} == {0o600}
    secure(tmp_path, traversable=True)
    assert mode(tmp_path) == 0o711
