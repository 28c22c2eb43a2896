from django.apps import AppConfig

from jobs import events


class NotificationsConfig(AppConfig):
    name = "notifications"
    verbose_name = "Notifications"

    def ready(self) -> None:
        from . import dispatch  # here, not above: it imports models, which load after the app configs

        # Every committed job event is matched against the workspace's event rules.
        events.subscribe(dispatch.event_committed)
