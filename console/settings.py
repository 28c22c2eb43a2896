"""Vigil settings. Everything that differs between a laptop and production comes
from the environment; the defaults are the embedded ones (SQLite under
VIGIL_DATA_DIR, a Redis on localhost, the local backend)."""

import logging
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import dj_database_url

from console.datadir import secure
from console.logs import logging_config

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


DATA_DIR = Path(os.environ.get("VIGIL_DATA_DIR", BASE_DIR / "var")).resolve()
DATA_DIR.mkdir(parents=True, exist_ok=True)

# --- As which OS user local jobs run (jobs/backends/osuser.py) -----------------------
# A console running as root never runs a job as root: each job runs as its workspace's
# `run_as` user or else this one. VIGIL_LOCAL_ALLOW_ROOT=1 runs them as root instead.
VIGIL_LOCAL_RUN_AS = os.environ.get("VIGIL_LOCAL_RUN_AS", "nobody")
VIGIL_LOCAL_ALLOW_ROOT = env_bool("VIGIL_LOCAL_ALLOW_ROOT", False)
# One OS user's processes read each other's /proc/<pid>/environ (job tokens, secret envs):
# a root console refuses to run two workspaces' jobs as one user at once unless this is on.
VIGIL_SHARED_RUN_AS = env_bool("VIGIL_SHARED_RUN_AS", False)
# Jobs that run as another user pass through the data dir to their own attempt's
# directory (0711: they cannot list it); otherwise nobody but the console enters it.
LOCAL_JOBS_SWITCH_USER = os.geteuid() == 0 and not VIGIL_LOCAL_ALLOW_ROOT


def _secure_data_dir() -> None:
    """The data dir and its secrets are the console's alone, also on installs made before
    that was enforced (the SQLite file is fixed again on each connection: console/apps.py)."""
    secure(DATA_DIR, traversable=LOCAL_JOBS_SWITCH_USER)


_secure_data_dir()

DEBUG = env_bool("DEBUG", False)


def _secret_key() -> str:
    """SECRET_KEY from the environment, else one generated on first start and kept
    in the data directory, so a fresh install never signs with a public default."""
    if os.environ.get("SECRET_KEY"):
        return os.environ["SECRET_KEY"]
    path = DATA_DIR / "secret_key"
    if not path.exists():
        import secrets

        tmp = path.with_name(f"secret_key.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(50))
        try:
            os.link(tmp, path)  # atomic, and the first process to start wins
        except FileExistsError:
            pass
        os.unlink(tmp)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI's files, served by us (the docs work offline)
    "django_htmx",
    "channels",
    "axes",
    "console",
    "jobs",
    "monitoring",
    "notifications",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "console.middleware.refuse_nul_in_url",
    "console.middleware.content_security_policy",
    # Last, as django-axes asks: it turns a locked-out login into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "console.urls"
WSGI_APPLICATION = "console.wsgi.application"
ASGI_APPLICATION = "console.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "console.context_processors.workspaces",
            ],
        },
    },
]

SQLITE_PATH = DATA_DIR / "vigil.sqlite3"
DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL") or f"sqlite:///{SQLITE_PATH}",
        conn_max_age=int(os.environ.get("DB_CONN_MAX_AGE", "0")),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the web process read while a worker writes; IMMEDIATE transactions
    # and a busy timeout turn lock contention into waiting instead of errors.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
        }
    )
    # A file (not :memory:) so that subprocesses of a test (a daphne, a Celery
    # worker) can share it; one per test run so that parallel runs never collide.
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / f"test-vigil-{os.getpid()}.sqlite3")}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

if os.environ.get("VIGIL_PASSWORD_HASHERS"):
    # The test suite uses a fast hasher (it creates people in almost every test).
    PASSWORD_HASHERS = env_list("VIGIL_PASSWORD_HASHERS")

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "staticfiles"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
# Serve straight from static/ when collectstatic has not run (development, tests).
WHITENOISE_USE_FINDERS = True
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard"
LOGOUT_REDIRECT_URL = "login"

# --- Login throttling (django-axes) --------------------------------------------------
# Wrong passwords for one account, or from one address, lock logging in on /login/
# and /admin/login/ for a while; a right password resets the count.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = int(os.environ.get("VIGIL_LOGIN_FAILURE_LIMIT", "5"))
AXES_COOLOFF_TIME = timedelta(minutes=float(os.environ.get("VIGIL_LOGIN_LOCKOUT_MINUTES", "15")))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]  # either one reaching the limit locks
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_CLIENT_IP_CALLABLE = "console.auth.client_ip"
AXES_VERBOSE = False

# --- Security: VIGIL_HTTPS=1 in production (behind TLS) turns on the HTTPS flags --
SECURE_HTTPS = env_bool("VIGIL_HTTPS", False)
SESSION_COOKIE_SECURE = SECURE_HTTPS
CSRF_COOKIE_SECURE = SECURE_HTTPS
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", SECURE_HTTPS)
SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", "31536000" if SECURE_HTTPS else "0"))
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_HTTPS
SECURE_HSTS_PRELOAD = SECURE_HTTPS
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if env_bool("VIGIL_BEHIND_PROXY") else None
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
# What pages may load: the console's own scripts, styles, images and sockets, nothing
# inline (the templates carry no <script> body, <style> or on* attribute; htmx's
# indicator style is off in base.html) and no other origin. data: images are Swagger
# UI's icons. 'self' in connect-src covers ws(s):// of the same host and port.
CONTENT_SECURITY_POLICY = os.environ.get(
    "VIGIL_CONTENT_SECURITY_POLICY",
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
)
SECURE_CONTENT_TYPE_NOSNIFF = True

# --- REST framework ----------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "jobs.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # JSON of bounded depth without NUL or lone surrogates (jobs.inputs); 400 otherwise.
    "DEFAULT_PARSER_CLASSES": [
        "jobs.inputs.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    # The one place domain errors (NotFound, Forbidden, InputError, ...) become responses.
    "EXCEPTION_HANDLER": "jobs.exceptions.api_exception_handler",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "DEFAULT_THROTTLE_RATES": {"sdk": os.environ.get("VIGIL_SDK_RATE", "20/s")},
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Vigil API",
    "DESCRIPTION": "Run distributed deep-learning jobs and keep them alive.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Pinned assets from drf-spectacular-sidecar instead of a CDN at @latest.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Swagger UI draws an operation's deep link inside the button that unfolds it, an
    # interactive control nested in another (axe-core, serious): no deep links.
    "SWAGGER_UI_SETTINGS": {"deepLinking": False},
    "ENUM_NAME_OVERRIDES": {
        "JobStatusEnum": "jobs.models.JobStatus",
        "AttemptStatusEnum": "jobs.models.AttemptStatus",
        "InstanceStatusEnum": "jobs.models.InstanceStatus",
        "RestartResultEnum": "jobs.models.RestartResult",
    },
}

# --- Redis, Celery, Channels ---------------------------------------------------
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", REDIS_URL)
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 300}
CELERY_TIMEZONE = "UTC"
# An announced exit's tick (monitoring.tasks.run_job, enqueued by the exit listener) has a
# queue of its own, so the decision does not wait behind shard sweeps: at 10,000 jobs a shard
# task runs for seconds and every sweeping process can be inside one (docs/scaling.md). The
# Procfile's `decide` process consumes only this queue; the sweeping workers consume it too,
# so decisions go on while `decide` is down: a sweeping worker's command names both queues
# (tests/test_task_queues.py holds the Procfile and the units to it).
CELERY_TASK_DEFAULT_QUEUE = "celery"
MONITOR_EXITS_QUEUE = "vigil.exits"
CELERY_TASK_ROUTES = {"monitoring.tasks.run_job": {"queue": MONITOR_EXITS_QUEUE}}
# A hang is flagged at most one sweep after its interval ends; exits are handled at
# once through the exit listener whatever this is.
MONITOR_SWEEP_SECONDS = float(os.environ.get("VIGIL_MONITOR_SWEEP_SECONDS", "0.5"))
# The sweep's shards (job id modulo this): one task per shard per sweep, any
# worker takes it under the shard's Redis lease, so N worker processes share the
# jobs. More shards than worker processes spreads the work evenly.
MONITOR_SHARDS = max(1, int(os.environ.get("VIGIL_MONITOR_SHARDS", "4")))
# The longest a steady Running job goes without a tick while the exit listener is alive
# (monitoring.schedule): it bounds an exit nobody announced (a shim killed with its rank,
# a lost node). 0 ticks every job every sweep.
MONITOR_QUIET_SECONDS = float(os.environ.get("VIGIL_MONITOR_QUIET_SECONDS", "10"))
# While a shard has more jobs than its workers tick at that pace, the quiet period
# stretches up to this (core.pacing), so the hang deadlines and periodic checks keep
# their time; the price is that an unannounced exit may be found this late. It shrinks
# back once the shard keeps up. Set it equal to the quiet period to never stretch.
MONITOR_QUIET_MAX_SECONDS = max(MONITOR_QUIET_SECONDS, float(os.environ.get("VIGIL_MONITOR_QUIET_MAX_SECONDS", "60")))
# How long a shard's lease outlives a worker that died holding it (monitoring.leases).
MONITOR_LEASE_SECONDS = float(os.environ.get("VIGIL_MONITOR_LEASE_SECONDS", "4"))
# The schedule's shelve files 0600 like the rest of the data dir (console/beat.py).
CELERY_BEAT_SCHEDULER = "console.beat:OwnerOnlyScheduler"
CELERY_BEAT_SCHEDULE = {
    **{
        f"monitor-sweep-{shard}": {
            "task": "monitoring.tasks.sweep",
            "schedule": MONITOR_SWEEP_SECONDS,
            "args": (shard,),
            "options": {"expires": MONITOR_SWEEP_SECONDS * 2},
        }
        for shard in range(MONITOR_SHARDS)
    },
    # Re-queues notification deliveries whose task was lost.
    "notifications-sweep": {"task": "notifications.tasks.sweep_deliveries", "schedule": 60.0},
}

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "console.layers.ResilientRedisChannelLayer",  # degrades while Redis is away
        # redis-py's 5 s default read timeout races channels_redis's own blocking read
        # on an idle socket and closes quiet WebSockets; give reads room.
        "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 30}], "capacity": 2000, "expiry": 30},
    }
}

# --- Vigil ---------------------------------------------------------------------
# Where the console is reachable from jobs (the SDK's VIGIL_CONSOLE_URL).
# By default the address `make run` serves (VIGIL_BIND, VIGIL_PORT as in the Procfile).
_BIND = os.environ.get("VIGIL_BIND") or "127.0.0.1"
VIGIL_CONSOLE_URL = os.environ.get("VIGIL_CONSOLE_URL") or (
    f"http://{'127.0.0.1' if _BIND in ('0.0.0.0', '::') else _BIND}:{os.environ.get('VIGIL_PORT') or '8000'}"
)
# Workspace roles that may submit jobs to the local backend: local jobs run on the
# console's machine (as VIGIL_LOCAL_RUN_AS when the console is root, else as its user).
VIGIL_LOCAL_SUBMIT_ROLES = env_list("VIGIL_LOCAL_SUBMIT_ROLES", "owner,admin")
# The OpenAPI schema and its Swagger page without a login (off: they need one).
VIGIL_PUBLIC_API_DOCS = env_bool("VIGIL_PUBLIC_API_DOCS", False)
# Who may create workspaces (and so become their owner): "staff" or "anyone".
VIGIL_WORKSPACE_CREATION = os.environ.get("VIGIL_WORKSPACE_CREATION", "staff").strip().lower() or "staff"
VIGIL_STOP_GRACE_SECONDS = float(os.environ.get("VIGIL_STOP_GRACE_SECONDS", "15"))
# Tearing down a failed attempt before a restart: its ranks are broken anyway, and
# every second here is lost training time.
VIGIL_RESTART_GRACE_SECONDS = float(os.environ.get("VIGIL_RESTART_GRACE_SECONDS", "3"))
# A launch whose worker died before storing the attempt's handle is taken over after
# this long; an attempt queued this long without a launch task taking it is re-enqueued.
VIGIL_LAUNCH_LEASE_SECONDS = float(os.environ.get("VIGIL_LAUNCH_LEASE_SECONDS", "30"))
VIGIL_RELAUNCH_AFTER_SECONDS = float(os.environ.get("VIGIL_RELAUNCH_AFTER_SECONDS", "10"))

# Where the shims announce instance exits (the local backend's channel_prefix + ":instance-exit").
VIGIL_EXIT_CHANNEL = os.environ.get("VIGIL_EXIT_CHANNEL", "vigil:instance-exit")

# Each backend's OPTIONS are its own (jobs.backends.get_backend passes them as keywords).
JOB_BACKENDS: dict[str, dict[str, Any]] = {
    "local": {
        "BACKEND": "jobs.backends.local.LocalBackend",
        "OPTIONS": {
            "data_dir": str(DATA_DIR / "local-backend"),
            "redis_url": REDIS_URL,
            "grace": VIGIL_STOP_GRACE_SECONDS,
            "run_as": VIGIL_LOCAL_RUN_AS,
            "allow_root": VIGIL_LOCAL_ALLOW_ROOT,
            "shared_run_as": VIGIL_SHARED_RUN_AS,
        },
    },
}
if os.environ.get("VIGIL_LOCAL_NODES"):
    # "name:slots,name:slots": present this machine as several virtual nodes.
    JOB_BACKENDS["local"]["OPTIONS"]["nodes"] = [
        {"name": part.split(":")[0], "slots": int(part.split(":")[1])} for part in env_list("VIGIL_LOCAL_NODES")
    ]
if os.environ.get("VIGIL_SLURM_PARTITION") is not None or env_bool("VIGIL_SLURM"):
    JOB_BACKENDS["slurm"] = {
        "BACKEND": "jobs.backends.slurm.SlurmBackend",
        "OPTIONS": {
            "partition": os.environ.get("VIGIL_SLURM_PARTITION", ""),
            "account": os.environ.get("VIGIL_SLURM_ACCOUNT", ""),
            "log_dir": os.environ.get("VIGIL_SLURM_LOG_DIR", str(DATA_DIR / "slurm-logs")),
            "grace": VIGIL_STOP_GRACE_SECONDS,
            # Extra sbatch arguments, comma-separated: "--spread-job,--qos=high".
            "sbatch_options": env_list("VIGIL_SLURM_SBATCH_OPTIONS"),
            # Where the nodes announce exits; leave unset where they cannot reach Redis.
            **({"redis_url": os.environ["VIGIL_SLURM_REDIS_URL"]} if os.environ.get("VIGIL_SLURM_REDIS_URL") else {}),
        },
    }

# /metrics (Prometheus): scrapers send "Authorization: Bearer <VIGIL_METRICS_TOKEN>", or
# connect directly (not through the proxy) from an address in VIGIL_METRICS_ALLOW
# (addresses or networks, e.g. 10.0.0.0/24). With neither set, /metrics refuses everyone.
VIGIL_METRICS_TOKEN = os.environ.get("VIGIL_METRICS_TOKEN", "")
VIGIL_METRICS_ALLOW = env_list("VIGIL_METRICS_ALLOW")

# Outbound notification targets that are allowed although private (tests: 127.0.0.1).
VIGIL_OUTBOUND_ALLOW = env_list("VIGIL_OUTBOUND_ALLOW")

# Quiet by default (job decisions, warnings, errors); VIGIL_LOG_LEVEL=DEBUG for
# everything, VIGIL_LOG_FORMAT=json for one JSON object per line. See console/logs.py.
LOGGING = logging_config(os.environ.get("VIGIL_LOG_LEVEL"), os.environ.get("VIGIL_LOG_FORMAT"))
logging.captureWarnings(True)  # library warnings go through the same handler (and JSON format)
