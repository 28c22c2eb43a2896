from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from jobs.models import ApiToken


class Command(BaseCommand):
    help = "Create a personal API token for USER and print it (it is shown only once)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="cli", help="a label to recognise the token by")

    def handle(self, username, name, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user named {username!r}; create one with `manage.py createsuperuser`.")
        _, raw = ApiToken.issue(user, name=name)
        self.stdout.write(raw)
