from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    verbose_name = "Notifications"

    def ready(self) -> None:
        from jobs import events

        from . import dispatch

        # Every committed job event is matched against the workspace's event rules.
        events.subscribe(dispatch.event_committed)
