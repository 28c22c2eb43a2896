"""The backend contract (jobs/backends/base.py) is complete: every method the
console calls on a backend is declared there, and every backend answers it."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from jobs.backends.base import Backend, BackendError
from jobs.backends.local import LocalBackend
from jobs.backends.memory import MemoryBackend
from jobs.backends.slurm import SlurmBackend

from .test_memory_backend import spec

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = (LocalBackend, SlurmBackend, MemoryBackend)
# Methods only a backend's own tests call (test drivers, internals), not the console.
CALLERS = ("console", "jobs", "monitoring", "notifications")


def _is_backend(node: ast.expr) -> bool:
    """`backend`, `get_backend(...)` or `get_backend_for(...)`."""
    if isinstance(node, ast.Name):
        return node.id == "backend"
    if isinstance(node, ast.Call):
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        return name in ("get_backend", "get_backend_for")
    return False


def names_called_on_backends() -> dict[str, str]:
    """{attribute: first place} for every attribute production code reads off a backend."""
    found: dict[str, str] = {}
    for package in CALLERS:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if "tests" in rel.parts or "migrations" in rel.parts or rel.parts[:2] == ("jobs", "backends"):
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(rel))):
                if isinstance(node, ast.Attribute) and _is_backend(node.value):
                    found.setdefault(node.attr, f"{rel}:{node.lineno}")
    return found


def test_every_method_the_console_calls_on_a_backend_is_declared_by_the_contract():
    called = names_called_on_backends()
    assert {"launch", "poll", "tail_log", "dump_stacks"} <= set(called)  # the scan sees the callers
    missing = {name: where for name, where in called.items() if not hasattr(Backend, name)}
    assert not missing, f"called on a backend but not declared in jobs/backends/base.py: {missing}"


@pytest.mark.parametrize("cls", BACKENDS, ids=lambda c: c.__name__)
def test_every_backend_takes_the_contract_s_arguments(cls):
    assert not inspect.isabstract(cls)
    for name, declared in vars(Backend).items():
        mine = getattr(cls, name)
        if name.startswith("_") or not inspect.isfunction(declared) or mine is declared:
            continue
        want = list(inspect.signature(declared).parameters)
        got = list(inspect.signature(mine).parameters)
        assert got[: len(want)] == want, f"{cls.__name__}.{name}{got} differs from the contract's {want}"


def test_what_a_backend_cannot_do_is_a_backend_error_naming_it():
    # Only the abstract methods written: everything else is the contract's default.
    bare = type("Bare", (Backend,), {m: lambda self, *a, **k: None for m in Backend.__abstractmethods__})("bare")
    with pytest.raises(BackendError, match="the bare backend cannot reach worker-0's processes"):
        bare.dump_stacks({}, "worker-0")
    with pytest.raises(BackendError, match="cannot find attempt 2 of job j1"):
        bare.handle_for("j1", 2)
    with pytest.raises(BackendError, match="cannot stop everything"):
        bare.stop_everything()
    assert bare.exit_channel is None


def test_the_memory_backend_finds_and_stops_its_attempts():
    backend = MemoryBackend()
    handle = backend.launch(spec())
    assert backend.handle_for("j1", 1) == handle
    with pytest.raises(BackendError, match="no attempt 2 of job j1"):
        backend.handle_for("j1", 2)
    assert backend.stop_everything(grace=0.1) == []
    assert all(s.state.finished for s in backend.poll(handle))
    assert backend.exit_channel is None
