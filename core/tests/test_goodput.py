"""The goodput ledger: where a job's time went, per attempt and as ETTR, which
never passes 100 % whatever the attempts' timings (overlaps, skew, lost stamps)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.goodput import AttemptTimes, ledger


def test_a_clean_run_is_productive_from_its_first_progress_to_its_end():
    g = ledger(
        [AttemptTimes(1, queued_at=0, starting_at=1, running_at=3, first_progress_at=5, ended_at=105, succeeded=True)],
        job_ended_at=105,
        now=200,
    )
    [a] = g.attempts
    assert (a.scheduling, a.startup, a.first_progress, a.productive) == (1, 2, 4, 100)
    assert g.wall_clock == 105 and g.ettr == pytest.approx(100 / 105, abs=1e-4)


def test_a_restart_splits_time_into_detection_teardown_and_lost_work():
    attempts = [
        AttemptTimes(
            1,
            queued_at=0,
            starting_at=1,
            running_at=2,
            first_progress_at=4,
            stopping_at=50,
            ended_at=53,
            made_progress=True,
        ),
        AttemptTimes(
            2,
            queued_at=50,
            starting_at=53,
            running_at=55,
            first_progress_at=58,
            ended_at=100,
            succeeded=True,
            failed_at=49.9,
            decided_at=50,
        ),
    ]
    g = ledger(attempts, job_ended_at=100, now=300)
    one, two = g.attempts
    assert one.productive == 46 and one.detection is None and one.teardown is None
    assert two.detection == pytest.approx(0.1) and two.teardown == 3 and two.scheduling == 3
    assert two.startup == 2 and two.first_progress == 5 and two.productive == 42
    assert g.productive == 88 and g.ettr == 0.88


def test_an_attempt_that_never_made_progress_counts_nothing():
    attempts = [AttemptTimes(1, queued_at=0, starting_at=1, running_at=2, stopping_at=30, ended_at=31)]
    assert ledger(attempts, job_ended_at=31, now=40).productive == 0


def test_a_running_attempt_counts_up_to_now():
    g = ledger([AttemptTimes(1, queued_at=0, starting_at=1, running_at=2)], job_ended_at=None, now=12)
    assert g.attempts[0].productive == 10 and g.wall_clock == 12


def test_no_attempts_has_no_ratio():
    assert ledger([], job_ended_at=None, now=5).ettr is None


def test_overlapping_attempts_count_their_shared_time_once_for_the_later_attempt():
    # what the Reliability page showed as 183 %: attempt 1's end was stamped when the job
    # ended, while attempt 2 had been training since 15
    attempts = [
        AttemptTimes(
            1, queued_at=0, starting_at=1, running_at=1, first_progress_at=2, ended_at=100, made_progress=True
        ),
        AttemptTimes(
            2, queued_at=10, starting_at=11, running_at=12, first_progress_at=15, ended_at=100, succeeded=True
        ),
    ]
    g = ledger(attempts, job_ended_at=100, now=300)
    assert [a.productive for a in g.attempts] == [13, 85]
    assert g.productive == 98 and g.wall_clock == 100 and g.ettr == 0.98


def test_an_attempt_never_stamped_as_ended_stops_counting_where_its_restart_took_over():
    attempts = [
        AttemptTimes(1, queued_at=0, starting_at=1, running_at=2),  # its end was never recorded
        AttemptTimes(2, queued_at=18, starting_at=19, running_at=20, made_progress=True),
    ]
    g = ledger(attempts, job_ended_at=None, now=100)
    assert [a.productive for a in g.attempts] == [18, 80] and g.ettr == 0.98


def test_stamps_from_a_skewed_node_clock_are_clipped_to_the_jobs_wall_window():
    # first progress stamped by a node 10 s behind the console, before the attempt was queued;
    # the attempt's end after the job's
    g = ledger(
        [
            AttemptTimes(
                1, queued_at=10, starting_at=11, running_at=12, first_progress_at=0, ended_at=130, succeeded=True
            )
        ],
        job_ended_at=100,
        now=300,
    )
    assert g.attempts[0].productive == 90 and g.wall_clock == 90 and g.ettr == 1.0


def test_stamps_at_the_epoch_are_stamps_not_missing():
    g = ledger(
        [
            AttemptTimes(
                1, queued_at=0, running_at=0, first_progress_at=0, stopping_at=0, ended_at=50, made_progress=True
            )
        ],
        job_ended_at=50,
        now=60,
    )
    assert g.attempts[0].productive == 0 and g.wall_clock == 50


# a narrow range, so that stamps often tie, overlap and come in every order
moment = st.floats(min_value=0, max_value=100, allow_nan=False)
stamp = st.one_of(st.none(), moment)
attempt_times = st.builds(
    AttemptTimes,
    number=st.integers(1, 8),
    queued_at=moment,
    starting_at=stamp,
    running_at=stamp,
    first_progress_at=stamp,
    stopping_at=stamp,
    ended_at=stamp,
    made_progress=st.booleans(),
    succeeded=st.booleans(),
    failed_at=stamp,
    decided_at=stamp,
)


@given(st.lists(attempt_times, max_size=6), stamp, moment)
def test_ettr_stays_within_0_and_1_whatever_the_attempts_timings(attempts, job_ended_at, now):
    g = ledger(attempts, job_ended_at, now)
    assert 0 <= g.productive <= g.wall_clock
    assert g.ettr is None or 0 <= g.ettr <= 1
    assert sum(a.productive for a in g.attempts) == pytest.approx(g.productive, abs=1e-6)
    for a in g.attempts:
        assert a.productive >= 0
        assert all(v is None or v >= 0 for v in (a.detection, a.teardown, a.scheduling, a.startup, a.first_progress))
