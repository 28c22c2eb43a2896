"""Turn the shims' exit announcements (Redis PUBLISH) into immediate monitor
ticks, so a failed rank is handled within milliseconds, and mark the job due for
the sweep (which otherwise ticks a steady job only at its scheduled check). While
this listener's heartbeat is fresh the sweep trusts the schedule; without it, every
job is ticked every sweep, so losing the listener costs at most one sweep interval
per exit (the exit is on disk before it is announced)."""

import json
import logging
import time

import redis
from django.conf import settings
from django.core.management.base import BaseCommand

from django.db import DatabaseError

from infra import health
from jobs.actions import wake_monitor
from monitoring.tasks import run_job

log = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Listen for instance exits announced by the backends and tick their jobs at once."

    def add_arguments(self, parser):
        parser.add_argument("--channel", default=settings.VIGIL_EXIT_CHANNEL)

    def handle(self, channel, **options):
        log.info("listening for instance exits on channel %s", channel)
        while True:
            try:
                client = redis.Redis.from_url(settings.REDIS_URL)
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                pubsub.subscribe(channel)
                beat_at = 0.0
                while True:
                    # Wake at least every second to leave the heartbeat /readyz reads.
                    message = pubsub.get_message(timeout=1.0)
                    if message is not None:
                        self.dispatch(message.get("data"))
                    if time.monotonic() - beat_at >= health.HEARTBEAT_SECONDS:
                        health.record(health.EXITS)
                        beat_at = time.monotonic()
            except redis.RedisError as exc:
                log.warning("exit listener lost Redis (%s); reconnecting in 1 s", exc)
                time.sleep(1)

    def dispatch(self, data) -> None:
        try:
            payload = json.loads(data)
            job_id = int(payload["job_id"])
        except (TypeError, ValueError, KeyError):
            log.warning("ignoring a malformed exit announcement: %r", data)
            return
        # The exit is the event the sweep's schedule waits for: the job is due at the next
        # sweep even if this task is slow to run; run_job ticks it at once meanwhile.
        try:
            wake_monitor(job_id)
        except DatabaseError:
            log.warning("could not mark job %s due; its run_job tick still handles the exit", job_id)
        run_job.delay(job_id)
