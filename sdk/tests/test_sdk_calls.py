"""Each Monitor call against a loopback console that follows the contract, and the
Status it returns."""

import pytest

from loopback_console import ERROR, JOB_ID, RATE_LIMITED, SERVER_ERROR, TOKEN, job_env
from vigil import job_monitor as jm
from vigil._client import StatusCode


@pytest.fixture
def monitor(console):
    return jm.Monitor(config=jm.PyTorchConfig(), environ=job_env(console.url))


def test_custom_message_is_posted_with_the_job_token(console, monitor):
    st = monitor.send_custom_message(content="The training loss for the job is NaN.")
    assert st.ok() and st.code == StatusCode.OK and st.to_string() == "OK"
    [r] = console.received()
    assert r.path == "/api/v1/sdk/jobs/%s/messages/" % JOB_ID
    assert r.headers["Authorization"] == "Bearer " + TOKEN
    assert r.headers["Content-Type"] == "application/json"
    assert r.body == {"content": "The training loss for the job is NaN."}
    # Every call says who sends it (from the job's VIGIL_* environment).
    assert r.sender == {"rank": 0, "instance": "worker-0", "attempt": 1}


def test_a_message_over_the_limit_carries_the_consoles_detail(console, monitor):
    st = monitor.send_custom_message(content="x" * 4097)
    assert not st.ok()
    assert st.code == StatusCode.INVALID_ARGUMENT and st.http_status == 400 and st.field == "content"
    assert st.message == "content is longer than 4096 characters"
    assert st.to_string() == ("INVALID_ARGUMENT: content is longer than 4096 characters (HTTP 400, field 'content')")


def test_rate_limit_reports_retry_after(console, monitor):
    console.mode = RATE_LIMITED
    st = monitor.send_custom_message(content="hi")
    assert st.code == StatusCode.RATE_LIMITED and st.http_status == 429 and st.retry_after == 7.0
    assert "at most 20 SDK calls per second" in st.to_string() and "retry after 7 s" in st.to_string()


def test_a_server_error_page_is_not_ok_and_says_what_came_back(console, monitor):
    console.mode = SERVER_ERROR
    st = monitor.set_retryable_errors(["x"])
    assert st.code == StatusCode.SERVER_ERROR and st.http_status == 500
    assert "Server Error (500)" in st.message


def test_a_wrong_token_is_unauthenticated(console):
    monitor = jm.Monitor(environ=job_env(console.url, VIGIL_JOB_TOKEN="vjt_reset-since"))
    st = monitor.send_custom_message(content="hi")
    assert st.code == StatusCode.UNAUTHENTICATED and st.message == "invalid job token"


def test_an_unknown_job_is_not_found(console):
    monitor = jm.Monitor(environ=job_env(console.url, VIGIL_JOB_ID="999"))
    st = monitor.send_custom_message(content="hi")
    assert st.code == StatusCode.NOT_FOUND and "/api/v1/sdk/jobs/999/messages/" in st.message


def test_retryable_errors_replace_the_list(console, monitor):
    assert monitor.set_retryable_errors(["connect timeout", "error_yyy"]).ok()
    assert monitor.set_retryable_errors(("error_zzz",)).ok()
    assert console.bodies("retryable-errors") == [
        {"keywords": ["connect timeout", "error_yyy"]},
        {"keywords": ["error_zzz"]},
    ]


@pytest.mark.parametrize(
    "keywords, says",
    [
        ("connect timeout", "keywords must be a list of strings"),
        (["ok", 3], "each keyword must be a non-empty string; got 3"),
        (["x" * 257], "at most 256 are accepted"),
        (["k%d" % i for i in range(101)], "101 keywords given; at most 100 are accepted"),
    ],
)
def test_bad_keywords_are_refused_without_a_request(console, monitor, keywords, says):
    st = monitor.set_retryable_errors(keywords)
    assert st.code == StatusCode.INVALID_ARGUMENT and says in st.message and st.field == "keywords"
    assert console.received() == []


def test_reset_config_takes_keywords_or_a_dict(console, monitor):
    assert monitor.reset_config(job_hang_interval=10).ok()
    assert monitor.reset_config({"job_hang_interval": 20}).ok()
    assert monitor.reset_config(**{"job_hang_interval": -1}).ok()
    assert console.bodies("config") == [{"job_hang_interval": 10}, {"job_hang_interval": 20}, {"job_hang_interval": -1}]
    assert monitor.job_hang_interval == -1


def test_reset_config_with_nothing_changes_nothing(console, monitor):
    st = monitor.reset_config({})
    assert st.ok() and st.message == "nothing to change: no parameters given"
    assert console.received() == []


@pytest.mark.parametrize(
    "params, says",
    [
        ({"job_hang_intervall": 10}, "unknown parameter 'job_hang_intervall'; accepted: job_hang_interval"),
        ({"job_hang_interval": 0}, "job_hang_interval must be a whole number of seconds > 0, or -1"),
        ({"job_hang_interval": "600"}, "got '600'"),
        ({"job_hang_interval": 1.5}, "got 1.5"),
    ],
)
def test_reset_config_refuses_bad_parameters_in_its_status(console, monitor, params, says):
    st = monitor.reset_config(params)
    assert st.code == StatusCode.INVALID_ARGUMENT and says in st.message
    assert console.received() == []


def test_reset_config_refuses_what_is_not_a_dict(monitor):
    st = monitor.reset_config([("job_hang_interval", 10)])
    assert st.code == StatusCode.INVALID_ARGUMENT and "takes a dict or keyword arguments" in st.message


@pytest.mark.parametrize("config_class", [jm.PyTorchConfig, jm.TFConfig, jm.MPIConfig, jm.ElasticBatchConfig])
def test_config_given_at_construction_is_sent_once(console, config_class):
    monitor = jm.Monitor(config=config_class(job_hang_interval=3600), environ=job_env(console.url))
    assert monitor.init_status.ok()
    assert console.bodies("config") == [{"job_hang_interval": 3600}]
    assert monitor.job_hang_interval == 3600


def test_config_without_parameters_sends_nothing(console, monitor):
    assert monitor.init_status.ok() and console.received() == []


@pytest.mark.parametrize("config_class", [jm.PyTorchConfig, jm.TFConfig, jm.MPIConfig, jm.ElasticBatchConfig])
def test_an_unknown_config_keyword_is_a_type_error_naming_it(config_class):
    with pytest.raises(
        TypeError,
        match=r"%s\(\) got an unexpected keyword argument 'job_hang_intrval'; "
        r"accepted: job_hang_interval" % config_class.__name__,
    ):
        config_class(job_hang_intrval=10)


def test_a_bad_hang_interval_in_a_config_is_refused_at_construction():
    with pytest.raises(ValueError, match=r"PyTorchConfig\(\): job_hang_interval must be .* got -5"):
        jm.PyTorchConfig(job_hang_interval=-5)
    with pytest.raises(TypeError, match="got True"):
        jm.TFConfig(job_hang_interval=True)


def test_monitor_refuses_what_is_not_a_config_and_a_bad_timeout():
    with pytest.raises(TypeError, match="takes PyTorchConfig, TFConfig, MPIConfig or ElasticBatchConfig"):
        jm.Monitor(config={"job_hang_interval": 10})
    with pytest.raises(ValueError, match="timeout=...\\) must be a positive number of seconds; got 0"):
        jm.Monitor(timeout=0)


def test_outside_a_job_every_call_is_a_no_op_that_says_so():
    monitor = jm.Monitor(config=jm.PyTorchConfig(job_hang_interval=600))
    statuses = [
        monitor.init_status,
        monitor.send_custom_message(content="hi"),
        monitor.set_retryable_errors(["x"]),
        monitor.reset_config(job_hang_interval=10),
        monitor.report_progress(step=1, loss=0.5),
        jm.send_custom_message("hi"),
    ]
    for st in statuses:
        assert not st.ok() and st.code == StatusCode.NOT_IN_JOB
        assert st.to_string() == (
            "NOT_IN_JOB: not running under Vigil (VIGIL_CONSOLE_URL, VIGIL_JOB_ID, "
            "VIGIL_JOB_TOKEN are not set); nothing was sent"
        )
    assert not monitor.in_job


def test_an_incomplete_job_environment_names_what_is_missing(console):
    env = job_env(console.url)
    del env["VIGIL_JOB_TOKEN"]
    st = jm.Monitor(environ=env).send_custom_message(content="hi")
    assert st.code == StatusCode.MISCONFIGURED
    assert st.message == "the Vigil job environment is incomplete: VIGIL_JOB_TOKEN is not set; nothing was sent"
    st = jm.Monitor(environ=job_env("ftp://example")).send_custom_message(content="hi")
    assert st.code == StatusCode.MISCONFIGURED and "is not an http:// or https:// URL" in st.message
    assert console.received() == []


def test_a_non_string_message_is_refused(monitor):
    st = monitor.send_custom_message(content=float("nan"))
    assert st.code == StatusCode.INVALID_ARGUMENT and st.message == "content must be a str; got float"


def test_error_mode_applies_to_every_call(console, monitor):
    console.mode = ERROR
    for st in (
        monitor.send_custom_message(content="x"),
        monitor.set_retryable_errors(["x"]),
        monitor.reset_config(job_hang_interval=5),
    ):
        assert st.code == StatusCode.INVALID_ARGUMENT and st.http_status == 400


def test_module_level_calls_use_the_last_monitor_created(console):
    jm.Monitor(config=jm.TFConfig(), environ=job_env(console.url))
    assert jm.send_custom_message("from the module").ok()
    assert jm.set_retryable_errors(["a"]).ok()
    assert jm.reset_config(job_hang_interval=30).ok()
    assert jm.reset_hang_detect(40).ok()
    assert [r.endpoint for r in console.received()] == ["messages", "retryable-errors", "config", "config"]


def test_the_default_monitor_is_made_from_the_environment(in_job):
    assert jm.send_custom_message("hi").ok()
    assert jm.get_monitor() is jm.get_monitor()
    assert in_job.bodies("messages") == [{"content": "hi"}]


def test_a_bad_sdk_timeout_in_the_environment_falls_back_to_two_seconds(console, capsys):
    monitor = jm.Monitor(environ=job_env(console.url, VIGIL_SDK_TIMEOUT="soon"))
    assert monitor.timeout == 2.0
    assert "vigil: VIGIL_SDK_TIMEOUT='soon' is not a positive number of seconds; using 2" in capsys.readouterr().err


def test_the_package_exposes_report_progress_for_scripts_that_only_import_vigil(in_job):
    import vigil

    assert vigil.report_progress(step=7, metrics={"loss": 0.5}).ok()
    assert in_job.wait_for(lambda c: c.bodies("progress"), timeout=3)
    assert in_job.bodies("progress") == [{"step": 7, "metrics": {"loss": 0.5}}]
