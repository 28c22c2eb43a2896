"""First start: an admin user, a demo workspace and an API token, printed once
(and kept in VIGIL_DATA_DIR/first-start.txt, readable only by this user)."""

import os
import secrets
import sys

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from jobs.access import backend_names, backend_permission
from jobs.backends import osuser
from jobs.backends.base import BackendError
from jobs.models import ApiToken, Membership, Role, Workspace


QUIET_NOTE = (
    "Below: job decisions, warnings and errors only "
    "(VIGIL_LOG_LEVEL=DEBUG shows everything, VIGIL_LOG_FORMAT=json for log shippers)."
)


def run_as_warning(python: str, repo: str) -> str:
    """A banner line when local jobs would run as a user who cannot run this Python or
    read the repository (a root console with both under a 0700 /root: the README's demo
    would fail at once), with the two ways out; "" when they can (issue 28)."""
    if not settings.LOCAL_JOBS_SWITCH_USER:
        return ""
    try:
        who = osuser.resolve_run_as("", default=settings.VIGIL_LOCAL_RUN_AS)
    except BackendError as exc:
        return f"  warning: local jobs cannot start: {exc}"
    problems = osuser.run_as_problems(who, python, repo)
    if not problems:
        return ""
    return (
        f"  warning: OS user {who.name!r} {' and '.join(problems)}, so local jobs such as the README's demo "
        f"fail at once: {osuser.run_as_advice(who)} (e.g. VIGIL_LOCAL_ALLOW_ROOT=1 make run)"
    )


class Command(BaseCommand):
    help = "Create the first admin user, a demo workspace and an API token if there is no user yet."

    def handle(self, **options):
        url = settings.VIGIL_CONSOLE_URL
        notes = settings.DATA_DIR / "first-start.txt"
        User = get_user_model()
        if User.objects.exists():
            # The banner of every later start: where, who, where the token is, what follows.
            first = User.objects.filter(is_superuser=True).order_by("pk").values_list("username", flat=True).first()
            self.stdout.write(f"Vigil console: {url}")
            if notes.exists():
                self.stdout.write(f"  user: {first or 'your account'}; password and API token in {notes}")
            else:
                self.stdout.write(f"  user: your account; API tokens in the admin ({url}/admin/jobs/apitoken/)")
            if warning := run_as_warning(sys.executable, str(settings.BASE_DIR)):
                self.stdout.write(self.style.WARNING(warning))
            self.stdout.write(f"  {QUIET_NOTE}")
            return
        password = secrets.token_urlsafe(12)
        admin = User.objects.create_superuser("admin", "admin@localhost", password)
        # A superuser may do anything, but the grants are explicit so that they
        # stay visible in the admin (and hold if superuser is ever taken away).
        admin.user_permissions.add(*(backend_permission(name) for name in backend_names()))
        ws = Workspace.objects.create(name="Demo", slug="demo")
        Membership.objects.create(workspace=ws, user=admin, role=Role.OWNER)
        _, token = ApiToken.issue(admin, name="first start")
        text = (
            f"Vigil console: {url}\n"
            f"  user:      admin\n"
            f"  password:  {password}\n"
            f"  workspace: demo\n"
            f"  API token: {token}   (curl -H 'Authorization: Bearer {token}' {url}/api/v1/jobs/)\n"
        )
        fd = os.open(notes, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        self.stdout.write(self.style.SUCCESS("First start: created the admin user and a demo workspace."))
        self.stdout.write(text)
        if warning := run_as_warning(sys.executable, str(settings.BASE_DIR)):
            self.stdout.write(self.style.WARNING(warning))
