"""The shim learns of its instance's exit from a blocking wait, not a polling loop, and
has little left to do then (issue 28, point 3).

74c7501 made the shim's wait a 50 ms `waitpid(WNOHANG)` + sleep loop, to stamp the log's
growth, and every exit became up to 50 ms late. These tests hold the wait to what it
must be without timing it: the thread that waits for the instance does not wake while
the instance runs (counted with the kernel's own context-switch counters, against the
shim's other wake-ups as the clock), and the thread that keeps stamping the log cannot
take a signal meant for the waiting one.

Once woken, the shim writes exit.json and announces the exit; the slow parts of that
(creating a file, connecting to Redis and authenticating) are done while the instance
runs, and are checked by what the exit leaves: no new inode, no new Redis connection.
A Redis that restarted meanwhile still hears of the exit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import redis

from console.devredis import PrivateRedis
from jobs.backends import shim as shim_module
from jobs.backends.base import InstanceState
from jobs.tests.test_local_backend import Backends, attempt, wait_finished, wait_until
from testsupport.jobs import job_writable, let_jobs_reach

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads /proc (Linux)")


@pytest.fixture
def backends(tmp_path):
    let_jobs_reach(tmp_path)
    made = Backends(tmp_path / "data")
    yield made
    made.teardown()


def task_status(pid: int) -> dict[int, dict[str, str]]:
    """Each thread of `pid` (by thread id) with its /proc status fields."""
    tasks = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            text = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except FileNotFoundError:  # a thread that just ended
            continue
        tasks[int(tid)] = dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)
    return tasks


def wake_ups(pid: int) -> dict[int, int]:
    """How many times each thread of `pid` has gone to sleep and been woken (voluntary
    context switches: a blocking call that returned, a sleep that ended)."""
    return {tid: int(s["voluntary_ctxt_switches"]) for tid, s in task_status(pid).items()}


def running_shim(backend, handle) -> int:
    state_path = Path(handle["dir"], "worker-0", "state.json")
    wait_until(state_path.exists, what="state.json")
    [status] = backend.poll(handle)
    assert status.state == InstanceState.RUNNING
    return json.loads(state_path.read_text())["shim_pid"]


def test_the_thread_that_waits_for_the_instance_does_not_wake_while_it_runs(backends):
    backend = backends()
    handle = backend.launch(attempt("sleep 60"))  # prints nothing: no stamp to write either
    shim = running_shim(backend, handle)
    # The shim's own wake-ups are the clock: let it settle past its start-up (launcher
    # pipe, signal handlers, the stamper's start), then watch it for ten more.
    start = sum(wake_ups(shim).values())
    wait_until(lambda: sum(wake_ups(shim).values()) >= start + 3, what="the shim to settle")
    before = wake_ups(shim)
    wait_until(lambda: sum(wake_ups(shim).values()) >= sum(before.values()) + 10, what="ten wake-ups of the shim")
    after = wake_ups(shim)

    # The main thread (its id is the PID) is the one in waitpid; a polling loop wakes
    # every interval, a blocking wait only for the exit (or a signal: none was sent).
    woke = after[shim] - before[shim]
    assert woke == 0, f"the shim's waiting thread woke {woke} times while its instance ran: it polls"
    wchan = Path(f"/proc/{shim}/task/{shim}/wchan").read_text().strip()
    if wchan not in ("", "0"):  # the kernel names where a thread sleeps (not every one does)
        assert wchan == "do_wait", f"the shim's waiting thread sleeps in {wchan}, not in waitpid"

    backend.stop(handle, grace=1.0)
    assert [s.state for s in backend.poll(handle)] == [InstanceState.STOPPED]


def test_a_signal_to_the_shim_reaches_the_waiting_thread_and_is_forwarded_to_the_instance(backends):
    backend = backends()
    # Traps TERM and ends with 3: the exit code proves the signal got to the instance.
    handle = backend.launch(attempt("trap 'echo got TERM; exit 3' TERM; while :; do sleep 0.05; done"))
    shim = running_shim(backend, handle)
    # Past the stamper's first look at the log: the main thread (which starts it with
    # every signal blocked, for the new thread to inherit) has restored its own mask.
    wait_until(lambda: any(n >= 2 for tid, n in wake_ups(shim).items() if tid != shim), what="the log stamper")
    tasks = task_status(shim)
    caught = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

    def blocked(tid):
        mask = int(tasks[tid]["SigBlk"], 16)
        return {sig for sig in caught if mask & (1 << (sig - 1))}

    # A process-directed signal goes to a thread that does not block it. Only the main
    # thread runs Python's handlers, and only its waitpid returns to run them: the
    # stamper taking SIGTERM would leave the stop waiting for the exit it should cause.
    assert blocked(shim) == set()
    for tid in set(tasks) - {shim}:
        assert blocked(tid) == set(caught), f"the shim's thread {tid} can take the instance's signals"

    os.kill(shim, signal.SIGTERM)
    [status] = wait_finished(backend, handle)
    assert (status.state, status.exit_code) == (InstanceState.FAILED, 3)
    assert b"got TERM" in backend.read_log(handle, "worker-0")


def shims_connection(client, handle, name="worker-0"):
    """The Redis connection the instance's shim holds (CLIENT LIST, by its CLIENT SETNAME), or None."""
    want = f"vigil-shim:{handle['job_id']}/{handle['attempt']}/{name}"
    return next((c for c in client.client_list() if c.get("name") == want), None)


def waiting_for(go: Path, code: int) -> str:
    """A command that runs until the test creates `go`, then exits with `code`."""
    return f"while [ ! -e {go} ]; do sleep 0.02; done; exit {code}"


def next_message(pubsub, timeout=10.0):
    return wait_until(
        lambda: pubsub.get_message(ignore_subscribe_messages=True, timeout=0.2), timeout, "the exit's announcement"
    )


@pytest.mark.redis
def test_the_exit_needs_no_new_file_and_no_new_connection_both_were_made_while_the_instance_ran(backends, tmp_path):
    backend = backends(redis_url=REDIS_URL)
    client = redis.Redis.from_url(REDIS_URL)
    pubsub = client.pubsub()
    pubsub.subscribe(backend.exit_channel)
    pubsub.get_message(timeout=1.0)
    go = tmp_path / "go"
    handle = backend.launch(attempt(waiting_for(go, 4), job_id="job-exit-path"))
    idir = Path(handle["dir"], "worker-0")
    try:
        # Authenticated: CLIENT SETNAME, sent after AUTH, is refused (NOAUTH) without it.
        wait_until(lambda: shims_connection(client, handle), what="the shim's connection to Redis")
        [reserved] = wait_until(lambda: list(idir.glob("exit.json.tmp.*")), what="exit.json's temporary file")
        assert not (idir / "exit.json").exists()
        inode = reserved.stat().st_ino
        connections = client.info("stats")["total_connections_received"]
        go.touch()
        announced = json.loads(next_message(pubsub)["data"])
        assert (announced["job_id"], announced["instance"], announced["exit_code"]) == ("job-exit-path", "worker-0", 4)
        # Over the connection held since the start: Redis accepted none since.
        assert client.info("stats")["total_connections_received"] == connections
        # exit.json is the file created while the instance ran, renamed; nothing is left beside it.
        assert (idir / "exit.json").stat().st_ino == inode
        assert json.loads((idir / "exit.json").read_text())["exit_code"] == 4
        assert list(idir.glob("exit.json.tmp.*")) == []
        wait_until(lambda: shims_connection(client, handle) is None, what="the shim to close its connection")
    finally:
        pubsub.close()
        client.close()


@pytest.mark.redis
def test_an_exit_is_announced_to_a_redis_that_restarted_while_the_instance_ran(backends, tmp_path):
    private = PrivateRedis(password="a-restart-in-between").start()
    try:
        backend = backends(redis_url=private.url)
        go = tmp_path / "go"
        handle = backend.launch(attempt(waiting_for(go, 5), job_id="job-redis-restart"))
        with redis.Redis.from_url(private.url) as client:
            wait_until(lambda: shims_connection(client, handle), what="the shim's connection to Redis")
        private.stop()  # the shim's connection goes with it
        private.start()  # the same port and password, a new server
        with redis.Redis.from_url(private.url) as client:
            pubsub = client.pubsub()
            pubsub.subscribe(backend.exit_channel)
            pubsub.get_message(timeout=1.0)
            go.touch()
            announced = json.loads(next_message(pubsub)["data"])
            pubsub.close()
        assert (announced["job_id"], announced["exit_code"]) == ("job-redis-restart", 5)
    finally:
        private.stop()


def test_a_reserved_file_is_written_atomically_and_falls_back_when_its_temporary_is_gone(tmp_path):
    target = tmp_path / "exit.json"
    reserved = shim_module.ReservedFile(str(target))
    [tmp] = list(tmp_path.glob("exit.json.tmp.*"))
    assert oct(tmp.stat().st_mode & 0o777) == "0o600" and not target.exists()
    reserved.write_json({"exit_code": 0})
    assert json.loads(target.read_text()) == {"exit_code": 0} and list(tmp_path.glob("exit.json.tmp.*")) == []
    # Someone removed the temporary meanwhile: the write still lands, through a fresh one.
    again = shim_module.ReservedFile(str(target))
    os.unlink(again.tmp)
    again.write_json({"exit_code": 1})
    assert json.loads(target.read_text()) == {"exit_code": 1} and list(tmp_path.glob("exit.json.tmp.*")) == []


def test_an_instance_that_left_nothing_behind_costs_no_scan_of_proc():
    # In a process of its own: the check reaps the caller's ended children.
    script = textwrap.dedent(
        """
        import os, subprocess, sys
        from jobs.backends import shim
        child = subprocess.Popen(["true"], process_group=0)
        os.waitpid(child.pid, 0)
        def scanned(_roots):
            sys.exit("scanned /proc")
        shim.descendants = scanned
        shim._end_leftovers(child.pid, 0.2)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


def test_what_an_instance_left_running_when_it_exited_is_still_ended(backends):
    backend = backends()
    pidfile = Path(job_writable(backends.data_dir.parent / "shared")) / "pids"
    # One in the instance's group, one that left it: each outlives the instance.
    handle = backend.launch(attempt(f"sleep 30 & echo $! >> {pidfile}; setsid sleep 31 & echo $! >> {pidfile}; exit 0"))
    [status] = wait_finished(backend, handle)
    assert (status.state, status.exit_code) == (InstanceState.SUCCEEDED, 0)
    pids = [int(p) for p in pidfile.read_text().split()]
    assert len(pids) == 2

    def ended(pid):
        return shim_module.proc_start_ticks(pid) is None  # gone, or a zombie

    wait_until(lambda: all(ended(p) for p in pids), what="the shim to end what the instance left")
