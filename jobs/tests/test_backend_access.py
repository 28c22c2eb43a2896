"""The site permissions to run on a backend (jobs.access) and `manage.py backendaccess`."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command

from jobs.access import backend_names, permission_name, runnable_backends

pytestmark = pytest.mark.django_db


def fresh(user):
    """The user again from the database (has_perm caches per object)."""
    return type(user).objects.get(pk=user.pk)


@pytest.fixture
def nobody(django_user_model):
    return django_user_model.objects.create_user("nobody", "n@example.com", "nobody-password-123")


def test_every_shipped_and_configured_backend_has_a_permission_after_migrate(settings):
    from django.contrib.auth.models import Permission

    codenames = set(Permission.objects.filter(content_type__app_label="jobs").values_list("codename", flat=True))
    assert {"run_on_local", "run_on_slurm"} <= codenames
    settings.JOB_BACKENDS = {**settings.JOB_BACKENDS, "gpu-pool": {"BACKEND": "jobs.backends.memory.MemoryBackend"}}
    assert backend_names() == ["local", "slurm", "gpu-pool"]
    assert permission_name("gpu-pool") == "jobs.run_on_gpu-pool"


def test_grant_and_revoke_to_a_user(nobody):
    assert runnable_backends(fresh(nobody)) == []
    out = StringIO()
    call_command("backendaccess", "grant", "local", "--user", "nobody", stdout=out)
    assert "Granted jobs.run_on_local to user nobody" in out.getvalue()
    assert fresh(nobody).has_perm("jobs.run_on_local")
    assert runnable_backends(fresh(nobody)) == ["local"]
    call_command("backendaccess", "revoke", "local", "--user", "nobody", stdout=StringIO())
    assert not fresh(nobody).has_perm("jobs.run_on_local")


def test_grant_and_revoke_to_a_group(nobody):
    call_command("backendaccess", "grant", "slurm", "--group", "trainers", stdout=StringIO())
    group = Group.objects.get(name="trainers")
    nobody.groups.add(group)
    assert fresh(nobody).has_perm("jobs.run_on_slurm")
    assert not fresh(nobody).has_perm("jobs.run_on_local")
    out = StringIO()
    call_command("backendaccess", "list", stdout=out)
    assert "jobs.run_on_slurm: users -; groups trainers" in out.getvalue()
    call_command("backendaccess", "revoke", "slurm", "--group", "trainers", stdout=StringIO())
    assert not fresh(nobody).has_perm("jobs.run_on_slurm")


@pytest.mark.parametrize(
    "args, words",
    [
        (["grant", "moon", "--user", "nobody"], "not known"),
        (["grant", "local"], "--user or --group"),
        (["grant", "local", "--user", "ghost"], "no user 'ghost'"),
        (["revoke", "local", "--group", "ghosts"], "no group 'ghosts'"),
    ],
)
def test_bad_arguments_are_named(nobody, args, words):
    with pytest.raises(CommandError, match=words):
        call_command("backendaccess", *args, stdout=StringIO())


def test_bootstrap_gives_the_first_admin_the_backend_permissions(settings, tmp_path):
    from django.contrib.auth import get_user_model

    settings.DATA_DIR = tmp_path
    call_command("bootstrap", stdout=StringIO())
    admin = get_user_model().objects.get(username="admin")
    granted = set(admin.user_permissions.values_list("codename", flat=True))
    assert {"run_on_local", "run_on_slurm"} <= granted
    assert runnable_backends(admin) == list(settings.JOB_BACKENDS)


def test_staff_find_the_permissions_in_the_admins_user_and_group_forms(admin_client, nobody):
    for url in (f"/admin/auth/user/{nobody.pk}/change/", "/admin/auth/group/add/"):
        page = admin_client.get(url).content.decode()
        assert "Can run jobs on the local backend" in page and "Can run jobs on the slurm backend" in page, url
