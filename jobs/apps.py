from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Jobs"

    def ready(self):
        from . import schema  # noqa: F401  (registers the OpenAPI auth extension)
