"""Hang and exit-hang detection, the next check time, and the suggested hang interval."""

from __future__ import annotations

import copy

import pytest

from core.classify import ErrorSource
from core.flags import ExecutionMode, FaultToleranceConfig, parse_flags
from core.hang import (
    InstanceActivity,
    WatchedAttempt,
    check_exit_hang,
    check_hang,
    effective_hang_interval,
    hang_status,
    interval_in_force,
    next_check_at,
    next_look_at,
    plan_hang_check,
    step_times_from_log,
    suggest_from_cadence,
    suggest_hang_interval,
    suggestion_set,
)
from core.policy import Action, JobHistory, decide

START = 1_000.0
HANG_ON = parse_flags("--enable-job-hang-detection=True --job-hang-interval=60")
EXIT_ON = parse_flags("--enable-job-exit-hang-detection=True --job-exit-hang-interval=30")


def running(name: str, last: float | None) -> InstanceActivity:
    return InstanceActivity(name, True, last)


def exited(name: str, code: int, at: float) -> InstanceActivity:
    return InstanceActivity(name, False, at, exit_code=code, exited_at=at)


WORKERS = [running("worker-0", START + 10), running("worker-1", START + 25)]


# ---- job hang -----------------------------------------------------------------------


def test_all_running_instances_silent_for_the_interval_is_a_hang():
    v = check_hang(WatchedAttempt(HANG_ON, None, WORKERS, START, first_progress_at=START), now=START + 25 + 60)
    assert v is not None
    assert (v.silent_seconds, v.interval, v.last_writer, v.source) == (60.0, 60, "worker-1", ErrorSource.HANG)
    assert v.silent_instances == ("worker-0", "worker-1")
    assert v.message.startswith("Both running instances have been silent for 60 s")
    assert "hang interval of 60 s" in v.message
    assert "worker-1 wrote last" in v.message


def test_one_instance_still_writing_means_no_hang():
    assert (
        check_hang(WatchedAttempt(HANG_ON, None, WORKERS, START, first_progress_at=START), now=START + 25 + 59.9)
        is None
    )


def test_an_instance_that_never_wrote_counts_from_the_attempt_start():
    quiet = [running("worker-0", None), running("worker-1", None)]
    assert check_hang(WatchedAttempt(HANG_ON, None, quiet, START, first_progress_at=START), now=START + 59) is None
    v = check_hang(WatchedAttempt(HANG_ON, None, quiet, START, first_progress_at=START), now=START + 61)
    assert v is not None and v.last_writer is None
    assert "since the attempt started 61 s ago" in v.message


def test_output_from_an_earlier_attempt_does_not_count():
    stale = [running("worker-0", START - 500)]
    assert check_hang(WatchedAttempt(HANG_ON, None, stale, START, first_progress_at=START), now=START + 30) is None


def test_exited_instances_do_not_keep_a_job_alive_or_hang_it():
    inst = [exited("worker-0", 0, START + 100), running("worker-1", START + 5)]
    v = check_hang(WatchedAttempt(HANG_ON, None, inst, START, first_progress_at=START), now=START + 70)
    assert v is not None and v.silent_instances == ("worker-1",)
    assert (
        check_hang(
            WatchedAttempt(HANG_ON, None, [exited("worker-0", 1, START + 1)], START, first_progress_at=START),
            now=START + 999,
        )
        is None
    )


def test_hang_detection_off_never_reports_a_hang():
    assert (
        check_hang(
            WatchedAttempt(FaultToleranceConfig(), None, WORKERS, START, first_progress_at=START), now=START + 99_999
        )
        is None
    )


def test_job_hang_interval_flag_sets_the_interval():
    cfg = parse_flags("--enable-job-hang-detection=True --job-hang-interval=1800")
    assert check_hang(WatchedAttempt(cfg, None, WORKERS, START, first_progress_at=START), now=START + 25 + 1799) is None
    assert (
        check_hang(WatchedAttempt(cfg, None, WORKERS, START, first_progress_at=START), now=START + 25 + 1800).interval
        == 1800
    )


def test_hang_detection_applies_to_sync_jobs_only():
    # Async configs refuse hang detection when built; one stored before that check is still ignored.
    async_cfg = copy.copy(HANG_ON)
    object.__setattr__(async_cfg, "job_execution_mode", ExecutionMode.ASYNC)
    assert (
        check_hang(WatchedAttempt(async_cfg, None, WORKERS, START, first_progress_at=START), now=START + 99_999) is None
    )


def test_runtime_interval_override_replaces_the_configured_one():
    assert (
        check_hang(WatchedAttempt(HANG_ON, 10, WORKERS, START, first_progress_at=START), now=START + 35).interval == 10
    )
    assert (
        check_hang(WatchedAttempt(HANG_ON, 600, WORKERS, START, first_progress_at=START), now=START + 25 + 100) is None
    )


def test_runtime_interval_minus_one_suspends_hang_detection():
    assert check_hang(WatchedAttempt(HANG_ON, -1, WORKERS, START, first_progress_at=START), now=START + 99_999) is None
    assert effective_hang_interval(HANG_ON, -1) is None


@pytest.mark.parametrize("bad", [0, -2, 1.5, "60", True])
def test_bad_runtime_interval_is_rejected_naming_the_field(bad):
    with pytest.raises(ValueError, match="job_hang_interval"):
        check_hang(WatchedAttempt(HANG_ON, bad, WORKERS, START, first_progress_at=START), now=START)


def test_c4d_flag_asks_the_hang_verdict_to_run_c4d():
    cfg = parse_flags("--enable-job-hang-detection=True --job-hang-interval=60 --enable-c4d-hang-detection=True")
    assert (
        check_hang(WatchedAttempt(cfg, None, WORKERS, START, first_progress_at=START), now=START + 200).run_c4d is True
    )
    assert (
        check_hang(WatchedAttempt(HANG_ON, None, WORKERS, START, first_progress_at=START), now=START + 200).run_c4d
        is False
    )


def test_hang_verdict_feeds_the_restart_decision():
    cfg = parse_flags("--enable-job-hang-detection=True --job-hang-interval=60 --enable-job-restart=True")
    v = check_hang(WatchedAttempt(cfg, None, WORKERS, START, first_progress_at=START), now=START + 200)
    d = decide(cfg, JobHistory(), v.to_trigger())
    assert d.action is Action.RESTART_JOB and "the job hung" in d.reason


# ---- start-up -----------------------------------------------------------------------

SHORT = parse_flags("--enable-job-hang-detection=True --job-hang-interval=4")  # start-up: max(600, 4)


def test_before_the_first_progress_the_startup_interval_applies_not_the_hang_interval():
    quiet = [running("worker-0", START + 1), running("worker-1", None)]
    assert check_hang(WatchedAttempt(SHORT, None, quiet, START, first_progress_at=None), now=START + 11) is None
    assert check_hang(WatchedAttempt(SHORT, None, quiet, START, first_progress_at=None), now=START + 1 + 599.9) is None
    v = check_hang(WatchedAttempt(SHORT, None, quiet, START, first_progress_at=None), now=START + 1 + 600)
    assert v is not None and v.startup and v.interval == 600
    assert "start-up interval (the attempt has made no progress yet) of 600 s" in v.message


def test_after_the_first_progress_the_hang_interval_applies():
    quiet = [running("worker-0", START + 30)]
    assert check_hang(WatchedAttempt(SHORT, None, quiet, START, first_progress_at=START + 30), now=START + 33.9) is None
    v = check_hang(WatchedAttempt(SHORT, None, quiet, START, first_progress_at=START + 30), now=START + 34)
    assert v is not None and not v.startup and v.interval == 4
    assert "at least the hang interval of 4 s" in v.message


def test_a_given_startup_interval_is_used_even_shorter_than_the_hang_interval():
    cfg = parse_flags("--enable-job-hang-detection=True --job-hang-interval=1800 --job-hang-startup-interval=10")
    assert (
        check_hang(
            WatchedAttempt(cfg, None, [running("worker-0", None)], START, first_progress_at=None), now=START + 10
        ).interval
        == 10
    )


def test_the_next_check_waits_for_the_startup_interval_until_progress():
    quiet = [running("worker-0", START + 2)]
    assert next_check_at(WatchedAttempt(SHORT, None, quiet, START, first_progress_at=None)) == START + 2 + 600
    assert next_check_at(WatchedAttempt(SHORT, None, quiet, START, first_progress_at=START + 2)) == START + 2 + 4
    plan = plan_hang_check(WatchedAttempt(SHORT, None, quiet, START, first_progress_at=None), now=START + 7)
    assert plan.hang is None and plan.next_check_at == START + 602


def test_a_monitor_asleep_through_startup_looks_again_when_the_hang_interval_would_end():
    # A step line written unseen at START + 2 ends the start-up interval: the hang is due at
    # START + 6, not at the start-up deadline of START + 602.
    quiet = [running("worker-0", START + 2)]
    assert next_look_at(WatchedAttempt(SHORT, None, quiet, START, first_progress_at=None), START + 3) == START + 2 + 4
    # Past it with no progress seen, only the start-up deadline is left (new output moves both).
    assert next_look_at(WatchedAttempt(SHORT, None, quiet, START, first_progress_at=None), START + 7) == START + 602
    # After the first progress, as next_check_at; nothing running or hang detection off: None.
    assert next_look_at(WatchedAttempt(SHORT, None, quiet, START, first_progress_at=START + 2), START + 3) == START + 6
    assert (
        next_look_at(
            WatchedAttempt(SHORT, None, [exited("worker-0", 1, START + 2)], START, first_progress_at=None), START + 3
        )
        is None
    )
    assert next_look_at(WatchedAttempt(SHORT, -1, quiet, START, first_progress_at=None), START + 3) is None
    with pytest.raises(ValueError, match="now"):
        next_look_at(WatchedAttempt(SHORT, None, quiet, START, first_progress_at=None), "soon")


def test_a_runtime_interval_chosen_during_the_attempt_replaces_the_startup_interval():
    # reset_config(job_hang_interval=2) in the training code, before any progress
    force = interval_in_force(WatchedAttempt(SHORT, 2, (), START, first_progress_at=None, override_set_at=START + 5))
    assert (force.seconds, force.startup, force.counted_from) == (2, False, START + 5)
    v = check_hang(
        WatchedAttempt(
            SHORT, 2, [running("worker-0", START + 4)], START, first_progress_at=None, override_set_at=START + 5
        ),
        now=START + 7,
    )
    assert v is not None and v.interval == 2 and v.silent_seconds == 2.0


def test_a_runtime_interval_left_from_an_earlier_attempt_does_not_end_start_up():
    force = interval_in_force(WatchedAttempt(SHORT, 2, (), START, first_progress_at=None, override_set_at=START - 50))
    assert (force.seconds, force.startup, force.counted_from) == (600, True, START)
    force = interval_in_force(
        WatchedAttempt(SHORT, 2, (), START, first_progress_at=START + 1, override_set_at=START - 50)
    )
    assert (force.seconds, force.startup) == (2, False)


def test_the_flag_value_restored_by_hang_detect_keeps_start_up_protected():
    # hang_detect restores VIGIL_JOB_HANG_INTERVAL (the flag's value) when its scope ends
    force = interval_in_force(WatchedAttempt(SHORT, 4, (), START, first_progress_at=None, override_set_at=START + 9))
    assert (force.seconds, force.startup, force.counted_from) == (600, True, START + 9)


def test_suspension_holds_during_start_up_too():
    assert (
        interval_in_force(WatchedAttempt(SHORT, -1, (), START, first_progress_at=None, override_set_at=START + 1))
        is None
    )
    assert (
        check_hang(
            WatchedAttempt(SHORT, -1, [running("worker-0", None)], START, first_progress_at=None), now=START + 10**6
        )
        is None
    )


def test_a_watched_attempt_is_checked_and_frozen_when_built():
    with pytest.raises(ValueError, match="attempt_started_at"):
        WatchedAttempt(SHORT, None, WORKERS, "soon", first_progress_at=None)
    instances = [running("worker-0", START + 1)]
    watched = WatchedAttempt(SHORT, None, instances, START, first_progress_at=START)
    instances.append(running("worker-1", START + 100))  # the caller's list changes later
    assert watched.instances == (running("worker-0", START + 1),)
    assert check_hang(watched, now=START + 5).silent_instances == ("worker-0",)


@pytest.mark.parametrize("bad", ["soon", float("nan"), True])
def test_bad_progress_or_change_times_are_refused_by_name(bad):
    with pytest.raises(ValueError, match="first_progress_at"):
        check_hang(WatchedAttempt(SHORT, None, WORKERS, START, first_progress_at=bad), now=START)
    with pytest.raises(ValueError, match="override_set_at"):
        check_hang(WatchedAttempt(SHORT, None, WORKERS, START, first_progress_at=None, override_set_at=bad), now=START)


def test_the_status_says_how_much_of_the_interval_in_force_the_silence_has_used():
    quiet = [running("worker-0", START + 10)]
    status = hang_status(WatchedAttempt(SHORT, None, quiet, START, first_progress_at=None), now=START + 10 + 130)
    assert (status.interval, status.startup) == (600, True)
    assert status.text == "waiting for first progress: silent 2 of 10 min"
    status = hang_status(WatchedAttempt(SHORT, None, quiet, START, first_progress_at=START + 10), now=START + 13)
    assert status.text == "making progress: silent 3 of 4 s" and not status.startup
    cfg = parse_flags("--enable-job-hang-detection=True --job-hang-interval=150")
    assert (
        hang_status(WatchedAttempt(cfg, None, quiet, START, first_progress_at=START + 1), now=START + 70).text
        == "making progress: silent 1 of 2.5 min"
    )
    assert (
        hang_status(WatchedAttempt(FaultToleranceConfig(), None, quiet, START, first_progress_at=None), now=START)
        is None
    )
    assert hang_status(WatchedAttempt(SHORT, None, [], START, first_progress_at=None), now=START) is None


# ---- exit hang ----------------------------------------------------------------------


def test_job_not_finished_within_the_exit_interval_after_the_first_success_is_an_exit_hang():
    inst = [exited("worker-0", 0, START + 100), exited("worker-2", 0, START + 110), running("worker-1", START + 120)]
    assert check_exit_hang(EXIT_ON, inst, now=START + 129) is None
    v = check_exit_hang(EXIT_ON, inst, now=START + 130)
    assert v is not None
    assert (v.first_finished, v.waited_seconds, v.interval, v.still_running) == ("worker-0", 30.0, 30, ("worker-1",))
    assert v.source is ErrorSource.EXIT_HANG
    assert "worker-0 finished 30 s ago but worker-1 is still running" in v.message


def test_exit_hang_needs_a_successful_exit():
    inst = [exited("worker-0", 1, START + 100), running("worker-1", START + 100)]
    assert check_exit_hang(EXIT_ON, inst, now=START + 10_000) is None


def test_a_finished_job_has_no_exit_hang():
    inst = [exited("worker-0", 0, START + 100), exited("worker-1", 0, START + 200)]
    assert check_exit_hang(EXIT_ON, inst, now=START + 10_000) is None


def test_exit_hang_detection_off_never_reports():
    inst = [exited("worker-0", 0, START + 100), running("worker-1", START)]
    assert check_exit_hang(FaultToleranceConfig(), inst, now=START + 10_000) is None


def test_job_exit_hang_interval_flag_sets_the_interval():
    cfg = parse_flags("--enable-job-exit-hang-detection=True --job-exit-hang-interval=600")
    inst = [exited("worker-0", 0, START), running("worker-1", START)]
    assert check_exit_hang(cfg, inst, now=START + 599) is None
    assert check_exit_hang(cfg, inst, now=START + 600).interval == 600


# ---- when to check next -------------------------------------------------------------


def test_next_check_is_when_the_latest_writer_reaches_the_interval():
    assert next_check_at(WatchedAttempt(HANG_ON, None, WORKERS, START, first_progress_at=START)) == START + 25 + 60
    assert next_check_at(WatchedAttempt(HANG_ON, 5, WORKERS, START, first_progress_at=START)) == START + 25 + 5


def test_next_check_is_the_earlier_of_hang_and_exit_hang():
    both = FaultToleranceConfig(
        enable_job_hang_detection=True,
        job_hang_interval=60,
        enable_job_exit_hang_detection=True,
        job_exit_hang_interval=30,
    )
    inst = [exited("worker-0", 0, START + 20), running("worker-1", START + 40)]
    assert next_check_at(WatchedAttempt(both, None, inst, START, first_progress_at=START)) == START + 50
    plan = plan_hang_check(WatchedAttempt(both, None, inst, START, first_progress_at=START), now=START + 45)
    assert plan.hang is None and plan.exit_hang is None and plan.next_check_at == START + 50
    plan = plan_hang_check(WatchedAttempt(both, None, inst, START, first_progress_at=START), now=START + 50)
    assert plan.exit_hang is not None and plan.hang is None


def test_nothing_to_watch_has_no_next_check():
    assert next_check_at(WatchedAttempt(FaultToleranceConfig(), None, WORKERS, START, first_progress_at=START)) is None
    assert next_check_at(WatchedAttempt(HANG_ON, -1, WORKERS, START, first_progress_at=START)) is None
    assert next_check_at(WatchedAttempt(HANG_ON, None, [], START, first_progress_at=START)) is None


# ---- suggested hang interval --------------------------------------------------------


def _watchdog(ms: int) -> str:
    return (
        f"[rank0]:[E1129 10:02:11.512316 412 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective "
        f"operation timeout: WorkNCCL(SeqNum=2143, OpType=ALLREDUCE, NumelIn=659, NumelOut=659, "
        f"Timeout(ms)={ms}) ran for {ms + 535} milliseconds before timing out."
    )


@pytest.mark.parametrize("ms, interval", [(600_000, 450), (1_800_000, 1500), (3_600_000, 3000), (900_000, 750)])
def test_suggested_interval_is_timeout_minus_max_150s_or_a_sixth(ms, interval):
    s = suggest_hang_interval("step 1\n" + _watchdog(ms) + "\nterminate called after throwing\n")
    assert (s.timeout_seconds, s.interval) == (ms // 1000, interval)
    assert f"--job-hang-interval={interval}" in s.message
    assert s.line.startswith("[rank0]:[E1129") and s.line.endswith("before timing out.")


def test_suggestion_uses_the_shortest_timeout_in_the_log():
    s = suggest_hang_interval(_watchdog(1_800_000) + "\n" + _watchdog(600_000) + "\n")
    assert s.interval == 450


def test_a_short_timeout_still_gets_a_positive_interval():
    assert suggest_hang_interval(_watchdog(120_000)).interval == 60


def test_bytes_logs_are_read_too():
    assert suggest_hang_interval(_watchdog(600_000).encode()).interval == 450


def test_no_watchdog_line_means_no_suggestion():
    assert suggest_hang_interval("Watchdog caught collective operation timeout without details\n") is None
    assert suggest_hang_interval("") is None


# ---- the suggestion from the step cadence -----------------------------------------------


def stamped(steps_and_seconds) -> str:
    """DDP example lines at the given seconds after 2026-11-29T23:00:00Z."""
    lines = []
    for step, at in steps_and_seconds:
        whole, frac = divmod(at, 1)
        m, sec = divmod(int(whole), 60)
        lines.append(f"2026-11-29T23:{m:02d}:{sec:02d}.{round(frac * 1e6):06d}Z step={step} rank=0 loss=0.43\n")
    return "".join(lines)


def test_step_times_are_read_from_timestamped_step_lines_only():
    text = (
        "2026-11-29T23:00:00.500000Z step=3 rank=0\n"
        "loading checkpoint step 9 without a time\n"
        "2026-11-29 23:00:02,250 INFO iteration 4 done\n"
        "2026-11-29T23:00:03Z epoch=1\n"
        "2026-13-45T23:00:03Z step=5\n"
    )
    base = 1795993200.0  # 2026-11-29T23:00:00Z
    assert step_times_from_log(text) == [(base + 0.5, 3), (base + 2.25, 4)]
    assert step_times_from_log(text.encode()) == step_times_from_log(text)


def test_the_cadence_suggestion_is_ten_times_the_p99_step_time():
    # 99 steps of 20 s and one of 30 s: p99 (nearest rank) is 20 s, the suggestion 200 s.
    times, t = [(0, 0.0)], 0.0
    for step in range(1, 101):
        t += 30.0 if step == 50 else 20.0
        times.append((step, t))
    s = suggest_from_cadence([(at, step) for step, at in times])
    assert (s.steps, s.p99_step_seconds, s.median_step_seconds, s.interval) == (100, 20.0, 20.0, 200)
    assert "10 x the p99 step time is 200 s: set --job-hang-interval=200" in s.message
    # Two slow steps in a hundred make the p99 the slow one.
    times2 = [(at, step) for step, at in times]
    times2[80] = (times2[80][0] + 10.0, times2[80][1])  # step 80 takes 30 s, step 81 10 s
    assert suggest_from_cadence(times2).p99_step_seconds == 30.0


def test_fast_steps_get_the_floor_and_the_message_says_so():
    samples = step_times_from_log(stamped([(i, i * 0.05) for i in range(30)]))
    s = suggest_from_cadence(samples)
    assert s.interval == 120 and abs(s.p99_step_seconds - 0.05) < 1e-6
    assert "is 1 s, raised to the floor of 120 s" in s.message


def test_several_steps_between_two_observations_share_the_time():
    # report_progress seen every 10 steps, 10 s apart: 1 s a step
    s = suggest_from_cadence([(i * 10.0, i * 10) for i in range(5)])
    assert (s.steps, s.p99_step_seconds) == (40, 1.0)


def test_too_few_steps_or_a_restart_give_no_cadence_suggestion():
    assert suggest_from_cadence([]) is None
    assert suggest_from_cadence([(float(i), i) for i in range(10)]) is None  # 9 step times
    # a restart back to step 0 is not a step of -40 s; the pairs across it are skipped
    restarted = [(float(i), i) for i in range(5)] + [(100.0 + i, i) for i in range(5)]
    assert suggest_from_cadence(restarted) is None  # 4 + 4 step times
    assert suggest_from_cadence(restarted + [(105.0, 5), (106.0, 6)]).steps == 10


def test_a_very_slow_cadence_is_cut_to_the_flag_limit():
    s = suggest_from_cadence([(i * 400_000.0, i) for i in range(12)])
    assert s.interval == 2_592_000 and "cut to the 30-day limit" in s.message


def test_which_suggestion_the_user_set():
    assert suggestion_set(200, 200, 450) == "cadence"
    assert suggestion_set(450, 200, 450) == "watchdog"
    assert suggestion_set(1800, 200, 450) is None
    assert suggestion_set(None, 200, 450) is None
    assert suggestion_set(450, None, None) is None
