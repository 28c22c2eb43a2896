"""Quiet by default, everything with VIGIL_LOG_LEVEL=DEBUG, one JSON object per line
with VIGIL_LOG_FORMAT=json; job decisions one line each."""

from __future__ import annotations

import json
import logging
import sys
import time

import pytest

from console.logs import JsonFormatter, logging_config
from console.tests.test_health import start, stop


def test_by_default_vigil_speaks_at_info_and_celerys_routine_at_warning():
    config = logging_config(None, None)
    assert config["root"]["level"] == "INFO"
    assert config["loggers"]["celery"] == {"level": "WARNING"} and config["loggers"]["daphne"] == {"level": "WARNING"}
    assert config["handlers"]["console"]["formatter"] == "plain"


def test_a_given_level_applies_to_everything():
    config = logging_config("debug", "JSON")
    assert config["root"]["level"] == "DEBUG" and config["loggers"]["celery"]["level"] == "DEBUG"
    assert config["handlers"]["console"]["formatter"] == "json"
    assert logging_config("INFO", None)["loggers"]["celery"]["level"] == "INFO"
    assert logging_config("ERROR", None)["loggers"]["celery"]["level"] == "ERROR"


@pytest.mark.parametrize("level, fmt, field", [("LOUD", None, "VIGIL_LOG_LEVEL"), (None, "xml", "VIGIL_LOG_FORMAT")])
def test_bad_values_name_the_variable(level, fmt, field):
    with pytest.raises(ValueError, match=field):
        logging_config(level, fmt)


def test_the_json_formatter_prints_one_object_per_record_with_extras_and_traceback():
    logger = logging.getLogger("vigil.test")
    try:
        raise RuntimeError("boom\nsecond line")
    except RuntimeError:
        record = logger.makeRecord(
            "vigil.test", logging.ERROR, __file__, 1, "job %s failed", (7,), sys.exc_info(), extra={"job_id": 7}
        )
    line = JsonFormatter().format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert (entry["level"], entry["logger"], entry["message"], entry["job_id"]) == (
        "ERROR",
        "vigil.test",
        "job 7 failed",
        7,
    )
    assert entry["time"].endswith("Z") and "RuntimeError: boom" in entry["exc"]


def test_a_python_warning_is_one_line():
    import warnings

    from console.logs import OneLineWarnings

    text = warnings.formatwarning(
        "running as root:\n  absolutely not recommended!\n\nUse --uid.",
        UserWarning,
        "platforms.py",
        893,
        "_warn_or_raise(uid)",
    )
    # What logging.captureWarnings logs, through the filter every config's handler has.
    record = logging.LogRecord("py.warnings", logging.WARNING, "", 0, "%s", (text,), None)
    assert OneLineWarnings().filter(record)
    assert record.getMessage() == (
        "platforms.py:893: UserWarning: running as root: absolutely not recommended! Use --uid. _warn_or_raise(uid)"
    )
    assert logging_config(None, "json")["handlers"]["console"]["filters"] == ["one_line_warnings"]


@pytest.mark.django_db
def test_a_restart_decision_is_one_log_line_after_commit(
    alice, alice_ws, api_as, job_body, memory_backend, caplog, django_capture_on_commit_callbacks
):
    from jobs.actions import record_event
    from jobs.models import EventLevel, EventType, Job

    r = api_as(alice).post("/api/v1/jobs/", job_body(alice_ws), format="json")
    job = Job.objects.get(pk=r.json()["id"])
    caplog.set_level(logging.INFO, logger="vigil.decisions")
    with django_capture_on_commit_callbacks(execute=True):
        record_event(
            job,
            EventType.RESTART,
            "Restarting the whole job (restart 1 of 3).",
            level=EventLevel.WARNING,
            attempt=1,
            key="restart-1",
        )
        record_event(
            job,
            EventType.RESTART,
            "Restarting the whole job (restart 1 of 3).",
            level=EventLevel.WARNING,
            attempt=1,
            key="restart-1",
        )  # the same decision again: no second line
        record_event(job, EventType.DECISION, "job_hang_interval set to 600")  # routine: not shown
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "vigil.decisions"]
    assert lines == [("WARNING", f"job {job.pk} attempt 1 restart: Restarting the whole job (restart 1 of 3).")]


@pytest.mark.django_db(transaction=True)
def test_debug_and_json_bring_back_the_sweep_as_json_lines(settings, tmp_path):
    worker, out = start("worker", tmp_path, settings, VIGIL_LOG_LEVEL="DEBUG", VIGIL_LOG_FORMAT="json")
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "monitoring.tasks.sweep" not in out.read_text():
            time.sleep(0.25)
        printed = out.read_text()
    finally:
        stop(worker)
    lines = [ln for ln in printed.splitlines() if ln.strip()]
    entries = [json.loads(ln) for ln in lines[:-1]]  # the last may be cut mid-write
    assert any("monitoring.tasks.sweep" in e["message"] for e in entries), printed[-2000:]
    assert {"DEBUG", "INFO"} <= {e["level"] for e in entries}
