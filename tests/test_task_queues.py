"""Every queue a task is routed to is consumed by the processes we ship: the Procfile
(`make run`) and the systemd units. A route to a queue nobody consumes loses that task
silently (for run_job: every announced exit would wait for the next sweep), so a new route
or a worker command without `-Q` fails here."""

from __future__ import annotations

import shlex
from pathlib import Path

from django.conf import settings

from console.celery import app
from testsupport.processes import UNITS, procfile, unit_commands


def worker_queues(command: str) -> set[str] | None:
    """The queues a `celery ... worker` command consumes; None if it is not a worker."""
    argv = shlex.split(command)
    if "celery" not in Path(argv[0]).name or "worker" not in argv:
        return None
    if "-Q" not in argv:
        return {settings.CELERY_TASK_DEFAULT_QUEUE}  # Celery's default without -Q
    return set(argv[argv.index("-Q") + 1].split(","))


def unit_starts() -> dict[str, str]:
    return {unit.name: cmd for unit in sorted(UNITS.glob("*.service")) for cmd in unit_commands(unit.name, "ExecStart")}


def test_run_job_is_routed_to_the_decisions_queue_and_the_sweep_to_the_default_one():
    route = app.amqp.router.route({}, "monitoring.tasks.run_job", (1,), {})
    assert route["queue"].name == settings.MONITOR_EXITS_QUEUE == "vigil.exits"
    sweep = app.amqp.router.route({}, "monitoring.tasks.sweep", (0,), {})
    assert sweep["queue"].name == settings.CELERY_TASK_DEFAULT_QUEUE


def routed_queues() -> set[str]:
    return {settings.CELERY_TASK_DEFAULT_QUEUE} | {r["queue"] for r in settings.CELERY_TASK_ROUTES.values()}


def test_the_procfile_consumes_every_routed_queue_and_has_a_worker_for_decisions_alone():
    queues = {name: worker_queues(cmd) for name, cmd in procfile().items()}
    workers = {name: q for name, q in queues.items() if q is not None}
    assert set().union(*workers.values()) >= routed_queues(), workers
    # The sweeping worker takes decisions too (they go on while `decide` is down) ...
    assert workers["worker"] >= routed_queues()
    # ... and `decide` takes nothing else, so no shard sweep stands in front of an exit.
    assert workers["decide"] == {settings.MONITOR_EXITS_QUEUE}


def test_the_systemd_units_consume_every_routed_queue_the_same_way():
    workers = {unit: q for unit, cmd in unit_starts().items() if (q := worker_queues(cmd)) is not None}
    assert workers["vigil-worker@.service"] >= routed_queues()
    assert workers["vigil-decide.service"] == {settings.MONITOR_EXITS_QUEUE}
