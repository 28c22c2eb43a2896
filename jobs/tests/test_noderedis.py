"""The node side's one Redis client (shim.py and slurm_step.py announce exits with
it): a PUBLISH in plain RESP that reports whether Redis took it and never raises, on a
connection of its own (publish) or on one opened ahead and held (Announcer)."""

from __future__ import annotations

import json
import os
import socket
import time

import redis

from jobs.backends.noderedis import Announcer, publish, redis_target

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


def test_a_redis_url_becomes_a_target_a_spec_file_can_hold():
    assert redis_target("redis://bob:p%40ss@cache:6380/2", "vigil:instance-exit") == {
        "host": "cache",
        "port": 6380,
        "username": "bob",
        "password": "p@ss",
        "channel": "vigil:instance-exit",
    }
    assert redis_target("redis://:secret@", "c") == {
        "host": "127.0.0.1",
        "port": 6379,
        "username": None,
        "password": "secret",
        "channel": "c",
    }
    assert redis_target("", "c") is None
    assert redis_target("rediss://cache:6380/0", "c") is None  # TLS is not spoken here


def test_an_exit_published_reaches_a_subscriber():
    channel = f"vigil-test-noderedis-{os.getpid()}"
    pubsub = redis.Redis.from_url(REDIS_URL).pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(channel)
    try:
        assert pubsub.get_message(timeout=1.0) is None
        payload = json.dumps({"job_id": "7", "instance": "worker-0", "exit_code": 1})
        assert publish(redis_target(REDIS_URL, channel), payload, deadline=2.0)
        deadline = time.monotonic() + 5
        message = None
        while message is None and time.monotonic() < deadline:
            message = pubsub.get_message(timeout=0.5)
        assert message is not None and json.loads(message["data"]) == json.loads(payload)
    finally:
        pubsub.close()


def test_a_redis_that_is_down_or_refuses_is_false_not_an_exception():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert publish({"host": "127.0.0.1", "port": port, "channel": "c"}, "{}", deadline=0.5) is False
    assert publish(None, "{}", deadline=0.5) is False
    # A password this Redis does not have: AUTH is refused, so the PUBLISH does not count.
    refused = dict(redis_target(REDIS_URL, "c") or {}, password="not-the-password")
    assert publish(refused, "{}", deadline=2.0) is False


def subscribed(channel):
    pubsub = redis.Redis.from_url(REDIS_URL).pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(channel)
    assert pubsub.get_message(timeout=1.0) is None
    return pubsub


def received(pubsub):
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if (message := pubsub.get_message(timeout=0.5)) is not None:
            return json.loads(message["data"])
    return None


def test_an_announcer_publishes_over_the_connection_it_opened_ahead():
    channel = f"vigil-test-announcer-{os.getpid()}"
    client = redis.Redis.from_url(REDIS_URL)
    pubsub = subscribed(channel)
    announcer = Announcer(redis_target(REDIS_URL, channel), 2.0, name="vigil-shim:7/1/worker-0")
    try:
        assert announcer.open()
        [held] = [c for c in client.client_list() if c.get("name") == "vigil-shim:7/1/worker-0"]
        accepted = client.info("stats")["total_connections_received"]
        assert announcer.publish(json.dumps({"job_id": "7", "exit_code": 1}))
        assert received(pubsub) == {"job_id": "7", "exit_code": 1}
        assert client.info("stats")["total_connections_received"] == accepted
        assert [c["cmd"] for c in client.client_list() if c["id"] == held["id"]] == ["publish"]
    finally:
        announcer.close()
        pubsub.close()
        client.close()


def test_an_announcer_whose_connection_the_server_closed_publishes_over_a_fresh_one():
    channel = f"vigil-test-announcer-killed-{os.getpid()}"
    client = redis.Redis.from_url(REDIS_URL)
    pubsub = subscribed(channel)
    announcer = Announcer(redis_target(REDIS_URL, channel), 2.0, name=f"vigil-test-killed-{os.getpid()}")
    try:
        assert announcer.open()
        # What a restart or an idle `timeout` does to it.
        [held] = [c for c in client.client_list() if c.get("name") == f"vigil-test-killed-{os.getpid()}"]
        client.client_kill_filter(_id=held["id"])
        assert announcer.publish(json.dumps({"job_id": "8"}))
        assert received(pubsub) == {"job_id": "8"}
    finally:
        announcer.close()
        pubsub.close()
        client.close()


def test_an_announcer_that_cannot_connect_or_authenticate_is_false_not_an_exception():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = Announcer({"host": "127.0.0.1", "port": port, "channel": "c"}, 0.5)
    assert down.open() is False and down.publish("{}") is False
    assert Announcer(None, 0.5).open() is False and Announcer(None, 0.5).publish("{}") is False
    refused = Announcer(dict(redis_target(REDIS_URL, "c") or {}, password="not-the-password"), 2.0)
    assert refused.open() is False and refused.sock is None
    assert refused.publish("{}") is False
