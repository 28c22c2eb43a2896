"""The job socket while Redis stalls (issue 20, 2): a private Redis the test freezes
with SIGSTOP under the console's own channel layer (console.layers). An open socket
keeps streaming logs (they come from files) and is told that live events are
delayed; a new socket still connects; once Redis answers, the page is told and
gets the events it missed. The Redis is stopped by its PID at teardown."""

from __future__ import annotations

import os
import signal

import pytest
from asgiref.sync import async_to_sync, sync_to_async

from console.devredis import PrivateRedis
from jobs import actions
from jobs.models import EventType

from .test_consumers import collect, communicator, log_lines, session_cookie

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]


@pytest.fixture
def frozen_redis(settings):
    redis = PrivateRedis().start()
    if redis.process is None:
        redis.stop()
        pytest.skip("needs a redis-server process to freeze")
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "console.layers.ResilientRedisChannelLayer",
            "CONFIG": {"hosts": [{"address": redis.url, "socket_timeout": 30}]},
        }
    }
    yield redis
    try:
        os.killpg(redis.process.pid, signal.SIGCONT)
    except ProcessLookupError:
        pass
    redis.stop()


@pytest.mark.timeout(60)
def test_logs_keep_streaming_and_the_page_is_told_while_redis_stalls(
    frozen_redis, alice, alice_ws, job_body, memory_backend
):
    from console.asgi import application as app

    job, _ = actions.submit_job(alice, job_body(alice_ws))
    handle = job.attempts.get(number=1).backend_handle
    cookie = session_cookie(alice)

    async def scenario():
        memory_backend.write_log(handle, "worker-0", "before 1\n")
        comm = communicator(app, job.pk, cookie)
        assert (await comm.connect())[0]
        await comm.send_json_to({"type": "hello", "after_event": None, "logs": {"attempt": None, "offsets": {}}})
        await collect(comm, lambda ms: "before 1" in log_lines(ms, "worker-0"))

        os.killpg(frozen_redis.process.pid, signal.SIGSTOP)
        memory_backend.write_log(handle, "worker-0", "during 1\n")
        during = await collect(
            comm,
            lambda ms: "during 1" in log_lines(ms, "worker-0") and any(m["type"] == "live" for m in ms),
            timeout=10,
        )
        assert [m["delayed"] for m in during if m["type"] == "live"] == [True]
        missed = await sync_to_async(actions.record_event)(job, EventType.CUSTOM_MESSAGE, "Said while Redis slept.")

        other = communicator(app, job.pk, cookie)  # a page opened during the stall still connects
        assert (await other.connect(timeout=5))[0]
        await other.send_json_to({"type": "hello", "after_event": None, "logs": {"attempt": None, "offsets": {}}})
        got = await collect(other, lambda ms: "during 1" in log_lines(ms, "worker-0"), timeout=10)
        assert any(m["type"] == "event" and m["id"] == missed.pk for m in got)  # read from the database
        await other.disconnect()

        os.killpg(frozen_redis.process.pid, signal.SIGCONT)
        after = await collect(comm, lambda ms: any(m["type"] == "live" for m in ms), timeout=15)
        assert [m["delayed"] for m in after if m["type"] == "live"] == [False]
        assert [m["id"] for m in after if m["type"] == "event"] == [missed.pk]  # the missed event, once
        memory_backend.write_log(handle, "worker-0", "after 1\n")
        await collect(comm, lambda ms: "after 1" in log_lines(ms, "worker-0"))
        await comm.disconnect()

    async_to_sync(scenario)()
