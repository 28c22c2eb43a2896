from django.apps import AppConfig


class MonitoringConfig(AppConfig):
    name = "monitoring"
    verbose_name = "Fault-tolerance monitor"

    def ready(self) -> None:
        from jobs import events

        from . import publish

        # Every committed job event goes to the pages watching the job (before
        # notifications: this app comes first in INSTALLED_APPS).
        events.subscribe(publish.event_committed)
