from django.apps import AppConfig

from jobs import events


class MonitoringConfig(AppConfig):
    name = "monitoring"
    verbose_name = "Fault-tolerance monitor"

    def ready(self) -> None:
        from . import publish  # here, not above: it imports models, which load after the app configs

        # Every committed job event goes to the pages watching the job (before
        # notifications: this app comes first in INSTALLED_APPS).
        events.subscribe(publish.event_committed)
        events.subscribe_progress(publish.progress_reported)
