"""The in-memory backend: the contract with state set by hand, fast enough for benchmarks."""

from __future__ import annotations

import time

import pytest

from jobs.backends.base import AttemptLaunch, Backend, BackendError, InstanceState
from jobs.backends.frameworks import build_instances
from jobs.backends.memory import MemoryBackend


def spec(job_id="j1", attempt=1, workers=2, **kw):
    return AttemptLaunch(
        job_id,
        attempt,
        "PyTorchJob",
        build_instances("PyTorchJob", {"Master": 1, "Worker": workers}, "python t.py"),
        {},
        **kw,
    )


def test_a_launched_attempt_runs_every_instance_until_the_test_ends_one():
    backend = MemoryBackend()
    handle = backend.launch(spec())

    backend.write_log(handle, "worker-1", b"NCCL error: unhandled system error\n", now=100.0)
    backend.finish(handle, "worker-1", exit_code=1, now=101.0)

    status = {s.name: s for s in backend.poll(handle)}
    assert status["master-0"].state == InstanceState.RUNNING
    assert (
        status["worker-1"].state,
        status["worker-1"].exit_code,
        status["worker-1"].exited_at,
        status["worker-1"].last_output_at,
    ) == (InstanceState.FAILED, 1, 101.0, 100.0)
    assert backend.tail_log(handle, "worker-1", 6) == b"error\n"
    assert backend.read_log(handle, "worker-1", offset=0, limit=4) == b"NCCL"
    assert backend.launched == [spec()]


def test_any_field_can_be_set_directly():
    backend = MemoryBackend()
    handle = backend.launch(spec())
    backend.set_instance(handle, "worker-0", state="lost", reason="OOMKilled", node="gpu-7")
    s = {x.name: x for x in backend.poll(handle)}["worker-0"]
    assert (s.state, s.reason, s.node) == (InstanceState.LOST, "OOMKilled", "gpu-7")


def test_stop_stops_what_runs_and_keeps_what_ended():
    backend = MemoryBackend()
    handle = backend.launch(spec())
    backend.finish(handle, "worker-0", exit_code=0)
    backend.stop(handle, grace=3)
    states = {s.name: s.state for s in backend.poll(handle)}
    assert states == {
        "master-0": InstanceState.STOPPED,
        "worker-0": InstanceState.SUCCEEDED,
        "worker-1": InstanceState.STOPPED,
    }
    assert backend.stopped == [("j1", 1, None, 3)]


def test_restarting_one_instance_runs_it_again_and_is_recorded():
    backend = MemoryBackend()
    handle = backend.launch(spec())
    backend.finish(handle, "worker-1", signal=9)
    backend.restart_instance(handle, "worker-1")
    s = {x.name: x for x in backend.poll(handle)}["worker-1"]
    assert (s.state, s.exit_code, s.signal) == (InstanceState.RUNNING, None, None)
    assert backend.restarted == [("j1", 1, "worker-1")]
    assert b"restarted" in backend.read_log(handle, "worker-1")


def test_isolated_nodes_are_avoided_and_a_launch_error_can_be_injected():
    backend = MemoryBackend(nodes=[{"name": "a", "slots": 4}, {"name": "b", "slots": 4}])
    backend.isolate_node("a", "C4D error")
    assert [(n.name, n.schedulable, n.reason) for n in backend.list_nodes()] == [
        ("a", False, "C4D error"),
        ("b", True, ""),
    ]
    handle = backend.launch(spec())
    assert {s.node for s in backend.poll(handle)} == {"b"}

    backend.launch_error = BackendError("node pool busy", retryable=True)
    with pytest.raises(BackendError) as err:
        backend.launch(spec(attempt=2))
    assert err.value.retryable and "retryable" in str(err.value)
    backend.launch(spec(attempt=2))  # only the next launch fails


def test_unknown_instances_and_options_are_refused_clearly():
    backend = MemoryBackend()
    handle = backend.launch(spec())
    with pytest.raises(BackendError, match="worker-9"):
        backend.finish(handle, "worker-9")
    with pytest.raises(BackendError, match="initial_state"):
        MemoryBackend(initial_state="sleeping")


def test_it_is_a_backend_whose_required_methods_are_abstract():
    assert issubclass(MemoryBackend, Backend)

    class Half(Backend):
        def launch(self, spec):
            return {}

    with pytest.raises(TypeError, match="abstract"):
        Half()


def test_polling_5000_jobs_of_8_instances_is_fast():
    backend = MemoryBackend()
    handles = [backend.launch(spec(job_id=f"j{i}", workers=7)) for i in range(5000)]
    started = time.perf_counter()
    total = sum(len(backend.poll(h)) for h in handles)
    took = time.perf_counter() - started
    assert total == 40_000
    assert took < 0.5, f"polling 40,000 instances took {took:.3f} s"
