"""The fault-tolerance flag string: defaults, accepted values, rejections, round trips."""

import json
import keyword
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.flags import (
    KNOWN_FLAGS,
    MAX_COUNT,
    MAX_FLAGS_LENGTH,
    MAX_INTERVAL_SECONDS,
    C4DEnvs,
    C4DLogLevel,
    ExecutionMode,
    FaultTolerantPolicy,
    FaultToleranceConfig,
    FlagError,
    parse_c4d_common_envs,
    parse_flags,
)

SPEC_TABLE_ORDER = (
    "--job-execution-mode",
    "--enable-job-restart",
    "--max-num-of-job-restart",
    "--enable-job-hang-detection",
    "--job-hang-interval",
    "--job-hang-startup-interval",
    "--enable-c4d-hang-detection",
    "--enable-job-exit-hang-detection",
    "--job-exit-hang-interval",
    "--fault-tolerant-policy",
    "--max-num-of-same-error",
    "--max-tolerated-failure-rate",
    "--enable-warm-restart",
    "--warm-modules",
    "--c4d-log-level",
    "--c4d-common-envs",
)
# Issue 30's replica groups, after the SPEC's table.
REPLICA_GROUP_FLAGS = ("--replica-groups", "--lighthouse-heartbeat-timeout-ms")


def rejection(text: str) -> FlagError:
    with pytest.raises(FlagError) as caught:
        parse_flags(text)
    return caught.value


# --- defaults ----------------------------------------------------------------------


def test_the_known_flags_are_the_spec_table_in_its_order():
    assert KNOWN_FLAGS == SPEC_TABLE_ORDER + REPLICA_GROUP_FLAGS


@pytest.mark.parametrize("text", ["", "   ", "\n\t \n"])
def test_an_empty_flag_string_gives_the_spec_defaults(text):
    config = parse_flags(text)
    assert config == FaultToleranceConfig()
    assert config.job_execution_mode is ExecutionMode.SYNC
    assert config.enable_job_restart is False
    assert config.max_num_of_job_restart == 3
    assert config.enable_job_hang_detection is False
    assert config.job_hang_interval == 1800
    assert config.job_hang_startup_interval is None and config.startup_interval == 1800
    assert config.enable_c4d_hang_detection is False
    assert config.enable_job_exit_hang_detection is False
    assert config.job_exit_hang_interval == 600
    assert config.fault_tolerant_policy is FaultTolerantPolicy.EXIT_CODE_AND_ERROR_MSG
    assert config.max_num_of_same_error == 10
    assert config.max_tolerated_failure_rate == -1.0
    assert config.c4d_log_level is C4DLogLevel.WARNING
    assert config.c4d_common_envs == C4DEnvs()


@pytest.mark.parametrize(
    ("hang_interval", "startup"),
    [
        (1, 600),
        (4, 600),
        (599, 600),
        (600, 600),
        (601, 601),
        (1800, 1800),
        (MAX_INTERVAL_SECONDS, MAX_INTERVAL_SECONDS),
    ],
)
def test_the_startup_interval_left_out_is_the_larger_of_600_s_and_the_hang_interval(hang_interval, startup):
    config = parse_flags(f"--job-hang-interval={hang_interval}")
    assert config.job_hang_startup_interval is None
    assert config.startup_interval == startup
    assert "--job-hang-startup-interval" not in config.to_flags()  # derived, so it follows the hang interval


@pytest.mark.parametrize("startup", [1, 5, 600, 7200])
def test_a_given_startup_interval_is_used_as_given_even_below_the_hang_interval(startup):
    config = parse_flags(f"--job-hang-interval=1800 --job-hang-startup-interval={startup}")
    assert config.startup_interval == startup
    assert config.to_flags() == f"--job-hang-startup-interval={startup}"  # 1800 is the hang default
    assert FaultToleranceConfig.from_dict(config.to_dict()) == config


def test_a_startup_interval_of_600_given_explicitly_stays_explicit_when_the_hang_interval_grows():
    # Rendering must not fold an explicit 600 into "not given": with a 3600 s hang
    # interval the derived value would become 3600.
    config = parse_flags("--job-hang-startup-interval=600 --job-hang-interval=3600")
    assert config.startup_interval == 600
    assert parse_flags(config.to_flags()).startup_interval == 600


def test_a_stored_config_from_before_the_startup_flag_derives_it():
    assert FaultToleranceConfig.from_dict({"job_hang_interval": 30}).startup_interval == 600
    assert FaultToleranceConfig.from_dict({"job_hang_startup_interval": None}) == FaultToleranceConfig()


@pytest.mark.parametrize(
    ("value", "says"), [("-1", "positive"), ("2592001", "30 days"), ("10s", "positive"), ("1.5", "positive")]
)
def test_a_bad_startup_interval_names_its_flag(value, says):
    error = rejection(f"--job-hang-startup-interval={value}")
    assert error.flag == "--job-hang-startup-interval" and says in error.message


def test_a_startup_interval_may_be_set_while_hang_detection_is_off():
    config = parse_flags("--enable-job-hang-detection=False --job-hang-startup-interval=90")
    assert config.startup_interval == 90


def test_the_startup_interval_may_not_be_given_as_a_string_in_a_stored_config():
    with pytest.raises(FlagError) as caught:
        FaultToleranceConfig.from_dict({"job_hang_startup_interval": "60"})
    assert caught.value.flag == "--job-hang-startup-interval"


def test_the_c4d_environment_defaults_are_the_spec_defaults():
    envs = C4DEnvs()
    assert envs.to_env() == {
        "C4D_HANG_TIMEOUT": "10000000",
        "C4D_HANG_TIMES": "18",
        "C4D_CONN_BW_CHECK_PERIOD": "10",
        "C4D_RUNTIME_LOG_LEVEL": "INFO",
        "C4D_ENABLE_STATS_OUTPUT": "FALSE",
    }


def test_defaults_render_as_an_empty_flag_string():
    assert FaultToleranceConfig().to_flags() == ""


# --- the seed's examples -----------------------------------------------------------


def test_the_seeds_synchronous_pytorch_example_restarts_the_whole_job_up_to_three_times():
    config = parse_flags(
        "--job-execution-mode=Sync --enable-job-restart=True "
        "--max-num-of-job-restart=3 --fault-tolerant-policy=ExitCodeAndErrorMsg"
    )
    assert config == FaultToleranceConfig(
        job_execution_mode=ExecutionMode.SYNC,
        enable_job_restart=True,
        max_num_of_job_restart=3,
        fault_tolerant_policy=FaultTolerantPolicy.EXIT_CODE_AND_ERROR_MSG,
    )


@pytest.mark.parametrize("job", ["asynchronous TensorFlow", "offline inference (ElasticBatch)"])
def test_the_seeds_asynchronous_examples_restart_any_failed_instance(job):
    config = parse_flags("--job-execution-mode=Async --fault-tolerant-policy=OnFailure")
    assert config == FaultToleranceConfig(
        job_execution_mode=ExecutionMode.ASYNC,
        fault_tolerant_policy=FaultTolerantPolicy.ON_FAILURE,
    )
    assert config.enable_job_restart is False


@pytest.mark.parametrize("interval", [3600, 30])
def test_the_seeds_sdk_examples_turn_on_hang_detection_with_their_interval(interval):
    config = parse_flags(
        "--job-execution-mode=Sync --enable-job-restart=True "
        f"--enable-job-hang-detection=True --job-hang-interval={interval}"
    )
    assert config.enable_job_hang_detection is True
    assert config.job_hang_interval == interval
    assert config.enable_job_restart is True


def test_the_seeds_c4d_examples_set_the_log_level_and_two_variables():
    config = parse_flags("--c4d-log-level=Info --c4d-common-envs=C4D_HANG_TIMEOUT=1,C4D_HANG_TIMES=2")
    assert config.c4d_log_level is C4DLogLevel.INFO
    assert config.c4d_common_envs == C4DEnvs(hang_timeout_us=1, hang_times=2)
    assert config.c4d_common_envs.to_env()["C4D_CONN_BW_CHECK_PERIOD"] == "10"


# --- syntax -------------------------------------------------------------------------


def test_space_separated_values_read_the_same_as_equals_signs():
    assert parse_flags("--job-execution-mode Async --fault-tolerant-policy OnFailure") == parse_flags(
        "--job-execution-mode=Async --fault-tolerant-policy=OnFailure"
    )


def test_any_whitespace_between_flags_is_accepted():
    config = parse_flags("\n  --enable-job-restart=True\n\n\t--max-num-of-job-restart   5  \r\n")
    assert (config.enable_job_restart, config.max_num_of_job_restart) == (True, 5)


def test_a_non_breaking_space_pasted_from_a_web_page_separates_flags():
    assert parse_flags("--enable-job-restart=True\u00a0--max-num-of-job-restart=5").max_num_of_job_restart == 5


@pytest.mark.parametrize(
    "text",
    [
        "--c4d-common-envs 'C4D_HANG_TIMES=2, C4D_CONN_BW_CHECK_PERIOD=5'",
        '--c4d-common-envs="C4D_HANG_TIMES=2, C4D_CONN_BW_CHECK_PERIOD=5"',
        "'--c4d-common-envs=C4D_HANG_TIMES=2 , C4D_CONN_BW_CHECK_PERIOD=5'",
    ],
)
def test_quoted_values_are_shell_split(text):
    assert parse_flags(text).c4d_common_envs == C4DEnvs(hang_times=2, conn_bw_check_period=5)


@pytest.mark.parametrize("text", ["--job-hang-interval '60'", '--job-hang-interval="60"'])
def test_a_quoted_number_is_a_number(text):
    assert parse_flags(text).job_hang_interval == 60


# --- each flag: accepted values -------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "mode"),
    [
        ("Sync", ExecutionMode.SYNC),
        ("sync", ExecutionMode.SYNC),
        ("SYNC", ExecutionMode.SYNC),
        ("Async", ExecutionMode.ASYNC),
        ("async", ExecutionMode.ASYNC),
        ("aSyNc", ExecutionMode.ASYNC),
    ],
)
def test_execution_mode_is_matched_in_any_case_and_stored_canonically(value, mode):
    config = parse_flags(f"--job-execution-mode={value}")
    assert config.job_execution_mode is mode
    assert config.to_dict()["job_execution_mode"] == mode.value


BOOLEAN_FLAGS = [
    ("--enable-job-restart", "enable_job_restart"),
    ("--enable-job-hang-detection", "enable_job_hang_detection"),
    ("--enable-job-exit-hang-detection", "enable_job_exit_hang_detection"),
]


@pytest.mark.parametrize(("flag", "field"), BOOLEAN_FLAGS)
@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ("True", True),
        ("true", True),
        ("TRUE", True),
        ("tRuE", True),
        ("False", False),
        ("false", False),
        ("FALSE", False),
    ],
)
def test_booleans_accept_true_and_false_in_any_case(flag, field, word, expected):
    assert getattr(parse_flags(f"{flag}={word}"), field) is expected


@pytest.mark.parametrize(("word", "expected"), [("True", True), ("true", True), ("FALSE", False)])
def test_c4d_detection_is_a_boolean_too_when_hang_detection_is_on(word, expected):
    config = parse_flags(f"--enable-job-hang-detection=True --enable-c4d-hang-detection={word}")
    assert config.enable_c4d_hang_detection is expected


INTEGER_FLAGS = [
    # flag, field, lowest accepted, highest accepted
    ("--max-num-of-job-restart", "max_num_of_job_restart", 0, MAX_COUNT),
    ("--job-hang-interval", "job_hang_interval", 1, MAX_INTERVAL_SECONDS),
    ("--job-hang-startup-interval", "job_hang_startup_interval", 1, MAX_INTERVAL_SECONDS),
    ("--job-exit-hang-interval", "job_exit_hang_interval", 1, MAX_INTERVAL_SECONDS),
    ("--max-num-of-same-error", "max_num_of_same_error", 1, MAX_COUNT),
]


@pytest.mark.parametrize(("flag", "field", "low", "high"), INTEGER_FLAGS)
def test_integer_flags_accept_their_whole_range(flag, field, low, high):
    for value in (low, low + 1, 42, high - 1, high):
        assert getattr(parse_flags(f"{flag}={value}"), field) == value


def test_no_whole_job_restarts_at_all_is_expressed_as_zero():
    assert parse_flags("--enable-job-restart=True --max-num-of-job-restart=0").max_num_of_job_restart == 0


@pytest.mark.parametrize(
    ("value", "rate"),
    [
        ("-1", -1.0),
        ("-1.0", -1.0),
        ("0", 0.0),
        ("0.0", 0.0),
        ("-0", 0.0),
        ("0.3", 0.3),
        (".5", 0.5),
        ("1", 1.0),
        ("1.0", 1.0),
        ("3e-1", 0.3),
        ("0.125", 0.125),
    ],
)
def test_failure_rate_accepts_fractions_from_zero_to_one_and_minus_one(value, rate):
    assert parse_flags(f"--max-tolerated-failure-rate={value}").max_tolerated_failure_rate == rate


@pytest.mark.parametrize(
    ("flag", "field", "enum"),
    [
        ("--fault-tolerant-policy", "fault_tolerant_policy", FaultTolerantPolicy),
        ("--c4d-log-level", "c4d_log_level", C4DLogLevel),
    ],
)
def test_enumerations_accept_every_value_in_any_case_and_store_it_canonically(flag, field, enum):
    for member in enum:
        for spelling in (member.value, member.value.lower(), member.value.upper()):
            assert getattr(parse_flags(f"{flag}={spelling}"), field) is member


@pytest.mark.parametrize(
    ("value", "envs"),
    [
        ("C4D_HANG_TIMEOUT=1", C4DEnvs(hang_timeout_us=1)),
        ("C4D_HANG_TIMEOUT=2592000000000", C4DEnvs(hang_timeout_us=2_592_000_000_000)),
        ("C4D_HANG_TIMES=1", C4DEnvs(hang_times=1)),
        ("C4D_HANG_TIMES=10000", C4DEnvs(hang_times=10_000)),
        ("C4D_CONN_BW_CHECK_PERIOD=1", C4DEnvs(conn_bw_check_period=1)),
        ("C4D_CONN_BW_CHECK_PERIOD=2592000", C4DEnvs(conn_bw_check_period=2_592_000)),
        *[
            (f"C4D_RUNTIME_LOG_LEVEL={level}", C4DEnvs(runtime_log_level=level))
            for level in ("TRACE", "DEBUG", "INFO", "WARN", "WARNING", "ERROR", "FATAL")
        ],
        ("C4D_RUNTIME_LOG_LEVEL=debug", C4DEnvs(runtime_log_level="DEBUG")),
        ("C4D_ENABLE_STATS_OUTPUT=TRUE", C4DEnvs(enable_stats_output=True)),
        ("C4D_ENABLE_STATS_OUTPUT=true", C4DEnvs(enable_stats_output=True)),
        ("C4D_ENABLE_STATS_OUTPUT=FALSE", C4DEnvs(enable_stats_output=False)),
        (
            "C4D_HANG_TIMEOUT=5000000,C4D_HANG_TIMES=36,C4D_CONN_BW_CHECK_PERIOD=20,"
            "C4D_RUNTIME_LOG_LEVEL=ERROR,C4D_ENABLE_STATS_OUTPUT=TRUE",
            C4DEnvs(5_000_000, 36, 20, "ERROR", True),
        ),
    ],
)
def test_c4d_common_envs_accept_each_variable_over_its_range(value, envs):
    assert parse_flags(f"--c4d-common-envs={value}").c4d_common_envs == envs


@pytest.mark.parametrize("text", ["--c4d-common-envs=", "--c4d-common-envs=''", '--c4d-common-envs ""'])
def test_an_explicitly_empty_c4d_environment_keeps_its_defaults(text):
    assert parse_flags(text) == FaultToleranceConfig()


def test_the_c4d_environment_reaches_the_runtime_as_environment_variables():
    envs = parse_c4d_common_envs("C4D_HANG_TIMES=2,C4D_ENABLE_STATS_OUTPUT=true")
    assert envs.to_env() == {
        "C4D_HANG_TIMEOUT": "10000000",
        "C4D_HANG_TIMES": "2",
        "C4D_CONN_BW_CHECK_PERIOD": "10",
        "C4D_RUNTIME_LOG_LEVEL": "INFO",
        "C4D_ENABLE_STATS_OUTPUT": "TRUE",
    }


# --- each flag: rejected values ---------------------------------------------------------


@pytest.mark.parametrize("value", ["sink", "Synchronous", "1", "True", "Sync,Async"])
def test_a_bad_execution_mode_names_the_flag_and_both_modes(value):
    error = rejection(f"--job-execution-mode={value}")
    assert error.flag == "--job-execution-mode"
    assert str(error) == f"--job-execution-mode: {value!r} is not accepted; use Sync or Async"


@pytest.mark.parametrize(("flag", "field"), BOOLEAN_FLAGS + [("--enable-c4d-hang-detection", "")])
@pytest.mark.parametrize("word", ["yes", "no", "1", "0", "on", "T", "Truee", "None"])
def test_a_bad_boolean_names_the_flag_and_true_or_false(flag, field, word):
    error = rejection(f"{flag}={word}")
    assert error.flag == flag
    assert str(error).startswith(f"{flag}: {word!r} is not accepted")
    assert "True or False" in str(error)


@pytest.mark.parametrize(("flag", "field", "low", "high"), INTEGER_FLAGS)
@pytest.mark.parametrize(
    "kind",
    [
        "below the range",
        "above the range",
        "negative",
        "decimal",
        "word",
        "hex",
        "underscored",
        "huge",
        "plus sign",
        "full-width digit",
    ],
)
def test_a_bad_integer_names_the_flag_and_the_accepted_range(flag, field, low, high, kind):
    value = {
        "below the range": str(low - 1),
        "above the range": str(high + 1),
        "negative": "-5",
        "decimal": "2.5",
        "word": "ten",
        "hex": "0x10",
        "underscored": "1_000",
        "huge": "9" * 5000,
        "plus sign": "+5",
        "full-width digit": "\uff15",
    }[kind]
    error = rejection(f"{flag}={value}")
    assert error.flag == flag
    assert str(error).startswith(f"{flag}: ")
    assert "is not accepted" in error.message
    assert str(high) in error.message


@pytest.mark.parametrize("flag", ["--job-hang-interval", "--job-hang-startup-interval", "--job-exit-hang-interval"])
def test_an_interval_of_zero_is_refused_as_not_positive(flag):
    error = rejection(f"{flag}=0")
    assert "positive" in error.message and "30 days" in error.message


def test_the_same_error_limit_must_be_at_least_one():
    assert "from 1 to 10000" in rejection("--max-num-of-same-error=0").message


@pytest.mark.parametrize(
    "value",
    [
        "1.5",
        "-0.5",
        "-2",
        "2",
        "nan",
        "NaN",
        "inf",
        "-inf",
        "1e999",
        "30%",
        "0,3",
        "zero",
        "0x1",
        "1_0",
    ],
)
def test_a_bad_failure_rate_names_the_flag_and_the_accepted_range(value):
    error = rejection(f"--max-tolerated-failure-rate={value}")
    assert error.flag == "--max-tolerated-failure-rate"
    assert str(error) == (
        f"--max-tolerated-failure-rate: {value!r} is not accepted; "
        "use a decimal from 0 to 1 (e.g. 0.3), or -1 to turn the limit off"
    )


@pytest.mark.parametrize(
    ("flag", "accepted"),
    [
        ("--fault-tolerant-policy", "OnFailure, ExitCodeAndErrorMsg or Never"),
        ("--c4d-log-level", "Info, Warning or Error"),
    ],
)
@pytest.mark.parametrize("value", ["Always", "On-Failure", "Warn", "0", "debug"])
def test_a_bad_enumeration_value_names_the_flag_and_every_accepted_value(flag, accepted, value):
    error = rejection(f"{flag}={value}")
    assert str(error) == f"{flag}: {value!r} is not accepted; use {accepted}"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("C4D_HANG_TIMEOUT", "is not K=V"),
        ("C4D_HANG_TIMEOUT=1,,C4D_HANG_TIMES=2", "empty item"),
        ("C4D_HANG_TIMEOUT=1,", "empty item"),
        ("C4D_HANG_TIMEOUTS=1", "did you mean C4D_HANG_TIMEOUT?"),
        ("c4d_hang_times=2", "did you mean C4D_HANG_TIMES?"),
        ("PATH=/bin", "is not a C4D variable"),
        ("C4D_HANG_TIMES=2,C4D_HANG_TIMES=3", "C4D_HANG_TIMES is given twice"),
        ("C4D_HANG_TIMEOUT=0", "C4D_HANG_TIMEOUT: '0' is not accepted; use a positive whole number of microseconds"),
        ("C4D_HANG_TIMEOUT=2592000000001", "C4D_HANG_TIMEOUT: '2592000000001' is not accepted"),
        ("C4D_HANG_TIMEOUT=10s", "C4D_HANG_TIMEOUT: '10s' is not accepted"),
        ("C4D_HANG_TIMES=0", "C4D_HANG_TIMES: '0' is not accepted; use a whole number from 1 to 10000"),
        ("C4D_HANG_TIMES=10001", "C4D_HANG_TIMES: '10001' is not accepted"),
        ("C4D_HANG_TIMES=", "C4D_HANG_TIMES: '' is not accepted"),
        (
            "C4D_CONN_BW_CHECK_PERIOD=-1",
            "C4D_CONN_BW_CHECK_PERIOD: '-1' is not accepted; use a positive whole number of seconds",
        ),
        ("C4D_CONN_BW_CHECK_PERIOD=2592001", "C4D_CONN_BW_CHECK_PERIOD: '2592001' is not accepted"),
        (
            "C4D_RUNTIME_LOG_LEVEL=VERBOSE",
            "C4D_RUNTIME_LOG_LEVEL: 'VERBOSE' is not accepted; use one of TRACE DEBUG INFO WARN WARNING ERROR FATAL",
        ),
        ("C4D_ENABLE_STATS_OUTPUT=1", "C4D_ENABLE_STATS_OUTPUT: '1' is not accepted; use TRUE or FALSE"),
        ("C4D_ENABLE_STATS_OUTPUT=yes", "C4D_ENABLE_STATS_OUTPUT: 'yes' is not accepted; use TRUE or FALSE"),
    ],
)
def test_a_malformed_c4d_environment_names_the_flag_and_the_variable(value, says):
    error = rejection(f"--c4d-common-envs={value}")
    assert error.flag == "--c4d-common-envs"
    assert str(error).startswith("--c4d-common-envs: ")
    assert says in error.message


@pytest.mark.parametrize("flag", SPEC_TABLE_ORDER[:-1])
@pytest.mark.parametrize(
    "form", ["{flag}", "{flag}=", "{flag} ''", "{flag} --enable-job-restart=True", "--enable-job-restart=True {flag}"]
)
def test_a_missing_value_names_the_flag_and_what_it_accepts(flag, form):
    text = form.format(flag=flag)
    if flag == "--enable-job-restart" and "--enable-job-restart=True" in text:
        text = text.replace("--enable-job-restart=True", "--max-num-of-job-restart=3")
    error = rejection(text)
    assert error.flag == flag
    assert error.message.startswith("a value is missing; use ")


@pytest.mark.parametrize("text", ["--c4d-common-envs", "--c4d-common-envs --c4d-log-level=Info"])
def test_the_c4d_environment_flag_without_any_value_is_missing_its_value(text):
    error = rejection(text)
    assert (error.flag, error.message.startswith("a value is missing")) == ("--c4d-common-envs", True)


@pytest.mark.parametrize(
    ("given", "suggestion"),
    [
        ("--job-hang-intervall", "--job-hang-interval"),
        ("--job_execution_mode", "--job-execution-mode"),
        ("--enable-job-restarts", "--enable-job-restart"),
        ("--max-num-of-job-restarts", "--max-num-of-job-restart"),
        ("--fault-tolerance-policy", "--fault-tolerant-policy"),
        ("--enable-c4d-detection", "--enable-c4d-hang-detection"),
        ("-job-execution-mode", "--job-execution-mode"),
        ("\u2013job-execution-mode", "--job-execution-mode"),
        ("--Job-Execution-Mode", "--job-execution-mode"),
    ],
)
def test_an_unknown_flag_is_refused_with_the_closest_known_flag(given, suggestion):
    error = rejection(f"{given}=Sync")
    assert error.flag == given
    assert str(error) == f"{given}: is not a known flag; did you mean {suggestion}?"


def test_an_unknown_flag_with_nothing_close_lists_the_known_flags():
    error = rejection("--gpus=8")
    assert error.flag == "--gpus"
    assert all(flag in error.message for flag in SPEC_TABLE_ORDER)


@pytest.mark.parametrize(
    "text",
    [
        "--enable-job-restart=True --enable-job-restart=True",
        "--enable-job-restart=True --max-num-of-job-restart=3 --enable-job-restart False",
    ],
)
def test_a_flag_given_twice_is_refused_even_with_the_same_value(text):
    error = rejection(text)
    assert error.flag == "--enable-job-restart"
    assert "given twice" in error.message


def test_a_stray_word_is_refused_saying_what_came_before_it():
    error = rejection("--job-execution-mode=Sync Async")
    assert "'Async' after --job-execution-mode=Sync" in str(error)
    assert "--name=value" in str(error)


def test_an_unclosed_quote_names_the_flag_it_belongs_to():
    error = rejection("--enable-job-restart=True --c4d-common-envs='C4D_HANG_TIMES=2")
    assert error.flag == "--c4d-common-envs"
    assert "close every quote" in str(error)


def test_a_flag_string_longer_than_the_limit_is_refused_with_the_limit():
    error = rejection(" " * (MAX_FLAGS_LENGTH + 1))
    assert str(MAX_FLAGS_LENGTH) in str(error)


def test_a_flag_string_must_be_text():
    with pytest.raises(FlagError, match="must be text"):
        parse_flags(None)


# --- cross-flag rules --------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--enable-job-hang-detection", "--enable-job-exit-hang-detection"])
def test_hang_detection_is_refused_for_async_jobs_naming_both_flags(flag):
    error = rejection(f"--job-execution-mode=Async {flag}=True")
    assert error.flag == flag
    assert "--job-execution-mode=Async" in error.message
    assert "Sync jobs only" in error.message


@pytest.mark.parametrize("flag", ["--enable-job-hang-detection", "--enable-job-exit-hang-detection"])
def test_hang_detection_turned_off_is_fine_for_async_jobs(flag):
    assert parse_flags(f"--job-execution-mode=async {flag}=False").job_execution_mode is ExecutionMode.ASYNC


def test_c4d_detection_is_refused_without_hang_detection():
    error = rejection("--enable-c4d-hang-detection=True")
    assert error.flag == "--enable-c4d-hang-detection"
    assert "--enable-job-hang-detection=True" in error.message


def test_c4d_detection_is_refused_for_async_jobs_through_hang_detection():
    error = rejection("--job-execution-mode=Async --enable-job-hang-detection=True --enable-c4d-hang-detection=True")
    assert error.flag == "--enable-job-hang-detection"


def test_everything_on_for_a_sync_job_is_accepted():
    config = parse_flags(
        "--enable-job-hang-detection=True --enable-c4d-hang-detection=True "
        "--enable-job-exit-hang-detection=True --job-exit-hang-interval=120"
    )
    assert (config.enable_c4d_hang_detection, config.job_exit_hang_interval) == (True, 120)


def test_a_config_built_in_code_obeys_the_same_rules():
    with pytest.raises(FlagError) as caught:
        FaultToleranceConfig(job_execution_mode=ExecutionMode.ASYNC, enable_job_exit_hang_detection=True)
    assert caught.value.flag == "--enable-job-exit-hang-detection"
    with pytest.raises(FlagError) as caught:
        FaultToleranceConfig(job_hang_interval=0)
    assert caught.value.flag == "--job-hang-interval"


# --- rendering and storage ------------------------------------------------------------------


def test_to_flags_renders_only_non_default_flags_in_spec_order():
    config = parse_flags(
        "--c4d-common-envs=C4D_HANG_TIMES=2 --c4d-log-level=info "
        "--max-tolerated-failure-rate=0.30 --job-execution-mode=async "
        "--enable-job-restart=True --max-num-of-job-restart=3"
    )
    assert config.to_flags() == (
        "--job-execution-mode=Async --enable-job-restart=True "
        "--max-tolerated-failure-rate=0.3 --c4d-log-level=Info "
        "--c4d-common-envs=C4D_HANG_TIMES=2"
    )


def test_every_flag_renders_in_spec_order_when_none_is_default():
    config = FaultToleranceConfig(
        job_execution_mode=ExecutionMode.SYNC,  # the one default left: Async forbids hang detection
        enable_job_restart=True,
        max_num_of_job_restart=7,
        enable_job_hang_detection=True,
        job_hang_interval=900,
        job_hang_startup_interval=1200,
        enable_c4d_hang_detection=True,
        enable_job_exit_hang_detection=True,
        job_exit_hang_interval=300,
        fault_tolerant_policy=FaultTolerantPolicy.NEVER,
        max_num_of_same_error=2,
        max_tolerated_failure_rate=1.0,
        enable_warm_restart=True,
        warm_modules=("torch", "mypkg.models"),
        c4d_log_level=C4DLogLevel.ERROR,
        c4d_common_envs=C4DEnvs(hang_timeout_us=5, enable_stats_output=True),
    )
    rendered = config.to_flags()
    names = [token.split("=", 1)[0] for token in rendered.split()]
    assert names == list(SPEC_TABLE_ORDER[1:])
    assert "--max-tolerated-failure-rate=1 " in rendered
    assert rendered.endswith("--c4d-common-envs=C4D_HANG_TIMEOUT=5,C4D_ENABLE_STATS_OUTPUT=TRUE")
    assert parse_flags(rendered) == config


def test_values_equal_to_the_defaults_are_left_out_of_the_canonical_string():
    config = parse_flags(
        "--job-execution-mode=Sync --max-num-of-job-restart=3 "
        "--c4d-common-envs=C4D_HANG_TIMES=18,C4D_RUNTIME_LOG_LEVEL=info"
    )
    assert config == FaultToleranceConfig()
    assert config.to_flags() == ""


def test_to_dict_is_json_and_from_dict_restores_the_config():
    config = parse_flags(
        "--job-execution-mode=Sync --enable-job-hang-detection=True --job-hang-interval=30 "
        "--enable-c4d-hang-detection=True --max-tolerated-failure-rate=0.25 "
        "--c4d-common-envs=C4D_RUNTIME_LOG_LEVEL=warn"
    )
    stored = json.loads(json.dumps(config.to_dict()))
    assert stored["job_execution_mode"] == "Sync"
    assert stored["c4d_common_envs"]["runtime_log_level"] == "WARN"
    assert FaultToleranceConfig.from_dict(stored) == config
    assert FaultToleranceConfig.from_dict(stored).job_execution_mode is ExecutionMode.SYNC


def test_from_dict_fills_missing_settings_with_defaults():
    assert FaultToleranceConfig.from_dict({"enable_job_restart": True}) == FaultToleranceConfig(enable_job_restart=True)


@pytest.mark.parametrize(
    ("data", "flag", "says"),
    [
        ({"job_hang_intervall": 5}, "job_hang_intervall", "did you mean job_hang_interval?"),
        ({"job_hang_interval": "60"}, "--job-hang-interval", "'60' is not accepted"),
        ({"enable_job_restart": 1}, "--enable-job-restart", "1 is not accepted; use True or False"),
        ({"max_num_of_job_restart": True}, "--max-num-of-job-restart", "True is not accepted"),
        ({"max_tolerated_failure_rate": "0.5"}, "--max-tolerated-failure-rate", "'0.5' is not accepted"),
        ({"job_execution_mode": "sink"}, "--job-execution-mode", "'sink' is not accepted; use Sync or Async"),
        ({"c4d_common_envs": {"hang_times": 0}}, "--c4d-common-envs", "C4D_HANG_TIMES: 0 is not accepted"),
        ({"c4d_common_envs": {"HANG_TIMES": 2}}, "--c4d-common-envs", "did you mean hang_times?"),
        ({"c4d_common_envs": "C4D_HANG_TIMES=2"}, "--c4d-common-envs", "is not accepted"),
    ],
)
def test_from_dict_refuses_bad_stored_values_naming_the_setting(data, flag, says):
    with pytest.raises(FlagError) as caught:
        FaultToleranceConfig.from_dict(data)
    assert caught.value.flag == flag
    assert says in caught.value.message


def test_from_dict_refuses_something_that_is_not_an_object():
    with pytest.raises(FlagError, match="must be an object"):
        FaultToleranceConfig.from_dict(["--enable-job-restart=True"])


# --- properties -------------------------------------------------------------------------------

FLAG_NAMES = st.sampled_from(SPEC_TABLE_ORDER + ("--job-hang-intervall", "-enable-job-restart", "--", "--x"))
PLAUSIBLE_VALUES = st.one_of(
    st.sampled_from(
        [
            "True",
            "false",
            "TRUE",
            "yes",
            "Sync",
            "async",
            "Never",
            "onfailure",
            "ExitCodeAndErrorMsg",
            "Info",
            "warning",
            "ERROR",
            "-1",
            "0",
            "1",
            "0.5",
            "nan",
            "1e999",
            "",
            "''",
            '"',
            "\\",
            "C4D_HANG_TIMEOUT=1,C4D_HANG_TIMES=2",
            "C4D_RUNTIME_LOG_LEVEL=warn",
            "C4D_ENABLE_STATS_OUTPUT=true,",
            "=",
            ",",
        ]
    ),
    st.integers(min_value=-10, max_value=3 * MAX_INTERVAL_SECONDS).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=20),
    st.lists(
        st.tuples(
            st.sampled_from(
                [
                    "C4D_HANG_TIMEOUT",
                    "C4D_HANG_TIMES",
                    "C4D_CONN_BW_CHECK_PERIOD",
                    "C4D_RUNTIME_LOG_LEVEL",
                    "C4D_ENABLE_STATS_OUTPUT",
                    "C4D_X",
                ]
            ),
            st.one_of(
                st.integers(-5, 10**8).map(str), st.sampled_from(["TRUE", "false", "TRACE", "warn", "FATAL", "x", ""])
            ),
        ),
        max_size=6,
    ).map(lambda pairs: ",".join(f"{k}={v}" for k, v in pairs)),
)


@st.composite
def plausible_flag_strings(draw):
    parts = []
    for _ in range(draw(st.integers(0, 8))):
        name, value = draw(FLAG_NAMES), draw(PLAUSIBLE_VALUES)
        joiner = draw(st.sampled_from(["=", " ", "\n", "=  "]))
        if draw(st.booleans()):
            value = draw(st.sampled_from(["'{}'", '"{}"', "{}"])).format(value)
        parts.append(f"{name}{joiner}{value}")
        parts.append(draw(st.sampled_from([" ", "  ", "\n", "\t", " \n "])))
    return "".join(parts)


def any_case(word: str):
    return st.lists(st.booleans(), min_size=len(word), max_size=len(word)).map(
        lambda upper: "".join(c.upper() if u else c.lower() for c, u in zip(word, upper))
    )


VALID_VALUES = {
    "--job-execution-mode": st.sampled_from(["Sync", "Async"]).flatmap(any_case),
    "--enable-job-restart": st.sampled_from(["True", "False"]).flatmap(any_case),
    "--max-num-of-job-restart": st.integers(0, MAX_COUNT).map(str),
    "--enable-job-hang-detection": st.sampled_from(["True", "False"]).flatmap(any_case),
    "--job-hang-interval": st.integers(1, MAX_INTERVAL_SECONDS).map(str),
    "--job-hang-startup-interval": st.integers(1, MAX_INTERVAL_SECONDS).map(str),
    "--enable-c4d-hang-detection": st.sampled_from(["True", "False"]).flatmap(any_case),
    "--enable-job-exit-hang-detection": st.sampled_from(["True", "False"]).flatmap(any_case),
    "--job-exit-hang-interval": st.integers(1, MAX_INTERVAL_SECONDS).map(str),
    "--fault-tolerant-policy": st.sampled_from(["OnFailure", "ExitCodeAndErrorMsg", "Never"]).flatmap(any_case),
    "--max-num-of-same-error": st.integers(1, MAX_COUNT).map(str),
    "--max-tolerated-failure-rate": st.one_of(
        st.just("-1"), st.floats(0, 1).map(repr), st.decimals(0, 1, places=3).map(str)
    ),
    "--enable-warm-restart": st.sampled_from(["True", "False"]).flatmap(any_case),
    "--warm-modules": st.lists(
        st.sampled_from(["torch", "torch.distributed", "numpy", "my_pkg.sub_1"]), unique=True, min_size=1, max_size=4
    ).map(",".join),
    "--c4d-log-level": st.sampled_from(["Info", "Warning", "Error"]).flatmap(any_case),
    "--replica-groups": st.integers(2, 1024).map(str),
    "--lighthouse-heartbeat-timeout-ms": st.integers(100, 600_000).map(str),
    "--c4d-common-envs": st.lists(
        st.sampled_from(
            [
                "C4D_HANG_TIMEOUT=7",
                "C4D_HANG_TIMES=3",
                "C4D_CONN_BW_CHECK_PERIOD=60",
                "C4D_RUNTIME_LOG_LEVEL=trace",
                "C4D_ENABLE_STATS_OUTPUT=True",
            ]
        ),
        unique=True,
        max_size=5,
    ).map(",".join),
}


@st.composite
def mostly_valid_flag_strings(draw):
    """Distinct known flags with valid values in varied spellings; cross-flag rules may still refuse."""
    flags = draw(st.lists(st.sampled_from(SPEC_TABLE_ORDER), unique=True, max_size=len(SPEC_TABLE_ORDER)))
    parts = []
    for flag in flags:
        value = (
            draw(VALID_VALUES[flag] | PLAUSIBLE_VALUES) if draw(st.integers(0, 9)) == 0 else draw(VALID_VALUES[flag])
        )
        quoted = draw(st.sampled_from(["{}", "'{}'", '"{}"'])).format(value) if value else "''"
        parts.append(flag + draw(st.sampled_from(["=", " ", "\n  "])) + quoted)
    return draw(st.sampled_from([" ", "\n", "  \t"])).join(parts)


def assert_round_trips(config: FaultToleranceConfig) -> None:
    assert parse_flags(config.to_flags()) == config
    assert parse_flags(config.to_flags()).to_flags() == config.to_flags()
    assert FaultToleranceConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(), st.text(alphabet=string.printable), plausible_flag_strings(), mostly_valid_flag_strings()))
def test_any_text_either_parses_and_round_trips_or_raises_flag_error(text):
    try:
        config = parse_flags(text)
    except FlagError as error:
        assert str(error)
        return
    assert_round_trips(config)


@st.composite
def valid_configs(draw):
    mode = draw(st.sampled_from(ExecutionMode))
    hang = mode is ExecutionMode.SYNC and draw(st.booleans())
    return FaultToleranceConfig(
        job_execution_mode=mode,
        enable_job_restart=draw(st.booleans()),
        max_num_of_job_restart=draw(st.integers(0, MAX_COUNT)),
        enable_job_hang_detection=hang,
        job_hang_interval=draw(st.integers(1, MAX_INTERVAL_SECONDS)),
        job_hang_startup_interval=draw(st.one_of(st.none(), st.integers(1, MAX_INTERVAL_SECONDS))),
        enable_c4d_hang_detection=hang and draw(st.booleans()),
        enable_job_exit_hang_detection=mode is ExecutionMode.SYNC and draw(st.booleans()),
        job_exit_hang_interval=draw(st.integers(1, MAX_INTERVAL_SECONDS)),
        fault_tolerant_policy=draw(st.sampled_from(FaultTolerantPolicy)),
        max_num_of_same_error=draw(st.integers(1, MAX_COUNT)),
        max_tolerated_failure_rate=draw(st.one_of(st.just(-1.0), st.floats(0.0, 1.0))),
        enable_warm_restart=draw(st.booleans()),
        warm_modules=tuple(
            draw(
                st.lists(
                    st.from_regex(r"[a-z_][a-z0-9_]{0,8}(\.[a-z_][a-z0-9_]{0,8})?", fullmatch=True).filter(
                        lambda n: not any(keyword.iskeyword(p) for p in n.split("."))
                    ),
                    unique=True,
                    min_size=1,
                    max_size=5,
                )
            )
        ),
        c4d_log_level=draw(st.sampled_from(C4DLogLevel)),
        c4d_common_envs=C4DEnvs(
            hang_timeout_us=draw(st.integers(1, MAX_INTERVAL_SECONDS * 1_000_000)),
            hang_times=draw(st.integers(1, MAX_COUNT)),
            conn_bw_check_period=draw(st.integers(1, MAX_INTERVAL_SECONDS)),
            runtime_log_level=draw(st.sampled_from(["TRACE", "DEBUG", "INFO", "WARN", "WARNING", "ERROR", "FATAL"])),
            enable_stats_output=draw(st.booleans()),
        ),
    )


@settings(max_examples=300)
@given(valid_configs())
def test_every_valid_config_round_trips_through_its_flag_string_and_its_dict(config):
    assert_round_trips(config)


# --- warm restart ---------------------------------------------------------------------


def test_warm_restart_is_off_by_default_and_parks_torch_its_distributed_package_and_dynamo():
    config = parse_flags("")
    assert config.enable_warm_restart is False
    assert config.warm_modules == ("torch", "torch.distributed", "torch._dynamo")
    assert config.to_dict()["warm_modules"] == ["torch", "torch.distributed", "torch._dynamo"]


def test_warm_modules_are_comma_separated_dotted_names_kept_in_order():
    config = parse_flags("--enable-warm-restart=true --warm-modules ' torch , mypkg.models,_priv.x1'")
    assert config.enable_warm_restart is True
    assert config.warm_modules == ("torch", "mypkg.models", "_priv.x1")
    assert config.to_flags() == "--enable-warm-restart=True --warm-modules=torch,mypkg.models,_priv.x1"
    assert_round_trips(config)


def test_warm_modules_may_be_set_while_warm_restart_is_off():
    assert parse_flags("--warm-modules=numpy").warm_modules == ("numpy",)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("a..b", "'a..b' is not accepted"),
        ("torch,", "'' is not accepted"),
        ("os/path", "'os/path' is not accepted"),
        ("1torch", "'1torch' is not accepted"),
        ("mypkg.class", "'mypkg.class' is not accepted"),
        ("torch;rm", "'torch;rm' is not accepted"),
        ("t\u00f6rch", "is not accepted"),
        ("torch,numpy,torch", "torch is given twice"),
        (",".join(f"m{i}" for i in range(65)), "is not accepted"),
    ],
)
def test_a_bad_warm_module_list_names_its_flag(value, says):
    error = rejection(f"--warm-modules='{value}'")
    assert error.flag == "--warm-modules" and says in error.message


@pytest.mark.parametrize("stored", ["torch", [], [1], ["a b"], None])
def test_a_stored_config_needs_a_list_of_module_names(stored):
    with pytest.raises(FlagError) as caught:
        FaultToleranceConfig.from_dict({"warm_modules": stored})
    assert caught.value.flag == "--warm-modules"


def test_the_warm_restart_flag_is_a_boolean():
    error = rejection("--enable-warm-restart=yes")
    assert error.flag == "--enable-warm-restart" and "True or False" in error.message


def test_flags_given_names_the_known_flags_a_string_gives():
    from core.flags import flags_given

    assert flags_given("--enable-job-restart=True --warm-modules torch") == {"--enable-job-restart", "--warm-modules"}
    assert flags_given("") == set()
