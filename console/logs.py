"""How every Vigil process logs (web, workers, beat, exit listener): one config
built from the environment.

Quiet by default: with VIGIL_LOG_LEVEL unset, Vigil's own loggers are at INFO
(job decisions, one line each) and the routine chatter of Celery, daphne and
friends at WARNING -- Celery announces every task it receives, runs and schedules
at INFO, which with the half-second monitor sweep is four lines a second of
nothing. A VIGIL_LOG_LEVEL that is given applies to everything: DEBUG brings it
all back. VIGIL_LOG_FORMAT=json prints one JSON object per line for log shippers.
"""

from __future__ import annotations

import datetime
import json
import logging

# Loggers that talk at INFO about routine work: the sweep and other periodic
# tasks, server start-up banners, connection chatter.
CHATTY = (
    "celery",
    "kombu",
    "daphne",
    "django.channels.server",
    "asyncio",
    "twisted",
    "apprise",
    "urllib3",
    "httpx",
    "axes",
)  # axes: four INFO lines per login
# Fields of every LogRecord; anything else on a record came from `extra=`.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


class OneLineWarnings(logging.Filter):
    """Python warnings (logging.captureWarnings) arrive as several lines: the message,
    then the source line. One line each keeps them readable between the other records
    (Celery's warning about running as root alone is nine lines)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "py.warnings":
            record.msg, record.args = " ".join(record.getMessage().split()), None
        return True


class JsonFormatter(logging.Formatter):
    """One line per record: time (UTC, ISO 8601), level, logger, message, the
    record's `extra` fields, and the traceback as text when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.processName if record.processName != "MainProcess" else record.process,
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def logging_config(level: str | None, fmt: str | None) -> dict:
    """settings.LOGGING for VIGIL_LOG_LEVEL and VIGIL_LOG_FORMAT (both optional)."""
    quiet = not (level or "").strip()
    level = (level or "INFO").strip().upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise ValueError(f"VIGIL_LOG_LEVEL must be DEBUG, INFO, WARNING, ERROR or CRITICAL; got {level!r}")
    fmt = (fmt or "plain").strip().lower()
    if fmt not in ("plain", "json"):
        raise ValueError(f"VIGIL_LOG_FORMAT must be plain or json; got {fmt!r}")
    chatty = max(level, "WARNING", key=logging.getLevelName) if quiet else level
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
            "json": {"()": "console.logs.JsonFormatter"},
        },
        "filters": {"one_line_warnings": {"()": "console.logs.OneLineWarnings"}},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": fmt, "filters": ["one_line_warnings"]}},
        "root": {"handlers": ["console"], "level": level},
        "loggers": {
            "django.db.backends": {"level": "WARNING"},
            **{name: {"level": chatty} for name in CHATTY},
        },
    }
