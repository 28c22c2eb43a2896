"""Backends that run a job's instances, chosen by name from settings.JOB_BACKENDS.

    JOB_BACKENDS = {
        "local": {"BACKEND": "jobs.backends.local.LocalBackend", "OPTIONS": {"data_dir": "..."}},
    }

Settings are read on first use, not at import, so that pure code (and the shim)
can import this package without Django being configured.
"""

from __future__ import annotations

import threading

from .base import (
    AttemptLaunch,
    Backend,
    BackendError,
    InstanceLaunch,
    InstanceState,
    PolledInstance,
    Node,
)

__all__ = [
    "AttemptLaunch",
    "Backend",
    "BackendError",
    "InstanceLaunch",
    "InstanceState",
    "PolledInstance",
    "Node",
    "get_backend",
    "reset_backends",
]

DEFAULT_BACKENDS = {"local": {"BACKEND": "jobs.backends.local.LocalBackend", "OPTIONS": {}}}

_cache: dict[str, Backend] = {}
_lock = threading.Lock()


def _configured() -> dict:
    from django.conf import settings

    return getattr(settings, "JOB_BACKENDS", None) or DEFAULT_BACKENDS


def get_backend(name: str = "local") -> Backend:
    """The backend called `name`, built once per process from settings."""
    backend = _cache.get(name)
    if backend is not None:
        return backend
    with _lock:
        backend = _cache.get(name)
        if backend is None:
            backend = _build(name, _configured())
            _cache[name] = backend
    return backend


def _build(name: str, configured: dict) -> Backend:
    from django.utils.module_loading import import_string

    if name not in configured:
        known = ", ".join(sorted(configured)) or "none"
        raise BackendError(f"JOB_BACKENDS has no backend {name!r} (configured: {known})")
    conf = configured[name]
    path = conf.get("BACKEND")
    if not path:
        raise BackendError(f"JOB_BACKENDS[{name!r}]['BACKEND'] is missing: give a dotted class path")
    try:
        cls = import_string(path)
    except ImportError as exc:
        raise BackendError(f"JOB_BACKENDS[{name!r}]['BACKEND'] = {path!r} cannot be imported: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise BackendError(f"JOB_BACKENDS[{name!r}]['BACKEND'] = {path!r} is not a Backend subclass")
    return cls(name=name, **(conf.get("OPTIONS") or {}))


def reset_backends() -> None:
    """Forget built backends (tests that change JOB_BACKENDS call this)."""
    with _lock:
        _cache.clear()
