"""Configuration that operators rely on: production settings pass Django's
deployment checks, and Vigil's own checks catch bad configuration at start."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_manage(*args, env_extra=None, tmp_path=None):
    env = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "VIGIL_HTTPS", "SECRET_KEY", "DATABASE_URL"}}
    env.update({"DJANGO_SETTINGS_MODULE": "console.settings", "VIGIL_DATA_DIR": str(tmp_path)})
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_production_settings_pass_check_deploy_at_warning_level(tmp_path):
    r = run_manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        env_extra={
            "SECRET_KEY": "x" * 20 + "a-real-long-random-production-secret-key-0123456789",
            "VIGIL_HTTPS": "1",
            "ALLOWED_HOSTS": "vigil.example.com",
        },
        tmp_path=tmp_path,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no issues" in r.stdout


def test_plain_http_settings_are_reported_by_check_deploy(tmp_path):
    r = run_manage("check", "--deploy", "--fail-level", "WARNING", tmp_path=tmp_path)
    assert r.returncode != 0
    assert "SECURE_SSL_REDIRECT" in r.stderr or "security.W008" in r.stderr


def test_a_fresh_install_generates_and_keeps_its_secret_key(tmp_path):
    first = run_manage("shell", "-c", "from django.conf import settings; print(settings.SECRET_KEY)", tmp_path=tmp_path)
    second = run_manage(
        "shell", "-c", "from django.conf import settings; print(settings.SECRET_KEY)", tmp_path=tmp_path
    )
    assert first.returncode == 0, first.stderr
    key = first.stdout.strip()
    assert len(key) >= 50 and key == second.stdout.strip()
    assert (tmp_path / "secret_key").stat().st_mode & 0o077 == 0


def test_bad_configuration_is_reported_at_start(tmp_path):
    r = run_manage(
        "check",
        env_extra={
            "VIGIL_LOCAL_SUBMIT_ROLES": "owner,wizard",
            "REDIS_URL": "http://nope",
            "VIGIL_WORKSPACE_CREATION": "everyone",
        },
        tmp_path=tmp_path,
    )
    assert r.returncode != 0
    assert "vigil.E004" in r.stderr and "wizard" in r.stderr
    assert "vigil.E005" in r.stderr
    assert "vigil.E006" in r.stderr and "VIGIL_WORKSPACE_CREATION is 'everyone'" in r.stderr


@pytest.mark.django_db
def test_bootstrap_creates_admin_workspace_and_token_once(settings, tmp_path):
    from io import StringIO

    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    settings.DATA_DIR = tmp_path
    out = StringIO()
    call_command("bootstrap", stdout=out)
    text = out.getvalue()
    assert "password:" in text and "vpt_" in text and "http://" in text
    assert get_user_model().objects.filter(username="admin", is_superuser=True).exists()
    again = StringIO()
    call_command("bootstrap", stdout=again)
    assert "password:" not in again.getvalue()
    assert (tmp_path / "first-start.txt").read_text() == text.split("\n", 1)[1]
