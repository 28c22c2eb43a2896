"""The quiet period's stretch when a shard falls behind its schedule (core.pacing)."""

import pytest

from core.pacing import DECAY, PROBE, allowed_lateness, lateness, next_stretch

CADENCE, QUIET = 0.5, 10.0


def stretch_after(stretch: float, late: float, ceiling: float = 6.0) -> float:
    return next_stretch(stretch, late, quiet=QUIET, cadence=CADENCE, ceiling=ceiling)


def test_lateness_is_the_middle_scheduled_check_and_ignores_unscheduled_jobs():
    assert lateness([100.0, 97.0, None, 99.5], now=101.0) == 1.5
    assert lateness([None, None], now=101.0) == 0.0, "new or woken jobs say nothing about the pace"
    assert lateness([], now=101.0) == 0.0
    assert lateness([102.0], now=101.0) == -1.0  # a check not yet due (a sweep given a later now)


def test_one_job_whose_tick_keeps_failing_does_not_make_its_shard_late():
    # It stays due at its old time, sweep after sweep; the others fell due since the last sweep.
    due = [1000.0 - 3600, *(1000.0 - 0.1 * n for n in range(5))]
    assert lateness(due, now=1000.0) < allowed_lateness(0.5)


def test_a_shard_on_time_keeps_the_configured_period():
    assert stretch_after(1.0, 0.3) == 1.0
    assert stretch_after(1.0, 0.0) == 1.0


def test_a_shard_far_behind_stretches_at_once_in_proportion():
    # 33 s late on a 10 s period: the measured 30,000-job round on 2 cores.
    assert stretch_after(1.0, 33.0) == pytest.approx(4.3)
    # Already stretched to 30 s and still 30 s late: twice as long again, up to the ceiling.
    assert stretch_after(3.0, 30.0) == 6.0
    assert stretch_after(3.0, 30.0, ceiling=10.0) == pytest.approx(6.0)


def test_a_little_behind_grows_by_the_floor_not_by_a_rounding_error():
    late = allowed_lateness(CADENCE) + 0.1  # just past what counts as behind
    assert stretch_after(1.0, late) == pytest.approx(1.25)


def test_back_on_time_it_shrinks_slowly_and_never_under_the_configured_period():
    assert stretch_after(4.0, 0.1) == pytest.approx(4.0 * DECAY)
    sweeps, stretch = 0, 4.0
    while stretch > 1.0:
        stretch, sweeps = stretch_after(stretch, 0.1), sweeps + 1
    assert stretch == 1.0
    assert 50 < sweeps < 100, "back to the configured period in tens of seconds of 0.5 s sweeps, not at once"


def test_just_on_time_it_probes_back_down_more_slowly_still():
    allowed = allowed_lateness(CADENCE)
    assert stretch_after(3.0, allowed * 0.75) == pytest.approx(3.0 * PROBE)
    assert 1.0 > PROBE > DECAY


def test_a_ceiling_under_one_means_never_stretch():
    assert stretch_after(1.0, 100.0, ceiling=1.0) == 1.0
    assert stretch_after(1.0, 100.0, ceiling=0.5) == 1.0
