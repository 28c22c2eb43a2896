"""Fixtures shared by the whole suite: named people in two workspaces (alice
owns one, bob the other; carol is a viewer beside alice), API clients, and the
test wiring (Celery runs tasks in-process; the "local" backend is the in-memory
one unless a test asks for real processes with `local_backend`)."""

from __future__ import annotations

import os
import re
import shutil

import pytest
from hypothesis import HealthCheck, settings

# Property tests check what holds, not how fast inputs are drawn: on a shared 2-core
# CI machine under load, Hypothesis's too-slow health check and per-example deadline
# fail tests whose properties hold. Speed is for bench/.
settings.register_profile("vigil", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("vigil")

FAST_HASHER = "django.contrib.auth.hashers.MD5PasswordHasher"
# Set before anything starts a subprocess (a live server, a worker), so that they
# check the test people's passwords with the same fast hasher.
os.environ.setdefault("VIGIL_PASSWORD_HASHERS", FAST_HASHER)


_OWN_BASETEMP = "_vigil_own_basetemp"


def pytest_configure(config):
    """Run as root, jobs run as `nobody` and must pass through to the tests' tmp dirs.
    Under pytest's shared /tmp/pytest-of-root every session start takes that search
    bit away again (pytest keeps its root 0700), so a session of its own root
    gets a base dir that no other session touches."""
    import tempfile

    if os.geteuid() == 0 and not config.option.basetemp and not hasattr(config, "workerinput"):
        config.option.basetemp = tempfile.mkdtemp(prefix="vigil-pytest-")
        setattr(config, _OWN_BASETEMP, config.option.basetemp)


def pytest_sessionfinish(session, exitstatus):
    own = getattr(session.config, _OWN_BASETEMP, None)
    if own and exitstatus == 0:  # a failed session keeps its files to look at
        shutil.rmtree(own, ignore_errors=True)


def pytest_report_header(config):
    from django.conf import settings

    db = settings.DATABASES["default"]
    redis = re.sub(r"//[^@/]*@", "//***@", str(settings.REDIS_URL))  # never print its password
    return [f"vigil: database {db['ENGINE'].rsplit('.', 1)[-1]} {db.get('NAME')}, redis {redis}"]


def _uses_django(request) -> bool:
    names = set(request.fixturenames)
    return bool(
        request.node.get_closest_marker("django_db")
        or names & {"db", "transactional_db", "settings", "client", "admin_client", "live_server"}
    )


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix):
    """On PostgreSQL, a transactional test's teardown empties the tables with DELETE, not
    TRUNCATE. Django flushes with one TRUNCATE of every table, which makes new files for
    all 31 of them: about a second per test here, minutes over the suite (the PostgreSQL
    pass was three minutes longer than SQLite's). A test's tables hold a few rows, which
    DELETE removes in milliseconds; Django's foreign keys on PostgreSQL are DEFERRABLE
    INITIALLY DEFERRED and the flush runs in one transaction, so the order of the
    DELETEs does not matter. A flush that resets sequences keeps Django's TRUNCATE."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences or not tables:
            return truncate(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        return [f"{style.SQL_KEYWORD('DELETE FROM')} {style.SQL_FIELD(self.quote_name(t))};" for t in tables]

    DatabaseOperations.sql_flush = sql_flush  # type: ignore[method-assign]
    yield
    DatabaseOperations.sql_flush = truncate  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def _test_wiring(request):
    """For tests that touch Django: Celery tasks run where they are sent (so a test
    sees their effects and nothing is left in the real broker's queue), and the
    "local" backend is the in-memory one. Pure tests stay free of Django."""
    if not _uses_django(request):
        yield None
        return
    settings = request.getfixturevalue("settings")
    settings.PASSWORD_HASHERS = [FAST_HASHER]
    # Tests jump the sweep's clock ahead, which reads as a shard far behind its schedule;
    # its stretched quiet period (core.pacing, kept in Redis) would carry into the next
    # test. Tests of the stretch raise this themselves.
    settings.MONITOR_QUIET_MAX_SECONDS = 0.0
    # The jobs' SDK reports to no console unless the test gives them one (live_server): the
    # default is where `make run` serves, and a console a developer runs there beside the
    # suite got every test job's posts (answered 401). Nothing listens on the discard port.
    settings.VIGIL_CONSOLE_URL = "http://127.0.0.1:9"
    from console.celery import app
    from jobs.backends import get_backend, reset_backends

    app.conf.task_always_eager = True
    app.conf.task_eager_propagates = True
    settings.JOB_BACKENDS = {"local": {"BACKEND": "jobs.backends.memory.MemoryBackend", "OPTIONS": {}}}
    reset_backends()
    yield get_backend
    reset_backends()
    app.conf.task_always_eager = False


@pytest.fixture
def memory_backend(_test_wiring, db):
    """The default backend in Django tests: in memory, fast, state set by the test."""
    from jobs.backends import get_backend

    return get_backend("local")


@pytest.fixture
def local_backend(settings, tmp_path, _test_wiring):
    """The real local backend (real processes) in a private data dir; every
    instance it started is stopped at teardown, even when the test failed. Jobs
    run as they do in production: as `nobody` when the suite runs as root."""
    from jobs.backends import get_backend, reset_backends
    from testsupport.jobs import job_writable

    job_writable(tmp_path)  # the tests' jobs run scripts and leave markers there
    data_dir = tmp_path / "local-backend"
    settings.JOB_BACKENDS = {
        "local": {
            "BACKEND": "jobs.backends.local.LocalBackend",
            "OPTIONS": {
                "data_dir": str(data_dir),
                "redis_url": settings.REDIS_URL,
                "grace": 2.0,
                "channel_prefix": f"vigil-test-{os.getpid()}-{tmp_path.name}",
            },
        },
    }
    reset_backends()
    backend = get_backend("local")
    yield backend
    backend.stop_everything(grace=0.5)
    reset_backends()
    shutil.rmtree(data_dir, ignore_errors=True)


def _person(django_user_model, name):
    """A person who may run jobs on the local and Slurm backends (site permission);
    what they may do in a workspace is their role there."""
    from jobs.access import backend_permission

    user = django_user_model.objects.create_user(name, f"{name}@example.com", f"{name}-password-123")
    user.user_permissions.add(backend_permission("local"), backend_permission("slurm"))
    return user


@pytest.fixture
def alice(db, django_user_model):
    return _person(django_user_model, "alice")


@pytest.fixture
def bob(db, django_user_model):
    return _person(django_user_model, "bob")


@pytest.fixture
def carol(db, django_user_model):
    return _person(django_user_model, "carol")


@pytest.fixture
def dave(db, django_user_model):
    return _person(django_user_model, "dave")


@pytest.fixture
def alice_ws(alice, carol, dave):
    """Alice owns it; carol is a viewer; dave is a member."""
    from jobs.models import Membership, Role, Workspace

    ws = Workspace.objects.create(name="Alice Lab", slug="alice-lab")
    Membership.objects.create(workspace=ws, user=alice, role=Role.OWNER)
    Membership.objects.create(workspace=ws, user=carol, role=Role.VIEWER)
    Membership.objects.create(workspace=ws, user=dave, role=Role.MEMBER)
    return ws


@pytest.fixture
def bob_ws(bob):
    from jobs.models import Membership, Role, Workspace

    ws = Workspace.objects.create(name="Bob Team", slug="bob-team")
    Membership.objects.create(workspace=ws, user=bob, role=Role.OWNER)
    return ws


def _client_for(user):
    from rest_framework.test import APIClient

    from jobs.models import ApiToken

    client = APIClient()
    _, raw = ApiToken.issue(user)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    client.user = user
    return client


@pytest.fixture
def api_as():
    """api_as(user) -> an APIClient authenticated with a fresh personal token."""
    return _client_for


@pytest.fixture
def job_body():
    """The factory of CreateJob bodies: job_body(workspace, **overrides)."""
    from testsupport.factory import pytorch_job

    return pytorch_job
