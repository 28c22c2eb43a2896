"""core.stages: stage durations never go below zero (issue 15, defect 10)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from core.stages import STAGES, clamp, durations, monotonic

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def at(seconds):
    return None if seconds is None else T0 + timedelta(seconds=seconds)


def test_first_output_before_the_launch_stamp_counts_as_zero_seconds_of_starting():
    # what the API showed: "starting": -0.311 (an instance printed before starting_at was stamped)
    stamps = {"queued": at(0), "preparing": at(0.1), "starting": at(0.5), "running": at(0.189)}
    assert durations(stamps, ended=None) == {
        "queued": 0.1,
        "preparing": 0.4,
        "starting": 0.0,
        "running": None,
        "stopping": None,
    }
    assert durations(stamps, ended=at(10))["running"] == 9.5


def test_open_and_missing_stages_are_none_and_in_order_stamps_are_kept():
    stamps = {"queued": at(0), "preparing": at(1), "starting": at(2), "running": at(5), "stopping": at(9)}
    assert monotonic(stamps) == stamps
    assert durations(stamps, at(10)) == {
        "queued": 1.0,
        "preparing": 1.0,
        "starting": 3.0,
        "running": 4.0,
        "stopping": 1.0,
    }
    assert durations({"queued": at(0)}, None) == dict.fromkeys(STAGES, None)
    # an end stamped before the last stage (another clock) ends it at zero, not below
    assert (
        durations({"queued": at(0), "preparing": at(1), "starting": at(2), "running": at(5)}, at(4))["running"] == 0.0
    )


def test_clamp():
    assert clamp(at(1), at(2), at(3)) == at(2)
    assert clamp(at(5), at(2), at(3)) == at(3)
    assert clamp(at(2.5), None, None) == at(2.5)


maybe = st.one_of(st.none(), st.floats(min_value=0, max_value=1e6, allow_nan=False))


@given(st.lists(maybe, min_size=5, max_size=5), maybe)
def test_no_stage_is_ever_negative_whatever_order_the_stamps_arrive_in(seconds, end):
    stamps = dict(zip(STAGES, (at(s) for s in seconds)))
    marks = monotonic(stamps)
    present = [marks[s] for s in STAGES if marks[s] is not None]
    assert present == sorted(present)
    assert all(v is None or v >= 0 for v in durations(stamps, at(end)).values())
