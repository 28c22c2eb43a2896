"""Grant or revoke the site permission to run jobs on a backend (jobs.run_on_<backend>)
to users or groups, the same as ticking it in the admin:

    manage.py backendaccess grant local --user alice --group trainers
    manage.py backendaccess revoke slurm --user bob
    manage.py backendaccess list
"""

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError

from jobs.access import backend_names, backend_permission, permission_name


class Command(BaseCommand):
    help = "Grant or revoke the permission to run jobs on a backend (jobs.run_on_<backend>) to users or groups."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["grant", "revoke", "list"])
        parser.add_argument("backend", nargs="?", help="a backend name, e.g. local or slurm")
        parser.add_argument("--user", action="append", default=[], dest="users", help="a username (repeatable)")
        parser.add_argument(
            "--group",
            action="append",
            default=[],
            dest="groups",
            help="a group name (repeatable); a missing group is created on grant",
        )

    def handle(self, action, backend=None, users=(), groups=(), **options):
        if action == "list":
            return self._list()
        known = backend_names()
        if backend not in known:
            raise CommandError(f"backend {backend!r} is not known; accepted: {', '.join(known)}.")
        if not users and not groups:
            raise CommandError("name at least one --user or --group.")
        User = get_user_model()
        people = []
        for name in users:
            user = User.objects.filter(username=name).first()
            if user is None:
                raise CommandError(f"no user {name!r}.")
            people.append(user)
        teams = []
        for name in groups:
            group = Group.objects.filter(name=name).first()
            if group is None:
                if action == "revoke":
                    raise CommandError(f"no group {name!r}.")
                group = Group.objects.create(name=name)
            teams.append(group)
        perm = backend_permission(backend)
        for user in people:
            (user.user_permissions.add if action == "grant" else user.user_permissions.remove)(perm)
        for group in teams:
            (group.permissions.add if action == "grant" else group.permissions.remove)(perm)
        who = [f"user {u.get_username()}" for u in people] + [f"group {g.name}" for g in teams]
        verb = "Granted" if action == "grant" else "Revoked"
        self.stdout.write(
            f"{verb} {permission_name(backend)} {'to' if action == 'grant' else 'from'} {', '.join(who)}."
        )

    def _list(self):
        User = get_user_model()
        for name in backend_names():
            perm = backend_permission(name)
            users = sorted(User.objects.filter(user_permissions=perm).values_list("username", flat=True))
            groups = sorted(Group.objects.filter(permissions=perm).values_list("name", flat=True))
            self.stdout.write(
                f"{permission_name(name)}: users {', '.join(users) or '-'}; "
                f"groups {', '.join(groups) or '-'} (superusers always may)"
            )
