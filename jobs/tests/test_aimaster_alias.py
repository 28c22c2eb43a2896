"""Seed compatibility: the seed's SDK examples with their own import line,
`from aimaster import job_monitor as jm`, run unchanged as a real job on the local
backend against a live console; their effects are read back through the REST API."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from django.core.cache import cache

from testsupport.monitor import finished, tick_until

pytestmark = pytest.mark.django_db(transaction=True)

SDK = Path(__file__).resolve().parents[2] / "sdk"
EXAMPLES = SDK / "tests" / "examples"  # the seed's examples, kept with the import changed to vigil
SEED_IMPORT = "from aimaster import job_monitor as jm"
VIGIL_IMPORT = "from vigil import job_monitor as jm"


@pytest.fixture(autouse=True)
def _roomy_sdk_rate(settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"sdk": "200/s"}}
    cache.clear()
    yield
    cache.clear()


def as_the_seed_wrote_it(tmp_path: Path, name: str) -> Path:
    """The example with the seed's own import line put back; nothing else differs."""
    text = (EXAMPLES / name).read_text()
    assert text.count(VIGIL_IMPORT) == 1, name
    seeded = tmp_path / name
    seeded.write_text(text.replace(VIGIL_IMPORT, SEED_IMPORT))
    return seeded


def test_the_seeds_examples_run_unchanged_under_the_aimaster_name(
    alice, alice_ws, api_as, live_server, settings, local_backend, tmp_path
):
    settings.VIGIL_CONSOLE_URL = live_server.url
    api = api_as(alice)
    names = [
        "custom_message.py",
        "retryable_errors_pytorch.py",
        "retryable_errors_tf.py",
        "reset_config.py",
        "staged_hang_detection.py",
    ]
    scripts = [as_the_seed_wrote_it(tmp_path, n) for n in names]
    # The alias and the real module are one object: one default monitor per process.
    check = tmp_path / "same_module.py"
    check.write_text(f"{SEED_IMPORT}\nimport vigil.job_monitor\nassert jm is vigil.job_monitor\n")
    command = " && ".join(f"{sys.executable} {s}" for s in [check, *scripts])
    body = {
        "workspace": alice_ws.slug,
        "display_name": "seed-aimaster",
        "job_type": "PyTorchJob",
        "job_specs": [{"type": "Master", "pod_count": 1}],
        "user_command": command,
        "envs": {"PYTHONPATH": str(SDK / "src")},  # the SDK distribution's packages: vigil and aimaster
        "backend": "local",
        "settings": {
            "enable_error_monitoring_in_aimaster": True,
            "error_monitoring_args": "--job-execution-mode=Sync --enable-job-hang-detection=True "
            "--job-hang-interval=600",
        },
    }
    r = api.post("/api/v1/jobs/", body, format="json")
    assert r.status_code == 201, r.content
    job_id = r.json()["id"]
    from jobs.models import Job

    tick_until(Job.objects.get(pk=job_id), finished, backend=local_backend, what="finish")

    job = api.get(f"/api/v1/jobs/{job_id}/").json()
    assert job["status"] == "Succeeded", job["reason"]
    log = api.get(f"/api/v1/jobs/{job_id}/logs/", {"instance": "master-0"}).json()
    assert log["content"] == ""  # every `if not st.ok(): print(...)` stayed silent
    # send_custom_message
    messages = api.get(f"/api/v1/jobs/{job_id}/events/", {"type": "custom_message"}).json()
    assert [m["message"] for m in messages] == ["The training loss for the job is NaN."]
    # set_retryable_errors (PyTorch and TF examples both set the same list)
    assert job["settings"]["sdk_retryable_errors"] == ["connect timeout", "error_yyy", "error_zzz"]
    # reset_config and hang_detect: each change is a decision event; the last one stays in force
    decisions = api.get(f"/api/v1/jobs/{job_id}/events/", {"type": "decision"}).json()
    intervals = [e["payload"]["job_hang_interval"] for e in decisions if "job_hang_interval" in e["payload"]]
    assert intervals == [1800, 10, 1800, 180, 1800, -1, 1800, 180, 1800, -1, 1800, 600]
    assert job["hang_interval_override"] == 600
