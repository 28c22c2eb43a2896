from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Vigil console"

    def ready(self):
        from . import checks  # noqa: F401  (registers the system checks)
