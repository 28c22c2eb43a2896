import os

from celery import Celery
from celery.signals import setup_logging, worker_ready, worker_shutdown

from infra.health import WorkerHeartbeat

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

app = Celery("vigil")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@setup_logging.connect
def use_the_consoles_logging(**kwargs):
    """Workers and the beat log like the web process (settings.LOGGING: quiet by
    default, VIGIL_LOG_LEVEL, VIGIL_LOG_FORMAT=json) instead of Celery's own setup,
    which would print every sweep twice a second at INFO."""
    from logging.config import dictConfig

    from django.conf import settings

    dictConfig(settings.LOGGING)


_heartbeat = None


@worker_ready.connect
def start_heartbeat(sender=None, **kwargs):
    """/readyz counts workers by this heartbeat (infra.health)."""
    global _heartbeat
    _heartbeat = WorkerHeartbeat(getattr(sender, "hostname", None)).start()


@worker_shutdown.connect
def stop_heartbeat(**kwargs):
    if _heartbeat is not None:
        _heartbeat.stop()
