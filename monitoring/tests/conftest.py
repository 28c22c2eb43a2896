"""Fixtures with real processes for the monitor's crash tests (see cluster.py)."""

from .cluster import cluster, private_redis_db  # noqa: F401
