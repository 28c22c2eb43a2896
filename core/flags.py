"""The fault-tolerance flag string (SPEC section 3): parsing, validation, rendering.

A job's fault-tolerance settings arrive as one flag string (the API's
``error_monitoring_args``, the form's "Other configuration" box), e.g.
``--job-execution-mode=Sync --enable-job-restart=True --max-num-of-job-restart=3``.
``parse_flags`` turns it into a frozen ``FaultToleranceConfig`` or raises
``FlagError`` naming the flag and what it accepts. Pure: no Django, no clock.

Syntax
  * ``--flag=value`` or ``--flag value``; the string is shell-split (``shlex``), so
    quoted values work; any whitespace (spaces, tabs, newlines) separates flags.
  * An empty or all-whitespace string gives the SPEC defaults.
  * Each flag at most once; unknown flags are rejected with the closest known flag
    suggested.
  * Booleans: ``True``/``False`` in any case. Enumerations (mode, policy, C4D log
    level) are matched case-insensitively and stored in their canonical case.

Decisions the SPEC leaves open
  * ``--max-num-of-job-restart`` accepts 0 (whole-job restarts are never allowed,
    the job fails at the first qualifying failure) up to 10000.
  * ``--max-num-of-same-error`` accepts 1 to 10000: the rule is "occurred more than
    N times", and 0 would fail every job on its first error, which is what
    ``--fault-tolerant-policy=Never`` is for.
  * ``--job-hang-interval`` and ``--job-exit-hang-interval`` are whole seconds from
    1 to 2592000 (30 days). The SDK's ``-1`` (suspend) is a runtime value, not a flag.
  * ``--job-hang-startup-interval`` takes the same range. Left out, it follows the hang
    interval: the larger of 600 s and ``--job-hang-interval`` (``None`` in the config,
    resolved by ``FaultToleranceConfig.startup_interval``), so raising the hang interval
    never leaves start-up with less. It may also be set shorter than the hang interval
    (to catch a start-up that is stuck sooner); it is the user's number either way.
  * ``--max-tolerated-failure-rate`` is a decimal in [0, 1] or exactly -1 (off);
    ``nan``, ``inf``, ``30%`` and decimal commas are rejected.
  * ``--c4d-common-envs`` is ``K=V`` pairs separated by commas (whitespace around
    items is ignored); only the five C4D keys, each at most once. It alone may be
    given an explicitly empty value (its SPEC default is "empty"). C4D_HANG_TIMEOUT
    is 1..2592000000000 microseconds (30 days), C4D_HANG_TIMES 1..10000,
    C4D_CONN_BW_CHECK_PERIOD 1..2592000 seconds, C4D_RUNTIME_LOG_LEVEL one of TRACE
    DEBUG INFO WARN WARNING ERROR FATAL (any case, stored upper-case, WARN kept as
    given because the C4D runtime reads it verbatim), C4D_ENABLE_STATS_OUTPUT
    TRUE/FALSE (any case).
  * Cross-flag rules: hang detection and exit-hang detection are Sync only (rejected
    with ``--job-execution-mode=Async``); C4D detection needs hang detection on.
    ``--c4d-log-level``, ``--c4d-common-envs`` and the two intervals may be set while
    their feature is off; they are then simply unused.
  * ``--enable-warm-restart`` keeps, per instance, a parked interpreter for the next
    attempt (the local backend, jobs/backends/warm.py). ``--warm-modules`` is the
    modules it imports while parked: comma-separated dotted names (ASCII identifiers,
    no keywords), each at most once, 1 to 64 of them, default
    ``torch,torch.distributed,torch._dynamo``. It may be set while warm restart is off (unused then).
  * ``--replica-groups=N`` (issue 30) runs the job as N torchft replica groups (its instances
    split into N equal groups in rank order) with a Lighthouse keeping their quorum; a failed
    group is restarted alone. N is 2 to 1024; 0, the default, means one ordinary job. That N
    divides the instances and that the job is a PyTorchJob is checked where the roles are
    known (jobs/serializers.py). ``--lighthouse-heartbeat-timeout-ms`` is how long the
    Lighthouse waits for a silent group before it forms a quorum without it (torchft's
    default, 5000; 100 to 600000): the pause the healthy groups see when one dies.
  * The whole string is at most 16384 characters.

``FaultToleranceConfig`` validates itself on construction (also when built from a
dict or directly in code), so every instance renders, via ``to_flags()``, to a string
that parses back to an equal instance.
"""

from __future__ import annotations

import difflib
import keyword
import math
import re
import shlex
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Callable

MAX_FLAGS_LENGTH = 16384
MAX_INTERVAL_SECONDS = 30 * 24 * 3600  # 30 days
MAX_COUNT = 10_000
MAX_C4D_HANG_TIMEOUT_US = MAX_INTERVAL_SECONDS * 1_000_000
# The floor of the derived start-up interval: importing torch, joining the rendezvous and
# loading a checkpoint take minutes on a busy cluster (SPEC section 3).
DEFAULT_STARTUP_INTERVAL_SECONDS = 600

_INT_RE = re.compile(r"-?[0-9]+")
_DECIMAL_RE = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
# Longer digit strings than this are "too large" anyway; checking first keeps int()
# away from huge inputs.
_MAX_INT_DIGITS = 20


class FlagError(ValueError):
    """A flag string (or stored config) that cannot be accepted.

    ``flag`` is the offending flag as the user wrote or would write it (e.g.
    ``--job-hang-interval``), or "" when the problem is not tied to one flag.
    """

    def __init__(self, flag: str, message: str):
        self.flag = flag
        self.message = message
        super().__init__(f"{flag}: {message}" if flag else message)


class ExecutionMode(StrEnum):
    SYNC = "Sync"
    ASYNC = "Async"


class FaultTolerantPolicy(StrEnum):
    ON_FAILURE = "OnFailure"
    EXIT_CODE_AND_ERROR_MSG = "ExitCodeAndErrorMsg"
    NEVER = "Never"


class C4DLogLevel(StrEnum):
    INFO = "Info"
    WARNING = "Warning"
    ERROR = "Error"


C4D_RUNTIME_LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARN", "WARNING", "ERROR", "FATAL")


# --- value checks shared by the string parser and the constructors ---------------


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _reject(flag: str, value: Any, accepted: str, key: str = "") -> FlagError:
    prefix = f"{key}: " if key else ""
    return FlagError(flag, f"{prefix}{_shown(value)} is not accepted; use {accepted}")


@dataclass(frozen=True)
class _IntRule:
    low: int
    high: int
    accepted: str

    def from_text(self, flag: str, text: str, key: str = "") -> int:
        stripped = text.strip()
        if not _INT_RE.fullmatch(stripped):
            raise _reject(flag, text, self.accepted, key)
        if len(stripped.lstrip("-")) > _MAX_INT_DIGITS:
            raise _reject(flag, text, self.accepted, key)
        return self.check(flag, int(stripped), key, shown=text)

    def check(self, flag: str, value: Any, key: str = "", shown: Any = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _reject(flag, value, self.accepted, key)
        if not self.low <= value <= self.high:
            raise _reject(flag, value if shown is None else shown, self.accepted, key)
        return int(value)


_INTERVAL = _IntRule(
    1, MAX_INTERVAL_SECONDS, f"a positive whole number of seconds, at most {MAX_INTERVAL_SECONDS} (30 days)"
)
_RESTARTS = _IntRule(0, MAX_COUNT, f"a whole number from 0 to {MAX_COUNT}")
_SAME_ERRORS = _IntRule(1, MAX_COUNT, f"a whole number from 1 to {MAX_COUNT}")
_C4D_HANG_TIMEOUT = _IntRule(
    1, MAX_C4D_HANG_TIMEOUT_US, f"a positive whole number of microseconds, at most {MAX_C4D_HANG_TIMEOUT_US} (30 days)"
)
_C4D_HANG_TIMES = _IntRule(1, MAX_COUNT, f"a whole number from 1 to {MAX_COUNT}")
_C4D_BW_PERIOD = _IntRule(
    1, MAX_INTERVAL_SECONDS, f"a positive whole number of seconds, at most {MAX_INTERVAL_SECONDS} (30 days)"
)

_BOOL_ACCEPTED = "True or False"
WARM_MODULES_FLAG = "--warm-modules"
# torch._dynamo too: DistributedDataParallel imports it (with sympy, ~800 modules) when it
# is constructed, and that import cost as much as torch's own (4.1-7.3 s against
# 4.2-5.6 s on 2 shared cores at load 9-10), so without it a warm DDP rank still paid half
# the cold floor after the hand-over. It costs the parked interpreter ~68 MB more.
DEFAULT_WARM_MODULES = ("torch", "torch.distributed", "torch._dynamo")
MAX_WARM_MODULES = 64
_MODULE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_MODULES_ACCEPTED = (
    f"module names separated by commas (e.g. torch,torch.distributed,mypkg.models), "
    f"each a dotted Python name given once, at most {MAX_WARM_MODULES}"
)
MAX_REPLICA_GROUPS = 1024
REPLICA_GROUPS_FLAG = "--replica-groups"
_GROUPS_ACCEPTED = f"a whole number from 2 to {MAX_REPLICA_GROUPS} (the job's instances split into that many groups)"
_HEARTBEAT = _IntRule(100, 600_000, "a whole number of milliseconds from 100 to 600000")


_GROUPS = _IntRule(2, MAX_REPLICA_GROUPS, _GROUPS_ACCEPTED)


def _check_groups(value: Any) -> int:
    # 0 is the default (no replica groups); a user who writes the flag asks for 2 or more.
    if value == 0 and not isinstance(value, bool):
        return 0
    return _GROUPS.check(REPLICA_GROUPS_FLAG, value)


_RATE_ACCEPTED = "a decimal from 0 to 1 (e.g. 0.3), or -1 to turn the limit off"


def _bool_from_text(flag: str, text: str, key: str = "", accepted: str = _BOOL_ACCEPTED) -> bool:
    word = text.strip().lower()
    if word == "true":
        return True
    if word == "false":
        return False
    raise _reject(flag, text, accepted, key)


def _check_bool(flag: str, value: Any, key: str = "", accepted: str = _BOOL_ACCEPTED) -> bool:
    if not isinstance(value, bool):
        raise _reject(flag, value, accepted, key)
    return value


def _enum_accepted(enum: type[StrEnum]) -> str:
    names = [m.value for m in enum]
    return ", ".join(names[:-1]) + " or " + names[-1]


def _check_enum(flag: str, enum: type[StrEnum], value: Any) -> StrEnum:
    if isinstance(value, str):
        for member in enum:
            if member.value.lower() == value.strip().lower():
                return member
    raise _reject(flag, value, _enum_accepted(enum))


def _rate_from_text(flag: str, text: str) -> float:
    stripped = text.strip()
    if not _DECIMAL_RE.fullmatch(stripped):
        raise _reject(flag, text, _RATE_ACCEPTED)
    return _check_rate(flag, float(stripped), shown=text)


def _check_rate(flag: str, value: Any, shown: Any = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _reject(flag, value, _RATE_ACCEPTED)
    rate = float(value)
    if not math.isfinite(rate) or not (rate == -1.0 or 0.0 <= rate <= 1.0):
        raise _reject(flag, value if shown is None else shown, _RATE_ACCEPTED)
    return rate + 0.0  # -0.0 -> 0.0, so it renders as "0"


def _modules_from_text(text: str) -> tuple[str, ...]:
    return _check_modules(tuple(item.strip() for item in text.split(",")), shown=text)


def _check_modules(value: Any, shown: Any = None) -> tuple[str, ...]:
    # A stored config holds a list (JSON); the config holds a tuple so it stays hashable.
    if isinstance(value, str) or not isinstance(value, (tuple, list)):
        raise _reject(WARM_MODULES_FLAG, value, _MODULES_ACCEPTED)
    names = tuple(value)
    if not names or len(names) > MAX_WARM_MODULES:
        raise _reject(WARM_MODULES_FLAG, value if shown is None else shown, _MODULES_ACCEPTED)
    for name in names:
        # The parked interpreter runs `import <name>`: a keyword or a path would not import.
        if (
            not isinstance(name, str)
            or not _MODULE_RE.fullmatch(name)
            or len(name) > 200
            or any(keyword.iskeyword(part) for part in name.split("."))
        ):
            raise _reject(WARM_MODULES_FLAG, name, _MODULES_ACCEPTED)
    if len(set(names)) != len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise FlagError(WARM_MODULES_FLAG, f"{twice} is given twice; give each module once")
    return names


def _render_rate(rate: float) -> str:
    return str(int(rate)) if rate.is_integer() else repr(rate)


def _suggest(given: str, known: list[str]) -> str:
    # Compare ignoring case and '_' vs '-', the usual slips; suggest the original spelling.
    def fold(name: str) -> str:
        return name.lower().replace("_", "-")

    folded = {fold(name): name for name in known}
    close = difflib.get_close_matches(fold(given), list(folded), n=1, cutoff=0.6)
    return f"did you mean {folded[close[0]]}?" if close else "known: " + ", ".join(known)


# --- C4D environment -----------------------------------------------------------------

C4D_ENVS_FLAG = "--c4d-common-envs"


@dataclass(frozen=True)
class _EnvKey:
    name: str  # the C4D environment variable
    field: str  # the C4DEnvs field
    parse: Callable[[str], Any]
    check: Callable[[Any], Any]
    render: Callable[[Any], str]


def _runtime_level_from_text(text: str) -> str:
    return _check_runtime_level(text)


def _check_runtime_level(value: Any) -> str:
    accepted = " ".join(C4D_RUNTIME_LOG_LEVELS)
    if isinstance(value, str) and value.strip().upper() in C4D_RUNTIME_LOG_LEVELS:
        return value.strip().upper()
    raise _reject(C4D_ENVS_FLAG, value, "one of " + accepted, "C4D_RUNTIME_LOG_LEVEL")


_STATS_ACCEPTED = "TRUE or FALSE"

_ENV_KEYS: tuple[_EnvKey, ...] = (
    _EnvKey(
        "C4D_HANG_TIMEOUT",
        "hang_timeout_us",
        lambda t: _C4D_HANG_TIMEOUT.from_text(C4D_ENVS_FLAG, t, "C4D_HANG_TIMEOUT"),
        lambda v: _C4D_HANG_TIMEOUT.check(C4D_ENVS_FLAG, v, "C4D_HANG_TIMEOUT"),
        str,
    ),
    _EnvKey(
        "C4D_HANG_TIMES",
        "hang_times",
        lambda t: _C4D_HANG_TIMES.from_text(C4D_ENVS_FLAG, t, "C4D_HANG_TIMES"),
        lambda v: _C4D_HANG_TIMES.check(C4D_ENVS_FLAG, v, "C4D_HANG_TIMES"),
        str,
    ),
    _EnvKey(
        "C4D_CONN_BW_CHECK_PERIOD",
        "conn_bw_check_period",
        lambda t: _C4D_BW_PERIOD.from_text(C4D_ENVS_FLAG, t, "C4D_CONN_BW_CHECK_PERIOD"),
        lambda v: _C4D_BW_PERIOD.check(C4D_ENVS_FLAG, v, "C4D_CONN_BW_CHECK_PERIOD"),
        str,
    ),
    _EnvKey("C4D_RUNTIME_LOG_LEVEL", "runtime_log_level", _runtime_level_from_text, _check_runtime_level, str),
    _EnvKey(
        "C4D_ENABLE_STATS_OUTPUT",
        "enable_stats_output",
        lambda t: _bool_from_text(C4D_ENVS_FLAG, t, "C4D_ENABLE_STATS_OUTPUT", _STATS_ACCEPTED),
        lambda v: _check_bool(C4D_ENVS_FLAG, v, "C4D_ENABLE_STATS_OUTPUT", _STATS_ACCEPTED),
        lambda v: "TRUE" if v else "FALSE",
    ),
)
_ENV_BY_NAME = {k.name: k for k in _ENV_KEYS}
_ENVS_ACCEPTED = "K=V pairs separated by commas, with K one of " + ", ".join(_ENV_BY_NAME)


@dataclass(frozen=True)
class C4DEnvs:
    """The environment C4D runs with (``--c4d-common-envs``); defaults as SPEC gives them."""

    hang_timeout_us: int = 10_000_000
    hang_times: int = 18
    conn_bw_check_period: int = 10
    runtime_log_level: str = "INFO"
    enable_stats_output: bool = False

    def __post_init__(self) -> None:
        for key in _ENV_KEYS:
            object.__setattr__(self, key.field, key.check(getattr(self, key.field)))

    def to_env(self) -> dict[str, str]:
        """All five variables as a process environment for the C4D runtime."""
        return {k.name: k.render(getattr(self, k.field)) for k in _ENV_KEYS}

    def to_flag_value(self) -> str:
        """The non-default variables as ``K=V,K=V`` (SPEC order); "" for defaults."""
        default = _DEFAULT_ENVS
        return ",".join(
            f"{k.name}={k.render(getattr(self, k.field))}"
            for k in _ENV_KEYS
            if getattr(self, k.field) != getattr(default, k.field)
        )

    def to_dict(self) -> dict[str, Any]:
        return {k.field: getattr(self, k.field) for k in _ENV_KEYS}

    @classmethod
    def from_dict(cls, data: Any) -> "C4DEnvs":
        if not isinstance(data, dict):
            raise _reject(C4D_ENVS_FLAG, data, "an object with keys " + ", ".join(k.field for k in _ENV_KEYS))
        known = [k.field for k in _ENV_KEYS]
        for name in data:
            if name not in known:
                raise FlagError(C4D_ENVS_FLAG, f"{_shown(name)} is not a known key; {_suggest(str(name), known)}")
        return cls(**data)


_DEFAULT_ENVS = C4DEnvs()


def parse_c4d_common_envs(text: str) -> C4DEnvs:
    """``C4D_HANG_TIMEOUT=1,C4D_HANG_TIMES=2`` -> C4DEnvs (unset keys keep defaults)."""
    values: dict[str, Any] = {}
    if not text.strip():
        return C4DEnvs()
    for item in text.split(","):
        item = item.strip()
        if not item:
            raise FlagError(C4D_ENVS_FLAG, f"{_shown(text)} has an empty item; use {_ENVS_ACCEPTED}")
        name, eq, raw = item.partition("=")
        name, raw = name.strip(), raw.strip()
        if not eq:
            raise FlagError(C4D_ENVS_FLAG, f"{_shown(item)} is not K=V; use {_ENVS_ACCEPTED}")
        key = _ENV_BY_NAME.get(name)
        if key is None:
            raise FlagError(
                C4D_ENVS_FLAG, f"{_shown(name)} is not a C4D variable; {_suggest(name, list(_ENV_BY_NAME))}"
            )
        if key.field in values:
            raise FlagError(C4D_ENVS_FLAG, f"{name} is given twice; give each variable once")
        values[key.field] = key.parse(raw)
    return C4DEnvs(**values)


# --- the flag table (SPEC section 3 order) --------------------------------------------


@dataclass(frozen=True)
class _Flag:
    flag: str
    field: str
    accepted: str
    parse: Callable[[str], Any]  # text -> value (raises FlagError)
    check: Callable[[Any], Any]  # value -> canonical value (raises FlagError)
    render: Callable[[Any], str]
    empty_ok: bool = False
    optional: bool = False  # None (not given) is a value: the default is derived


def _bool_flag(flag: str, field_name: str) -> _Flag:
    return _Flag(
        flag,
        field_name,
        _BOOL_ACCEPTED,
        lambda t: _bool_from_text(flag, t),
        lambda v: _check_bool(flag, v),
        lambda v: "True" if v else "False",
    )


def _int_flag(flag: str, field_name: str, rule: _IntRule) -> _Flag:
    return _Flag(flag, field_name, rule.accepted, lambda t: rule.from_text(flag, t), lambda v: rule.check(flag, v), str)


def _optional_int_flag(flag: str, field_name: str, rule: _IntRule) -> _Flag:
    # None means "not given": the field's default is derived from other flags.
    return _Flag(
        flag,
        field_name,
        rule.accepted,
        lambda t: rule.from_text(flag, t),
        lambda v: None if v is None else rule.check(flag, v),
        str,
        optional=True,
    )


def _enum_flag(flag: str, field_name: str, enum: type[StrEnum]) -> _Flag:
    return _Flag(
        flag,
        field_name,
        _enum_accepted(enum),
        lambda t: _check_enum(flag, enum, t),
        lambda v: _check_enum(flag, enum, v),
        str,
    )


def _check_envs(value: Any) -> C4DEnvs:
    if isinstance(value, C4DEnvs):
        return value
    raise _reject(C4D_ENVS_FLAG, value, _ENVS_ACCEPTED)


FLAGS: tuple[_Flag, ...] = (
    _enum_flag("--job-execution-mode", "job_execution_mode", ExecutionMode),
    _bool_flag("--enable-job-restart", "enable_job_restart"),
    _int_flag("--max-num-of-job-restart", "max_num_of_job_restart", _RESTARTS),
    _bool_flag("--enable-job-hang-detection", "enable_job_hang_detection"),
    _int_flag("--job-hang-interval", "job_hang_interval", _INTERVAL),
    _optional_int_flag("--job-hang-startup-interval", "job_hang_startup_interval", _INTERVAL),
    _bool_flag("--enable-c4d-hang-detection", "enable_c4d_hang_detection"),
    _bool_flag("--enable-job-exit-hang-detection", "enable_job_exit_hang_detection"),
    _int_flag("--job-exit-hang-interval", "job_exit_hang_interval", _INTERVAL),
    _enum_flag("--fault-tolerant-policy", "fault_tolerant_policy", FaultTolerantPolicy),
    _int_flag("--max-num-of-same-error", "max_num_of_same_error", _SAME_ERRORS),
    _Flag(
        "--max-tolerated-failure-rate",
        "max_tolerated_failure_rate",
        _RATE_ACCEPTED,
        lambda t: _rate_from_text("--max-tolerated-failure-rate", t),
        lambda v: _check_rate("--max-tolerated-failure-rate", v),
        _render_rate,
    ),
    _bool_flag("--enable-warm-restart", "enable_warm_restart"),
    _Flag(WARM_MODULES_FLAG, "warm_modules", _MODULES_ACCEPTED, _modules_from_text, _check_modules, ",".join),
    _enum_flag("--c4d-log-level", "c4d_log_level", C4DLogLevel),
    _Flag(
        C4D_ENVS_FLAG,
        "c4d_common_envs",
        _ENVS_ACCEPTED,
        parse_c4d_common_envs,
        _check_envs,
        lambda v: v.to_flag_value(),
        empty_ok=True,
    ),
    # Issue 30's, after the SPEC's table.
    _Flag(
        REPLICA_GROUPS_FLAG,
        "replica_groups",
        _GROUPS_ACCEPTED,
        lambda t: _GROUPS.from_text(REPLICA_GROUPS_FLAG, t),
        _check_groups,
        str,
    ),
    _int_flag("--lighthouse-heartbeat-timeout-ms", "lighthouse_heartbeat_timeout_ms", _HEARTBEAT),
)
_FLAG_BY_NAME = {f.flag: f for f in FLAGS}
_FLAG_BY_FIELD = {f.field: f for f in FLAGS}
KNOWN_FLAGS: tuple[str, ...] = tuple(_FLAG_BY_NAME)


@dataclass(frozen=True)
class FaultToleranceConfig:
    """One job's fault-tolerance settings; field defaults are the SPEC defaults."""

    job_execution_mode: ExecutionMode = ExecutionMode.SYNC
    enable_job_restart: bool = False
    max_num_of_job_restart: int = 3
    enable_job_hang_detection: bool = False
    job_hang_interval: int = 1800
    job_hang_startup_interval: int | None = None  # None: see startup_interval
    enable_c4d_hang_detection: bool = False
    enable_job_exit_hang_detection: bool = False
    job_exit_hang_interval: int = 600
    fault_tolerant_policy: FaultTolerantPolicy = FaultTolerantPolicy.EXIT_CODE_AND_ERROR_MSG
    max_num_of_same_error: int = 10
    max_tolerated_failure_rate: float = -1.0
    enable_warm_restart: bool = False
    warm_modules: tuple[str, ...] = DEFAULT_WARM_MODULES
    c4d_log_level: C4DLogLevel = C4DLogLevel.WARNING
    c4d_common_envs: C4DEnvs = field(default_factory=C4DEnvs)
    replica_groups: int = 0  # 0: no replica groups
    lighthouse_heartbeat_timeout_ms: int = 5000

    def __post_init__(self) -> None:
        for spec in FLAGS:
            object.__setattr__(self, spec.field, spec.check(getattr(self, spec.field)))
        self._check_combination()

    @property
    def startup_interval(self) -> int:
        """Seconds of silence allowed from an attempt's start until its first progress: the
        flag's value, or, when it is not given, the larger of 600 s and the hang interval."""
        if self.job_hang_startup_interval is not None:
            return self.job_hang_startup_interval
        return max(DEFAULT_STARTUP_INTERVAL_SECONDS, self.job_hang_interval)

    def _check_combination(self) -> None:
        if self.job_execution_mode == ExecutionMode.ASYNC:
            for flag, on in (
                ("--enable-job-hang-detection", self.enable_job_hang_detection),
                ("--enable-job-exit-hang-detection", self.enable_job_exit_hang_detection),
            ):
                if on:
                    raise FlagError(
                        flag,
                        "True is not accepted with --job-execution-mode=Async; "
                        f"it works for Sync jobs only (use --job-execution-mode=Sync "
                        f"or {flag}=False)",
                    )
        if self.enable_c4d_hang_detection and not self.enable_job_hang_detection:
            raise FlagError(
                "--enable-c4d-hang-detection",
                "True needs --enable-job-hang-detection=True; C4D diagnoses the hangs that hang detection finds",
            )

    def to_flags(self) -> str:
        """The canonical flag string: non-default flags only, SPEC order; "" for defaults."""
        parts = []
        for spec in FLAGS:
            value = getattr(self, spec.field)
            if value != getattr(_DEFAULT_CONFIG, spec.field):
                parts.append(shlex.quote(f"{spec.flag}={spec.render(value)}"))
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable: enums as their values, the C4D envs as a nested object."""
        out: dict[str, Any] = {}
        for spec in FLAGS:
            value = getattr(self, spec.field)
            if isinstance(value, C4DEnvs):
                out[spec.field] = value.to_dict()
            elif isinstance(value, StrEnum):
                out[spec.field] = value.value
            elif isinstance(value, tuple):
                out[spec.field] = list(value)
            else:
                out[spec.field] = value
        return out

    @classmethod
    def from_dict(cls, data: Any) -> "FaultToleranceConfig":
        """Inverse of ``to_dict``; missing keys take their defaults, unknown keys are rejected."""
        if not isinstance(data, dict):
            raise FlagError("", f"a fault-tolerance config must be an object, not {_shown(data)}")
        values: dict[str, Any] = {}
        for name, value in data.items():
            if name not in _FLAG_BY_FIELD:
                raise FlagError(str(name), f"is not a known setting; {_suggest(str(name), list(_FLAG_BY_FIELD))}")
            values[name] = C4DEnvs.from_dict(value) if name == "c4d_common_envs" else value
        return cls(**values)


_DEFAULT_CONFIG = FaultToleranceConfig()


# --- the string parser ------------------------------------------------------------------


def _unbalanced_quote_flag(text: str) -> str:
    """The flag a dangling quote or backslash most likely belongs to, for the message."""
    cut = max(text.rfind('"'), text.rfind("'"), text.rfind("\\"))
    names = re.findall(r"--[A-Za-z0-9_-]+", text[: cut if cut >= 0 else len(text)])
    return names[-1] if names and names[-1] in _FLAG_BY_NAME else ""


def _split(text: str) -> list[str]:
    # Unicode spaces (e.g. a non-breaking space pasted from a web page) separate flags too.
    normal = "".join(" " if ch.isspace() else ch for ch in text)
    lexer = shlex.shlex(normal, posix=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        return list(lexer)
    except ValueError as exc:
        flag = _unbalanced_quote_flag(normal)
        raise FlagError(
            flag,
            f"the flag string cannot be split ({str(exc).lower()}); close every quote and do not end with a backslash",
        ) from None


def flags_given(text: str) -> set[str]:
    """The known flags a valid flag string names (a workspace default applies to the others)."""
    return {t.partition("=")[0] for t in _split(text) if t.partition("=")[0] in _FLAG_BY_NAME}


def parse_flags(text: str) -> FaultToleranceConfig:
    """Parse the fault-tolerance flag string into a validated FaultToleranceConfig."""
    if not isinstance(text, str):
        raise FlagError("", f"the flag string must be text, not {type(text).__name__}")
    if len(text) > MAX_FLAGS_LENGTH:
        raise FlagError("", f"the flag string is {len(text)} characters; at most {MAX_FLAGS_LENGTH} are accepted")
    tokens = _split(text)
    raw: dict[str, str] = {}
    values: dict[str, Any] = {}
    i = 0
    previous = ""
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not token.startswith(("-", "\u2013", "\u2014")):
            after = f" after {previous}" if previous else ""
            raise FlagError("", f"unexpected {_shown(token)}{after}; flags look like --name=value or --name value")
        name, eq, value = token.partition("=")
        spec = _FLAG_BY_NAME.get(name)
        if spec is None:
            raise FlagError(name, f"is not a known flag; {_suggest(name, list(KNOWN_FLAGS))}")
        if not eq:
            if i >= len(tokens) or tokens[i].startswith("--"):
                raise FlagError(spec.flag, f"a value is missing; use {spec.accepted}")
            value = tokens[i]
            i += 1
        if not value.strip() and not spec.empty_ok:
            raise FlagError(spec.flag, f"a value is missing; use {spec.accepted}")
        if spec.flag in raw:
            raise FlagError(
                spec.flag, f"is given twice (as {_shown(raw[spec.flag])} and {_shown(value)}); give each flag once"
            )
        raw[spec.flag] = value
        values[spec.field] = spec.parse(value)
        previous = f"{spec.flag}={value}" if len(value) <= 40 else spec.flag
    return FaultToleranceConfig(**values)
