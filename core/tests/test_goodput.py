"""The goodput ledger: where a job's time went, per attempt and as ETTR."""

import pytest

from core.goodput import AttemptTimes, ledger


def test_a_clean_run_is_productive_from_its_first_progress_to_its_end():
    g = ledger([AttemptTimes(1, queued_at=0, starting_at=1, running_at=3, first_progress_at=5, ended_at=105,
                             succeeded=True)], job_ended_at=105, now=200)
    [a] = g.attempts
    assert (a.scheduling, a.startup, a.first_progress, a.productive) == (1, 2, 4, 100)
    assert g.wall_clock == 105 and g.ettr == pytest.approx(100 / 105, abs=1e-4)


def test_a_restart_splits_time_into_detection_teardown_and_lost_work():
    attempts = [
        AttemptTimes(1, queued_at=0, starting_at=1, running_at=2, first_progress_at=4, stopping_at=50, ended_at=53,
                     made_progress=True),
        AttemptTimes(2, queued_at=50, starting_at=53, running_at=55, first_progress_at=58, ended_at=100,
                     succeeded=True, failed_at=49.9, decided_at=50),
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
