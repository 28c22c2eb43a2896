"""First start: an admin user, a demo workspace and an API token, printed once
(and kept in VIGIL_DATA_DIR/first-start.txt, readable only by this user)."""

import os
import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from jobs.access import backend_names, backend_permission
from jobs.models import ApiToken, Membership, Role, Workspace


QUIET_NOTE = (
    "Below: job decisions, warnings and errors only "
    "(VIGIL_LOG_LEVEL=DEBUG shows everything, VIGIL_LOG_FORMAT=json for log shippers)."
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
