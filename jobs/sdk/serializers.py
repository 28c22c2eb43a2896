"""What each SDK call may hold. Bounded so that no call can make the console hold
much: a message is at most 4,096 characters; at most 100 keywords of at most 256
characters; at most 5,000 C4D records per call. Every refusal is one sentence
naming the field and what is accepted (the SDK logs it as is), with the field's
path in the SDK's style: `keywords[1]`, `records[0].op`, `metrics.loss`
(jobs.exceptions renders it as {"detail": ..., "field": ...}).

Calls may name who sends them with optional "rank", "instance" and "attempt"
fields (SdkSenderSerializer); the events then say so (e.g. source "SDK (rank 3)").
Progress metrics are checked (names to finite numbers) but not kept: nothing
reads them yet. The serializers take the job as context["job"]: an attempt
that has not started is refused.
"""

from __future__ import annotations

import math
from typing import Any, cast

from rest_framework import serializers

from core.c4d import CollectiveRecord

from ..inputs import text_problem
from ..serializers import HangInterval
from .auth import processes_of

MAX_MESSAGE_CHARS = 4096
MAX_KEYWORDS = 100
MAX_KEYWORD_CHARS = 256
MAX_METRICS = 100
MAX_METRIC_NAME_CHARS = 128
MAX_INSTANCE_CHARS = 64
MAX_RANK = 1 << 20
MAX_STEP = (1 << 63) - 1
MAX_C4D_RECORDS_PER_CALL = 5000  # the SDK's own batch size
RUNTIME_PARAMETERS = ("job_hang_interval",)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def at_item(index: int, detail: Any) -> serializers.ValidationError:
    """A refusal of one item of a list, named by its index (`keywords[1]`, jobs.inputs.flat_errors)."""
    return serializers.ValidationError(cast(Any, {index: detail}))


def _storable(text: str, path: str) -> str:
    """PostgreSQL stores neither NUL characters nor lone UTF-16 surrogates (both valid in JSON)."""
    problem = text_problem(text)
    if problem:
        raise serializers.ValidationError(f"{path} {problem}")
    return text


class Count(serializers.IntegerField):
    """A JSON whole number in [min_value, max_value]; `refusal` says what is accepted,
    formatted with the value sent (a missing one is None)."""

    def __init__(self, *, refusal: str, **kwargs: Any) -> None:
        self.refusal = refusal
        super().__init__(**kwargs)
        self.validators = []  # the range is checked here, in the refusal's words
        self.error_messages["required"] = self.error_messages["null"] = refusal.format(value=None)

    def to_internal_value(self, data: Any) -> int:
        if not _is_int(data) or not self.min_value <= data <= self.max_value:
            raise serializers.ValidationError(self.refusal.format(value=data))
        return data


class InstanceName(serializers.CharField):
    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str) or len(data) > MAX_INSTANCE_CHARS:
            raise serializers.ValidationError(
                f'instance must be a name of at most {MAX_INSTANCE_CHARS} characters, e.g. "worker-0".'
            )
        return _storable(data, "instance")


def started_attempt(job: Any, attempt: int | None) -> int | None:
    """The attempt a call names, None when it did not say (0 is the SDK's "not known")."""
    if attempt is not None and attempt > job.current_attempt:
        raise serializers.ValidationError(
            f"attempt {attempt} has not started; the job is on attempt {job.current_attempt}."
        )
    return attempt or None


def _attempt() -> Count:
    return Count(
        min_value=0,
        max_value=MAX_STEP,
        required=False,
        allow_null=True,
        refusal="attempt must be a whole number >= 1 (VIGIL_ATTEMPT); got {value!r}.",
        help_text="VIGIL_ATTEMPT; 0 means not known (the current attempt)",
    )


class SdkBodySerializer(serializers.Serializer):
    default_error_messages = {"invalid": "the request body must be a JSON object; got {datatype}."}


class SdkSenderSerializer(SdkBodySerializer):
    """Who in the job made the call, as far as it said."""

    rank = Count(
        min_value=0,
        max_value=MAX_RANK,
        required=False,
        allow_null=True,
        refusal=f"rank must be a whole number from 0 to {MAX_RANK}; got {{value!r}}.",
    )
    instance = InstanceName(
        required=False,
        allow_null=True,
        allow_blank=True,
        trim_whitespace=False,
        max_length=MAX_INSTANCE_CHARS,
        help_text="e.g. worker-0",
    )
    attempt = _attempt()

    def validate_instance(self, value: str | None) -> str:
        return value or ""

    def validate_attempt(self, attempt: int | None) -> int | None:
        return started_attempt(self.context["job"], attempt)


def sender_source(body: dict) -> str:
    """Who sent a call, for events: "SDK (rank 3)", "SDK (worker-0)" or "SDK"."""
    if body.get("rank") is not None:
        return f"SDK (rank {body['rank']})"
    if body.get("instance"):
        return f"SDK ({body['instance']})"
    return "SDK"


def sender_payload(body: dict) -> dict:
    out: dict = {}
    if body.get("rank") is not None:
        out["rank"] = body["rank"]
    if body.get("instance"):
        out["instance"] = body["instance"]
    return out


class MessageText(serializers.CharField):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_length=MAX_MESSAGE_CHARS, trim_whitespace=False, **kwargs)
        self.error_messages["required"] = self.error_messages["null"] = (
            f"content is required: a string of at most {MAX_MESSAGE_CHARS} characters."
        )

    def run_validation(self, data: Any = serializers.empty) -> Any:
        if isinstance(data, str) and not data.strip():  # before CharField's own "blank"
            raise serializers.ValidationError("content is empty; send the text people should read.")
        return super().run_validation(data)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("required")
        if len(data) > MAX_MESSAGE_CHARS:
            raise serializers.ValidationError(
                f"content is {len(data)} characters; at most {MAX_MESSAGE_CHARS} are accepted."
            )
        return _storable(data, "content")


class SdkMessageSerializer(SdkSenderSerializer):
    """send_custom_message(content=...)."""

    content = MessageText(help_text="the text people read in the job's events")


class Keywords(serializers.ListField):
    """The retryable keywords, in order, each once; [] clears them."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=serializers.CharField(max_length=MAX_KEYWORD_CHARS), max_length=MAX_KEYWORDS, **kwargs)
        self.error_messages["required"] = self.error_messages["null"] = (
            'keywords is required: a list of strings, e.g. ["connect timeout"] ([] clears the list).'
        )

    def to_internal_value(self, data: Any) -> list[str]:
        if not isinstance(data, list):
            self.fail("required")
        if len(data) > MAX_KEYWORDS:
            raise serializers.ValidationError(f"{len(data)} keywords given; at most {MAX_KEYWORDS} are accepted.")
        seen: list[str] = []
        for i, keyword in enumerate(data):
            if not isinstance(keyword, str) or not keyword.strip():
                raise at_item(i, [f"keywords[{i}] must be a non-empty string; got {keyword!r}."])
            if len(keyword) > MAX_KEYWORD_CHARS:
                raise at_item(
                    i, [f"keywords[{i}] is {len(keyword)} characters; at most {MAX_KEYWORD_CHARS} are accepted."]
                )
            try:
                _storable(keyword, f"keywords[{i}]")
            except serializers.ValidationError as exc:
                raise at_item(i, exc.detail) from None
            if keyword not in seen:
                seen.append(keyword)
        return seen


class SdkRetryableErrorsSerializer(SdkSenderSerializer):
    """set_retryable_errors([...])."""

    keywords = Keywords(help_text="log-line keywords matched literally; [] clears the list")


class SdkConfigSerializer(SdkSenderSerializer):
    """reset_config(job_hang_interval=N) and hang_detect(N)."""

    job_hang_interval = HangInterval(
        accept_digits=False,
        refusal_prefix="job_hang_interval ",
        error_messages={
            "required": "job_hang_interval is required: seconds > 0, or -1 to suspend hang detection.",
            "null": "job_hang_interval may not be null here.",
        },
    )

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            accepted = RUNTIME_PARAMETERS + tuple(SdkSenderSerializer._declared_fields)
            unknown = sorted(k for k in data if k not in accepted)
            if unknown:
                raise serializers.ValidationError(
                    {unknown[0]: [f"unknown parameter {unknown[0]!r}; accepted: {', '.join(RUNTIME_PARAMETERS)}."]}
                )
        return super().to_internal_value(data)


class Metrics(serializers.DictField):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=serializers.FloatField(), required=False, allow_null=True, **kwargs)

    def to_internal_value(self, data: Any) -> dict:
        if not isinstance(data, dict):
            raise serializers.ValidationError('metrics must be an object of name to number, e.g. {"loss": 0.31}.')
        if len(data) > MAX_METRICS:
            raise serializers.ValidationError(f"{len(data)} metrics given; at most {MAX_METRICS} are accepted.")
        for name, value in data.items():
            if not name or len(name) > MAX_METRIC_NAME_CHARS:
                raise serializers.ValidationError(
                    f"metric names are 1 to {MAX_METRIC_NAME_CHARS} characters; got {name[:40]!r}."
                )
            if not (_is_int(value) or isinstance(value, float)) or not math.isfinite(value):
                raise serializers.ValidationError({name: [f"metric {name!r} must be a finite number; got {value!r}."]})
        return data


class SdkProgressSerializer(SdkSenderSerializer):
    """report_progress(step, metrics)."""

    step = Count(min_value=0, max_value=MAX_STEP, refusal="step is required: a whole number >= 0; got {value!r}.")
    metrics = Metrics(
        help_text='name to a finite number, e.g. {"loss": 0.31}; "loss" and "total_steps" '
        "(the M of step N of M) are kept for the job page's progress, the rest checked only"
    )

    def validate(self, data: dict) -> dict:
        data = super().validate(data)
        total = (data.get("metrics") or {}).get("total_steps")
        if total is not None and not (_is_int(total) and 0 < total <= MAX_STEP):
            raise serializers.ValidationError(
                {
                    "metrics": {
                        "total_steps": [f"total_steps must be a whole number from 1 to {MAX_STEP}; got {total!r}."]
                    }
                }
            )
        return data


class Records(serializers.ListField):
    """Collective records, parsed by the C4D consumer's own parser so that stored records always parse."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            child=serializers.DictField(),
            max_length=MAX_C4D_RECORDS_PER_CALL,
            help_text="[{seq, op, enter, exit}]",
            **kwargs,
        )
        self.error_messages["required"] = self.error_messages["null"] = (
            'records is required: a list of {{"seq", "op", "enter", "exit"}}.'  # {{ }}: fail() formats it
        )

    def to_internal_value(self, data: Any) -> list[dict]:
        if not isinstance(data, list):
            self.fail("required")
        if len(data) > MAX_C4D_RECORDS_PER_CALL:
            raise serializers.ValidationError(
                f"{len(data)} records given; at most {MAX_C4D_RECORDS_PER_CALL} are accepted per call."
            )
        parsed = []
        for i, raw in enumerate(data):
            try:
                rec = CollectiveRecord.from_dict(raw)
            except ValueError as exc:
                name = str(exc).split(":", 1)[0]
                error = (
                    {name: [f"records[{i}]: {exc}"]}
                    if name in ("seq", "op", "enter", "exit")
                    else [f"records[{i}]: {exc}"]
                )
                raise at_item(i, error) from None
            if not math.isfinite(rec.enter) or (rec.exit is not None and not math.isfinite(rec.exit)):
                raise at_item(i, [f"records[{i}]: enter and exit must be finite epoch seconds."])
            try:
                _storable(rec.op, f"records[{i}].op")
            except serializers.ValidationError as exc:
                raise at_item(i, {"op": exc.detail}) from None
            parsed.append(rec.to_dict())
        return parsed


class SdkC4DSerializer(SdkBodySerializer):
    """One rank's collective records (C4D input)."""

    rank = Count(
        min_value=0,
        max_value=MAX_RANK,
        refusal=f"rank is required: a whole number from 0 to {MAX_RANK}; got {{value!r}}.",
    )
    attempt = _attempt()
    records = Records()

    def validate_attempt(self, attempt: int | None) -> int | None:
        return started_attempt(self.context["job"], attempt)

    def validate_rank(self, rank: int) -> int:
        # A job's token is one per job, so any of its processes may post; it may post
        # only for ranks its own world has (one per process of its roles), not make up
        # ranks that C4D would then judge (issue 31).
        world = processes_of(self.context["job"].job_specs)
        if rank >= world:
            raise serializers.ValidationError(
                f"rank {rank} is not a rank of job {self.context['job'].pk}: its world has ranks 0 to {world - 1}."
            )
        return rank
