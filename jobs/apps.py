from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Jobs"

    def ready(self):
        from django.db.models.signals import post_migrate

        from . import schema  # noqa: F401  (registers the OpenAPI auth extension)
        from .access import ensure_backend_permissions

        post_migrate.connect(ensure_backend_permissions, sender=self, dispatch_uid="jobs-backend-permissions")
