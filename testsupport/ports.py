"""Ports for the servers and rendezvous a test starts.

A port from bind(("127.0.0.1", 0)) is free when asked for, but it comes from the kernel's
ephemeral range, the one every outgoing connection on the machine takes its source port
from: between the check and the server's own bind (seconds later, for a daphne or a rank
that imports torch first) the other test shard's connections to PostgreSQL and Redis may
take it (CI: daphne's "Couldn't listen on 127.0.0.1:58847: Address already in use").

These come from a range nothing takes on its own: below the local backend's job ports
(the 12,000 below the ephemeral range, jobs.backends.local) and the Slurm test clusters'
(10000-19999), and above the well-known ports. A port this process handed out is not
handed out again.
"""

from __future__ import annotations

import random
import socket

LOW, HIGH = 4000, 10000
_given: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on, from LOW to HIGH."""
    candidates = [p for p in range(LOW, HIGH) if p not in _given]
    random.shuffle(candidates)
    for port in candidates[:500]:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _given.add(port)
        return port
    raise RuntimeError(f"no free port from {LOW} to {HIGH} (500 tried)")
