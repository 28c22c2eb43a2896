"""The SDK tests run without installing the package: sdk/src goes first on sys.path."""

import os
import sys

import pytest

SDK_SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, "src"))
TESTS = os.path.dirname(os.path.abspath(__file__))
for path in (SDK_SRC, TESTS):
    if path not in sys.path:
        sys.path.insert(0, path)

from loopback_console import LoopbackConsole, SilentConsole, job_env  # noqa: E402

VIGIL_VARS = (
    "VIGIL_CONSOLE_URL",
    "VIGIL_JOB_ID",
    "VIGIL_JOB_TOKEN",
    "VIGIL_ATTEMPT",
    "VIGIL_ROLE",
    "VIGIL_INDEX",
    "VIGIL_RANK",
    "VIGIL_INSTANCE",
    "VIGIL_C4D",
    "VIGIL_SDK_TIMEOUT",
    "VIGIL_JOB_HANG_INTERVAL",
    "VIGIL_C4D_FLUSH_SECONDS",
)


@pytest.fixture(autouse=True)
def no_vigil_env(monkeypatch):
    """Each test starts outside any job, and with no monitor or C4D recorder left over."""
    for name in VIGIL_VARS:
        monkeypatch.delenv(name, raising=False)
    from vigil import c4d, job_monitor

    job_monitor._default = None
    yield
    job_monitor._default = None
    c4d.uninstrument_torch_distributed()
    c4d.disable(timeout=0.5)


@pytest.fixture
def console():
    server = LoopbackConsole()
    yield server
    server.close()


@pytest.fixture
def silent_console():
    server = SilentConsole()
    yield server
    server.close()


@pytest.fixture
def in_job(monkeypatch, console):
    """os.environ as a Vigil backend would set it, pointing at the loopback console."""
    for name, value in job_env(console.url).items():
        monkeypatch.setenv(name, value)
    return console


def subprocess_env(url: str, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIGIL_")}
    env.update(job_env(url, **extra))
    env["PYTHONPATH"] = SDK_SRC + os.pathsep + env.get("PYTHONPATH", "")
    return env
