"""hang_detect(seconds): the hang interval for one function's scope, restored after,
asserted by the config requests the console receives."""

import asyncio
import threading

import pytest

from loopback_console import job_env
from vigil import job_monitor as jm


def intervals(console):
    return [b["job_hang_interval"] for b in console.bodies("config")]


@pytest.fixture
def monitor(console):
    return jm.Monitor(config=jm.PyTorchConfig(job_hang_interval=1800), environ=job_env(console.url))


def test_a_function_runs_with_its_interval_and_the_previous_one_comes_back(console, monitor):
    seen = []

    @jm.hang_detect(180)
    def train(epoch, lr=0.1):
        seen.append(monitor.job_hang_interval)
        return epoch * lr

    assert train(3, lr=0.5) == 1.5
    assert seen == [180] and monitor.job_hang_interval == 1800
    assert intervals(console) == [1800, 180, 1800]
    assert train.__name__ == "train"


def test_minus_one_suspends_detection_for_the_scope(console, monitor):
    @monitor.hang_detect(-1)
    def evaluate():
        return monitor.job_hang_interval

    assert evaluate() == -1
    assert intervals(console) == [1800, -1, 1800]


def test_nested_scopes_restore_each_level(console, monitor):
    @jm.hang_detect(60)
    def inner():
        return monitor.job_hang_interval

    @jm.hang_detect(300)
    def outer():
        before = monitor.job_hang_interval
        got = inner()
        return before, got, monitor.job_hang_interval

    assert outer() == (300, 60, 300)
    assert intervals(console) == [1800, 300, 60, 300, 1800]


def test_an_exception_restores_the_interval_and_still_reaches_the_caller(console, monitor):
    @jm.hang_detect(120)
    def inner():
        raise KeyError("boom")

    @jm.hang_detect(600)
    def outer():
        try:
            inner()
        finally:
            assert monitor.job_hang_interval == 600

    with pytest.raises(KeyError, match="boom"):
        outer()
    assert monitor.job_hang_interval == 1800
    assert intervals(console) == [1800, 600, 120, 600, 1800]


def test_coroutine_functions_keep_their_interval_across_awaits(console, monitor):
    @jm.hang_detect(90)
    async def fetch(x):
        await asyncio.sleep(0.01)
        return x, monitor.job_hang_interval

    @jm.hang_detect(30)
    async def failing():
        await asyncio.sleep(0)
        raise ValueError("bad batch")

    async def main():
        got = await fetch(7)
        with pytest.raises(ValueError, match="bad batch"):
            await failing()
        return got

    assert asyncio.iscoroutinefunction(fetch)
    assert asyncio.run(main()) == (7, 90)
    assert intervals(console) == [1800, 90, 1800, 30, 1800]


def test_overlapping_coroutines_end_on_the_base_value(console, monitor):
    gate = None

    @jm.hang_detect(100)
    async def first():
        await gate.wait()

    @jm.hang_detect(200)
    async def second():
        await asyncio.sleep(0.01)

    async def main():
        nonlocal gate
        gate = asyncio.Event()
        task = asyncio.create_task(first())
        await asyncio.sleep(0.01)
        await second()  # opens inside first's scope, closes before it
        gate.set()
        await task

    asyncio.run(main())
    # first's scope is still open when second's closes, so 100 comes back, then the base
    assert intervals(console) == [1800, 100, 200, 100, 1800]
    assert monitor.job_hang_interval == 1800


def test_a_generator_keeps_its_interval_until_it_is_exhausted(console, monitor):
    @jm.hang_detect(45)
    def batches():
        yield monitor.job_hang_interval
        yield monitor.job_hang_interval

    assert list(batches()) == [45, 45]
    assert intervals(console) == [1800, 45, 1800]


def test_threads_with_overlapping_scopes_leave_the_base_value(console, monitor):
    inside = threading.Barrier(2)

    @jm.hang_detect(100)
    def a():
        inside.wait(5)
        inside.wait(5)

    @jm.hang_detect(200)
    def b():
        inside.wait(5)
        inside.wait(5)

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert monitor.job_hang_interval == 1800
    assert intervals(console)[-1] == 1800


def test_reset_config_inside_a_scope_lasts_until_the_scope_ends(console, monitor):
    @jm.hang_detect(300)
    def stage():
        monitor.reset_config(job_hang_interval=20)
        return monitor.job_hang_interval

    assert stage() == 20
    assert intervals(console) == [1800, 300, 20, 1800]


def test_the_decorator_uses_the_monitor_created_after_decoration(console):
    @jm.hang_detect(50)
    def step():
        return "done"

    jm.Monitor(config=jm.TFConfig(job_hang_interval=900), environ=job_env(console.url))
    assert step() == "done"
    assert intervals(console) == [900, 50, 900]


def test_the_base_value_comes_from_the_backend_when_the_code_gives_none(console):
    monitor = jm.Monitor(environ=job_env(console.url, VIGIL_JOB_HANG_INTERVAL="3600"))

    @monitor.hang_detect(10)
    def quick():
        pass

    quick()
    assert intervals(console) == [10, 3600]


def test_a_scope_that_could_not_change_the_interval_sends_nothing_on_the_way_out(console, monitor):
    from loopback_console import ERROR

    @monitor.hang_detect(15)
    def work():
        console.mode = "ok"

    console.mode = ERROR
    work()
    # 15 was refused, so the console still has 1800: nothing to restore
    assert intervals(console) == [1800, 15]
    assert monitor.last_config_status.ok() is False


def test_outside_a_job_the_decorated_function_just_runs():
    @jm.hang_detect(10)
    def work(x):
        return x + 1

    assert work(1) == 2


@pytest.mark.parametrize(
    "seconds, error, says",
    [
        (
            0,
            ValueError,
            "hang_detect(seconds) must be a whole number of seconds > 0, or -1 to suspend hang detection; got 0",
        ),
        (-2, ValueError, "got -2"),
        ("600", TypeError, "got '600'"),
    ],
)
def test_a_bad_interval_is_refused_where_it_is_written(seconds, error, says):
    with pytest.raises(error) as raised:
        jm.hang_detect(seconds)
    assert says in str(raised.value)


def test_decorating_something_that_is_not_a_function_is_a_type_error():
    with pytest.raises(TypeError, match=r"hang_detect\(10\) decorates a function; got 5"):
        jm.hang_detect(10)(5)
