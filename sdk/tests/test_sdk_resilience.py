"""The SDK never hurts the training loop: bounded time, no exceptions, threads, fork."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import subprocess_env
from loopback_console import (
    ERROR,
    OK,
    RATE_LIMITED,
    SERVER_ERROR,
    LoopbackConsole,
    SilentConsole,
    closed_port_url,
    job_env,
)
from vigil import c4d
from vigil import job_monitor as jm
from vigil._client import Status, StatusCode

MARGIN = 1.0  # seconds on top of the SDK timeout for thread start-up on a busy 2-core machine


def every_public_call(monitor):
    """Each way training code talks to the SDK, as (name, call) pairs."""

    @monitor.hang_detect(60)
    def scoped():
        return "ran"

    return [
        ("send_custom_message", lambda: monitor.send_custom_message(content="hi")),
        ("set_retryable_errors", lambda: monitor.set_retryable_errors(["x"])),
        ("reset_config", lambda: monitor.reset_config(job_hang_interval=30)),
        ("reset_config(dict)", lambda: monitor.reset_config({"job_hang_interval": 30})),
        ("report_progress", lambda: monitor.report_progress(step=1, loss=0.25)),
        ("hang_detect", scoped),
    ]


def test_a_silent_console_costs_at_most_the_default_timeout(silent_console):
    monitor = jm.Monitor(environ=job_env(silent_console.url))
    assert monitor.timeout == 2.0
    started = time.monotonic()
    st = monitor.send_custom_message(content="hi")
    elapsed = time.monotonic() - started
    assert st.code == StatusCode.TIMEOUT and not st.ok()
    assert "did not answer within 2 s" in st.message
    assert 1.9 < elapsed < 2.0 + MARGIN
    assert silent_console.connections == 1


def test_after_a_timeout_calls_fail_fast_for_a_while(silent_console):
    monitor = jm.Monitor(environ=job_env(silent_console.url, VIGIL_SDK_TIMEOUT="0.3"))
    assert monitor.send_custom_message(content="first").code == StatusCode.TIMEOUT
    started = time.monotonic()
    st = monitor.set_retryable_errors(["x"])
    assert time.monotonic() - started < 0.1
    assert st.code == StatusCode.UNAVAILABLE
    assert "did not answer within 0.3 s; the SDK waits 5 s more before calling the console again" in st.message
    assert silent_console.connections == 1


def test_the_timeout_comes_from_the_constructor_over_the_environment(silent_console):
    monitor = jm.Monitor(environ=job_env(silent_console.url, VIGIL_SDK_TIMEOUT="5"), timeout=0.25)
    started = time.monotonic()
    assert monitor.reset_config(job_hang_interval=9).code == StatusCode.TIMEOUT
    assert time.monotonic() - started < 0.25 + MARGIN


def test_a_closed_port_is_unavailable_at_once():
    url = closed_port_url()
    monitor = jm.Monitor(environ=job_env(url))
    started = time.monotonic()
    st = monitor.send_custom_message(content="hi")
    assert time.monotonic() - started < 1.0
    assert st.code == StatusCode.UNAVAILABLE
    assert st.message.startswith("cannot reach the console at %s: " % url)
    assert "refused" in st.message.lower()


@pytest.mark.parametrize(
    "mode", [OK, ERROR, RATE_LIMITED, SERVER_ERROR, "silent", "closed", "not in a job", "misconfigured"]
)
def test_no_exception_escapes_and_every_call_is_bounded(mode):
    server = None
    if mode == "silent":
        server = SilentConsole()
        environ = job_env(server.url, VIGIL_SDK_TIMEOUT="0.3")
    elif mode == "closed":
        environ = job_env(closed_port_url(), VIGIL_SDK_TIMEOUT="0.3")
    elif mode == "not in a job":
        environ = {}
    elif mode == "misconfigured":
        environ = job_env("not a url", VIGIL_SDK_TIMEOUT="0.3")
    else:
        server = LoopbackConsole(mode)
        environ = job_env(server.url, VIGIL_SDK_TIMEOUT="0.3")
    try:
        monitor = jm.Monitor(config=jm.PyTorchConfig(job_hang_interval=100), environ=environ)
        for name, call in every_public_call(monitor):
            started = time.monotonic()
            result = call()
            # a hang_detect scope makes two config calls
            assert time.monotonic() - started < 2 * 0.3 + MARGIN, name
            if name == "hang_detect":
                assert result == "ran"
            else:
                assert isinstance(result, Status), name
                if name == "report_progress":  # queued for the background sender when in a job
                    assert result.ok() == (mode not in ("not in a job", "misconfigured")), result
                else:
                    assert result.ok() == (mode == OK), (name, result)
        with c4d.collective("all_reduce"):
            pass
    finally:
        if server is not None:
            server.close()


def test_twenty_threads_calling_at_once_all_get_through(console):
    monitor = jm.Monitor(environ=job_env(console.url))
    results = [None] * 20
    start = threading.Barrier(20)

    def worker(i):
        start.wait()
        results[i] = monitor.send_custom_message(content="thread %d" % i)
        monitor.report_progress(step=i)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert all(st is not None and st.ok() for st in results), results
    assert sorted(b["content"] for b in console.bodies("messages")) == sorted("thread %d" % i for i in range(20))


def test_twenty_threads_against_a_silent_console_all_return_in_time(silent_console):
    monitor = jm.Monitor(environ=job_env(silent_console.url, VIGIL_SDK_TIMEOUT="0.5"))
    results = [None] * 20
    start = threading.Barrier(20)

    def worker(i):
        start.wait()
        began = time.monotonic()
        st = monitor.reset_config(job_hang_interval=10 + i)
        results[i] = (st.code, time.monotonic() - began)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert all(r is not None for r in results)
    assert all(elapsed < 0.5 + MARGIN for _, elapsed in results), results
    assert {code for code, _ in results} <= {StatusCode.TIMEOUT, StatusCode.UNAVAILABLE}


def wait_child(pid, timeout=15.0):
    """The child's exit code; the child is killed if it has not exited by then."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError("forked child %d did not exit within %s s" % (pid, timeout))


def test_a_forked_child_can_call_the_sdk(console):
    monitor = jm.Monitor(environ=job_env(console.url))
    monitor.report_progress(step=1)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if monitor.send_custom_message(content="from the child").ok() else 3
            code = code or (0 if monitor.report_progress(step=2).ok() else 4)
            code = code or (0 if monitor._progress._pid == os.getpid() else 5)
        finally:
            os._exit(code)
    assert wait_child(pid) == 0
    assert console.bodies("messages") == [{"content": "from the child"}]


def test_fork_while_another_thread_waits_on_the_console_leaves_the_child_usable(silent_console):
    monitor = jm.Monitor(environ=job_env(silent_console.url, VIGIL_SDK_TIMEOUT="1.5"))
    waiting = threading.Thread(target=monitor.reset_config, kwargs={"job_hang_interval": 5})
    waiting.start()
    deadline = time.monotonic() + 5
    while not monitor._send.locked() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert monitor._send.locked()  # the parent's config lock is held across fork
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            began = time.monotonic()
            st = monitor.reset_config(job_hang_interval=7)
            elapsed = time.monotonic() - began
            # The child's lock is its own, so it gets to ask the console (which stays silent).
            code = 0 if st.code == StatusCode.TIMEOUT and elapsed < 1.5 + MARGIN else 2
        finally:
            os._exit(code)
    try:
        assert wait_child(pid) == 0
    finally:
        waiting.join(5)


def test_progress_is_sent_at_most_once_a_second_and_always_the_newest(console):
    monitor = jm.Monitor(environ=job_env(console.url))
    started = time.monotonic()
    for step in range(2000):
        st = monitor.report_progress(step=step, loss=1.0 / (step + 1))
    calls_took = time.monotonic() - started
    assert st.ok() and st.message == "step 1999 queued; sent at most once per second"
    assert calls_took < 1.0  # no network in the caller
    assert console.wait_for(lambda c: any(b["step"] == 1999 for b in c.bodies("progress")), timeout=3)
    bodies = console.bodies("progress")
    assert len(bodies) <= 2 + int(time.monotonic() - started)
    assert bodies[-1] == {"step": 1999, "metrics": {"loss": 1.0 / 2000}}
    times = [r.at for r in console.received("progress")]
    assert all(b - a >= 0.95 for a, b in zip(times, times[1:])), times


def test_progress_takes_a_metrics_dict_and_leaves_out_nan(console):
    monitor = jm.Monitor(environ=job_env(console.url))
    st = monitor.report_progress(step=3, metrics={"loss": float("nan"), "lr": 0.1}, tokens=4096)
    assert st.ok() and st.message.endswith("'loss' left out (NaN or infinite)")
    assert console.wait_for(lambda c: c.bodies("progress"), timeout=3)
    assert console.bodies("progress") == [{"step": 3, "metrics": {"lr": 0.1, "tokens": 4096}}]
    deadline = time.monotonic() + 3
    while monitor.last_progress_status is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert monitor.last_progress_status.ok()


@pytest.mark.parametrize(
    "kwargs, says",
    [
        ({"step": -1}, "step must be an int >= 0; got -1"),
        ({"step": 1.5}, "step must be an int >= 0; got 1.5"),
        ({"step": 1, "loss": "low"}, "metric 'loss' must be a number (int or float); got str"),
        ({"step": 1, "metrics": [1]}, "metrics must be a dict"),
    ],
)
def test_bad_progress_is_refused_in_the_status(console, kwargs, says):
    st = jm.Monitor(environ=job_env(console.url)).report_progress(**kwargs)
    assert st.code == StatusCode.INVALID_ARGUMENT and says in st.message


def test_the_last_progress_report_is_sent_at_exit(console):
    script = (
        "from vigil import job_monitor as jm\nm = jm.Monitor()\nfor step in range(5): m.report_progress(step=step)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], env=subprocess_env(console.url), timeout=30, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert console.bodies("progress")[-1] == {"step": 4, "metrics": {}}


def test_a_silent_console_delays_exit_by_at_most_the_timeout(silent_console):
    script = (
        "from vigil import job_monitor as jm\n"
        "m = jm.Monitor()\n"
        "for step in range(5): m.report_progress(step=step)\n"
        "m.send_custom_message(content='bye')\n"
    )
    env = subprocess_env(silent_console.url, VIGIL_SDK_TIMEOUT="0.5")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", script], env=env, timeout=30, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    # one timed-out message, then the breaker skips the exit-time progress flush
    assert time.monotonic() - started < 0.5 * 3 + 2 * MARGIN
