"""The seed's SDK examples, with the import changed to `from vigil import job_monitor
as jm`, run as real processes against a loopback console."""

import os
import subprocess
import sys

import pytest

from conftest import subprocess_env
from loopback_console import ERROR, TOKEN

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "examples")


def run_example(name, env, timeout=30):
    proc = subprocess.Popen(
        [sys.executable, os.path.join(EXAMPLES, name)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, err


def test_every_example_imports_only_vigil_job_monitor():
    for name in os.listdir(EXAMPLES):
        with open(os.path.join(EXAMPLES, name)) as f:
            text = f.read()
        assert "from vigil import job_monitor as jm" in text
        assert "aimaster" not in text


def test_custom_message_example_creates_one_message_event(console):
    code, out, err = run_example("custom_message.py", subprocess_env(console.url))
    assert (code, out, err) == (0, "", "")
    [request] = console.received()
    assert request.endpoint == "messages"
    assert request.body == {"content": "The training loss for the job is NaN."}
    assert request.headers["Authorization"] == "Bearer " + TOKEN


def test_custom_message_example_prints_the_consoles_refusal(console):
    console.mode = ERROR
    code, out, err = run_example("custom_message.py", subprocess_env(console.url))
    assert code == 0 and err == ""
    assert out.strip() == (
        "failed to send message, error INVALID_ARGUMENT: content is longer than "
        "4096 characters (HTTP 400, field 'content')"
    )


def test_custom_message_example_outside_a_job_says_it_is_not_running_under_vigil():
    env = {k: v for k, v in subprocess_env("http://unused").items() if not k.startswith("VIGIL_")}
    code, out, err = run_example("custom_message.py", env)
    assert code == 0 and err == ""
    assert out.startswith("failed to send message, error NOT_IN_JOB: not running under Vigil")


@pytest.mark.parametrize("example", ["retryable_errors_pytorch.py", "retryable_errors_tf.py"])
def test_retryable_error_examples_send_the_keywords(console, example):
    code, out, err = run_example(example, subprocess_env(console.url))
    assert (code, out, err) == (0, "", "")
    assert [(r.endpoint, r.body) for r in console.received()] == [
        ("retryable-errors", {"keywords": ["connect timeout", "error_yyy", "error_zzz"]})
    ]


def test_reset_config_example_sends_each_form(console):
    code, out, err = run_example("reset_config.py", subprocess_env(console.url))
    assert (code, out, err) == (0, "", "")
    # Monitor(config) sends the global 1800, then the dict, keyword and ** forms.
    assert [b["job_hang_interval"] for b in console.bodies("config")] == [1800, 1800, 10, 10]


def test_staged_hang_detection_example_scopes_each_function(console):
    code, out, err = run_example("staged_hang_detection.py", subprocess_env(console.url))
    assert (code, out, err) == (0, "", "")
    assert [b["job_hang_interval"] for b in console.bodies("config")] == [
        1800,  # Monitor(config=PyTorchConfig(job_hang_interval=1800))
        180,
        1800,
        -1,
        1800,  # epoch 0: train(), test()
        180,
        1800,
        -1,
        1800,  # epoch 1
        600,  # the seed's reset_hang_detect(600)
    ]
