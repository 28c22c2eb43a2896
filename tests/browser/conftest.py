"""Browser tests: a real Chromium (Debian's, driven by Playwright) against a real
daphne serving console.asgi in a subprocess.

How the server starts (fixture `server`): the test database is a file (SQLite,
settings DATABASES TEST NAME) or a PostgreSQL database, so with `transaction=True`
tests a second process sees what the test writes. The fixture starts

    python -m daphne -b 127.0.0.1 -p <free port> console.asgi:application

with DJANGO_SETTINGS_MODULE=browser_settings (this directory), which takes the
test database's NAME, the test's local backend (real processes, in the test's
tmp dir) and a private Redis channel-layer prefix from the environment. The test
process uses the same backend and prefix, so the monitor run in the test
(monitoring.tick.run_job) and the pages in the browser see one world. The
daphne process is terminated by its PID at teardown, also when a test fails.
Screenshots go to test-artifacts/screenshots/.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from testsupport.ports import free_port

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
# An assertion waits as long as an action may (page_for's 15 s), not Playwright's 5 s: on a
# loaded two-core machine a live update (a restart's separator and record, pushed once the
# monitor's tick has run) can take longer than 5 s. A check that holds returns at once.
EXPECT_TIMEOUT_MS = 15_000
try:
    from playwright.sync_api import expect

    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
except ImportError:  # the browser tests skip with their reason (pytest_collection_modifyitems)
    pass


def pytest_collection_modifyitems(config, items):
    reason = None
    if not os.path.exists(CHROMIUM):
        reason = f"Debian's chromium is not installed at {CHROMIUM} (apt-get install chromium)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            reason = "the playwright package is not installed"
    if reason:
        for item in items:
            if "browser" in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))


def redis_host(settings) -> dict:
    """The Redis of settings with a read timeout above channels_redis's 5 s
    BZPOPMIN: redis-py 8's default socket timeout is also 5 s, which drops a
    consumer whose read loses that race (seen in daphne: redis TimeoutError
    closing a job socket after 5 s without messages)."""
    return {"address": settings.REDIS_URL, "socket_timeout": 30}


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop running in this thread; Django
    # would then refuse ORM calls from the test. The test only calls the ORM
    # between browser steps, never concurrently with them.
    # Module scope: the loop stops with the module, before other tests run.
    before = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    pw = sync_playwright().start()
    try:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()
    finally:
        pw.stop()
        if before is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = before


@pytest.fixture
def channel_prefix(settings):
    prefix = f"vigil-browser-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [redis_host(settings)], "prefix": prefix},
        },
    }
    return prefix


@pytest.fixture
def server(transactional_db, local_backend, channel_prefix, settings, tmp_path):
    """The base URL of a daphne serving the console against the test database."""
    from django.db import connection

    port = free_port()
    env = dict(os.environ)
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)  # daphne keeps Django's async safety checks
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "browser_settings",
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(Path(__file__).parent), env.get("PYTHONPATH", "")]),
            "VIGIL_BROWSER_DB_NAME": str(connection.settings_dict["NAME"]),
            "VIGIL_BROWSER_JOB_BACKENDS": json.dumps(settings.JOB_BACKENDS),
            "VIGIL_BROWSER_CHANNEL_LAYERS": json.dumps(settings.CHANNEL_LAYERS),
            "VIGIL_LOG_LEVEL": "WARNING",
        }
    )
    log_path = tmp_path / "daphne.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "console.asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"daphne exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(base + "/healthz", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"daphne did not answer in 30 s:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.2)
        yield base
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        log.close()
        if os.environ.get("VIGIL_KEEP_DAPHNE_LOG"):
            shutil.copy(log_path, ROOT / "test-artifacts" / f"daphne-{port}.log")


@pytest.fixture
def page_for(browser, server):
    """page_for(user, width=1280) -> a Playwright page logged in through the login form."""
    contexts = []

    def make(user, width=1280, height=900, password=None):
        context = browser.new_context(
            viewport={"width": width, "height": height}, base_url=server, timezone_id="Asia/Jakarta"
        )
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(15_000)
        page.on("dialog", lambda dialog: dialog.accept())
        # Shown with a failing test's output.
        page.on("console", lambda m: print(f"[{user.username} console] {m.type}: {m.text}"))
        page.on("pageerror", lambda e: print(f"[{user.username} page error] {e}"))
        page.goto("/login/")
        page.fill("#id_username", user.username)
        page.fill("#id_password", password or f"{user.username}-password-123")
        page.click("button[type=submit]")
        page.wait_for_url(lambda url: "/login/" not in url)
        return page

    yield make
    for context in contexts:
        context.close()


@pytest.fixture
def shoot():
    """shoot(page, name): a full-page screenshot in test-artifacts/screenshots/."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def take(page, name):
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take
