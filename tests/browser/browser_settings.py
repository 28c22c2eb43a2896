"""Settings of the daphne process that the browser tests start: the project's
settings, pointed at the test database, the test's local backend and a private
channel-layer prefix (all passed in the environment by conftest.py), with Celery
tasks run in the request (no worker process in a test)."""

import json
import os

from console.settings import *  # noqa: F403
from console.settings import DATABASES

DATABASES["default"]["NAME"] = os.environ["VIGIL_BROWSER_DB_NAME"]
DATABASES["default"].pop("TEST", None)
JOB_BACKENDS = json.loads(os.environ["VIGIL_BROWSER_JOB_BACKENDS"])
CHANNEL_LAYERS = json.loads(os.environ["VIGIL_BROWSER_CHANNEL_LAYERS"])
CELERY_TASK_ALWAYS_EAGER = True
CELERY_TASK_EAGER_PROPAGATES = True
VIGIL_STOP_GRACE_SECONDS = 1.0
DEBUG = False
# Static files straight from static/ (no collectstatic in a test).
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = True
