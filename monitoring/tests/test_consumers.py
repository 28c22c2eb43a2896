"""The live job socket (ws/jobs/<id>/) through the whole ASGI application:
origin check, session authentication, workspace membership, log batches by
byte offset, events pushed after commit through the real Redis channel layer,
and a reconnect that resumes with nothing lost and nothing doubled."""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator as _WebsocketCommunicator
from django.test import Client

from jobs import actions
from jobs.models import EventType

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.redis]

ORIGIN = b"http://127.0.0.1"


def redis_host(settings) -> dict:
    """The Redis of settings with a read timeout above channels_redis's 5 s
    BZPOPMIN: redis-py 8's default socket timeout is also 5 s, which drops a
    consumer whose read loses that race (seen in daphne: redis TimeoutError
    closing a job socket after 5 s without messages)."""
    return {"address": settings.REDIS_URL, "socket_timeout": 30}


@pytest.fixture(autouse=True)
def private_channel_layer(settings):
    """The real Redis layer, under a prefix no other test run shares."""
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [redis_host(settings)], "prefix": f"vigil-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"},
        }
    }


@pytest.fixture
def app():
    from console.asgi import application

    return application


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


class WebsocketCommunicator(_WebsocketCommunicator):
    """Channels' communicator with a handshake that may take 10 s instead of 1 s: on a
    loaded machine the consumer's database read can outlast 1 s, and a timed-out
    handshake cancels the consumer in the middle of that read, which can hang the
    test until pytest's timeout instead of failing it."""

    async def connect(self, timeout=10):
        return await super().connect(timeout)


def communicator(app, job_id, cookie=None, origin=ORIGIN):
    """A socket to the job; `cookie` is a session id from session_cookie()."""
    headers = [(b"host", b"127.0.0.1")]
    if origin:
        headers.append((b"origin", origin))
    if cookie is not None:
        headers.append((b"cookie", f"sessionid={cookie}".encode()))
    return WebsocketCommunicator(app, f"/ws/jobs/{job_id}/", headers=headers)


async def collect(comm, until, timeout=5.0) -> list[dict]:
    """Messages until `until(messages)` is true; fails after `timeout` seconds."""
    messages: list[dict] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not until(messages):
        remaining = deadline - loop.time()
        assert remaining > 0, f"timed out; got {[m.get('type') for m in messages]}"
        messages.append(await comm.receive_json_from(timeout=remaining))
    return messages


def log_lines(messages, instance=None) -> list[str]:
    out = []
    for m in messages:
        if m["type"] == "log" and (instance is None or m["instance"] == instance):
            out.extend(m["lines"])
    return out


@pytest.fixture
def running_job(alice, alice_ws, job_body, memory_backend):
    job, _ = actions.submit_job(alice, job_body(alice_ws))  # launched after commit (Celery in-process)
    job.refresh_from_db()
    handle = job.attempts.get(number=1).backend_handle
    assert handle, "the attempt was launched"
    return job, handle


def test_member_receives_log_batches_and_events(app, alice, running_job, memory_backend):
    job, handle = running_job
    memory_backend.write_log(handle, "worker-0", "".join(f"epoch 0 step {i}\n" for i in range(5)))
    cookie = session_cookie(alice)

    async def scenario():
        comm = communicator(app, job.pk, cookie)
        connected, _ = await comm.connect()
        assert connected
        await comm.send_json_to({"type": "hello", "after_event": None, "logs": {"attempt": None, "offsets": {}}})
        first = await collect(comm, lambda ms: len(log_lines(ms, "worker-0")) >= 5)
        events = [m for m in first if m["type"] == "event"]
        assert [e["message"] for e in events][:2] == [
            "Job submitted by alice: PyTorchJob with 1 Master, 1 Worker.",
            "Attempt 1 is running.",
        ]
        assert any(m["type"] == "status" and m["status"] == "Running" and m["max_restarts"] == 3 for m in first)
        batch = next(m for m in first if m["type"] == "log")
        assert batch["attempt"] == 1 and batch["offset"] == 0
        assert log_lines(first, "worker-0") == [f"epoch 0 step {i}" for i in range(5)]

        # new output arrives as the next batch, starting where the last one ended
        memory_backend.write_log(handle, "worker-0", "epoch 1 step 0\npartial line without newline")
        more = await collect(comm, lambda ms: log_lines(ms, "worker-0") == ["epoch 1 step 0"])
        assert more[-1]["offset"] == batch["next_offset"]

        # an event committed elsewhere is pushed through the channel layer with its id
        event = await sync_to_async(actions.record_event)(job, EventType.CUSTOM_MESSAGE, "The loss is NaN.")
        pushed = await collect(comm, lambda ms: any(m["type"] == "event" for m in ms))
        got = next(m for m in pushed if m["type"] == "event")
        assert got["id"] == event.pk and got["message"] == "The loss is NaN." and got["event_type"] == "custom_message"
        await comm.disconnect()

    async_to_sync(scenario)()


@pytest.mark.parametrize("who", ["outsider", "anonymous", "foreign_origin", "no_origin"])
def test_socket_is_refused_to_anyone_but_a_member_from_this_site(app, who, alice, bob, bob_ws, running_job):
    job, _ = running_job
    comm = {
        "outsider": lambda: communicator(app, job.pk, session_cookie(bob)),
        "anonymous": lambda: communicator(app, job.pk, None),
        "foreign_origin": lambda: communicator(app, job.pk, session_cookie(alice), origin=b"https://evil.example.com"),
        "no_origin": lambda: communicator(app, job.pk, session_cookie(alice), origin=None),
    }[who]()

    async def scenario():
        connected, _ = await comm.connect()
        assert not connected
        await comm.disconnect()

    async_to_sync(scenario)()


def test_an_unknown_job_is_refused_like_a_foreign_one(app, alice, alice_ws):
    cookie = session_cookie(alice)

    async def scenario():
        comm = communicator(app, 999_999, cookie)
        connected, _ = await comm.connect()
        assert not connected
        # End the refused consumer as the server does (a websocket.disconnect); left running,
        # it is cancelled when async_to_sync closes its loop, and that cancellation can wait
        # forever on the channel layer's receive (seen once in CI: a 300 s timeout).
        await comm.disconnect()

    async_to_sync(scenario)()


def test_reconnect_with_offsets_resumes_without_a_gap_or_a_duplicate(app, alice, running_job, memory_backend):
    job, handle = running_job
    written = [f"line {i:05d} " + "x" * (i % 50) for i in range(3000)]
    cookie = session_cookie(alice)

    async def scenario():
        memory_backend.write_log(handle, "worker-0", "".join(line + "\n" for line in written[:1000]))
        comm = communicator(app, job.pk, cookie)
        assert (await comm.connect())[0]
        await comm.send_json_to(
            {"type": "hello", "after_event": None, "logs": {"attempt": 1, "instances": ["worker-0"], "offsets": {}}}
        )
        got = await collect(comm, lambda ms: len(log_lines(ms)) >= 1000)
        last_event = max(m["id"] for m in got if m["type"] == "event")
        offset = max(m["next_offset"] for m in got if m["type"] == "log")
        await comm.disconnect()

        # while away: more output and an event
        memory_backend.write_log(handle, "worker-0", "".join(line + "\n" for line in written[1000:2000]))
        missed = await sync_to_async(actions.record_event)(job, EventType.HANG, "All instances silent for 30 s.")

        comm = communicator(app, job.pk, cookie)
        assert (await comm.connect())[0]
        await comm.send_json_to(
            {
                "type": "hello",
                "after_event": last_event,
                "logs": {"attempt": 1, "instances": ["worker-0"], "offsets": {"1:worker-0": offset}},
            }
        )
        memory_backend.write_log(handle, "worker-0", "".join(line + "\n" for line in written[2000:]))
        again = await collect(comm, lambda ms: len(log_lines(ms)) >= 2000)
        await comm.disconnect()
        return got, again, missed

    got, again, missed = async_to_sync(scenario)()
    assert log_lines(got) + log_lines(again) == written
    assert [m["id"] for m in again if m["type"] == "event"] == [missed.pk]
    batches = [m for m in got + again if m["type"] == "log"]
    assert all(a["next_offset"] == b["offset"] for a, b in zip(batches, batches[1:]))


def workspace_communicator(app, slug, cookie):
    return WebsocketCommunicator(
        app,
        f"/ws/workspaces/{slug}/",
        headers=[(b"host", b"127.0.0.1"), (b"origin", ORIGIN), (b"cookie", f"sessionid={cookie}".encode())],
    )


def test_workspace_socket_tells_members_of_status_changes_and_refuses_outsiders(
    app, alice, bob, bob_ws, alice_ws, running_job
):
    job, _ = running_job
    member, outsider = session_cookie(alice), session_cookie(bob)

    async def scenario():
        refused = workspace_communicator(app, alice_ws.slug, outsider)
        assert not (await refused.connect())[0]
        await refused.disconnect()  # as above: a refused consumer left running can hang the loop's close
        comm = workspace_communicator(app, alice_ws.slug, member)
        assert (await comm.connect())[0]
        await sync_to_async(actions.stop_job)(alice, job)
        got = await collect(comm, lambda ms: any(m["type"] == "status" and m["job_id"] == job.pk for m in ms))
        status = next(m for m in got if m["type"] == "status")
        assert status["status"] in ("Stopping", "Stopped")
        await comm.disconnect()

    async_to_sync(scenario)()


def test_batches_carry_line_numbers_and_a_permalink_target_opens_at_its_line(app, alice, running_job, memory_backend):
    job, handle = running_job
    memory_backend.write_log(handle, "worker-0", "".join(f"line {i}\n" for i in range(1, 1001)))
    cookie = session_cookie(alice)

    async def scenario():
        comm = communicator(app, job.pk, cookie)
        assert (await comm.connect())[0]
        await comm.send_json_to(
            {
                "type": "hello",
                "after_event": None,
                "logs": {
                    "attempt": 1,
                    "instances": ["worker-0"],
                    "offsets": {},
                    "target": {"instance": "worker-0", "line": 700},
                },
            }
        )
        got = await collect(comm, lambda ms: len(log_lines(ms)) >= 400)
        target = next(m for m in got if m["type"] == "log_target")
        batches = [m for m in got if m["type"] == "log"]
        assert target["line"] == 700 and target["instance"] == "worker-0"
        assert batches[0]["line"] == 600 and batches[0]["lines"][0] == "line 600"
        for b in batches:  # every batch's first line is numbered from the start of the file
            assert b["lines"][0] == f"line {b['line']}" and b["next_line"] == b["line"] + len(b["lines"])

        # the classifier's byte offset resolves to its line; a missing line says why
        offset = sum(len(f"line {i}\n") for i in range(1, 42))
        await comm.send_json_to(
            {
                "type": "logs",
                "attempt": 1,
                "instances": ["worker-0"],
                "offsets": {},
                "target": {"instance": "worker-0", "offset": offset},
            }
        )
        got = await collect(comm, lambda ms: any(m["type"] == "log_target" for m in ms))
        assert next(m for m in got if m["type"] == "log_target")["line"] == 42
        await comm.send_json_to(
            {
                "type": "logs",
                "attempt": 1,
                "instances": ["worker-0"],
                "offsets": {},
                "target": {"instance": "worker-0", "line": 5000},
            }
        )
        got = await collect(comm, lambda ms: any(m["type"] == "log_target" for m in ms))
        missing = next(m for m in got if m["type"] == "log_target")
        assert missing["line"] is None and missing["why"] == "the log has 1,000 lines"
        await comm.send_json_to(
            {
                "type": "logs",
                "attempt": 1,
                "instances": ["worker-9"],
                "offsets": {},
                "target": {"instance": "worker-9", "line": 1},
            }
        )
        got = await collect(comm, lambda ms: any(m["type"] == "log_target" for m in ms))
        unknown = next(m for m in got if m["type"] == "log_target")
        assert unknown["line"] is None and unknown["missing_instance"] is True
        await comm.disconnect()

    async_to_sync(scenario)()


def test_every_log_message_carries_the_subscription_it_answers(app, alice, running_job, memory_backend):
    """The page numbers its subscriptions: a batch the old stream had already sent when
    the page chose another instance carries the old number and is not shown (a jump to
    the classified line once lost to the all-instances batch that arrived after it)."""
    job, handle = running_job
    memory_backend.write_log(handle, "worker-0", "".join(f"line {i}\n" for i in range(1, 201)))
    cookie = session_cookie(alice)

    async def scenario():
        comm = communicator(app, job.pk, cookie)
        assert (await comm.connect())[0]
        await comm.send_json_to(
            {"type": "hello", "after_event": None, "logs": {"attempt": 1, "instances": None, "offsets": {}, "sub": 1}}
        )
        got = await collect(comm, lambda ms: len(log_lines(ms)) >= 200)
        assert {m["sub"] for m in got if m["type"] == "log"} == {1}
        await comm.send_json_to(
            {
                "type": "logs",
                "attempt": 1,
                "instances": ["worker-0"],
                "offsets": {},
                "sub": 2,
                "target": {"instance": "worker-0", "line": 150},
            }
        )
        got = await collect(
            comm, lambda ms: any(m["type"] == "log" for m in ms) and any(m["type"] == "log_target" for m in ms)
        )
        assert {m["sub"] for m in got if m["type"] in ("log", "log_target")} == {2}
        # a client that sends no number (or not an integer) gets null, never an error
        await comm.send_json_to({"type": "logs", "attempt": 1, "instances": ["worker-0"], "offsets": {}, "sub": "x"})
        got = await collect(comm, lambda ms: any(m["type"] == "log" for m in ms))
        assert {m["sub"] for m in got if m["type"] == "log"} == {None}
        await comm.disconnect()

    async_to_sync(scenario)()


def test_a_reconnect_after_a_restart_shows_the_end_of_the_failed_attempt_before_the_new_one(
    app, alice, alice_ws, job_body, memory_backend
):
    """Issue 20, 6: the failed attempt's last lines (its error) are not skipped."""
    from datetime import timedelta

    from django.utils import timezone

    from jobs.models import Attempt
    from monitoring import restarts, tick

    job, _ = actions.submit_job(
        alice,
        job_body(
            alice_ws,
            settings={
                "enable_error_monitoring_in_aimaster": True,
                "error_monitoring_args": "--job-execution-mode=Sync --enable-job-restart=True --max-num-of-job-restart=3 "
                "--fault-tolerant-policy=ExitCodeAndErrorMsg",
            },
        ),
    )
    handle = job.attempts.get(number=1).backend_handle
    cookie = session_cookie(alice)
    nccl = (
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1331, "
        "unhandled system error, NCCL version 2.18.1"
    )

    def fail_and_restart():
        memory_backend.write_log(handle, "worker-0", nccl + "\n" + "last words without a newline")
        memory_backend.finish(handle, "worker-0", exit_code=1)
        tick.run_job(job.pk, now=timezone.now() + timedelta(seconds=restarts.CASCADE_SETTLE_SECONDS + 1))
        second = Attempt.objects.get(job=job, number=2).backend_handle
        assert second, "attempt 2 was launched"
        memory_backend.write_log(second, "worker-0", "attempt 2 step 1\n")

    async def scenario():
        memory_backend.write_log(handle, "worker-0", "step 1\nstep 2\n")
        comm = communicator(app, job.pk, cookie)
        assert (await comm.connect())[0]
        await comm.send_json_to({"type": "hello", "after_event": None, "logs": {"attempt": None, "offsets": {}}})
        got = await collect(comm, lambda ms: log_lines(ms, "worker-0") == ["step 1", "step 2"])
        offsets = {f"{m['attempt']}:{m['instance']}": m["next_offset"] for m in got if m["type"] == "log"}
        await comm.disconnect()

        await sync_to_async(fail_and_restart)()  # while the page is away

        comm = communicator(app, job.pk, cookie)
        assert (await comm.connect())[0]
        await comm.send_json_to({"type": "hello", "after_event": None, "logs": {"attempt": None, "offsets": offsets}})
        again = await collect(comm, lambda ms: "attempt 2 step 1" in log_lines(ms, "worker-0"))
        await comm.disconnect()
        return again

    again = async_to_sync(scenario)()
    batches = [
        (m["attempt"], line) for m in again if m["type"] == "log" and m["instance"] == "worker-0" for line in m["lines"]
    ]
    assert batches == [(1, nccl), (1, "last words without a newline"), (2, "attempt 2 step 1")]


def scraped(name: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    from console.metrics import render

    text = render()[0].decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


def test_a_live_log_stream_counts_as_a_viewer_and_its_lines_as_streamed(app, alice, running_job, memory_backend):
    job, handle = running_job
    memory_backend.write_log(handle, "worker-0", "".join(f"step {i}\n" for i in range(6)))
    viewers, lines = scraped("vigil_log_viewers"), scraped("vigil_log_lines_streamed_total")
    cookie = session_cookie(alice)

    async def until(check):
        # The stream records in a thread, never waiting for Redis: give it a moment.
        for _ in range(100):
            if await sync_to_async(check)():
                return
            await asyncio.sleep(0.02)
        raise AssertionError("the metrics did not move")

    async def scenario():
        comm = communicator(app, job.pk, cookie)
        assert (await comm.connect())[0]
        await comm.send_json_to({"type": "hello", "after_event": None, "logs": {"attempt": None, "offsets": {}}})
        await collect(comm, lambda ms: len(log_lines(ms, "worker-0")) >= 6)
        await until(
            lambda: (
                scraped("vigil_log_viewers") == viewers + 1 and scraped("vigil_log_lines_streamed_total") >= lines + 6
            )
        )
        await comm.disconnect()
        await until(lambda: scraped("vigil_log_viewers") == viewers)

    async_to_sync(scenario)()


def test_a_kept_report_progress_step_reaches_the_workspace_and_job_sockets_once(app, alice, alice_ws, running_job):
    """One 'progress' message per step the SDK view keeps: a second rank reporting the
    same step (not kept) sends nothing, so pages refetch once per step, not per rank."""
    from rest_framework.test import APIClient

    job, _ = running_job
    sdk = APIClient()
    sdk.credentials(HTTP_AUTHORIZATION=f"Bearer {job.reset_token()}")
    cookie = session_cookie(alice)

    def report(step, rank):
        r = sdk.post(
            f"/api/v1/sdk/jobs/{job.pk}/progress/",
            {"step": step, "rank": rank, "metrics": {"loss": 1.5}},
            format="json",
        )
        assert r.status_code == 202, r.content

    async def scenario():
        listing = workspace_communicator(app, alice_ws.slug, cookie)
        page = communicator(app, job.pk, cookie)
        assert (await listing.connect())[0] and (await page.connect())[0]
        for step, rank in ((7, 0), (7, 1), (8, 0)):
            await sync_to_async(report)(step, rank)
        seen = {}
        for name, comm in (("list", listing), ("page", page)):
            # in order: a message for the repeated step 7 would stand between 7 and 8
            got = await collect(comm, lambda ms: any(m["type"] == "progress" and m["step"] == 8 for m in ms))
            seen[name] = [(m["job_id"], m["attempt"], m["step"]) for m in got if m["type"] == "progress"]
            await comm.disconnect()
        return seen

    seen = async_to_sync(scenario)()
    assert seen == {"list": [(job.pk, 1, 7), (job.pk, 1, 8)], "page": [(job.pk, 1, 7), (job.pk, 1, 8)]}
